//===- fuzz/SizingFuzzer.cpp - qd-fuzz-sizing ------------------------------===//
//
// For every kernel of a module that parses and verifies: sizeAdStacks must
// not crash, must size every adstack once, and every launch-time SizeExpr
// must survive serialise -> deserialise as an equal expression (and
// evaluate on fake launch data without crashing); the CFG tier's two
// algorithms (NetPushPaths.h) must agree on every stack.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_ptr<qd::Module> m = qd::fuzz::parseAndVerify(data, size);
  if (!m)
    return 0;
  qd::SizingOptions options;
  // The default budget (2^24 steps) makes single inputs take seconds; the
  // fuzzer looks for crashes, not for the exact tier.
  options.compileTimeEvalSteps = 100000;
  qd::fuzz::FakeInputs inputs;
  for (const auto &kernel : m->kernels()) {
    qd::KernelSizing sizing = qd::sizeAdStacks(*kernel, options);
    if (const qd::Kernel *counter = sizing.countKernel())
      if (absl::Status v = qd::verify(*counter); !v.ok())
        qd::fuzz::fail("the counting kernel does not verify: " + std::string(v.message()),
                       printKernel(*kernel) + "\n" + printKernel(*counter));
    for (const qd::AdStackSize &s : sizing.stacks()) {
      if (!s.stack)
        qd::fuzz::fail("a sized adstack has no alloca", printKernel(*kernel));
      (void)sizing.describe(s);
      // The CFG tier's linear algorithm against Bellman-Ford; qd's CFGs are
      // reducible, so it never needs to fall back.
      bool fellBack = false;
      std::optional<int64_t> fast =
          qd::bellmanFordDepth(*kernel, *s.stack, qd::NetPathAlgorithm::Structured, &fellBack);
      if (fast != qd::bellmanFordDepth(*kernel, *s.stack, qd::NetPathAlgorithm::BellmanFord) ||
          fellBack)
        qd::fuzz::fail("adstack " + s.name() +
                           (fellBack ? ": the CFG is not reducible"
                                     : ": the CFG tier's two algorithms disagree"),
                       printKernel(*kernel));
      if (fast && qd::pushingCycleIsCertain(*kernel, *s.stack))
        qd::fuzz::fail(
            "adstack " + s.name() +
                ": the CFG tier was skipped for a pushing cycle, but its longest path is " +
                std::to_string(*fast),
            printKernel(*kernel));
      if (s.tier != qd::SizingTier::LaunchTime) {
        if (s.capacity < 1)
          qd::fuzz::fail("adstack " + s.name() + " got capacity " + std::to_string(s.capacity),
                         printKernel(*kernel));
        continue;
      }
      if (!s.expr)
        qd::fuzz::fail("launch-time adstack " + s.name() + " has no SizeExpr",
                       printKernel(*kernel));
      std::string text = qd::printSizeExpr(*s.expr, sizing.names());
      std::vector<uint8_t> bytes = qd::serializeSizeExpr(*s.expr);
      auto back = qd::deserializeSizeExpr(bytes);
      if (!back.ok())
        qd::fuzz::fail("the SizeExpr of " + s.name() + " (" + text +
                           ") does not deserialise: " + std::string(back.status().message()),
                       printKernel(*kernel));
      if (!(*back)->equals(*s.expr))
        qd::fuzz::fail("the SizeExpr of " + s.name() + " (" + text +
                           ") deserialises to a different expression: " +
                           qd::printSizeExpr(**back, sizing.names()),
                       printKernel(*kernel));
      (void)qd::evaluateSizeExpr(*s.expr, inputs, 100000);
    }
  }
  return 0;
}
