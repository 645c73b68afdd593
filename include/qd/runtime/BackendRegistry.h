//===- qd/runtime/BackendRegistry.h - Backends by name ----------*- C++ -*-===//
//
// Every backend a build has is registered here under its name (`interp`,
// `cpu`, `cuda`, `amdgpu`, `vulkan`) with a factory, the options the
// factory reads and a line of help for each. Tools choose a backend by
// name and pass options as `key=value` text; the registry checks every key
// against the backend's declared options before the factory runs, and the
// factory reads typed values through a BackendOptionReader, whose errors
// name the backend, the option and what it takes.
//
// The registry starts empty. Each backend library has a registration
// function (registerCpuBackend() in qd/runtime/CpuBackend.h, ...), and
// qd::registerAllBackends() (qd/runtime/AllBackends.h, target
// qd::backends) calls those of every backend the build enabled
// (QD_ENABLE_CUDA, QD_ENABLE_HIP, QD_ENABLE_VULKAN): explicit calls, so no
// registration is lost when a static library's unreferenced object is left
// out by the linker.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qd {

/// One option a backend declares.
struct BackendOptionInfo {
  std::string name;   ///< the key: `threads`, `validation`
  std::string values; ///< what it takes, for help: `0..1024`, `off|if-installed|required`
  std::string help;   ///< one line
};

/// The options a backend is created with: `key=value` pairs, in the order
/// given (a key given twice: the last value counts), plus where a backend
/// reports diagnostics while it runs.
class BackendOptions {
public:
  BackendOptions() = default;
  /// `text` as comma-separated `key=value` items ("" gives none);
  /// InvalidArgument naming an item without a key or without `=`.
  static absl::StatusOr<BackendOptions> parse(std::string_view text);

  /// Adds `key=value`.
  void set(std::string key, std::string value);
  /// Adds one `key=value` item; InvalidArgument naming it when it has no
  /// `=` or no key.
  absl::Status add(std::string_view item);
  /// The last value given for `key`, or null.
  const std::string *find(std::string_view key) const;
  const std::vector<std::pair<std::string, std::string>> &entries() const { return entries_; }

  /// Warnings and errors the backend reports while it lives (the Vulkan
  /// backend: the validation layer's messages), called on any thread.
  /// Unset: the backend keeps them to itself.
  std::function<void(const std::string &message)> onDiagnostic;

private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

/// Reads typed option values for a factory. Each read of a key that was
/// given parses it; the first bad value is kept as the reader's status
/// (InvalidArgument: "backend 'cpu': option 'threads' expects an integer
/// from 0 to 1024, got 'x'"), and later reads do nothing.
class BackendOptionReader {
public:
  BackendOptionReader(std::string_view backend, const BackendOptions &options)
      : backend_(backend), options_(options) {}

  /// Sets `out` from `key` (an integer in [lo, hi]) where it is given.
  template <typename T>
  void integer(std::string_view key, T &out, int64_t lo = std::numeric_limits<int64_t>::min(),
               int64_t hi = std::numeric_limits<int64_t>::max()) {
    if (int64_t v = 0; readInteger(key, lo, hi, v))
      out = static_cast<T>(v);
  }
  /// `true|false|on|off|1|0`.
  void boolean(std::string_view key, bool &out);
  void string(std::string_view key, std::string &out);
  /// One of `names` (each with the value it stands for).
  template <typename T>
  void choice(std::string_view key, T &out,
              std::initializer_list<std::pair<std::string_view, T>> names) {
    const std::string *text = value(key);
    if (!text)
      return;
    std::vector<std::string_view> accepted;
    for (const auto &[name, v] : names) {
      if (*text == name) {
        out = v;
        return;
      }
      accepted.push_back(name);
    }
    badValue(key, accepted, *text);
  }

  /// OK, or the first bad value's error.
  const absl::Status &status() const { return status_; }

private:
  /// The text of `key` while no error was found, else null.
  const std::string *value(std::string_view key) const;
  bool readInteger(std::string_view key, int64_t lo, int64_t hi, int64_t &out);
  void badValue(std::string_view key, const std::vector<std::string_view> &accepted,
                const std::string &got);
  void fail(std::string_view key, const std::string &expects, const std::string &got);

  std::string backend_;
  const BackendOptions &options_;
  absl::Status status_;
};

using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions &options)>;

/// What a backend registers.
struct BackendInfo {
  std::string name;
  std::string summary; ///< one line: what it runs on
  std::vector<BackendOptionInfo> options;
  BackendFactory create;
};

/// Adds a backend. InvalidArgument for an empty name or no factory,
/// AlreadyExists for a name already registered. Thread-safe, like every
/// function here.
absl::Status registerBackend(BackendInfo info);

/// The names of the registered backends, in registration order.
std::vector<std::string> registeredBackends();

/// The registration of `name`, or NotFound listing the registered ones.
absl::StatusOr<BackendInfo> findBackend(std::string_view name);

/// Creates backend `name` with `options`: NotFound for an unknown name
/// (the message lists the registered backends), InvalidArgument for a key
/// the backend does not declare (listing the ones it does) or a bad value,
/// and whatever the backend's creation reports (FailedPrecondition where
/// its device or driver is missing).
absl::StatusOr<std::unique_ptr<Backend>> createBackend(std::string_view name,
                                                       const BackendOptions &options = {});

/// Help text for every registered backend: its name and summary, then one
/// line per option (`key=VALUES  help`), indented by `indent` spaces.
std::string backendHelp(int indent = 2);

} // namespace qd
