//===- lib/capi/Internal.h - What the C API's files share ------*- C++ -*-===//
//
// The structs behind the C API's opaque handles and the conversions at its
// boundary: absl::Status to qd_status, C++ exceptions to error statuses
// (none crosses the API), NULL handles to INVALID_ARGUMENT errors naming
// the call and the parameter.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd-c/qd.h"

#include "qd/ir/IRBuilder.h"
#include "qd/runtime/Buffer.h"
#include "qd/runtime/Program.h"

#include <absl/status/status.h>

#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

struct qd_status_s {
  qd_status_code code;
  std::string message;
};

struct qd_module_s {
  std::shared_ptr<qd::Module> module;
};

struct qd_backend_s {
  qd_backend_s(std::unique_ptr<qd::Backend> b, std::string n)
      : backend(std::move(b)), name(std::move(n)) {}
  std::unique_ptr<qd::Backend> backend;
  std::string name;
  /// The modules of asynchronous launches not synchronised yet: decoding
  /// their reports names their kernels and statements (guarded by `mutex`).
  std::mutex mutex;
  std::vector<std::shared_ptr<qd::Module>> asyncModules;
};

struct qd_program_s {
  /// Deleting the program releases the module it refers to.
  std::shared_ptr<qd::Program> program;
  std::shared_ptr<qd::Module> module;
};

struct qd_builder_s {
  explicit qd_builder_s(qd::Kernel &k) : kernel(&k), builder(k) {}
  qd::Kernel *kernel;
  qd::IRBuilder builder;
  /// The loops and branches begun and not yet ended, innermost last.
  struct Open {
    std::optional<qd::IRBuilder::LoopScope> loop;
    std::optional<qd::IRBuilder::IfScope> branch;
    bool inElse = false;
  };
  std::vector<Open> open;
};

namespace qd::capi {

inline qd::Kernel *unwrap(qd_kernel k) {
  return reinterpret_cast<qd::Kernel *>(k);
}
inline qd_kernel wrap(qd::Kernel *k) {
  return reinterpret_cast<qd_kernel>(k);
}
inline qd::Value *unwrap(qd_value v) {
  return reinterpret_cast<qd::Value *>(v);
}
inline qd_value wrap(qd::Value *v) {
  return reinterpret_cast<qd_value>(v);
}

/// NULL for OK, else a status object with its code and message.
qd_status toStatus(const absl::Status &status);
qd_status error(qd_status_code code, std::string message);
/// INVALID_ARGUMENT: "<call>: <what> is NULL".
qd_status nullArgument(const char *call, const char *what);

/// Runs `body` (which returns a qd_status), turning an exception into an
/// error status naming `call`.
template <typename F> qd_status guard(const char *call, F &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return error(QD_RESOURCE_EXHAUSTED, std::string(call) + ": out of memory");
  } catch (const std::exception &e) {
    return error(QD_INTERNAL, std::string(call) + ": " + e.what());
  } catch (...) {
    return error(QD_INTERNAL, std::string(call) + ": unknown exception");
  }
}

/// A copy of `text` the caller frees with qd_string_free.
char *copyString(const std::string &text);

/// The ScalarType of `dtype`; InvalidArgument naming `call` when it is none.
absl::StatusOr<qd::ScalarType> scalarType(const char *call, qd_dtype dtype);
qd_dtype toDtype(qd::ScalarType type);

/// `ndim` extents from `shape`; InvalidArgument for a negative ndim or a
/// NULL shape with ndim > 0.
absl::StatusOr<std::vector<int64_t>> shapeOf(const char *call, int ndim, const int64_t *shape);

/// Buffers are handles into a registry, so that a freed handle is an error
/// rather than a use of freed memory: registers `buffer` and returns its
/// handle; the shared_ptr may alias storage something else owns.
qd_buffer registerBuffer(std::shared_ptr<qd::Buffer> buffer);
/// The buffer of a live handle; FailedPrecondition for a freed one,
/// InvalidArgument for NULL or a value that never was a handle.
absl::StatusOr<std::shared_ptr<qd::Buffer>> lookupBuffer(const char *call, qd_buffer handle);

/// The launch arguments of a qd_arg array, by name: `keep` holds the
/// buffers and `ndarrays` the NdarrayArgs `named` points to.
struct LaunchArgs {
  std::vector<std::shared_ptr<qd::Buffer>> keep;
  std::vector<qd::NdarrayArg> ndarrays;
  std::vector<qd::NamedLaunchArg> named;
  /// `named` in the kernel's order (orderedLaunchArgs only).
  std::vector<qd::LaunchArg> ordered;
};
/// `nargs` qd_args for `kernel` (scalars converted to the declared types);
/// InvalidArgument naming `call`, the kernel and the argument.
absl::StatusOr<LaunchArgs> launchArgs(const char *call, const qd::Kernel &kernel, size_t nargs,
                                      const qd_arg *args);
/// launchArgs, with `ordered` filled (orderLaunchArgs's errors).
absl::StatusOr<LaunchArgs> orderedLaunchArgs(const char *call, const qd::Kernel &kernel,
                                             size_t nargs, const qd_arg *args);
/// Kernel `name` of `module`; NotFound naming `call` and the kernel.
absl::StatusOr<qd::Kernel *> moduleKernel(const char *call, const qd::Module &module,
                                          const char *name);
/// The LaunchOptions of QD_LAUNCH_* `flags`.
qd::LaunchOptions launchOptions(unsigned flags);
/// The LaunchOptions of `options` (NULL: the defaults); InvalidArgument
/// naming `call` for a size this library does not know.
absl::StatusOr<qd::LaunchOptions> launchOptions(const char *call, const qd_launch_options *options);
/// Keeps `module` alive on `backend` until qd_backend_synchronize when
/// `options` is asynchronous.
void keepForAsync(qd_backend backend, const std::shared_ptr<qd::Module> &module,
                  const qd::LaunchOptions &options);

} // namespace qd::capi
