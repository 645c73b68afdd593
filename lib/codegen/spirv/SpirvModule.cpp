//===- SpirvModule.cpp - A SPIR-V module assembled word by word -----------===//
#include "SpirvModule.h"

#include <bit>
#include <cstring>

namespace qd::spirv {

void emitInst(Words &out, spv::Op op, std::initializer_list<uint32_t> operands) {
  out.push_back(uint32_t(operands.size() + 1) << 16 | uint32_t(op));
  out.insert(out.end(), operands.begin(), operands.end());
}

void emitInst(Words &out, spv::Op op, const Words &operands) {
  out.push_back(uint32_t(operands.size() + 1) << 16 | uint32_t(op));
  out.insert(out.end(), operands.begin(), operands.end());
}

Words stringWords(const std::string &s) {
  Words w((s.size() + 4) / 4, 0);
  std::memcpy(w.data(), s.data(), s.size()); // little-endian packing, nul padded
  return w;
}

void SpirvModule::capability(spv::Capability c) {
  if (caps_.emplace(uint32_t(c), true).second)
    emitInst(capabilities_, spv::Op::OpCapability, {uint32_t(c)});
}

void SpirvModule::extension(const std::string &name) {
  if (exts_.emplace(name, true).second)
    emitInst(extensions_, spv::Op::OpExtension, stringWords(name));
}

Id SpirvModule::glsl() {
  if (!glsl_) {
    glsl_ = newId();
    Words ops{glsl_};
    Words s = stringWords("GLSL.std.450");
    ops.insert(ops.end(), s.begin(), s.end());
    emitInst(imports_, spv::Op::OpExtInstImport, ops);
  }
  return glsl_;
}

namespace {
/// A key of a type or constant: its opcode and operands (not its id).
std::vector<uint32_t> key(spv::Op op, std::initializer_list<uint32_t> operands) {
  std::vector<uint32_t> k{uint32_t(op)};
  k.insert(k.end(), operands.begin(), operands.end());
  return k;
}
} // namespace

#define QD_SPIRV_TYPE(OP, ...)                                                                     \
  do {                                                                                             \
    auto k = key(spv::Op::OP, {__VA_ARGS__});                                                      \
    if (auto it = types_.find(k); it != types_.end())                                              \
      return it->second;                                                                           \
    Id id = newId();                                                                               \
    Words ops{id};                                                                                 \
    ops.insert(ops.end(), k.begin() + 1, k.end());                                                 \
    emitInst(globals_, spv::Op::OP, ops);                                                          \
    types_.emplace(k, id);                                                                         \
    return id;                                                                                     \
  } while (0)

Id SpirvModule::typeVoid() {
  QD_SPIRV_TYPE(OpTypeVoid);
}
Id SpirvModule::typeBool() {
  QD_SPIRV_TYPE(OpTypeBool);
}
Id SpirvModule::typeInt(unsigned width, bool isSigned) {
  QD_SPIRV_TYPE(OpTypeInt, width, isSigned ? 1u : 0u);
}
Id SpirvModule::typeFloat(unsigned width) {
  QD_SPIRV_TYPE(OpTypeFloat, width);
}
Id SpirvModule::typeVector(Id elem, unsigned n) {
  QD_SPIRV_TYPE(OpTypeVector, elem, n);
}
Id SpirvModule::typeArray(Id elem, Id length) {
  QD_SPIRV_TYPE(OpTypeArray, elem, length);
}
Id SpirvModule::typePointer(spv::StorageClass sc, Id pointee) {
  QD_SPIRV_TYPE(OpTypePointer, uint32_t(sc), pointee);
}
Id SpirvModule::typeFunction(Id ret) {
  QD_SPIRV_TYPE(OpTypeFunction, ret);
}
#undef QD_SPIRV_TYPE

Id SpirvModule::typeStruct(const std::vector<Id> &members) {
  std::vector<uint32_t> k{uint32_t(spv::Op::OpTypeStruct)};
  k.insert(k.end(), members.begin(), members.end());
  if (auto it = types_.find(k); it != types_.end())
    return it->second;
  Id id = newId();
  Words ops{id};
  ops.insert(ops.end(), members.begin(), members.end());
  emitInst(globals_, spv::Op::OpTypeStruct, ops);
  types_.emplace(k, id);
  return id;
}

Id SpirvModule::typeBufferBlock(Id elem, unsigned stride) {
  // Keyed separately from plain types: the array and struct carry layout
  // decorations.
  auto k = key(spv::Op::OpTypeRuntimeArray, {elem, stride, 0xB10C});
  if (auto it = types_.find(k); it != types_.end())
    return it->second;
  Id array = newId();
  emitInst(globals_, spv::Op::OpTypeRuntimeArray, {array, elem});
  decorate(array, spv::Decoration::ArrayStride, {stride});
  Id block = newId();
  emitInst(globals_, spv::Op::OpTypeStruct, {block, array});
  decorate(block, spv::Decoration::Block);
  memberDecorate(block, 0, spv::Decoration::Offset, {0});
  types_.emplace(k, block);
  return block;
}

Id SpirvModule::constant(Id type, std::initializer_list<uint32_t> words) {
  std::vector<uint32_t> k{uint32_t(spv::Op::OpConstant), type};
  k.insert(k.end(), words.begin(), words.end());
  if (auto it = constants_.find(k); it != constants_.end())
    return it->second;
  Id id = newId();
  Words ops{type, id};
  ops.insert(ops.end(), words.begin(), words.end());
  emitInst(globals_, spv::Op::OpConstant, ops);
  constants_.emplace(k, id);
  return id;
}

Id SpirvModule::constBool(bool v) {
  std::vector<uint32_t> k{uint32_t(v ? spv::Op::OpConstantTrue : spv::Op::OpConstantFalse)};
  if (auto it = constants_.find(k); it != constants_.end())
    return it->second;
  Id id = newId();
  emitInst(globals_, v ? spv::Op::OpConstantTrue : spv::Op::OpConstantFalse, {typeBool(), id});
  constants_.emplace(k, id);
  return id;
}

Id SpirvModule::constI64(int64_t v) {
  uint64_t u = uint64_t(v);
  return constant(typeInt(64, true), {uint32_t(u), uint32_t(u >> 32)});
}
Id SpirvModule::constU64(uint64_t v) {
  return constant(typeInt(64, false), {uint32_t(v), uint32_t(v >> 32)});
}
Id SpirvModule::constF32(float v) {
  return constant(typeFloat(32), {std::bit_cast<uint32_t>(v)});
}
Id SpirvModule::constF64(double v) {
  uint64_t u = std::bit_cast<uint64_t>(v);
  return constant(typeFloat(64), {uint32_t(u), uint32_t(u >> 32)});
}

Id SpirvModule::constNull(Id type) {
  std::vector<uint32_t> k{uint32_t(spv::Op::OpConstantNull), type};
  if (auto it = constants_.find(k); it != constants_.end())
    return it->second;
  Id id = newId();
  emitInst(globals_, spv::Op::OpConstantNull, {type, id});
  constants_.emplace(k, id);
  return id;
}

Id SpirvModule::globalVariable(Id pointerType, spv::StorageClass sc, Id id) {
  if (!id)
    id = newId();
  emitInst(globals_, spv::Op::OpVariable, {pointerType, id, uint32_t(sc)});
  return id;
}

void SpirvModule::decorate(Id target, spv::Decoration d, std::initializer_list<uint32_t> extra) {
  Words ops{target, uint32_t(d)};
  ops.insert(ops.end(), extra.begin(), extra.end());
  emitInst(annotations_, spv::Op::OpDecorate, ops);
}

void SpirvModule::memberDecorate(Id type, uint32_t member, spv::Decoration d,
                                 std::initializer_list<uint32_t> extra) {
  Words ops{type, member, uint32_t(d)};
  ops.insert(ops.end(), extra.begin(), extra.end());
  emitInst(annotations_, spv::Op::OpMemberDecorate, ops);
}

void SpirvModule::name(Id target, const std::string &n) {
  Words ops{target};
  Words s = stringWords(n);
  ops.insert(ops.end(), s.begin(), s.end());
  emitInst(debug_, spv::Op::OpName, ops);
}

void SpirvModule::entryPoint(Id fn, const std::string &n, const std::vector<Id> &interface) {
  Words ops{uint32_t(spv::ExecutionModel::GLCompute), fn};
  Words s = stringWords(n);
  ops.insert(ops.end(), s.begin(), s.end());
  ops.insert(ops.end(), interface.begin(), interface.end());
  emitInst(entries_, spv::Op::OpEntryPoint, ops);
}

void SpirvModule::executionMode(Id fn, spv::ExecutionMode m,
                                std::initializer_list<uint32_t> extra) {
  Words ops{fn, uint32_t(m)};
  ops.insert(ops.end(), extra.begin(), extra.end());
  emitInst(modes_, spv::Op::OpExecutionMode, ops);
}

Words SpirvModule::finish() {
  Words out{spv::MagicNumber, 0x00010300u /* SPIR-V 1.3 */, 0 /* generator */, next_, 0};
  Words memoryModel;
  emitInst(memoryModel, spv::Op::OpMemoryModel,
           {uint32_t(spv::AddressingModel::Logical), uint32_t(spv::MemoryModel::GLSL450)});
  for (const Words *w : {&capabilities_, &extensions_, &imports_, &memoryModel, &entries_, &modes_,
                         &debug_, &annotations_, &globals_, &functions_})
    out.insert(out.end(), w->begin(), w->end());
  return out;
}

} // namespace qd::spirv
