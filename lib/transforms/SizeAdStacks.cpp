//===- SizeAdStacks.cpp - Write compile-time adstack capacities -----------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/transforms/Passes.h"

namespace qd {
namespace {

/// Writes every tier-1 capacity into its `adstack.alloca`, so the printed IR
/// shows it and every backend sees it without running the analysis again.
/// Launch-time and default stacks keep capacity 0: the runtime sizes them
/// before each launch; so do constant upper bounds the optimistic launch
/// refines (docs/sizing.md, "Refined bounds").
class SizeAdStacksPass : public KernelPass {
public:
  std::string_view name() const override { return "size-adstacks"; }

  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    bool changed = false;
    KernelSizing sizing = sizeAdStacks(kernel);
    for (const AdStackSize &s : sizing.stacks()) {
      if (s.tier != SizingTier::Constant || s.refined)
        continue; // (a refined upper bound is left to the launch to measure)
      const_cast<AdStackAllocaStmt *>(s.stack)->setCapacity(s.capacity);
      changed = true;
    }
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createSizeAdStacksPass() {
  return std::make_unique<SizeAdStacksPass>();
}

} // namespace qd
