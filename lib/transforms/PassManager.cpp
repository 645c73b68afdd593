//===- PassManager.cpp - Passes, registry and pass manager ----------------===//
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/Passes.h"

#include <fmt/format.h>

#include <cctype>

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

PassRegistry &PassRegistry::global() {
  static PassRegistry *registry = [] {
    auto *r = new PassRegistry();
    registerBuiltinPasses(*r);
    return r;
  }();
  return *registry;
}

absl::Status PassRegistry::add(std::string name, std::string description, Factory factory) {
  if (entries_.count(name))
    return absl::AlreadyExistsError(fmt::format("a pass named '{}' is already registered", name));
  entries_.emplace(std::move(name), Entry{std::move(description), std::move(factory)});
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Pass>> PassRegistry::create(std::string_view name) const {
  auto it = entries_.find(name);
  if (it != entries_.end())
    return it->second.factory();
  std::string known;
  for (const auto &[n, e] : entries_)
    known += (known.empty() ? "" : ", ") + n;
  return absl::NotFoundError(fmt::format("unknown pass '{}'; registered passes: {}", name, known));
}

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}
} // namespace

absl::Status PassManager::addPipeline(std::string_view pipeline, const PassRegistry &registry) {
  if (trim(pipeline).empty())
    return absl::OkStatus();
  // Parse the whole pipeline first so that an error adds nothing.
  std::vector<std::unique_ptr<Pass>> parsed;
  size_t start = 0;
  while (start <= pipeline.size()) {
    size_t comma = pipeline.find(',', start);
    if (comma == std::string_view::npos)
      comma = pipeline.size();
    std::string_view name = trim(pipeline.substr(start, comma - start));
    start = comma + 1;
    if (name.empty())
      return absl::InvalidArgumentError(fmt::format(
          "empty pass name in pipeline '{}'; separate names with single commas", pipeline));
    absl::StatusOr<std::unique_ptr<Pass>> pass = registry.create(name);
    if (!pass.ok())
      return pass.status();
    parsed.push_back(*std::move(pass));
  }
  for (auto &pass : parsed)
    addPass(std::move(pass));
  return absl::OkStatus();
}

absl::Status PassManager::run(Module &module) {
  for (auto &pass : passes_) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> r = pass->run(module);
    if (options_.timePasses)
      timings_.push_back({std::string(pass->name()), std::chrono::steady_clock::now() - start});
    if (!r.ok())
      return absl::Status(r.status().code(), fmt::format("pass '{}' failed: {}", pass->name(),
                                                         std::string(r.status().message())));
    if (options_.printAfterAll) {
      *options_.printAfterAll << "// ----- IR after " << pass->name() << " -----\n";
      printModule(module, *options_.printAfterAll);
    }
    if (options_.verifyEach) {
      absl::Status v = verify(module);
      if (!v.ok())
        return absl::InternalError(
            fmt::format("pass '{}' produced invalid IR (this is a bug in the pass):\n{}",
                        pass->name(), std::string(v.message())));
    }
  }
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
    os << fmt::format("  {:>10.3f} ms  {:>5.1f}%  {}\n", t.wall.count() / 1e6,
                      total.count() ? 100.0 * t.wall.count() / total.count() : 0.0, t.pass);
  os << fmt::format("  {:>10.3f} ms  100.0%  total\n", total.count() / 1e6);
}

void registerBuiltinPasses(PassRegistry &registry) {
  // Names are unique here, so the statuses are always OK.
  (void)registry.add("fold", "fold constant expressions and constant loop bounds", createFoldPass);
  (void)registry.add("dce", "remove dead statements, write-only locals and empty control flow",
                     createDcePass);
  (void)registry.add("simplify", "exact algebraic simplification, constant ifs and zero-trip loops",
                     createSimplifyPass);
  (void)registry.add("size-adstacks",
                     "write compile-time adstack capacities (sizing tier 1) into the IR",
                     createSizeAdStacksPass);
  (void)registry.add("reverse-ad", "add the reverse-mode gradient kernel @<k>_grad of every kernel",
                     createReverseAdPass);
  (void)registry.add("reverse-ad-recompute",
                     "reverse-ad that runs nested loops again instead of taping them (stacks hold "
                     "one iteration of the enclosing loop)",
                     createReverseAdRecomputePass);
  (void)registry.add("check-global-accesses",
                     "fail when a kernel may write a global after reading it in the same launch",
                     createCheckGlobalAccessesPass);
  (void)registry.add("forward-ad", "add the forward-mode tangent kernel @<k>_dual of every kernel",
                     createForwardAdPass);
  (void)registry.add("print-uniformity",
                     "print what varies between the lanes of every parallel task",
                     [] { return createPrintUniformityPass(); });
  (void)registry.add("print-element-ownership",
                     "print which global elements each parallel task's iterations own",
                     [] { return createPrintElementOwnershipPass(); });
}

} // namespace qd
