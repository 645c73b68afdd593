//===- KernelCodegen.cpp - LLVM IR for kernels ----------------------------===//
//
// The public entry point: picks the target's hooks and runs the emitter
// (KernelEmitter.h gives the map of the files).
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/KernelCodegen.h"

#include "KernelEmitter.h"
#include "LlvmTarget.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>

namespace qd {

absl::StatusOr<CodegenTarget> parseCodegenTarget(std::string_view name) {
  if (name == "cpu")
    return CodegenTarget::Cpu;
  if (name == "nvptx")
    return CodegenTarget::Nvptx;
  if (name == "amdgpu")
    return CodegenTarget::Amdgpu;
  return absl::InvalidArgumentError(
      fmt::format("unknown code generation target '{}' (known targets: cpu, nvptx, amdgpu)", name));
}

std::string_view toString(VectorMathIsa isa) {
  switch (isa) {
  case VectorMathIsa::None:
    return "none";
  case VectorMathIsa::Sse4:
    return "sse4";
  case VectorMathIsa::Avx2:
    return "avx2";
  case VectorMathIsa::Avx512:
    return "avx512";
  }
  return "?";
}

const char *codegenTargetName(CodegenTarget target) {
  switch (target) {
  case CodegenTarget::Cpu:
    return "cpu";
  case CodegenTarget::Nvptx:
    return "nvptx";
  case CodegenTarget::Amdgpu:
    return "amdgpu";
  }
  return "?";
}

namespace codegen {

std::unique_ptr<LlvmTarget> createTarget(CodegenTarget target) {
  switch (target) {
  case CodegenTarget::Cpu:
    return createCpuTarget();
  case CodegenTarget::Nvptx:
    return createNvptxTarget();
  case CodegenTarget::Amdgpu:
    return createAmdgpuTarget();
  }
  return nullptr;
}

} // namespace codegen

absl::StatusOr<std::unique_ptr<llvm::Module>>
emitKernel(const Kernel &kernel, llvm::LLVMContext &context, const CodegenOptions &options,
           KernelLayout &layout, CodegenTarget target) {
  layout = KernelLayout();
  std::unique_ptr<codegen::LlvmTarget> hooks = codegen::createTarget(target);
  if (!hooks)
    return absl::InvalidArgumentError(
        fmt::format("codegen: no LLVM target '{}'", codegenTargetName(target)));
  return codegen::KernelEmitter(kernel, context, options, layout, *hooks).run();
}

} // namespace qd
