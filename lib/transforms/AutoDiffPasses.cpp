//===- AutoDiffPasses.cpp - reverse-ad and forward-ad passes --------------===//
#include "qd/transforms/AutoDiff.h"
#include "qd/transforms/Passes.h"

#include <vector>

namespace qd {
namespace {

/// Adds a derived kernel for every kernel the module had when it started.
class DerivedKernelPass : public Pass {
public:
  using Builder = absl::StatusOr<Kernel *> (*)(Module &, const Kernel &, std::string);
  DerivedKernelPass(std::string_view name, Builder build) : name_(name), build_(build) {}
  std::string_view name() const override { return name_; }

  absl::StatusOr<bool> run(Module &module) override {
    std::vector<const Kernel *> kernels;
    for (const auto &k : module.kernels())
      kernels.push_back(k.get());
    for (const Kernel *k : kernels)
      if (absl::StatusOr<Kernel *> r = build_(module, *k, {}); !r.ok())
        return r.status();
    return !kernels.empty();
  }

private:
  std::string_view name_;
  Builder build_;
};

} // namespace

std::unique_ptr<Pass> createReverseAdPass() {
  return std::make_unique<DerivedKernelPass>("reverse-ad", buildGradientKernel);
}

std::unique_ptr<Pass> createForwardAdPass() {
  return std::make_unique<DerivedKernelPass>("forward-ad", buildDualKernel);
}

} // namespace qd
