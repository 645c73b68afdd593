//===- SpirvModule.h - A SPIR-V module assembled word by word ---*- C++ -*-===//
//
// The sections of a SPIR-V module in their required order, with types and
// constants made once each, and the instructions of the function being
// emitted split into its variables (which SPIR-V wants first in the entry
// block), a prologue (values computed once per function, in the entry
// block) and the body.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <spirv/unified1/GLSL.std.450.h>
#include <spirv/unified1/spirv.hpp11>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace qd::spirv {

using Id = uint32_t;
using Words = std::vector<uint32_t>;

/// Appends instruction `op` with `operands` to `out`.
void emitInst(Words &out, spv::Op op, std::initializer_list<uint32_t> operands);
void emitInst(Words &out, spv::Op op, const Words &operands);
/// A literal string's words (nul-terminated, padded).
Words stringWords(const std::string &s);

class SpirvModule {
public:
  Id newId() { return next_++; }

  void capability(spv::Capability c);
  void extension(const std::string &name);
  Id glsl();

  Id typeVoid();
  Id typeBool();
  Id typeInt(unsigned width, bool isSigned);
  Id typeFloat(unsigned width);
  Id typeVector(Id elem, unsigned n);
  /// An array of `length` (the id of a constant) `elem`s.
  Id typeArray(Id elem, Id length);
  Id typePointer(spv::StorageClass sc, Id pointee);
  /// A runtime array of `elem` with `stride` and a Block struct holding it.
  Id typeBufferBlock(Id elem, unsigned stride);
  Id typeFunction(Id ret);
  Id typeStruct(const std::vector<Id> &members);

  Id constant(Id type, std::initializer_list<uint32_t> words);
  Id constBool(bool v);
  Id constU32(uint32_t v) { return constant(typeInt(32, false), {v}); }
  Id constI32(int32_t v) { return constant(typeInt(32, true), {uint32_t(v)}); }
  Id constI64(int64_t v);
  Id constU64(uint64_t v);
  Id constF32(float v);
  Id constF64(double v);
  /// A constant of float type `width` with value `v`.
  Id constFloat(unsigned width, double v) { return width == 32 ? constF32(float(v)) : constF64(v); }
  Id constNull(Id type);

  /// A module-scope variable of `pointerType` (with the id `id` reserved
  /// earlier with newId(), when the code using it came first).
  Id globalVariable(Id pointerType, spv::StorageClass sc, Id id = 0);
  void decorate(Id target, spv::Decoration d, std::initializer_list<uint32_t> extra = {});
  void memberDecorate(Id type, uint32_t member, spv::Decoration d,
                      std::initializer_list<uint32_t> extra = {});
  void name(Id target, const std::string &n);
  void entryPoint(Id fn, const std::string &name, const std::vector<Id> &interface);
  void executionMode(Id fn, spv::ExecutionMode m, std::initializer_list<uint32_t> extra = {});

  /// Appends a finished function's words.
  void addFunction(const Words &words) {
    functions_.insert(functions_.end(), words.begin(), words.end());
  }

  Words finish();

private:
  Id next_ = 1;
  Id glsl_ = 0;
  Words capabilities_, extensions_, imports_, entries_, modes_, debug_, annotations_, globals_,
      functions_;
  std::map<uint32_t, bool> caps_;
  std::map<std::string, bool> exts_;
  std::map<std::vector<uint32_t>, Id> types_, constants_;
};

} // namespace qd::spirv
