//===- SpirvBuilder.h - Instructions of the function being emitted -*- C++ -*-===//
//
// SpirvBuilder appends instructions to the function being emitted: typed
// helpers for the values of qd's scalar types, structured control flow
// (blocks, merges) and the GLSL.std.450 calls. SpirvMath.cpp builds the
// accurate math functions on it; SpirvEmitter.cpp the kernels.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "SpirvModule.h"

#include "qd/ir/Stmt.h"
#include "qd/ir/Type.h"

#include <functional>

namespace qd::spirv {

/// The words of one function: OpVariables (first in the entry block), a
/// prologue (computed once, in the entry block) and the body.
struct FunctionWords {
  Words vars, prologue, body;
};

class SpirvBuilder {
public:
  explicit SpirvBuilder(SpirvModule &m) : m(m) {}
  SpirvModule &m;

  /// Where instructions go (a function's body or prologue).
  Words *out = nullptr;
  /// Whether the current block is still open (no terminator yet).
  bool open = true;

  Id tBool() { return m.typeBool(); }
  Id tU32() { return m.typeInt(32, false); }
  Id tI32() { return m.typeInt(32, true); }
  Id tU64() { return m.typeInt(64, false); }
  Id tI64() { return m.typeInt(64, true); }
  Id tUvec2() { return m.typeVector(tU32(), 2); }
  Id tFloat(unsigned width) { return m.typeFloat(width); }
  /// The SSA type of a scalar type (i1: bool).
  Id typeOf(ScalarType t);

  /// An instruction with a result: `op type id operands...`.
  Id op(spv::Op op, Id type, std::initializer_list<uint32_t> operands);
  /// One without.
  void inst(spv::Op op, std::initializer_list<uint32_t> operands);
  Id ext(GLSLstd450 fn, Id type, std::initializer_list<Id> args);

  // Blocks and structured control flow.
  void label(Id id);
  void branch(Id target);
  void condBranch(Id cond, Id t, Id f);
  void selectionMerge(Id merge);
  void loopMerge(Id merge, Id cont);
  void ret();

  // Arithmetic shorthands on floats of one width.
  Id fadd(Id t, Id a, Id b) { return op(spv::Op::OpFAdd, t, {a, b}); }
  Id fsub(Id t, Id a, Id b) { return op(spv::Op::OpFSub, t, {a, b}); }
  Id fmul(Id t, Id a, Id b) { return op(spv::Op::OpFMul, t, {a, b}); }
  Id fdiv(Id t, Id a, Id b) { return op(spv::Op::OpFDiv, t, {a, b}); }
  Id fneg(Id t, Id a) { return op(spv::Op::OpFNegate, t, {a}); }
  Id select(Id t, Id c, Id a, Id b) { return op(spv::Op::OpSelect, t, {c, a, b}); }
  Id cmp(spv::Op o, Id a, Id b) { return op(o, tBool(), {a, b}); }
  Id isNan(Id a) { return op(spv::Op::OpIsNan, tBool(), {a}); }
  Id isInf(Id a) { return op(spv::Op::OpIsInf, tBool(), {a}); }
  Id lor(Id a, Id b) { return op(spv::Op::OpLogicalOr, tBool(), {a, b}); }
  Id land(Id a, Id b) { return op(spv::Op::OpLogicalAnd, tBool(), {a, b}); }
  Id lnot(Id a) { return op(spv::Op::OpLogicalNot, tBool(), {a}); }
  Id bitcast(Id t, Id a) { return op(spv::Op::OpBitcast, t, {a}); }
  Id iadd(Id t, Id a, Id b) { return op(spv::Op::OpIAdd, t, {a, b}); }
  Id isub(Id t, Id a, Id b) { return op(spv::Op::OpISub, t, {a, b}); }
  Id imul(Id t, Id a, Id b) { return op(spv::Op::OpIMul, t, {a, b}); }
  Id u32(uint32_t v) { return m.constU32(v); }
  Id load(Id type, Id ptr) { return op(spv::Op::OpLoad, type, {ptr}); }
  void store(Id ptr, Id v) { inst(spv::Op::OpStore, {ptr, v}); }

  /// if (cond) { then(); } with a selection construct; `then` may end its
  /// block (a return), the builder continues after the merge.
  void ifThen(Id cond, const std::function<void()> &then);
};

/// The math functions of Ops.def (MathFn, the ids the LLVM targets use
/// too), implemented by qd itself for Vulkan: accurate to a few ulp in the
/// ranges docs/runtime.md gives, for 32- and 64-bit floats. `fn` applied to
/// `args` (arity(fn) of them) of float `width`.
Id emitMath(SpirvBuilder &b, MathFn fn, unsigned width, std::initializer_list<Id> args);

} // namespace qd::spirv
