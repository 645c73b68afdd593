//===- Optimize.cpp - The optimisation pipeline ---------------------------===//
#include "qd/codegen/llvm/Optimize.h"

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Scalar/InferAddressSpaces.h>

#include <algorithm>
#include <mutex>

namespace qd {

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> hostTargetMachine() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return absl::InternalError("cannot detect the host CPU: " +
                               llvm::toString(builder.takeError()));
  builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto machine = builder->createTargetMachine();
  if (!machine)
    return absl::InternalError("cannot create a target machine for the host: " +
                               llvm::toString(machine.takeError()));
  return std::move(*machine);
}

size_t largestFunctionSize(const llvm::Module &module) {
  size_t largest = 0;
  for (const llvm::Function &f : module)
    largest = std::max<size_t>(largest, f.getInstructionCount());
  return largest;
}

OptimizationTier chooseTier(const llvm::Module &module, size_t fullLimit) {
  return largestFunctionSize(module) > fullLimit ? OptimizationTier::Light : OptimizationTier::Full;
}

void optimizeModule(llvm::Module &module, llvm::TargetMachine *machine) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(machine);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // GPU targets: the emitter marks pointers into device memory with a cast
  // to the global address space and back (LlvmTarget::devicePointer).
  // Address-space inference must see the pair before instcombine folds it
  // away, so it runs first; loads and stores then use global addressing.
  if (machine && (machine->getTargetTriple().isNVPTX() || machine->getTargetTriple().isAMDGPU()))
    pb.registerPipelineStartEPCallback([](llvm::ModulePassManager &mpm, llvm::OptimizationLevel) {
      mpm.addPass(llvm::createModuleToFunctionPassAdaptor(llvm::InferAddressSpacesPass()));
    });
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

} // namespace qd
