//===- qd/ir/Ops.h - The operators of qd/ir/Ops.def -------------*- C++ -*-===//
//
// The enums of the operators of `binary`, `unary`, `cmp` and the atomic
// statements, the shared math-function ids, and the queries of each row's
// columns (domain, math function, derivative, folding), all generated from
// qd/ir/Ops.def (tables in lib/ir/Ops.cpp). The statements that use them
// are in qd/ir/Stmt.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace qd {

/// The scalar types an operator is defined on (qd/ir/Ops.def's DOMAIN).
enum class OpDomain : uint8_t { Any, Float, Integer };
/// How derivatives flow through an operator (Ops.def's DIFF column).
enum class OpDiff : uint8_t {
  Smooth,    // partials everywhere in its domain
  Piecewise, // partials except at kinks (abs at 0, min/max on ties)
  Rejected,  // a float operator without a usable derivative (floor, rem)
  Integer,   // integer-only: no derivative is ever asked
};
/// What the constant folder does with an operator (Ops.def's FOLD column).
enum class OpFold : uint8_t {
  Exact, // evaluates it where it is defined
  Libm,  // leaves it: the result depends on the math library
};

/// The math functions a backend implements its own way (Ops.def's
/// QD_MATH_FN rows): LLVM targets call a math library, SPIR-V inlines qd's
/// own code. One id for every backend.
enum class MathFn : uint8_t {
#define QD_MATH_FN(NAME, ...) NAME,
#include "qd/ir/Ops.def"
};
/// The C library's name of `fn` on doubles (`sin`; `sinf` on floats), the
/// stem of the vendor libraries' names (libmvec, libdevice, ocml).
std::string_view libmName(MathFn fn);
/// Its number of arguments.
unsigned arity(MathFn fn);

enum class BinaryOp : uint8_t {
#define QD_BINARY_OP(NAME, ...) NAME,
#include "qd/ir/Ops.def"
};
std::string_view toString(BinaryOp op);
std::optional<BinaryOp> parseBinaryOp(std::string_view text);
/// Ops defined only on integers (and i1): and, or, xor, shl, shr.
bool isBitwise(BinaryOp op);
/// Ops defined only on floats: pow, atan2.
bool isFloatOnly(BinaryOp op);
OpDomain domainOf(BinaryOp op);
/// The math function a float `op` is lowered to; none when it is inline.
std::optional<MathFn> mathFn(BinaryOp op);
OpDiff diffOf(BinaryOp op);
OpFold foldOf(BinaryOp op);

enum class UnaryOp : uint8_t {
#define QD_UNARY_OP(NAME, ...) NAME,
#include "qd/ir/Ops.def"
};
std::string_view toString(UnaryOp op);
std::optional<UnaryOp> parseUnaryOp(std::string_view text);
/// Ops defined only on floats (everything except neg, abs and not).
bool isFloatOnly(UnaryOp op);
OpDomain domainOf(UnaryOp op);
/// The math function a float `op` is lowered to; none when it is inline.
std::optional<MathFn> mathFn(UnaryOp op);
OpDiff diffOf(UnaryOp op);
OpFold foldOf(UnaryOp op);

enum class CmpPredicate : uint8_t {
#define QD_CMP_PREDICATE(NAME, ...) NAME,
#include "qd/ir/Ops.def"
};
std::string_view toString(CmpPredicate p);
std::optional<CmpPredicate> parseCmpPredicate(std::string_view text);

/// The operation of an atomic read-modify-write (Ops.def's QD_ATOMIC_OP).
enum class AtomicOp : uint8_t {
#define QD_ATOMIC_OP(NAME, ...) NAME,
#include "qd/ir/Ops.def"
};
OpDomain domainOf(AtomicOp op);

} // namespace qd
