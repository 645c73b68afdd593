//===- qd/transforms/Pass.h - Passes, registry and pass manager -*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"
#include "qd/transforms/PassOptions.h"

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
/// an error status when the input cannot be handled (never aborts). "No
/// change" is a promise that the module is exactly as before: the pass
/// manager then skips verifying it and printing it after the pass.
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

/// Name -> factory table of every pass a pipeline string can name, with
/// each pass's one-line summary and declared options, and aliases (a name
/// that stands for one pipeline element, such as `reverse-ad-recompute`).
/// The built-in passes (qd/transforms/Passes.def) are registered on first
/// use of `global()`; libraries add their own with `add`.
///
/// Pipeline syntax: elements separated by commas; an element is a pass name
/// or alias, optionally followed by options in braces, separated by spaces
/// or commas: `fold, reverse-ad{tape-nested-loops=false}, dce`. A bool
/// option takes `true`/`false` (or `1`/`0`), or stands alone for true; an
/// int option a decimal integer. Errors name the pass, the option and the
/// column (1-based) in the pipeline.
class PassRegistry {
public:
  using Factory = std::function<std::unique_ptr<Pass>(const PassOptionValues &)>;
  struct Entry {
    std::string description;
    Factory factory;
    std::vector<PassOptionInfo> options;
  };

  static PassRegistry &global();

  /// Registers a pass; fails if the name is taken (by a pass or an alias).
  absl::Status add(std::string name, std::string description, Factory factory);
  /// Same, for a pass without options.
  absl::Status add(std::string name, std::string description,
                   std::function<std::unique_ptr<Pass>()> factory);
  /// Declares an option of the registered pass `pass`; fails for an
  /// unknown pass, a taken option name or a default that does not parse.
  absl::Status addOption(std::string_view pass, PassOptionInfo option);
  /// Registers `name` as another spelling of the pipeline element
  /// `expansion` (for example `reverse-ad{tape-nested-loops=false}`), which
  /// must parse; an alias takes no options of its own.
  absl::Status addAlias(std::string name, std::string expansion);

  /// Creates a pass from one pipeline element (a name with optional
  /// options, or an alias); errors as for pipelines.
  absl::StatusOr<std::unique_ptr<Pass>> create(std::string_view element) const;

  /// A pass made from a pipeline element, and the text that names it in
  /// reports: the pass name, with the options that differ from their
  /// defaults in braces.
  struct Created {
    std::unique_ptr<Pass> pass;
    std::string label;
  };
  /// Parses a whole pipeline; an empty or blank one gives no passes.
  absl::StatusOr<std::vector<Created>> parsePipeline(std::string_view pipeline) const;

  const std::map<std::string, Entry, std::less<>> &entries() const { return entries_; }
  /// Alias name -> the pipeline element it stands for.
  const std::map<std::string, std::string, std::less<>> &aliases() const { return aliases_; }

  /// What `qd-opt --list-passes` prints: passes and aliases by name, each
  /// pass with its options (`name=<type> (default ...) - help`).
  void printList(std::ostream &os) const;

private:
  absl::StatusOr<Created> createElement(std::string_view pipeline, size_t begin, size_t end) const;
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, std::string, std::less<>> aliases_;
};

struct PassManagerOptions {
  /// Verify the module after every pass that reports a change (on by
  /// default; a pass that breaks the IR is reported by name). A pass that
  /// reports no change left the module as it was, so it is not verified
  /// again (see `checkUnchanged`).
  bool verifyEach = true;
  /// When set, the module is printed here after every pass.
  std::ostream *printAfterAll = nullptr;
  /// When set, the module is printed here after every pass that reports a
  /// change.
  std::ostream *printAfterChange = nullptr;
  /// Record wall time per pass (see `timings()`).
  bool timePasses = false;
  /// Expensive: copy the module before every pass and fail, naming the
  /// pass, when it reports no change but the module differs (tests use it
  /// to hold passes to the contract that skipping verification relies on).
  bool checkUnchanged = false;
};

/// Runs a sequence of passes over a module.
class PassManager {
public:
  explicit PassManager(PassManagerOptions options = {}) : options_(options) {}

  void addPass(std::unique_ptr<Pass> pass);
  /// Appends the passes of a pipeline such as "fold,reverse-ad{tape-nested-
  /// loops=false}" (syntax: PassRegistry). Unknown names, empty elements
  /// and bad options are errors naming the problem; on error no pass of
  /// the pipeline is added.
  absl::Status addPipeline(std::string_view pipeline,
                           const PassRegistry &registry = PassRegistry::global());
  size_t size() const { return passes_.size(); }

  /// Runs every pass in order; stops at the first failure with a status
  /// naming the pass.
  absl::Status run(Module &module);

  struct Timing {
    std::string pass; ///< the label: name and non-default options
    std::chrono::nanoseconds wall;
    enum class Result : uint8_t { Changed, Unchanged, Failed } result = Result::Changed;
  };
  const std::vector<Timing> &timings() const { return timings_; }
  /// A table of per-pass wall time, in the order the passes ran; passes
  /// that reported no change are marked `(no change)`, failed ones
  /// `(failed)`.
  void printTimings(std::ostream &os) const;

private:
  absl::Status runOne(PassRegistry::Created &p, Module &module);
  PassManagerOptions options_;
  std::vector<PassRegistry::Created> passes_;
  std::vector<Timing> timings_;
};

} // namespace qd
