//===- AllBackends.cpp - Register every backend built ---------------------===//
//
// Compiled with QD_ENABLE_CUDA, QD_ENABLE_HIP and QD_ENABLE_VULKAN defined
// to 0 or 1 (runtimes/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/AllBackends.h"

#include "qd/interp/Interpreter.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"
#if QD_ENABLE_CUDA
#include "qd/runtime/CudaBackend.h"
#endif
#if QD_ENABLE_HIP
#include "qd/runtime/HipBackend.h"
#endif
#if QD_ENABLE_VULKAN
#include "qd/runtime/VulkanBackend.h"
#endif

#include <mutex>

namespace qd {

namespace {

using Registration = absl::Status (*)();

constexpr Registration kBuilt[] = {
    registerInterpreterBackend, registerCpuBackend,
#if QD_ENABLE_CUDA
    registerCudaBackend,
#endif
#if QD_ENABLE_HIP
    registerHipBackend,
#endif
#if QD_ENABLE_VULKAN
    registerVulkanBackend,
#endif
};

} // namespace

void registerAllBackends() {
  static std::once_flag once;
  std::call_once(once, [] {
    // AlreadyExists: the program registered one itself first, which is
    // what it asked for.
    for (Registration r : kBuilt)
      (void)r();
  });
}

std::vector<std::string> builtBackends() {
  std::vector<std::string> names = {"interp", "cpu"};
  if (QD_ENABLE_CUDA)
    names.push_back("cuda");
  if (QD_ENABLE_HIP)
    names.push_back("amdgpu");
  if (QD_ENABLE_VULKAN)
    names.push_back("vulkan");
  return names;
}

} // namespace qd
