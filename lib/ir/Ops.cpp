//===- Ops.cpp - The operator tables of Ops.def ---------------------------===//
//
// Each query of qd/ir/Stmt.h about an operator reads one column of its
// Ops.def row, from tables generated from the rows and indexed by the enum.
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Stmt.h"

#include <cassert>
#include <iterator>
#include <type_traits>

namespace qd {

namespace {

/// A QD_BINARY_OP or QD_UNARY_OP row.
struct OpRow {
  std::string_view spelling;
  OpDomain domain;
  std::optional<MathFn> math;
  OpDiff diff;
  OpFold fold;
};
struct MathRow {
  std::string_view libm;
  unsigned arity;
};
struct CmpRow {
  std::string_view spelling;
};
struct AtomicRow {
  StmtKind kind;
  OpDomain domain;
};

/// The values the MATH column names: a QD_MATH_FN row, or None.
namespace math_column {
constexpr std::optional<MathFn> None;
#define QD_MATH_FN(NAME, ...) constexpr std::optional<MathFn> NAME = MathFn::NAME;
#include "qd/ir/Ops.def"
} // namespace math_column

#define QD_OP_ROW(NAME, SPELLING, DOMAIN, BUILDER, MATH, DIFF, FOLD)                               \
  OpRow{SPELLING, OpDomain::DOMAIN, math_column::MATH, OpDiff::DIFF, OpFold::FOLD},

constexpr OpRow kBinaryRows[] = {
#define QD_BINARY_OP QD_OP_ROW
#include "qd/ir/Ops.def"
};
constexpr OpRow kUnaryRows[] = {
#define QD_UNARY_OP QD_OP_ROW
#include "qd/ir/Ops.def"
};
#undef QD_OP_ROW
constexpr MathRow kMathRows[] = {
#define QD_MATH_FN(NAME, LIBM, ARITY) MathRow{LIBM, ARITY},
#include "qd/ir/Ops.def"
};
constexpr CmpRow kCmpRows[] = {
#define QD_CMP_PREDICATE(NAME, SPELLING, BUILDER) CmpRow{SPELLING},
#include "qd/ir/Ops.def"
};
constexpr AtomicRow kAtomicRows[] = {
#define QD_ATOMIC_OP(NAME, KIND, DOMAIN) AtomicRow{StmtKind::KIND, OpDomain::DOMAIN},
#include "qd/ir/Ops.def"
};

/// Whether every MATH of `rows` names a function of `arity` arguments
/// called on floats.
template <size_t N> constexpr bool mathColumnFits(const OpRow (&rows)[N], unsigned arity) {
  for (const OpRow &r : rows)
    if (r.math &&
        (kMathRows[static_cast<size_t>(*r.math)].arity != arity || r.domain == OpDomain::Integer))
      return false;
  return true;
}
static_assert(mathColumnFits(kBinaryRows, 2),
              "Ops.def: a binary operator's MATH names a function of one argument, or the "
              "operator is integer-only; name a two-argument QD_MATH_FN or None");
static_assert(mathColumnFits(kUnaryRows, 1),
              "Ops.def: a unary operator's MATH names a function of two arguments, or the "
              "operator is integer-only; name a one-argument QD_MATH_FN or None");

/// Every statement class derived from AtomicRmwStmt has a QD_ATOMIC_OP row.
constexpr size_t kAtomicStmtKinds = 0
#define QD_STMT(KIND, CLASS, ...) +(std::is_base_of_v<AtomicRmwStmt, CLASS> ? 1 : 0)
#include "qd/ir/StmtKinds.def"
    ;
static_assert(kAtomicStmtKinds == std::size(kAtomicRows),
              "Ops.def: every atomic statement kind of StmtKinds.def needs a QD_ATOMIC_OP row");

template <typename Enum, typename Row, size_t N>
std::optional<Enum> lookupBySpelling(const Row (&rows)[N], std::string_view text) {
  for (size_t i = 0; i < N; ++i)
    if (rows[i].spelling == text)
      return static_cast<Enum>(i);
  return std::nullopt;
}

const OpRow &row(BinaryOp op) {
  return kBinaryRows[static_cast<size_t>(op)];
}
const OpRow &row(UnaryOp op) {
  return kUnaryRows[static_cast<size_t>(op)];
}

} // namespace

std::string_view libmName(MathFn fn) {
  return kMathRows[static_cast<size_t>(fn)].libm;
}
unsigned arity(MathFn fn) {
  return kMathRows[static_cast<size_t>(fn)].arity;
}

std::string_view toString(BinaryOp op) {
  return row(op).spelling;
}
std::optional<BinaryOp> parseBinaryOp(std::string_view text) {
  return lookupBySpelling<BinaryOp>(kBinaryRows, text);
}
bool isBitwise(BinaryOp op) {
  return row(op).domain == OpDomain::Integer;
}
bool isFloatOnly(BinaryOp op) {
  return row(op).domain == OpDomain::Float;
}
OpDomain domainOf(BinaryOp op) {
  return row(op).domain;
}
std::optional<MathFn> mathFn(BinaryOp op) {
  return row(op).math;
}
OpDiff diffOf(BinaryOp op) {
  return row(op).diff;
}
OpFold foldOf(BinaryOp op) {
  return row(op).fold;
}

std::string_view toString(UnaryOp op) {
  return row(op).spelling;
}
std::optional<UnaryOp> parseUnaryOp(std::string_view text) {
  return lookupBySpelling<UnaryOp>(kUnaryRows, text);
}
bool isFloatOnly(UnaryOp op) {
  return row(op).domain == OpDomain::Float;
}
OpDomain domainOf(UnaryOp op) {
  return row(op).domain;
}
std::optional<MathFn> mathFn(UnaryOp op) {
  return row(op).math;
}
OpDiff diffOf(UnaryOp op) {
  return row(op).diff;
}
OpFold foldOf(UnaryOp op) {
  return row(op).fold;
}

std::string_view toString(CmpPredicate p) {
  return kCmpRows[static_cast<size_t>(p)].spelling;
}
std::optional<CmpPredicate> parseCmpPredicate(std::string_view text) {
  return lookupBySpelling<CmpPredicate>(kCmpRows, text);
}

StmtKind kindOf(AtomicOp op) {
  return kAtomicRows[static_cast<size_t>(op)].kind;
}
OpDomain domainOf(AtomicOp op) {
  return kAtomicRows[static_cast<size_t>(op)].domain;
}
AtomicOp AtomicRmwStmt::op() const {
  size_t i = 0;
  while (i + 1 < std::size(kAtomicRows) && kAtomicRows[i].kind != kind())
    ++i;
  assert(kAtomicRows[i].kind == kind() && "an atomic statement kind without a QD_ATOMIC_OP row");
  return static_cast<AtomicOp>(i);
}

} // namespace qd
