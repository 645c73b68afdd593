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

/// Runs LLVM's O3 pipeline over `module`, with the cost models of `machine`
/// (null: target-independent defaults).
void optimizeModule(llvm::Module &module, llvm::TargetMachine *machine);

} // namespace qd
