//===- fuzz/ReverseADFuzzer.cpp - qd-fuzz-reverse-ad -----------------------===//
//
// For every kernel of a module that parses and verifies, builds the
// gradient kernel (reverse mode) and the dual kernel (forward mode). Each
// may fail with an error status (and must then leave a module that still
// verifies); when it succeeds the module must verify, and sizing the new
// kernel's adstacks must not crash.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Printer.h"
#include "qd/transforms/AutoDiff.h"

#include <vector>

namespace {

void checkVerifies(const qd::Module &m, const qd::Kernel &built, std::string_view what) {
  if (absl::Status st = qd::verify(m); !st.ok())
    qd::fuzz::fail(std::string(what) + " @" + built.name() +
                       " produced a module that does not verify:\n" + std::string(st.message()),
                   qd::printModule(m));
  qd::SizingOptions options;
  options.compileTimeEvalSteps = 100000;
  (void)qd::sizeAdStacks(built, options);
}

// A build that fails must leave a module that still verifies (no
// half-built kernel behind).
void checkUnchanged(const qd::Module &m, const qd::Kernel &k, std::string_view what,
                    const absl::Status &error) {
  if (absl::Status st = qd::verify(m); !st.ok())
    qd::fuzz::fail(std::string(what) + " of @" + k.name() + " failed (" +
                       std::string(error.message()) +
                       ") and left a module that does not verify:\n" + std::string(st.message()),
                   qd::printModule(m));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_ptr<qd::Module> m = qd::fuzz::parseAndVerify(data, size);
  if (!m)
    return 0;
  std::vector<const qd::Kernel *> kernels;
  for (const auto &k : m->kernels())
    kernels.push_back(k.get());
  for (const qd::Kernel *k : kernels) {
    if (auto grad = qd::buildGradientKernel(*m, *k); grad.ok())
      checkVerifies(*m, **grad, "buildGradientKernel");
    else
      checkUnchanged(*m, *k, "buildGradientKernel", grad.status());
    if (auto dual = qd::buildDualKernel(*m, *k); dual.ok())
      checkVerifies(*m, **dual, "buildDualKernel");
    else
      checkUnchanged(*m, *k, "buildDualKernel", dual.status());
  }
  return 0;
}
