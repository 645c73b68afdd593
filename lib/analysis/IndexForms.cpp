//===- IndexForms.cpp - What an index says about the iteration -----------===//
#include "IndexForms.h"

#include "qd/ir/Module.h"

#include <algorithm>
#include <cstdlib>

namespace qd::analysis_detail {
namespace {

/// How deep the forms look through arithmetic (indices are short
/// expressions; a long chain is not worth following).
constexpr int kMaxDepth = 12;

std::optional<int64_t> integerConstant(const Value *v) {
  auto *c = dyn_cast<ConstStmt>(v);
  if (!c || !isInteger(c->scalarType()))
    return std::nullopt;
  return c->intValue();
}

/// The same value in every iteration of `task`.
bool isShared(const Value *v, const ForStmt &task, int depth) {
  if (isa<Argument>(v))
    return true;
  auto *s = dyn_cast<Stmt>(v);
  if (!s || depth > kMaxDepth)
    return false;
  if (enclosingParallelTask(*s) != &task)
    return s != &task; // a top-level value
  if (isa<ConstStmt>(s))
    return true;
  if (!isa<BinaryStmt>(s) && !isa<UnaryStmt>(s) && !isa<CastStmt>(s) && !isa<SelectStmt>(s) &&
      !isa<CmpStmt>(s))
    return false;
  for (unsigned k = 0; k < s->numOperands(); ++k)
    if (!isShared(s->operand(k), task, depth + 1))
      return false;
  return true;
}

std::optional<SharedOffset> sharedOffset(const Value *v, const ForStmt &task, int depth) {
  if (std::optional<int64_t> c = integerConstant(v))
    return SharedOffset{nullptr, *c};
  if (auto *bin = dyn_cast<BinaryStmt>(v); bin && depth <= kMaxDepth) {
    bool add = bin->op() == BinaryOp::Add, sub = bin->op() == BinaryOp::Sub;
    std::optional<int64_t> r = integerConstant(bin->rhs());
    if ((add || sub) && r)
      if (auto x = sharedOffset(bin->lhs(), task, depth + 1))
        return SharedOffset{x->base, add ? x->offset + *r : x->offset - *r};
    if (std::optional<int64_t> l = integerConstant(bin->lhs()); add && l)
      if (auto x = sharedOffset(bin->rhs(), task, depth + 1))
        return SharedOffset{x->base, x->offset + *l};
  }
  if (isShared(v, task, depth))
    return SharedOffset{v, 0};
  return std::nullopt;
}

/// Constant bounds of task dimension `d`, or nullopt.
std::optional<std::pair<int64_t, int64_t>> constantBounds(const ForStmt &task, int d) {
  Bound b = task.begin(d), e = task.end(d);
  if (!b.isConstant() || !e.isConstant() || e.constant <= b.constant)
    return std::nullopt;
  return std::pair{b.constant, e.constant};
}

/// `x` or `y` (a select's arms): one interval holding both, modulo the
/// extent where that is tighter.
std::optional<NearIndex> either(NearIndex x, NearIndex y, const ForStmt &task) {
  if (x.dim != y.dim)
    return std::nullopt;
  NearIndex plain{x.dim, std::min(x.lo, y.lo), std::max(x.hi, y.hi), x.modular || y.modular};
  auto bounds = constantBounds(task, x.dim);
  if (!bounds)
    return plain.modular ? std::nullopt : std::optional(plain);
  // Shift y by the multiple of the extent that brings it closest to x.
  int64_t extent = bounds->second - bounds->first;
  int64_t gap = (x.lo + x.hi) / 2 - (y.lo + y.hi) / 2;
  int64_t k = gap >= 0 ? (gap + extent / 2) / extent : -((-gap + extent / 2) / extent);
  if (k == 0)
    return plain;
  NearIndex wrapped{x.dim, std::min(x.lo, y.lo + k * extent), std::max(x.hi, y.hi + k * extent),
                    true};
  return wrapped.hi - wrapped.lo < plain.hi - plain.lo ? wrapped : plain;
}

std::optional<NearIndex> near(const Value *v, const ForStmt &task, int depth) {
  if (int d = taskDimOf(v, task); d >= 0)
    return NearIndex{d, 0, 0, false};
  if (depth > kMaxDepth)
    return std::nullopt;
  if (auto *sel = dyn_cast<SelectStmt>(v)) {
    auto x = near(sel->trueValue(), task, depth + 1);
    auto y = x ? near(sel->falseValue(), task, depth + 1) : std::nullopt;
    return y ? either(*x, *y, task) : std::nullopt;
  }
  auto *bin = dyn_cast<BinaryStmt>(v);
  if (!bin || !isInteger(bin->type().element()))
    return std::nullopt;
  std::optional<int64_t> l = integerConstant(bin->lhs()), r = integerConstant(bin->rhs());
  const Value *other = r ? bin->lhs() : bin->rhs();
  std::optional<int64_t> c = r ? r : l;
  if (!c)
    return std::nullopt;
  switch (bin->op()) {
  case BinaryOp::Add:
  case BinaryOp::Sub: {
    if (bin->op() == BinaryOp::Sub && !r)
      return std::nullopt; // c - i runs backwards
    auto x = near(other, task, depth + 1);
    int64_t by = bin->op() == BinaryOp::Add ? *c : -*c;
    if (!x || std::abs(by) > (int64_t(1) << 30))
      return std::nullopt;
    return NearIndex{x->dim, x->lo + by, x->hi + by, x->modular};
  }
  case BinaryOp::Min:
  case BinaryOp::Max: {
    // i + [lo, hi] clamped by c: with i in [b, e), the result minus i
    // stays within [min(lo, c - (e - 1)), hi] (min) or [lo, max(hi, c - b)].
    auto x = near(other, task, depth + 1);
    auto bounds = x ? constantBounds(task, x->dim) : std::nullopt;
    if (!x || x->modular || !bounds)
      return std::nullopt;
    if (bin->op() == BinaryOp::Min)
      x->lo = std::min(x->lo, *c - (bounds->second - 1));
    else
      x->hi = std::max(x->hi, *c - bounds->first);
    return x;
  }
  default:
    return std::nullopt;
  }
}

} // namespace

std::optional<SharedOffset> sharedOffsetOf(const Value *v, const ForStmt &task) {
  return sharedOffset(v, task, 0);
}

bool provablyDisjoint(const GlobalAccessStmt &a, const GlobalAccessStmt &b, const ForStmt &task) {
  unsigned n = std::min(a.numIndices(), b.numIndices());
  for (unsigned p = 0; p < n; ++p) {
    auto x = sharedOffsetOf(a.index(p), task);
    auto y = x ? sharedOffsetOf(b.index(p), task) : std::nullopt;
    // Offsets of one base differ as i32 too (indices are at most 64 bits;
    // a difference below 2^31 survives wrapping).
    if (y && x->base == y->base && x->offset != y->offset &&
        std::abs(x->offset - y->offset) < (int64_t(1) << 31))
      return true;
  }
  return false;
}

std::optional<NearIndex> nearIndexOf(const Value *v, const ForStmt &task) {
  return near(v, task, 0);
}

} // namespace qd::analysis_detail
