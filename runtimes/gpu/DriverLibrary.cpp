//===- DriverLibrary.cpp - Opening a GPU driver library at run time -------===//
#include "DriverLibrary.h"

#include <fmt/format.h>

#include <dlfcn.h>

namespace qd::gpu {

void *openLibrary(const std::string &path, std::string &why) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *text = dlerror();
    why = text ? text : "not found";
  }
  return handle;
}

void *SymbolResolver::find(const char *symbol) {
  if (!status_.ok())
    return nullptr;
  void *p = dlsym(handle_, symbol);
  if (!p)
    status_ = absl::FailedPreconditionError(
        fmt::format("{} the library '{}' lacks '{}': {}", prefix_, path_, symbol, fix_));
  return p;
}

} // namespace qd::gpu
