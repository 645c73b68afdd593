//===- qd/runtime/CudaDriver.h - The CUDA driver API, loaded at run time -*- C++ -*-===//
//
// qd never links libcuda: the driver is opened with dlopen when a CUDA
// backend is created, so the library builds and its tests run on machines
// without a GPU (creating the driver there fails with a clear error).
// Only the entry points qd uses are resolved; their C signatures are
// declared here (ABI-stable since CUDA 4), so no CUDA header is needed to
// build either.
//
// Every call returns an absl::Status naming the call and the driver's own
// error name and text (`cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of
// memory)`).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/GpuDevice.h"

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qd::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;

/// The entry points qd calls, resolved by name from libcuda.so.1.
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  // Graphs (CUDA 11.4 and later; null where the driver lacks them).
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
};

/// What a device is.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int computeMajor = 0, computeMinor = 0;
  int multiprocessors = 0;
  int maxThreadsPerMultiprocessor = 0;
};

/// The driver, opened once per process, and one device's primary context.
class Device final : public gpu::Device {
public:
  /// Opens the driver library (`library`; when empty, `QD_LIBCUDA` if set,
  /// else libcuda.so.1), initialises the driver and retains device
  /// `ordinal`'s primary context. Fails with FailedPrecondition when there
  /// is no driver or no such device, saying which.
  static absl::StatusOr<std::unique_ptr<Device>> open(int ordinal = 0, std::string library = {});
  ~Device() override;

  const char *apiName() const override { return "cuda"; }
  const char *allocCall() const override { return "cuMemAlloc"; }
  int ordinal() const override { return info_.ordinal; }
  const std::string &name() const override { return info_.name; }
  int multiprocessors() const override { return info_.multiprocessors; }

  const DriverApi &api() const { return *api_; }
  const DeviceInfo &info() const { return info_; }
  /// "sm_90" for a compute capability 9.0 device.
  std::string smArch() const;

  /// Makes the context current on the calling thread (every call below does
  /// it first, so any host thread may use the device).
  absl::Status makeCurrent() const;
  /// `what: CUDA_ERROR_X (text)` as an error status, or OK for success.
  absl::Status check(CUresult r, std::string_view what) const;

  absl::StatusOr<CUdeviceptr> alloc(size_t bytes) const override;
  /// cuMemGetInfo's free bytes (0 when it fails).
  uint64_t freeMemory() const override;
  void free(CUdeviceptr p) const override;
  absl::Status copyToDevice(CUdeviceptr dst, const void *src, size_t bytes) const override;
  absl::Status copyToHost(void *dst, CUdeviceptr src, size_t bytes) const override;
  absl::Status zero(CUdeviceptr dst, size_t bytes) const override;
  /// The base and size of the allocation of this device's context that
  /// holds `p` (an error when `p` is not device memory of the context).
  absl::StatusOr<std::pair<CUdeviceptr, size_t>> addressRange(CUdeviceptr p) const override;
  absl::StatusOr<std::pair<void *, CUdeviceptr>> allocMapped(size_t bytes) const override;
  void freeMapped(void *host) const override;
  absl::Status launch(gpu::Function f, unsigned grid, unsigned block,
                      std::span<const uint64_t> args, std::string_view what,
                      gpu::Stream stream = nullptr) const override;
  absl::StatusOr<int> residentBlocks(gpu::Function f, unsigned block) const override;
  /// Two CUDA events on the stream timed.
  absl::StatusOr<std::unique_ptr<gpu::StreamTimer>> createTimer() const override;

  bool hasStreams() const override { return true; }
  absl::Status copyToDeviceAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                 gpu::Stream stream) const override;
  absl::Status copyToHostAsync(void *dst, CUdeviceptr src, size_t bytes,
                               gpu::Stream stream) const override;
  absl::StatusOr<gpu::Event> createEvent() const override;
  void destroyEvent(gpu::Event event) const override;
  absl::Status recordEvent(gpu::Event event, gpu::Stream stream) const override;
  absl::Status streamWaitEvent(gpu::Stream stream, gpu::Event event) const override;
  absl::Status waitEvent(gpu::Event event) const override;

  /// The driver has the graph entry points.
  bool hasGraphs() const override { return api_->cuGraphLaunch != nullptr; }
  absl::StatusOr<gpu::Stream> beginCapture() const override;
  absl::StatusOr<gpu::Graph> endCapture(gpu::Stream stream) const override;
  absl::Status launchGraph(gpu::Graph graph, gpu::Stream stream) const override;
  void destroyGraph(gpu::Graph graph) const override;

private:
  Device() = default;
  const DriverApi *api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceInfo info_;
  /// The stream graphs are recorded on (created at the first recording;
  /// non-blocking: it never waits for the default stream).
  mutable CUstream captureStream_ = nullptr;
  mutable std::mutex captureMutex_;
};

using gpu::DeviceBuffer;
using gpu::MappedHostMemory;

/// A loaded PTX module (unloaded on destruction).
class Module final : public gpu::LoadedModule {
public:
  /// JIT-compiles `ptx` with the driver. The driver's error log is part of
  /// the error.
  /// `maxRegisters` > 0 caps the registers per thread of its functions
  /// (the JIT's CU_JIT_MAX_REGISTERS; more may spill to local memory).
  static absl::StatusOr<std::unique_ptr<Module>> load(const Device &device, std::string_view ptx,
                                                      unsigned maxRegisters = 0);
  ~Module() override;
  absl::StatusOr<CUfunction> function(const std::string &name) const;
  absl::StatusOr<gpu::Function> entry(const std::string &name) const override;
  absl::StatusOr<std::pair<CUdeviceptr, size_t>> global(const std::string &name) const override;

private:
  Module(const Device &d, CUmodule m) : device_(d), module_(m) {}
  const Device &device_;
  CUmodule module_;
};

} // namespace qd::cuda
