//===- SpirvEmitArith.cpp - Arithmetic of the SPIR-V emitter -------------===//
//
// Constants, selects, binary and unary operations, comparisons and casts
// (SpirvEmitter.h), with the interpreter's semantics (docs/ir.md).
//
//===----------------------------------------------------------------------===//
#include "SpirvEmitter.h"

#include <fmt/format.h>

#include <limits>

namespace qd::spirv {

//===--- Arithmetic -------------------------------------------------------===//

void SpirvEmitter::visitConstStmt(ConstStmt &s) {
  Id v = 0;
  switch (s.scalarType()) {
  case ScalarType::I1:
    v = m_.constBool(s.intValue() != 0);
    break;
  case ScalarType::I32:
    v = m_.constI32(int32_t(s.intValue()));
    break;
  case ScalarType::I64:
    v = m_.constI64(s.intValue());
    break;
  case ScalarType::F32:
    v = m_.constF32(float(s.floatValue()));
    break;
  case ScalarType::F64:
    v = m_.constF64(s.floatValue());
    break;
  }
  set(&s, v);
}

void SpirvEmitter::visitSelectStmt(SelectStmt &s) {
  set(&s, b_.select(b_.typeOf(s.type().element()), get(s.cond()), get(s.trueValue()),
                    get(s.falseValue())));
}

void SpirvEmitter::visitBinaryStmt(BinaryStmt &s) {
  ScalarType t = s.type().element();
  Id x = get(s.lhs()), y = get(s.rhs());
  if (!isFloat(t)) {
    set(&s, integerBinary(s, x, y));
    return;
  }
  Id ty = b_.typeOf(t);
  unsigned width = bitWidth(t);
  Id v = x;
  switch (s.op()) {
  case BinaryOp::Add:
    v = b_.fadd(ty, x, y);
    break;
  case BinaryOp::Sub:
    v = b_.fsub(ty, x, y);
    break;
  case BinaryOp::Mul:
    v = b_.fmul(ty, x, y);
    break;
  case BinaryOp::Div:
    v = b_.fdiv(ty, x, y);
    break;
  case BinaryOp::Rem:
    v = b_.op(spv::Op::OpFRem, ty, {x, y});
    break;
  case BinaryOp::Min:
  case BinaryOp::Max:
    v = floatMinMax(x, y, t, s.op() == BinaryOp::Min);
    break;
  case BinaryOp::Pow:
  case BinaryOp::Atan2:
    v = emitMath(b_, *mathFn(s.op()), width, {x, y});
    break;
  case BinaryOp::And:
  case BinaryOp::Or:
  case BinaryOp::Xor:
  case BinaryOp::Shl:
  case BinaryOp::Shr: // integer-only: the verifier rejects them on floats
    break;
  }
  set(&s, v);
}

Id SpirvEmitter::integerBinary(BinaryStmt &s, Id x, Id y) {
  ScalarType t = s.type().element();
  using spv::Op;
  if (t == ScalarType::I1) {
    switch (s.op()) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Xor:
      return b_.op(Op::OpLogicalNotEqual, b_.tBool(), {x, y});
    case BinaryOp::Mul:
    case BinaryOp::And:
    case BinaryOp::Min:
      return b_.land(x, y);
    case BinaryOp::Or:
    case BinaryOp::Max:
      return b_.lor(x, y);
    case BinaryOp::Div:
    case BinaryOp::Rem:
      raiseIf(b_.lnot(y), site(s, "integer division by zero"));
      return s.op() == BinaryOp::Div ? x : m_.constBool(false);
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      raiseIf(y, site(s, "shift amount is outside [0, 1)"));
      return x;
    case BinaryOp::Pow:
    case BinaryOp::Atan2: // float-only: the verifier rejects them on integers
      return x;
    }
  }
  Id ty = b_.typeOf(t);
  Id zero = zeroOf(t);
  bool wide = t == ScalarType::I64;
  auto konst = [&](int64_t v) { return wide ? m_.constI64(v) : m_.constI32(int32_t(v)); };
  switch (s.op()) {
  case BinaryOp::Add:
    return b_.iadd(ty, x, y);
  case BinaryOp::Sub:
    return b_.isub(ty, x, y);
  case BinaryOp::Mul:
    return b_.imul(ty, x, y);
  case BinaryOp::Div:
  case BinaryOp::Rem: {
    bool div = s.op() == BinaryOp::Div;
    raiseIf(b_.cmp(Op::OpIEqual, y, zero), site(s, "integer division by zero"));
    // INT_MIN / -1 wraps: x * -1 = -x, remainder 0.
    Id minusOne = b_.cmp(Op::OpIEqual, y, konst(-1));
    Id safe = b_.select(ty, minusOne, konst(1), y);
    Id q = b_.op(Op::OpSDiv, ty, {x, safe});
    // The remainder is x - q y, not OpSRem: NVIDIA's Vulkan driver (580)
    // returns x for OpSRem by a negative divisor (found by the random
    // kernels on an H200, docs/runtime.md).
    if (!div)
      q = b_.isub(ty, x, b_.imul(ty, q, safe));
    return b_.select(ty, minusOne, div ? b_.op(Op::OpSNegate, ty, {x}) : zero, q);
  }
  case BinaryOp::Min:
    return b_.select(ty, b_.cmp(Op::OpSLessThan, x, y), x, y);
  case BinaryOp::Max:
    return b_.select(ty, b_.cmp(Op::OpSGreaterThan, x, y), x, y);
  case BinaryOp::And:
    return b_.op(Op::OpBitwiseAnd, ty, {x, y});
  case BinaryOp::Or:
    return b_.op(Op::OpBitwiseOr, ty, {x, y});
  case BinaryOp::Xor:
    return b_.op(Op::OpBitwiseXor, ty, {x, y});
  case BinaryOp::Shl:
  case BinaryOp::Shr: {
    unsigned width = bitWidth(t);
    raiseIf(b_.cmp(Op::OpUGreaterThanEqual, y, konst(width)),
            site(s, fmt::format("shift amount is outside [0, {})", width)));
    return b_.op(s.op() == BinaryOp::Shl ? Op::OpShiftLeftLogical : Op::OpShiftRightArithmetic, ty,
                 {x, y});
  }
  case BinaryOp::Pow:
  case BinaryOp::Atan2: // float-only: the verifier rejects them on integers
    return x;
  }
  return x;
}

Id SpirvEmitter::floatMinMax(Id x, Id y, ScalarType t, bool isMin) {
  using spv::Op;
  Id ty = b_.typeOf(t);
  Id xNan = b_.isNan(x), yNan = b_.isNan(y);
  Id xFirst = b_.cmp(isMin ? Op::OpFOrdLessThan : Op::OpFOrdGreaterThan, x, y);
  Id yFirst = b_.cmp(isMin ? Op::OpFOrdLessThan : Op::OpFOrdGreaterThan, y, x);
  // Equal (or both zero): combine the bits; min keeps a set sign, max a clear one.
  Id bits = t == ScalarType::F32 ? b_.tU32() : b_.tUvec2();
  Id same = b_.bitcast(ty, b_.op(isMin ? Op::OpBitwiseOr : Op::OpBitwiseAnd, bits,
                                 {b_.bitcast(bits, x), b_.bitcast(bits, y)}));
  Id r = b_.select(ty, yFirst, y, same);
  r = b_.select(ty, xFirst, x, r);
  r = b_.select(ty, yNan, x, r);
  return b_.select(ty, xNan, y, r);
}

void SpirvEmitter::visitUnaryStmt(UnaryStmt &s) {
  ScalarType t = s.type().element();
  Id x = get(s.input());
  Id ty = b_.typeOf(t);
  using spv::Op;
  // One case per operator, on the types of its domain (the verifier's).
  bool f = isFloat(t), isBool = t == ScalarType::I1;
  Id v = x;
  switch (s.op()) {
  case UnaryOp::Neg:
    v = f ? b_.fneg(ty, x) : isBool ? x : b_.op(Op::OpSNegate, ty, {x});
    break;
  case UnaryOp::Abs:
    if (f)
      v = b_.ext(GLSLstd450FAbs, ty, {x});
    else if (!isBool)
      v = b_.select(ty, b_.cmp(Op::OpSLessThan, x, zeroOf(t)), b_.op(Op::OpSNegate, ty, {x}), x);
    break;
  case UnaryOp::Sin:
  case UnaryOp::Cos:
  case UnaryOp::Tan:
  case UnaryOp::Exp:
  case UnaryOp::Log:
  case UnaryOp::Tanh:
    v = emitMath(b_, *mathFn(s.op()), bitWidth(t), {x});
    break;
  case UnaryOp::Sqrt:
    v = b_.ext(GLSLstd450Sqrt, ty, {x});
    break;
  case UnaryOp::Floor:
    v = b_.ext(GLSLstd450Floor, ty, {x});
    break;
  case UnaryOp::Ceil:
    v = b_.ext(GLSLstd450Ceil, ty, {x});
    break;
  case UnaryOp::Not:
    v = isBool ? b_.lnot(x) : b_.op(Op::OpNot, ty, {x});
    break;
  }
  set(&s, v);
}

void SpirvEmitter::visitCmpStmt(CmpStmt &s) {
  Id x = get(s.lhs()), y = get(s.rhs());
  ScalarType t = s.operandType();
  using spv::Op;
  int p = int(s.predicate()); // eq ne lt le gt ge
  Id v = 0;
  if (isFloat(t)) {
    static const Op ops[] = {Op::OpFOrdEqual,       Op::OpFUnordNotEqual,
                             Op::OpFOrdLessThan,    Op::OpFOrdLessThanEqual,
                             Op::OpFOrdGreaterThan, Op::OpFOrdGreaterThanEqual};
    v = b_.cmp(ops[p], x, y);
  } else if (t == ScalarType::I1) {
    switch (s.predicate()) { // unsigned: false < true
    case CmpPredicate::Eq:
      v = b_.op(Op::OpLogicalEqual, b_.tBool(), {x, y});
      break;
    case CmpPredicate::Ne:
      v = b_.op(Op::OpLogicalNotEqual, b_.tBool(), {x, y});
      break;
    case CmpPredicate::Lt:
      v = b_.land(b_.lnot(x), y);
      break;
    case CmpPredicate::Le:
      v = b_.lor(b_.lnot(x), y);
      break;
    case CmpPredicate::Gt:
      v = b_.land(x, b_.lnot(y));
      break;
    case CmpPredicate::Ge:
      v = b_.lor(x, b_.lnot(y));
      break;
    }
  } else {
    static const Op ops[] = {Op::OpIEqual,         Op::OpINotEqual,    Op::OpSLessThan,
                             Op::OpSLessThanEqual, Op::OpSGreaterThan, Op::OpSGreaterThanEqual};
    v = b_.cmp(ops[p], x, y);
  }
  set(&s, v);
}

void SpirvEmitter::visitCastStmt(CastStmt &s) {
  Id x = get(s.input());
  ScalarType from = s.from(), to = s.to();
  Id ty = b_.typeOf(to);
  using spv::Op;
  Id v = x;
  if (from == to) {
  } else if (to == ScalarType::I1) { // "not zero"
    v = isFloat(from) ? b_.cmp(Op::OpFUnordNotEqual, x, zeroOf(from))
                      : b_.cmp(Op::OpINotEqual, x, zeroOf(from));
  } else if (isFloat(from) && isFloat(to)) {
    v = b_.op(Op::OpFConvert, ty, {x});
  } else if (isFloat(from)) {
    // Truncate, saturate, NaN -> 0: convert only in range.
    unsigned w = bitWidth(from);
    double limit = to == ScalarType::I32 ? 2147483648.0 : 9223372036854775808.0;
    Id hi = m_.constFloat(w, limit), lo = m_.constFloat(w, -limit);
    Id tooHigh = b_.cmp(Op::OpFOrdGreaterThanEqual, x, hi);
    Id tooLow = b_.cmp(Op::OpFOrdLessThan, x, lo);
    Id bad = b_.lor(b_.lor(tooHigh, tooLow), b_.isNan(x));
    Id safe = b_.select(b_.typeOf(from), bad, zeroOf(from), x);
    v = b_.op(Op::OpConvertFToS, ty, {safe});
    bool wide = to == ScalarType::I64;
    Id maxV = wide ? m_.constI64(std::numeric_limits<int64_t>::max())
                   : m_.constI32(std::numeric_limits<int32_t>::max());
    Id minV = wide ? m_.constI64(std::numeric_limits<int64_t>::min())
                   : m_.constI32(std::numeric_limits<int32_t>::min());
    v = b_.select(ty, tooHigh, maxV, v);
    v = b_.select(ty, tooLow, minV, v);
  } else if (isFloat(to)) {
    v = from == ScalarType::I1 ? b_.select(ty, x, m_.constFloat(bitWidth(to), 1), zeroOf(to))
                               : b_.op(Op::OpConvertSToF, ty, {x});
  } else if (from == ScalarType::I1) {
    v = b_.select(ty, x, to == ScalarType::I64 ? m_.constI64(1) : m_.constI32(1), zeroOf(to));
  } else {
    v = b_.op(Op::OpSConvert, ty, {x});
  }
  set(&s, v);
}

} // namespace qd::spirv
