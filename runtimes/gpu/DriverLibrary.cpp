//===- DriverLibrary.cpp - Opening a GPU driver library at run time -------===//
#include "DriverLibrary.h"

#include <fmt/format.h>

#include <dlfcn.h>

namespace qd::gpu {

void *openLibrary(const std::string &path, absl::Status &status,
                  const std::function<std::string(const std::string &why)> &explain) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *text = dlerror();
    status = absl::FailedPreconditionError(explain(text ? text : "not found"));
  }
  return handle;
}

void *SymbolResolver::lookup(const char *symbol) {
  return dlsym(handle_, symbol);
}

void *SymbolResolver::find(const char *symbol) {
  if (!status_.ok())
    return nullptr;
  void *p = lookup(symbol);
  if (!p)
    status_ = absl::FailedPreconditionError(
        fmt::format("{} '{}' lacks '{}': {}", what_, path_, symbol, fix_));
  return p;
}

} // namespace qd::gpu
