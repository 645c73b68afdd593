//===- Simplify.cpp - Exact algebraic simplification ----------------------===//
//
// Every rewrite here is an identity for all inputs of the type, NaN, signed
// zeros and wrap-around included. For example `x + 0.0` is *not* `x` for
// floats (-0.0 + 0.0 is +0.0), but `x + -0.0` is; `x * 0` is 0 only for
// integers (NaN * 0 is NaN).
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <cmath>

namespace qd {
namespace {

const ConstStmt *asConst(const Value *v) {
  return dyn_cast<ConstStmt>(v);
}

bool isIntZero(const Value *v) {
  auto *c = asConst(v);
  return c && isInteger(c->scalarType()) && c->intValue() == 0;
}
bool isOne(const Value *v) {
  auto *c = asConst(v);
  return c && c->isOne();
}
/// The additive identity of the type: 0 for integers, -0.0 for floats.
bool isAdditiveIdentity(const Value *v) {
  auto *c = asConst(v);
  if (!c)
    return false;
  if (isInteger(c->scalarType()))
    return c->scalarType() != ScalarType::I1 && c->intValue() == 0;
  return c->floatValue() == 0 && std::signbit(c->floatValue());
}
/// x - c == x for c = +0.0 (and integer 0).
bool isSubtractiveIdentity(const Value *v) {
  auto *c = asConst(v);
  if (!c)
    return false;
  if (isInteger(c->scalarType()))
    return c->scalarType() != ScalarType::I1 && c->intValue() == 0;
  return c->floatValue() == 0 && !std::signbit(c->floatValue());
}

/// Returns the value `s` equals, or null. May set `constant` instead when the
/// result is a new integer constant.
Value *simplifyBinary(BinaryStmt &s, std::optional<int64_t> &constant) {
  Value *a = s.lhs(), *b = s.rhs();
  bool isInt = s.type().isIntegerScalar() && !s.type().isScalar(ScalarType::I1);
  switch (s.op()) {
  case BinaryOp::Add:
    if (isAdditiveIdentity(b))
      return a;
    if (isAdditiveIdentity(a))
      return b;
    break;
  case BinaryOp::Sub:
    if (isSubtractiveIdentity(b))
      return a;
    if (isInt && a == b)
      constant = 0;
    break;
  case BinaryOp::Mul:
    if (isOne(b))
      return a;
    if (isOne(a))
      return b;
    if (isInt && (isIntZero(a) || isIntZero(b)))
      constant = 0;
    break;
  case BinaryOp::Div:
    if (isOne(b))
      return a;
    break;
  case BinaryOp::Min:
  case BinaryOp::Max:
  case BinaryOp::And:
  case BinaryOp::Or:
    if (a == b)
      return a;
    break;
  case BinaryOp::Xor:
    if (a == b && s.type().isIntegerScalar())
      constant = 0;
    break;
  case BinaryOp::Rem:
  case BinaryOp::Pow:
  case BinaryOp::Atan2:
  case BinaryOp::Shl:
  case BinaryOp::Shr: // no identity that holds for every input
    break;
  }
  return nullptr;
}

Value *simplifyUnary(UnaryStmt &s) {
  // neg(neg x) == x and not(not x) == x, wrap-around and NaN included.
  auto *inner = dyn_cast<UnaryStmt>(s.input());
  if (inner && inner->op() == s.op() && (s.op() == UnaryOp::Neg || s.op() == UnaryOp::Not))
    return inner->input();
  return nullptr;
}

std::optional<int64_t> simplifyCmp(CmpStmt &s) {
  // x op x is known for integers (floats: NaN != NaN).
  if (s.lhs() != s.rhs() || isFloat(s.operandType()))
    return std::nullopt;
  switch (s.predicate()) {
  case CmpPredicate::Eq:
  case CmpPredicate::Le:
  case CmpPredicate::Ge:
    return 1;
  case CmpPredicate::Ne:
  case CmpPredicate::Lt:
  case CmpPredicate::Gt:
    return 0;
  }
  return std::nullopt;
}

/// Whether the statements of `chosen` can replace the if in its block:
/// a trailing break/continue must stay last in its block.
bool canInline(const IfStmt &s, const Block &chosen) {
  if (chosen.empty())
    return true;
  const Stmt &last = const_cast<Block &>(chosen).back();
  bool exits = last.kind() == StmtKind::Break || last.kind() == StmtKind::Continue;
  return !exits || &s.parent()->back() == &s;
}

/// True when every use of the loop index is in the loop's body (always, in
/// verified IR): erasing the loop then drops them all.
bool indexUsedOnlyInside(const ForStmt &loop) {
  for (const Use &u : loop.uses())
    if (!u.user()->parent()->isNestedIn(&loop.body()))
      return false;
  return true;
}

class SimplifyPass : public KernelPass {
public:
  std::string_view name() const override { return "simplify"; }

  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    changed_ = false;
    simplifyBlock(kernel.body());
    return changed_;
  }

private:
  void simplifyBlock(Block &block) {
    for (auto it = block.begin(); it != block.end();) {
      Stmt &s = *it++;
      if (auto *i = dyn_cast<IfStmt>(&s)) {
        if (auto c = evaluateConstantInt(i->cond())) {
          Block &chosen = *c ? i->thenBlock() : i->elseBlock();
          if (canInline(*i, chosen)) {
            simplifyBlock(chosen);
            block.splice(Block::iteratorTo(i), chosen);
            i->erase();
            changed_ = true;
            continue;
          }
        }
      }
      if (auto *loop = dyn_cast<ForStmt>(&s)) {
        if (constantTripCount(*loop) == 0 && indexUsedOnlyInside(*loop)) {
          loop->erase();
          changed_ = true;
          continue;
        }
      }
      for (unsigned b = 0; b < s.numBlocks(); ++b)
        simplifyBlock(s.block(b));
      simplifyValue(s);
    }
  }

  void simplifyValue(Stmt &s) {
    Value *replacement = nullptr;
    std::optional<int64_t> constant;
    if (auto *b = dyn_cast<BinaryStmt>(&s))
      replacement = simplifyBinary(*b, constant);
    else if (auto *u = dyn_cast<UnaryStmt>(&s))
      replacement = simplifyUnary(*u);
    else if (auto *c = dyn_cast<CmpStmt>(&s))
      constant = simplifyCmp(*c);
    else if (auto *sel = dyn_cast<SelectStmt>(&s))
      replacement = sel->trueValue() == sel->falseValue() ? sel->trueValue() : nullptr;
    else if (auto *cast = dyn_cast<CastStmt>(&s))
      replacement = cast->from() == cast->to() ? cast->input() : nullptr;
    if (constant && !replacement) {
      IRBuilder b = IRBuilder::before(s);
      ConstStmt *c = b.constInt(s.type().element(), *constant);
      c->setName(s.name());
      replacement = c;
    }
    if (replacement && replacement != &s) {
      s.replaceAndErase(replacement);
      changed_ = true;
    }
  }

  bool changed_ = false;
};

} // namespace

std::unique_ptr<Pass> createSimplifyPass() {
  return std::make_unique<SimplifyPass>();
}

} // namespace qd
