//===- qd/runtime/HipDriver.h - HIP's module API, loaded at run time -*- C++ -*-===//
//
// qd never links libamdhip64: HIP is opened with dlopen when an AMDGPU
// backend is created, so the library builds and its tests run on machines
// without ROCm or an AMD GPU (opening the device there fails with a clear
// FailedPrecondition error). Only the entry points qd uses are resolved;
// their C signatures are declared here (stable across ROCm 5 and 6), so no
// HIP header is needed to build either.
//
// Every call returns an absl::Status naming the call and HIP's own error
// name and text (`hipMalloc: hipErrorOutOfMemory (out of memory)`).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/GpuDevice.h"

#include <absl/status/statusor.h>

#include <memory>
#include <string>
#include <string_view>

namespace qd::hip {

using hipError_t = int;
using hipDeviceptr_t = void *;
using hipModule_t = struct ihipModule_t *;
using hipFunction_t = struct ihipModuleSymbol_t *;
using hipStream_t = struct ihipStream_t *;
using hipEvent_t = struct ihipEvent_t *;

/// The entry points qd calls, resolved by name from libamdhip64.
struct HipApi {
  hipError_t (*hipInit)(unsigned);
  hipError_t (*hipGetDeviceCount)(int *);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipDeviceGetName)(char *, int, int);
  hipError_t (*hipDeviceGetAttribute)(int *, int, int);
  hipError_t (*hipMalloc)(void **, size_t);
  hipError_t (*hipFree)(void *);
  hipError_t (*hipMemGetInfo)(size_t *, size_t *);
  hipError_t (*hipMemcpyHtoD)(hipDeviceptr_t, void *, size_t);
  hipError_t (*hipMemcpyDtoH)(void *, hipDeviceptr_t, size_t);
  hipError_t (*hipMemcpyHtoDAsync)(hipDeviceptr_t, void *, size_t, hipStream_t);
  hipError_t (*hipMemcpyDtoHAsync)(void *, hipDeviceptr_t, size_t, hipStream_t);
  hipError_t (*hipEventCreateWithFlags)(hipEvent_t *, unsigned);
  hipError_t (*hipEventDestroy)(hipEvent_t);
  hipError_t (*hipEventRecord)(hipEvent_t, hipStream_t);
  hipError_t (*hipEventSynchronize)(hipEvent_t);
  hipError_t (*hipStreamWaitEvent)(hipStream_t, hipEvent_t, unsigned);
  hipError_t (*hipMemsetD8)(hipDeviceptr_t, unsigned char, size_t);
  hipError_t (*hipMemGetAddressRange)(hipDeviceptr_t *, size_t *, hipDeviceptr_t);
  hipError_t (*hipHostMalloc)(void **, size_t, unsigned);
  hipError_t (*hipHostFree)(void *);
  hipError_t (*hipHostGetDevicePointer)(void **, void *, unsigned);
  hipError_t (*hipModuleLoadData)(hipModule_t *, const void *);
  hipError_t (*hipModuleUnload)(hipModule_t);
  hipError_t (*hipModuleGetFunction)(hipFunction_t *, hipModule_t, const char *);
  hipError_t (*hipModuleGetGlobal)(hipDeviceptr_t *, size_t *, hipModule_t, const char *);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, hipStream_t, void **, void **);
  hipError_t (*hipModuleOccupancyMaxActiveBlocksPerMultiprocessor)(int *, hipFunction_t, int,
                                                                   size_t);
  const char *(*hipGetErrorName)(hipError_t);
  const char *(*hipGetErrorString)(hipError_t);
  /// hipGetDevicePropertiesR0600 (ROCm 6) or hipGetDeviceProperties (5);
  /// may be null. Its hipDeviceProp_t is read as bytes (HipDriver.cpp).
  hipError_t (*hipGetDeviceProperties)(void *, int);
};

/// What a device is.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  /// The architecture's processor name, "gfx90a" (from the device's
  /// target id "gfx90a:sramecc+:xnack-"); empty when HIP does not say.
  std::string arch;
  /// Compute units.
  int multiprocessors = 0;
  int maxThreadsPerMultiprocessor = 0;
  /// Threads of a wavefront (64 or 32).
  int waveSize = 0;
};

/// The processor name ("gfx90a") of the first NUL-terminated target id
/// ("gfx90a:sramecc+:xnack-") that starts a string in `bytes` (a
/// hipDeviceProp_t read as bytes, whose layout differs between ROCm
/// releases), or "" when there is none.
std::string findProcessorName(const char *bytes, size_t size);

/// HIP, opened once per process, and one device.
class Device final : public gpu::Device {
public:
  /// Opens HIP (`library`; when empty, `QD_LIBAMDHIP64` if set, else
  /// libamdhip64.so, then libamdhip64.so.6 and .so.5), initialises it and
  /// selects device `ordinal`. Fails with FailedPrecondition when there is
  /// no HIP or no such device, saying which.
  static absl::StatusOr<std::unique_ptr<Device>> open(int ordinal = 0, std::string library = {});

  const char *apiName() const override { return "hip"; }
  const char *allocCall() const override { return "hipMalloc"; }
  int ordinal() const override { return info_.ordinal; }
  const std::string &name() const override { return info_.name; }
  int multiprocessors() const override { return info_.multiprocessors; }

  const HipApi &api() const { return *api_; }
  const DeviceInfo &info() const { return info_; }

  /// Makes the device current on the calling thread (every call below does
  /// it first).
  absl::Status makeCurrent() const;
  /// `hip: what: hipErrorX (text)` as an error status, or OK for success.
  absl::Status check(hipError_t r, std::string_view what) const;

  absl::StatusOr<gpu::DevicePtr> alloc(size_t bytes) const override;

  /// hipMemGetInfo's free bytes (0 when it fails).

  uint64_t freeMemory() const override;
  void free(gpu::DevicePtr p) const override;
  absl::Status copyToDevice(gpu::DevicePtr dst, const void *src, size_t bytes) const override;
  absl::Status copyToHost(void *dst, gpu::DevicePtr src, size_t bytes) const override;
  absl::Status zero(gpu::DevicePtr dst, size_t bytes) const override;
  absl::StatusOr<std::pair<gpu::DevicePtr, size_t>> addressRange(gpu::DevicePtr p) const override;
  absl::StatusOr<std::pair<void *, gpu::DevicePtr>> allocMapped(size_t bytes) const override;
  void freeMapped(void *host) const override;
  /// Passes `args` packed in one kernel-argument buffer (HIP_LAUNCH_PARAM_*).
  absl::Status launch(gpu::Function f, unsigned grid, unsigned block,
                      std::span<const uint64_t> args, std::string_view what,
                      gpu::Stream stream = nullptr) const override;
  absl::StatusOr<int> residentBlocks(gpu::Function f, unsigned block) const override;

  bool hasStreams() const override { return true; }
  absl::Status copyToDeviceAsync(gpu::DevicePtr dst, const void *src, size_t bytes,
                                 gpu::Stream stream) const override;
  absl::Status copyToHostAsync(void *dst, gpu::DevicePtr src, size_t bytes,
                               gpu::Stream stream) const override;
  absl::StatusOr<gpu::Event> createEvent() const override;
  void destroyEvent(gpu::Event event) const override;
  absl::Status recordEvent(gpu::Event event, gpu::Stream stream) const override;
  absl::Status streamWaitEvent(gpu::Stream stream, gpu::Event event) const override;
  absl::Status waitEvent(gpu::Event event) const override;

private:
  Device() = default;
  const HipApi *api_ = nullptr;
  DeviceInfo info_;
};

/// A loaded code object (unloaded on destruction).
class Module final : public gpu::LoadedModule {
public:
  /// Loads the code object `hsaco` (an ELF image, kept by the module) on
  /// the device.
  static absl::StatusOr<std::unique_ptr<Module>> load(const Device &device, std::string_view hsaco);
  ~Module() override;
  absl::StatusOr<gpu::Function> entry(const std::string &name) const override;
  absl::StatusOr<std::pair<gpu::DevicePtr, size_t>> global(const std::string &name) const override;

private:
  Module(const Device &d, std::string image) : device_(d), image_(std::move(image)) {}
  const Device &device_;
  std::string image_;
  hipModule_t module_ = nullptr;
};

} // namespace qd::hip
