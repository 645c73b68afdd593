//===- AutoDiffPasses.cpp - reverse-ad and forward-ad passes --------------===//
#include "qd/analysis/Activity.h"
#include "qd/analysis/GlobalAccess.h"
#include "qd/transforms/AutoDiff.h"
#include "qd/transforms/Passes.h"

#include <fmt/format.h>

#include <functional>
#include <iostream>
#include <sstream>
#include <vector>

namespace qd {
namespace {

/// Adds a derived kernel for every kernel the module had when it started.
class DerivedKernelPass : public Pass {
public:
  using Builder = std::function<absl::StatusOr<Kernel *>(Module &, const Kernel &, std::string)>;
  DerivedKernelPass(std::string_view name, Builder build) : name_(name), build_(std::move(build)) {}
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

/// Fails with every write-after-read of a global (qd/analysis/GlobalAccess.h).
class CheckGlobalAccessesPass : public KernelPass {
public:
  std::string_view name() const override { return "check-global-accesses"; }
  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    std::string report;
    for (const GlobalAccessConflict &c : findGlobalAccessConflicts(kernel))
      report += (report.empty() ? "" : "\n") + describe(c, kernel);
    if (!report.empty())
      return absl::FailedPreconditionError(report);
    return false;
  }
};

/// Prints the activity analysis of every kernel, for both modes.
class PrintActivityPass : public Pass {
public:
  std::string_view name() const override { return "print-activity"; }
  absl::StatusOr<bool> run(Module &module) override {
    for (const auto &k : module.kernels())
      for (ActivityMode mode : {ActivityMode::Reverse, ActivityMode::Forward}) {
        std::cout << "activity of @" << k->name() << " for "
                  << (mode == ActivityMode::Reverse ? "reverse-ad" : "forward-ad") << ":\n";
        std::ostringstream lines;
        Activity(*k, mode).print(*k, lines);
        std::istringstream in(lines.str());
        for (std::string line; std::getline(in, line);)
          std::cout << "  " << line << '\n';
      }
    return false;
  }
};

} // namespace

std::unique_ptr<Pass> createPrintActivityPass() {
  return std::make_unique<PrintActivityPass>();
}

std::unique_ptr<Pass> createCheckGlobalAccessesPass() {
  return std::make_unique<CheckGlobalAccessesPass>();
}

std::unique_ptr<Pass> createReverseAdPass(const PassOptionValues &options) {
  ReverseADOptions ad;
  ad.tapeNestedLoops = options.getBool("tape-nested-loops");
  ad.tapeFactors = options.getBool("tape-factors");
  ad.checkpointLoops = options.getBool("checkpoint");
  return std::make_unique<DerivedKernelPass>(
      "reverse-ad", [ad](Module &m, const Kernel &k, std::string name) {
        return buildGradientKernel(m, k, ad, std::move(name));
      });
}

std::unique_ptr<Pass> createForwardAdPass() {
  return std::make_unique<DerivedKernelPass>("forward-ad", buildDualKernel);
}

} // namespace qd
