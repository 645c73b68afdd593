//===- ToolSupport.h - What the qd tools share -------------------*- C++ -*-===//
//
// What qd-run and qd-check-grad read the same way: fields and kernel
// arguments as JSON (nested arrays for fields and ndarrays, numbers or
// booleans for scalars, "nan"/"inf"/"-inf" strings), an inputs file
// {"fields": {...}, "args": {...}} overridden by --set/--arg values, and
// integer options; backends by name (qd/runtime/BackendRegistry.h); and
// main's error handling: errors are thrown as Failure
// and printed by toolMain.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Values.h"
#include "qd/ir/Module.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/Buffer.h"

#include <absl/status/statusor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qd::tool {

/// Runs a tool's `run` and returns its exit status: 1, after printing the
/// message, on a Failure (prefixed with `tool: error: ` unless it already
/// carries `file:line:col: error:`) or when standard output cannot be
/// written.
int toolMain(std::string_view tool, int (*run)(int, char **), int argc, char **argv);

/// The value of `v`, or a failure with its error.
template <typename T> T orDie(absl::StatusOr<T> v) {
  if (!v.ok())
    die(std::string(v.status().message()));
  return *std::move(v);
}

/// The module in `path`, parsed and verified, or a failure.
std::unique_ptr<Module> readModule(const std::string &path);

/// The name of the module's only kernel, or a failure asking for
/// --kernel=NAME.
std::string onlyKernel(const Module &module);

/// Fills `buf` from a (nested) JSON array of its shape, or a scalar for a
/// 0-d buffer.
void fillBuffer(Buffer &buf, const json &j, const std::string &what);

/// The whole of `text` as a decimal integer in [lo, hi], or a failure
/// naming `flag`.
int64_t integerOption(const std::string &flag, const std::string &text, int64_t lo, int64_t hi);

/// Backend `name` with `options`, from the registry with every backend of
/// this build registered (qd/runtime/AllBackends.h), or a failure saying
/// why (an unknown name lists the backends there are).
std::unique_ptr<Backend> createBackendOrDie(const std::string &name,
                                            const BackendOptions &options = {});

/// The --help text of --backend and --backend-option: every backend of
/// this build with its options.
std::string backendUsage();

/// Field and argument values by name (`x`, `x.grad`).
struct JsonInputs {
  std::map<std::string, json> fields;
  std::map<std::string, json> args;
};

/// The values of an inputs file {"fields": {...}, "args": {...}}, or a
/// failure naming the file and the bad key.
JsonInputs readInputsFile(const std::string &path);

/// The values of `inputsFile` (when not empty), overridden by `--set`
/// (fields) and `--arg` (arguments) pairs of name and JSON text.
JsonInputs readJsonInputs(const std::string &inputsFile,
                          const std::vector<std::pair<std::string, std::string>> &sets,
                          const std::vector<std::pair<std::string, std::string>> &argValues);

} // namespace qd::tool
