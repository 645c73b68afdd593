//===- Optimize.cpp - The optimisation pipeline ---------------------------===//
#include "qd/codegen/llvm/Optimize.h"

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassTimingInfo.h>
#include <llvm/Pass.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/InferAddressSpaces.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

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

void timeLlvmPasses(bool on) {
  llvm::TimePassesIsEnabled = on;
}

void reportLlvmPassTimes() {
  llvm::reportAndResetTimings();
}

size_t largestFunctionSize(const llvm::Module &module) {
  size_t largest = 0;
  for (const llvm::Function &f : module)
    largest = std::max<size_t>(largest, f.getInstructionCount());
  return largest;
}

size_t splitLongBlocks(llvm::Function &f, size_t most) {
  if (most == 0)
    return 0;
  std::vector<llvm::BasicBlock *> blocks;
  for (llvm::BasicBlock &bb : f)
    blocks.push_back(&bb);
  size_t splits = 0;
  for (llvm::BasicBlock *bb : blocks) {
    // Cut points every `most` instructions, after the phis and (in the
    // entry block) the allocas, which stay static; never at the
    // terminator. Cut from the back, so that each instruction moves once.
    std::vector<llvm::Instruction *> cuts;
    size_t run = 0;
    bool entry = bb->isEntryBlock();
    for (llvm::Instruction &i : *bb) {
      if (llvm::isa<llvm::PHINode>(i) || (entry && llvm::isa<llvm::AllocaInst>(i))) {
        run = 0;
        cuts.clear();
        continue;
      }
      if (++run > most && !i.isTerminator()) {
        cuts.push_back(&i);
        run = 1;
      }
    }
    for (auto it = cuts.rbegin(); it != cuts.rend(); ++it)
      llvm::SplitBlock(bb, *it);
    splits += cuts.size();
  }
  return splits;
}

unsigned deepestLoopNest(const llvm::Module &module) {
  unsigned deepest = 0;
  for (const llvm::Function &f : module) {
    if (f.isDeclaration())
      continue;
    llvm::DominatorTree dt(const_cast<llvm::Function &>(f));
    llvm::LoopInfo loops(dt);
    std::vector<const llvm::Loop *> work(loops.begin(), loops.end());
    while (!work.empty()) {
      const llvm::Loop *l = work.back();
      work.pop_back();
      deepest = std::max(deepest, l->getLoopDepth());
      work.insert(work.end(), l->begin(), l->end());
    }
  }
  return deepest;
}

OptimizationTier chooseTier(const llvm::Module &module, const TierLimits &limits) {
  if (largestFunctionSize(module) > limits.fullInstructions)
    return OptimizationTier::Light;
  return deepestLoopNest(module) > limits.fullLoopDepth ? OptimizationTier::Light
                                                        : OptimizationTier::Full;
}

/// Instruction selection builds one DAG per block, and both it and the
/// fast register allocator take longer than linear time in a block's
/// length: the light tier cuts blocks to this length (a kernel of 16 000
/// straight-line statements: 8.5 s -> 2.7 s to compile, and 17% faster
/// to run).
constexpr size_t kLightBlockLength = 2000;

void optimizeModule(llvm::Module &module, llvm::TargetMachine *machine, OptimizationTier tier) {
  {
    // Not an LLVM pass: timed here when LLVM's pass timers are on.
    auto start = std::chrono::steady_clock::now();
    size_t promoted = 0;
    for (llvm::Function &f : module)
      promoted += promoteLocals(f);
    if (llvm::TimePassesIsEnabled)
      llvm::errs()
          << "qd promoteLocals: " << promoted << " locals in "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
          << " s\n";
  }
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  // Instrumented so that LLVM's -time-passes (llvm::TimePassesIsEnabled)
  // reports this pipeline too (qd-bench-compile --time-passes).
  llvm::PassInstrumentationCallbacks pic;
  llvm::StandardInstrumentations si(module.getContext(), /*DebugLogging=*/false);
  si.registerCallbacks(pic, &mam);
  llvm::PassBuilder pb(machine, llvm::PipelineTuningOptions(), std::nullopt, &pic);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // GPU targets: the emitter marks pointers into device memory with a cast
  // to the global address space and back (LlvmTarget::devicePointer).
  // Address-space inference must see the pair before instcombine folds it
  // away, so it runs first; loads and stores then use global addressing.
  bool gpu =
      machine && (machine->getTargetTriple().isNVPTX() || machine->getTargetTriple().isAMDGPU());
  if (tier == OptimizationTier::Light) {
    // Each pass once, each linear in practice: what remains of the locals
    // (SROA), common subexpressions (the emitter repeats address and lane
    // computations), peephole folding, and the control flow the emitter
    // leaves (empty blocks, constant branches).
    llvm::FunctionPassManager fpm;
    if (gpu)
      fpm.addPass(llvm::InferAddressSpacesPass());
    // (NVPTX: libdevice's __nvvm_reflect calls are folded by the target's
    // code generation, which runs NVVMReflect itself.)
    fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
    if (largestFunctionSize(module) <= kLightCseInstructions)
      fpm.addPass(llvm::EarlyCSEPass());
    fpm.addPass(llvm::InstCombinePass());
    fpm.addPass(llvm::SimplifyCFGPass());
    llvm::ModulePassManager mpm;
    mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
    mpm.run(module, mam);
    for (llvm::Function &f : module)
      splitLongBlocks(f, kLightBlockLength);
    return;
  }
  if (gpu)
    pb.registerPipelineStartEPCallback([](llvm::ModulePassManager &mpm, llvm::OptimizationLevel) {
      mpm.addPass(llvm::createModuleToFunctionPassAdaptor(llvm::InferAddressSpacesPass()));
    });
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

} // namespace qd
