//===- DriverLibrary.h - Opening a GPU driver library at run time -*- C++ -*-===//
//
// Private to the GPU runtimes. The CUDA driver and HIP are opened the same
// way: dlopen once per process and path, every entry point resolved by
// name, the first missing one an error, the result kept for later calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/status.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace qd::gpu {

/// A driver's entry points (`Api`, a struct of function pointers) and how
/// opening it went.
template <typename Api> struct LoadedDriver {
  Api api{};
  absl::Status status;
};

/// dlopen(`path`, RTLD_NOW | RTLD_LOCAL): the handle, or null with `status`
/// set to FailedPrecondition(`explain(dlerror's text)`).
void *openLibrary(const std::string &path, absl::Status &status,
                  const std::function<std::string(const std::string &why)> &explain);

/// Resolves a library's entry points into function pointers; after the
/// first one it lacks, status() is FailedPrecondition("<what> '<path>'
/// lacks '<symbol>': <fix>").
class SymbolResolver {
public:
  SymbolResolver(void *handle, std::string what, std::string path, std::string fix)
      : handle_(handle), what_(std::move(what)), path_(std::move(path)), fix_(std::move(fix)) {}
  template <typename F> void operator()(F *&fn, const char *symbol) {
    fn = reinterpret_cast<F *>(find(symbol));
  }
  /// An entry point the library may lack: whether it has it (`fn` null if
  /// not; status() is unchanged).
  template <typename F> bool optional(F *&fn, const char *symbol) {
    fn = reinterpret_cast<F *>(lookup(symbol));
    return fn != nullptr;
  }
  const absl::Status &status() const { return status_; }

private:
  void *find(const char *symbol);
  void *lookup(const char *symbol);
  void *handle_;
  std::string what_, path_, fix_;
  absl::Status status_;
};

/// `open(library)`, computed once per process and library path (later
/// calls return the same object).
template <typename Loaded>
const Loaded &loadOnce(const std::string &library, Loaded (*open)(const std::string &)) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Loaded> &slot = cache[library];
  if (!slot)
    slot = std::make_unique<Loaded>(open(library));
  return *slot;
}

} // namespace qd::gpu
