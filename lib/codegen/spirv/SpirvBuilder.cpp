//===- SpirvBuilder.cpp - Instructions of the function being emitted ------===//
#include "SpirvBuilder.h"

namespace qd::spirv {

Id SpirvBuilder::typeOf(ScalarType t) {
  switch (t) {
  case ScalarType::I1:
    return tBool();
  case ScalarType::I32:
    return tI32();
  case ScalarType::I64:
    return tI64();
  case ScalarType::F32:
    return tFloat(32);
  case ScalarType::F64:
    return tFloat(64);
  }
  return tI32();
}

Id SpirvBuilder::op(spv::Op o, Id type, std::initializer_list<uint32_t> operands) {
  Id id = m.newId();
  Words ops{type, id};
  ops.insert(ops.end(), operands.begin(), operands.end());
  emitInst(*out, o, ops);
  // IEEE arithmetic in the statement's own precision, as the interpreter
  // computes it: without NoContraction a driver may fuse or reassociate
  // (Mesa's NIR turns the Cody-Waite reduction x - q p1 - q p2 into
  // x - q (p1 + p2), losing the bits the split keeps).
  switch (o) {
  case spv::Op::OpFAdd:
  case spv::Op::OpFSub:
  case spv::Op::OpFMul:
  case spv::Op::OpFDiv:
  case spv::Op::OpFRem:
  case spv::Op::OpFNegate:
    m.decorate(id, spv::Decoration::NoContraction);
    break;
  default:
    break;
  }
  return id;
}

void SpirvBuilder::inst(spv::Op o, std::initializer_list<uint32_t> operands) {
  emitInst(*out, o, operands);
}

Id SpirvBuilder::ext(GLSLstd450 fn, Id type, std::initializer_list<Id> args) {
  Id id = m.newId();
  Words ops{type, id, m.glsl(), uint32_t(fn)};
  ops.insert(ops.end(), args.begin(), args.end());
  emitInst(*out, spv::Op::OpExtInst, ops);
  return id;
}

void SpirvBuilder::label(Id id) {
  emitInst(*out, spv::Op::OpLabel, {id});
  open = true;
}

void SpirvBuilder::branch(Id target) {
  emitInst(*out, spv::Op::OpBranch, {target});
  open = false;
}

void SpirvBuilder::condBranch(Id cond, Id t, Id f) {
  emitInst(*out, spv::Op::OpBranchConditional, {cond, t, f});
  open = false;
}

void SpirvBuilder::selectionMerge(Id merge) {
  emitInst(*out, spv::Op::OpSelectionMerge, {merge, 0});
}

void SpirvBuilder::loopMerge(Id merge, Id cont) {
  emitInst(*out, spv::Op::OpLoopMerge, {merge, cont, 0});
}

void SpirvBuilder::ret() {
  emitInst(*out, spv::Op::OpReturn, {});
  open = false;
}

void SpirvBuilder::ifThen(Id cond, const std::function<void()> &then) {
  Id thenBB = m.newId(), merge = m.newId();
  selectionMerge(merge);
  condBranch(cond, thenBB, merge);
  label(thenBB);
  then();
  if (open)
    branch(merge);
  label(merge);
}

} // namespace qd::spirv
