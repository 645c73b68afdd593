//===- qd/codegen/llvm/Optimize.h - The optimisation pipeline ---*- C++ -*-===//
//
// The LLVM pipeline generated kernels go through before machine code
// generation, in one place so that the CPU backend and qd-translate
// --optimize run the same passes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/statusor.h>

#include <memory>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace qd {

/// A TargetMachine for the host CPU with aggressive code generation, as the
/// CPU backend's JIT compiles for. Initialises LLVM's native target.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> hostTargetMachine();

/// How hard LLVM works on a module. Full: the O3 pipeline and aggressive
/// code generation. Light, for kernels so large that parts of those grow
/// faster than linearly with the size of a function (docs/performance.md,
/// "Compile time"): the same O3 pipeline, and code generation at
/// CodeGenOptLevel::Less (no post-RA scheduling, whose time grows with the
/// square of a block).
enum class OptimizationTier { Full, Light };

/// Instructions in the largest function of `module`.
size_t largestFunctionSize(const llvm::Module &module);

/// Light when `module`'s largest function has more than `fullLimit`
/// instructions, else Full.
OptimizationTier chooseTier(const llvm::Module &module, size_t fullLimit);

/// Runs LLVM's O3 pipeline over `module`, with the cost models of `machine`
/// (null: target-independent defaults).
void optimizeModule(llvm::Module &module, llvm::TargetMachine *machine);

} // namespace qd
