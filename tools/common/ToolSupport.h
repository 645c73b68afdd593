//===- ToolSupport.h - What the qd tools share -------------------*- C++ -*-===//
//
// What qd-run and qd-check-grad read the same way: fields and kernel
// arguments as JSON (nested arrays for fields and ndarrays, numbers or
// booleans for scalars, "nan"/"inf"/"-inf" strings), an inputs file
// {"fields": {...}, "args": {...}} overridden by --set/--arg values, and
// integer options; and main's error handling: errors are thrown as Failure
// and printed by toolMain.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"
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

using json = nlohmann::json;

/// An error for the user; toolMain prints it and exits with 1.
struct Failure {
  std::string message;
};

/// Runs a tool's `run` and returns its exit status: 1, after printing the
/// message, on a Failure (prefixed with `tool: error: ` unless it already
/// carries `file:line:col: error:`) or when standard output cannot be
/// written.
int toolMain(std::string_view tool, int (*run)(int, char **), int argc, char **argv);

[[noreturn]] void die(std::string message);

/// The value of `v`, or a failure with its error.
template <typename T> T orDie(absl::StatusOr<T> v) {
  if (!v.ok())
    die(std::string(v.status().message()));
  return *std::move(v);
}

/// The contents of `path`, or a failure naming it.
std::string readFile(const std::string &path);

/// The module in `path`, parsed and verified, or a failure.
std::unique_ptr<Module> readModule(const std::string &path);

/// The name of the module's only kernel, or a failure asking for
/// --kernel=NAME.
std::string onlyKernel(const Module &module);

/// `text` as JSON, or a failure naming `what` (malformed or nested too
/// deeply).
json parseJson(const std::string &text, const std::string &what);

/// `x.grad` -> (x, Grad), `x.dual` -> (x, Dual), `x` -> (x, Primal).
std::pair<std::string, Component> splitName(const std::string &name);

/// A JSON scalar as a value of type `t`; a failure naming `what` when it is
/// of the wrong kind or out of range.
Scalar toScalar(const json &j, ScalarType t, const std::string &what);

/// Shape of a rectangular nested JSON array (a scalar has shape []).
std::vector<int64_t> shapeOf(const json &j, const std::string &what);

/// Fills `buf` from a (nested) JSON array of its shape, or a scalar for a
/// 0-d buffer.
void fillBuffer(Buffer &buf, const json &j, const std::string &what);

/// The whole of `text` as a decimal integer in [lo, hi], or a failure
/// naming `flag`.
int64_t integerOption(const std::string &flag, const std::string &text, int64_t lo, int64_t hi);

/// Field and argument values by name (`x`, `x.grad`).
struct JsonInputs {
  std::map<std::string, json> fields;
  std::map<std::string, json> args;
};

/// The values of `inputsFile` (when not empty), overridden by `--set`
/// (fields) and `--arg` (arguments) pairs of name and JSON text.
JsonInputs readJsonInputs(const std::string &inputsFile,
                          const std::vector<std::pair<std::string, std::string>> &sets,
                          const std::vector<std::pair<std::string, std::string>> &argValues);

} // namespace qd::tool
