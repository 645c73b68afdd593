//===- EmitArith.cpp - Arithmetic, comparisons and casts ------------------===//
//
// Semantics follow docs/ir.md (the interpreter is the reference): wrapping
// integer arithmetic, INT_MIN / -1 wraps, saturating float-to-int casts,
// NaN-losing float min/max with -0 < +0, unsigned i1. Division by zero and
// out-of-range shifts raise an error site.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include <fmt/format.h>
#include <llvm/IR/PatternMatch.h>

namespace qd::codegen {

LV *ArithLowering::constant(ConstStmt &s) {
  llvm::Type *t = c_.typeOf(s.scalarType());
  return isFloat(s.scalarType()) ? llvm::ConstantFP::get(t, s.floatValue())
                                 : llvm::ConstantInt::get(t, s.intValue(), true);
}

LV *ArithLowering::select(SelectStmt &s) {
  bool vec = lanes_.varying(&s); // a uniform condition may pick between vectors
  return c_.b.CreateSelect(c_.get(s.cond()), lanes_.operand(s.trueValue(), vec),
                           lanes_.operand(s.falseValue(), vec));
}

LV *ArithLowering::binary(BinaryStmt &s) {
  // `last - index` of a descending loop is its common counter.
  if (lanes_.vectorMode())
    if (const ForStmt *loop = lanes_.plan().descendingCounterOf(&s))
      return lanes_.state().descendingCounters.at(loop);
  ScalarType t = s.type().element();
  bool vec = lanes_.varying(&s);
  LV *x = lanes_.operand(s.lhs(), vec), *y = lanes_.operand(s.rhs(), vec);
  lanes_.noteAffine(s);
  if (!isFloat(t))
    return integerBinary(s, x, y, vec);
  llvm::IRBuilder<> &b = c_.b;
  switch (s.op()) {
  case BinaryOp::Add:
    // -0.0 + y is y for every y: the first contribution to a gradient's
    // zeroed adjoint costs no instruction for LLVM to fold away later.
    if (llvm::PatternMatch::match(x, llvm::PatternMatch::m_NegZeroFP()))
      return y;
    if (llvm::PatternMatch::match(y, llvm::PatternMatch::m_NegZeroFP()))
      return x;
    return b.CreateFAdd(x, y);
  case BinaryOp::Sub:
    return b.CreateFSub(x, y);
  case BinaryOp::Mul:
    return b.CreateFMul(x, y);
  case BinaryOp::Div:
    return b.CreateFDiv(x, y);
  case BinaryOp::Rem:
    return b.CreateFRem(x, y);
  case BinaryOp::Min:
  case BinaryOp::Max:
    return floatMinMax(x, y, t, s.op() == BinaryOp::Min);
  case BinaryOp::Pow:
  case BinaryOp::Atan2:
    return c_.target.mathCall(c_, *mathFn(s.op()), t, {x, y});
  case BinaryOp::And:
  case BinaryOp::Or:
  case BinaryOp::Xor:
  case BinaryOp::Shl:
  case BinaryOp::Shr: // integer-only: the verifier rejects them on floats
    return x;
  }
  return x;
}

LV *ArithLowering::integerBinary(BinaryStmt &s, LV *x, LV *y, bool vec) {
  ScalarType t = s.type().element();
  llvm::IRBuilder<> &b = c_.b;
  llvm::Type *ty = x->getType();
  bool isBool = t == ScalarType::I1;
  switch (s.op()) {
  case BinaryOp::Add:
    return b.CreateAdd(x, y);
  case BinaryOp::Sub:
    return b.CreateSub(x, y);
  case BinaryOp::Mul:
    return b.CreateMul(x, y);
  case BinaryOp::Div:
  case BinaryOp::Rem: {
    bool div = s.op() == BinaryOp::Div;
    LV *zero = llvm::ConstantInt::get(ty, 0);
    if (vec) // an inactive lane's poison must not reach the divisor
      y = b.CreateFreeze(y);
    c_.raiseIf(lanes_.anyLane(b.CreateICmpEQ(y, zero)), c_.site(s, "integer division by zero"));
    // INT_MIN / -1 wraps: x * -1 = -x, remainder 0.
    if (isBool) {
      LV *one = llvm::ConstantInt::get(ty, 1);
      return div ? b.CreateUDiv(x, one) : zero; // y is 1 in every checked lane
    }
    // Inactive lanes of vector code skip the check above: divide them by 1
    // instead of 0.
    LV *minusOne = b.CreateICmpEQ(y, llvm::ConstantInt::get(ty, -1, true));
    LV *safe = b.CreateSelect(b.CreateOr(minusOne, b.CreateICmpEQ(y, zero)),
                              llvm::ConstantInt::get(ty, 1), y);
    LV *q = div ? b.CreateSDiv(x, safe) : b.CreateSRem(x, safe);
    return b.CreateSelect(minusOne, div ? b.CreateSub(zero, x) : zero, q);
  }
  case BinaryOp::Min:
    return b.CreateBinaryIntrinsic(isBool ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, x, y);
  case BinaryOp::Max:
    return b.CreateBinaryIntrinsic(isBool ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, x, y);
  case BinaryOp::And:
    return b.CreateAnd(x, y);
  case BinaryOp::Or:
    return b.CreateOr(x, y);
  case BinaryOp::Xor:
    return b.CreateXor(x, y);
  case BinaryOp::Shl:
  case BinaryOp::Shr: {
    unsigned width = bitWidth(t);
    LV *bad = isBool ? b.CreateICmpNE(y, llvm::ConstantInt::get(ty, 0))
                     : b.CreateICmpUGE(y, llvm::ConstantInt::get(ty, width));
    c_.raiseIf(lanes_.anyLane(bad),
               c_.site(s, fmt::format("shift amount is outside [0, {})", width)));
    return s.op() == BinaryOp::Shl ? b.CreateShl(x, y)
                                   : (isBool ? b.CreateLShr(x, y) : b.CreateAShr(x, y));
  }
  case BinaryOp::Pow:
  case BinaryOp::Atan2: // float-only: the verifier rejects them on integers
    return x;
  }
  return x;
}

LV *ArithLowering::floatMinMax(LV *x, LV *y, ScalarType t, bool isMin) {
  llvm::IRBuilder<> &b = c_.b;
  llvm::Type *ty = x->getType();
  llvm::Type *ity =
      EmitContext::shaped(t == ScalarType::F32 ? static_cast<llvm::Type *>(c_.i32) : c_.i64, x);
  LV *xNan = b.CreateFCmpUNO(x, x);
  LV *yNan = b.CreateFCmpUNO(y, y);
  LV *xFirst = isMin ? b.CreateFCmpOLT(x, y) : b.CreateFCmpOGT(x, y);
  LV *yFirst = isMin ? b.CreateFCmpOLT(y, x) : b.CreateFCmpOGT(y, x);
  // Equal (or both zero): combine sign bits; min keeps a set sign, max a clear one.
  LV *xi = b.CreateBitCast(x, ity), *yi = b.CreateBitCast(y, ity);
  LV *same = b.CreateBitCast(isMin ? b.CreateOr(xi, yi) : b.CreateAnd(xi, yi), ty);
  LV *r = b.CreateSelect(yFirst, y, same);
  r = b.CreateSelect(xFirst, x, r);
  r = b.CreateSelect(yNan, x, r);
  return b.CreateSelect(xNan, y, r);
}

LV *ArithLowering::unary(UnaryStmt &s) {
  ScalarType t = s.type().element();
  bool vec = lanes_.varying(&s);
  LV *x = lanes_.operand(s.input(), vec);
  llvm::IRBuilder<> &b = c_.b;
  llvm::Type *ty = x->getType();
  auto intrinsic = [&](llvm::Intrinsic::ID id) -> LV * {
    return b.CreateCall(c_.intrinsic(id, {ty}), {x});
  };
  // One case per operator, on the types of its domain (the verifier's).
  bool f = isFloat(t);
  switch (s.op()) {
  case UnaryOp::Neg:
    return f ? b.CreateFNeg(x) : b.CreateSub(llvm::ConstantInt::get(ty, 0), x);
  case UnaryOp::Abs:
    if (f)
      return intrinsic(llvm::Intrinsic::fabs);
    if (t == ScalarType::I1)
      return x;
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b.getFalse());
  case UnaryOp::Sin:
  case UnaryOp::Cos:
  case UnaryOp::Tan:
  case UnaryOp::Exp:
  case UnaryOp::Log:
  case UnaryOp::Tanh:
    return c_.target.mathCall(c_, *mathFn(s.op()), t, {x});
  case UnaryOp::Sqrt:
    return intrinsic(llvm::Intrinsic::sqrt);
  case UnaryOp::Floor:
    return intrinsic(llvm::Intrinsic::floor);
  case UnaryOp::Ceil:
    return intrinsic(llvm::Intrinsic::ceil);
  case UnaryOp::Not:
    return b.CreateNot(x);
  }
  return x;
}

LV *ArithLowering::compare(CmpStmt &s) {
  bool vec = lanes_.varying(&s);
  LV *x = lanes_.operand(s.lhs(), vec), *y = lanes_.operand(s.rhs(), vec);
  ScalarType t = s.operandType();
  using P = llvm::CmpInst::Predicate;
  if (isFloat(t)) {
    static const P preds[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT,
                              P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
    return c_.b.CreateFCmp(preds[static_cast<int>(s.predicate())], x, y);
  }
  static const P signedPreds[] = {P::ICMP_EQ,  P::ICMP_NE,  P::ICMP_SLT,
                                  P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
  static const P unsignedPreds[] = {P::ICMP_EQ,  P::ICMP_NE,  P::ICMP_ULT,
                                    P::ICMP_ULE, P::ICMP_UGT, P::ICMP_UGE};
  bool isUnsigned = t == ScalarType::I1;
  return c_.b.CreateICmp(
      (isUnsigned ? unsignedPreds : signedPreds)[static_cast<int>(s.predicate())], x, y);
}

LV *ArithLowering::cast(CastStmt &s) {
  LV *x = c_.get(s.input()); // varying exactly when the input is
  ScalarType from = s.from(), to = s.to();
  llvm::IRBuilder<> &b = c_.b;
  llvm::Type *ty = EmitContext::shaped(c_.typeOf(to), x);
  lanes_.noteAffine(s);
  if (from == to)
    return x;
  if (to == ScalarType::I1) // "not zero"
    return isFloat(from) ? b.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0))
                         : b.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
  if (isFloat(from) && isFloat(to))
    return b.CreateFPCast(x, ty);
  if (isFloat(from)) // truncate, saturate, NaN -> 0
    return b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {ty, x->getType()}, {x});
  if (isFloat(to))
    return from == ScalarType::I1 ? b.CreateUIToFP(x, ty) : b.CreateSIToFP(x, ty);
  if (from == ScalarType::I1)
    return b.CreateZExt(x, ty);
  return b.CreateSExtOrTrunc(x, ty);
}

} // namespace qd::codegen
