//===- PassManager.cpp - Running pipelines --------------------------------===//
#include "qd/ir/Clone.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/Pass.h"

#include <fmt/format.h>

namespace qd {

absl::StatusOr<bool> KernelPass::run(Module &module) {
  bool changed = false;
  for (const auto &k : module.kernels()) {
    absl::StatusOr<bool> r = runOnKernel(*k);
    if (!r.ok())
      return r.status();
    changed |= *r;
  }
  return changed;
}

void PassManager::addPass(std::unique_ptr<Pass> pass) {
  std::string label(pass->name());
  passes_.push_back({std::move(pass), std::move(label)});
}

absl::Status PassManager::addPipeline(std::string_view pipeline, const PassRegistry &registry) {
  // Parse the whole pipeline first so that an error adds nothing.
  absl::StatusOr<std::vector<PassRegistry::Created>> parsed = registry.parsePipeline(pipeline);
  if (!parsed.ok())
    return parsed.status();
  for (auto &p : *parsed)
    passes_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status PassManager::runOne(PassRegistry::Created &p, Module &module) {
  std::unique_ptr<Module> before = options_.checkUnchanged ? cloneModule(module) : nullptr;
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<bool> r = p.pass->run(module);
  if (options_.timePasses)
    timings_.push_back({p.label, std::chrono::steady_clock::now() - start,
                        !r.ok() ? Timing::Result::Failed
                        : *r    ? Timing::Result::Changed
                                : Timing::Result::Unchanged});
  if (!r.ok())
    return absl::Status(r.status().code(), fmt::format("pass '{}' failed: {}", p.label,
                                                       std::string(r.status().message())));
  std::string why;
  if (before && !*r && !isEquivalent(*before, module, &why))
    return absl::InternalError(
        fmt::format("pass '{}' reported no change but changed the module (this is a bug in the "
                    "pass): {}",
                    p.label, why));
  if (options_.printAfterAll) {
    *options_.printAfterAll << "// ----- IR after " << p.label << " -----\n";
    printModule(module, *options_.printAfterAll);
  }
  if (!*r)
    return absl::OkStatus(); // the module is as it was: verified, and printed already
  if (options_.printAfterChange) {
    *options_.printAfterChange << "// ----- IR after " << p.label << " -----\n";
    printModule(module, *options_.printAfterChange);
  }
  if (options_.verifyEach) {
    absl::Status v = verify(module);
    if (!v.ok())
      return absl::InternalError(
          fmt::format("pass '{}' produced invalid IR (this is a bug in the pass):\n{}", p.label,
                      std::string(v.message())));
  }
  return absl::OkStatus();
}

absl::Status PassManager::run(Module &module) {
  for (auto &p : passes_)
    if (absl::Status s = runOne(p, module); !s.ok())
      return s;
  return absl::OkStatus();
}

void PassManager::printTimings(std::ostream &os) const {
  std::chrono::nanoseconds total{0};
  for (const Timing &t : timings_)
    total += t.wall;
  os << "===-------------------------------------------------------------===\n"
     << "                      qd pass execution timing\n"
     << "===-------------------------------------------------------------===\n";
  for (const Timing &t : timings_)
    os << fmt::format("  {:>10.3f} ms  {:>5.1f}%  {}{}\n", t.wall.count() / 1e6,
                      total.count() ? 100.0 * t.wall.count() / total.count() : 0.0, t.pass,
                      t.result == Timing::Result::Unchanged ? " (no change)"
                      : t.result == Timing::Result::Failed  ? " (failed)"
                                                            : "");
  os << fmt::format("  {:>10.3f} ms  100.0%  total\n", total.count() / 1e6);
}

} // namespace qd
