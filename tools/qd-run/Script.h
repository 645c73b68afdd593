//===- Script.h - The launches of a qd-run run ------------------*- C++ -*-===//
//
// qd-run runs a list of launches: the --kernel options of the command line,
// or the entries of a launch script (--script, docs/runtime.md). Both are
// written as LaunchSpecs and checked against the module into Launches
// before anything runs, so a mistake in the tenth launch is reported
// before the first one starts and no launch is left half-prepared.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Values.h"

#include "qd/runtime/Program.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace qdrun {
using namespace qd::tool;

/// One launch as written: an entry of a launch script or a --kernel.
struct LaunchSpec {
  /// Where it is written, for messages ("steps.json: launches[2]"); empty
  /// for the command line, whose messages name options instead.
  std::string where;
  /// Its position among the launches (0-based, as in the script).
  int index = 0;
  std::string kernel;
  /// The launch's own argument values, and the field/ndarray values written
  /// before it: objects {NAME: JSON}.
  json args = json::object(), set = json::object();
  /// Whether to print after the launch: `print` (each name once), or every
  /// field and ndarray with `printAll`.
  bool prints = false, printAll = false;
  std::vector<std::string> print;
  /// The launch must fail: with any error (""), or one whose message
  /// contains this text.
  std::optional<std::string> expectError;
  /// Record the launch on the run's launch tape (`"tape": true`).
  bool tape = false;
  /// Instead of a kernel, run the tape backward with these seeds
  /// (`"backward": {NAME: number}`).
  std::optional<json> backward;
};

/// Reads the launch script at `path`, checking its structure: every key
/// known, every value of the right JSON type. Fails naming the launch
/// (`path: launches[i]`) and the key.
std::vector<LaunchSpec> readScript(const std::string &path);

/// Argument values given for all launches (--arg, --inputs "args"): kernel
/// name ("" for every kernel that has the argument) -> {NAME: JSON}.
using ArgDefaults = std::map<std::string, json>;

/// Splits an --arg key, `NAME` or `KERNEL:NAME`; fails naming `what`.
std::pair<std::string, std::string> parseArgKey(const std::string &key, const std::string &what);

/// A field or ndarray component, named as in the input (`x`, `x.grad`).
struct Slot {
  std::string name, base;
  qd::Component component = qd::Component::Primal;
  bool ndarray = false;
};

/// An ndarray argument given a value for a launch: the runner makes its
/// buffers afresh from `primal`; the companions its parameter declares are
/// zero unless `companions` has a value (which may also be for a companion
/// only a later kernel declares).
struct NewNdarray {
  const qd::Argument *param = nullptr;
  Value primal;
  std::map<qd::Component, Value> companions;
};

/// A launch checked against the module, its values converted.
struct Launch {
  int index = 0;
  /// Names it in messages: "steps.json: launches[2] (kernel @step)" or,
  /// from the command line, "kernel @step".
  std::string label;
  const qd::Kernel *kernel = nullptr;
  /// Values of the scalar parameters, by parameter index (ndarray
  /// parameters' entries are unused).
  std::vector<qd::Scalar> scalars;
  /// Before the launch, in order: ndarrays (re)made, then values written.
  std::vector<NewNdarray> newNdarrays;
  std::vector<std::pair<Slot, Value>> sets;
  /// After it: what to print.
  bool prints = false;
  std::vector<Slot> print;
  std::optional<std::string> expectError;
  /// Recorded on the run's launch tape.
  bool tape = false;
  /// A backward entry (`kernel` null): the adjoints (`NAME.grad` slots) it
  /// seeds, with their values.
  std::optional<std::vector<std::pair<Slot, double>>> backward;
};

/// Checks `specs` against the module of `program` (kernels, argument and
/// field names, value types and shapes, argument defaults that no launch
/// can take) and converts their values; `initialSets` ({NAME: JSON}) are
/// field values written before the first launch. Messages name the
/// launch's `where`, and the module as `moduleFile`.
std::vector<Launch> planLaunches(const std::vector<LaunchSpec> &specs, const json &initialSets,
                                 const ArgDefaults &defaults, qd::Program &program,
                                 const std::string &moduleFile);

} // namespace qdrun
