//===- qd/transforms/Pass.h - Passes, registry and pass manager -*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

/// A transformation of a module. `run` returns whether anything changed, or
/// an error status when the input cannot be handled (never aborts).
class Pass {
public:
  virtual ~Pass() = default;
  /// The name used in pipelines (`--passes=fold,dce`).
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<bool> run(Module &module) = 0;
};

/// A pass that transforms kernels one at a time.
class KernelPass : public Pass {
public:
  absl::StatusOr<bool> run(Module &module) override;
  virtual absl::StatusOr<bool> runOnKernel(Kernel &kernel) = 0;
};

/// Name -> factory table of every pass a pipeline string can name. The
/// built-in passes are registered on first use; libraries add their own with
/// `add`.
class PassRegistry {
public:
  using Factory = std::function<std::unique_ptr<Pass>()>;
  struct Entry {
    std::string description;
    Factory factory;
  };

  static PassRegistry &global();

  /// Registers a pass; fails if the name is taken.
  absl::Status add(std::string name, std::string description, Factory factory);
  /// Creates a pass by name, or NotFound naming the registered passes.
  absl::StatusOr<std::unique_ptr<Pass>> create(std::string_view name) const;
  const std::map<std::string, Entry, std::less<>> &entries() const { return entries_; }

private:
  std::map<std::string, Entry, std::less<>> entries_;
};

struct PassManagerOptions {
  /// Verify the module after every pass (on by default; a pass that breaks
  /// the IR is reported by name).
  bool verifyEach = true;
  /// When set, the module is printed here after every pass.
  std::ostream *printAfterAll = nullptr;
  /// Record wall time per pass (see `timings()`).
  bool timePasses = false;
};

/// Runs a sequence of passes over a module.
class PassManager {
public:
  explicit PassManager(PassManagerOptions options = {}) : options_(options) {}

  void addPass(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  /// Appends the passes of a comma-separated pipeline such as "fold,dce".
  /// Unknown names and empty elements are errors naming the problem; on
  /// error no pass of the pipeline is added.
  absl::Status addPipeline(std::string_view pipeline,
                           const PassRegistry &registry = PassRegistry::global());
  size_t size() const { return passes_.size(); }

  /// Runs every pass in order; stops at the first failure with a status
  /// naming the pass.
  absl::Status run(Module &module);

  struct Timing {
    std::string pass;
    std::chrono::nanoseconds wall;
  };
  const std::vector<Timing> &timings() const { return timings_; }
  /// A table of per-pass wall time, in the order the passes ran.
  void printTimings(std::ostream &os) const;

private:
  PassManagerOptions options_;
  std::vector<std::unique_ptr<Pass>> passes_;
  std::vector<Timing> timings_;
};

} // namespace qd
