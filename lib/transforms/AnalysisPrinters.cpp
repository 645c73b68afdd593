//===- AnalysisPrinters.cpp - Passes that print an analysis ---------------===//
//
// `print-uniformity`, `print-element-ownership` and `print-cooperative-tasks`
// change nothing: they print what qd/analysis/Uniformity.h,
// qd/analysis/ElementOwnership.h and qd/analysis/CooperativeTask.h say about
// every parallel task, so lit tests check the analyses directly.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/CooperativeTask.h"
#include "qd/analysis/ElementOwnership.h"
#include "qd/analysis/Uniformity.h"
#include "qd/transforms/Passes.h"

#include <iostream>

namespace qd {
namespace {

class AnalysisPrinterPass : public KernelPass {
public:
  using Printer = void (*)(const Kernel &, std::ostream &);
  AnalysisPrinterPass(std::string_view name, Printer print, std::ostream &os)
      : name_(name), print_(print), os_(os) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    print_(kernel, os_);
    return false;
  }

private:
  std::string_view name_;
  Printer print_;
  std::ostream &os_;
};

/// The plan of the GPU code generators with their default limits, a
/// task's trip count known at launch included.
void printGpuCooperativeTasks(const Kernel &kernel, std::ostream &os) {
  CooperativeTaskOptions options;
  options.mostTaskIterations = kDefaultCooperativeTaskIterations;
  options.runTimeTrips = true;
  printCooperativeTasks(kernel, options, os);
}

} // namespace

std::unique_ptr<Pass> createPrintUniformityPass() {
  return std::make_unique<AnalysisPrinterPass>("print-uniformity", printUniformity, std::cout);
}

std::unique_ptr<Pass> createPrintElementOwnershipPass() {
  return std::make_unique<AnalysisPrinterPass>("print-element-ownership", printElementOwnership,
                                               std::cout);
}

std::unique_ptr<Pass> createPrintCooperativeTasksPass() {
  return std::make_unique<AnalysisPrinterPass>("print-cooperative-tasks", printGpuCooperativeTasks,
                                               std::cout);
}

} // namespace qd
