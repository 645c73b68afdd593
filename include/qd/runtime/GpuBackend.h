//===- qd/runtime/GpuBackend.h - What GPU backends offer alike --*- C++ -*-===//
//
// The part of the CUDA (qd/runtime/CudaBackend.h) and AMDGPU
// (qd/runtime/HipBackend.h) backends' API that is the same: both are the
// accelerator launch (qd/runtime/AcceleratorBackend.h) over one LLVM GPU
// device (runtimes/gpu/GpuRuntime.h) behind a driver API, and differ in
// what they compile to and how they name their device.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/AcceleratorBackend.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qd {
namespace gpu {
class GpuRuntime;
} // namespace gpu

/// Timing (AcceleratorBackend::timeKernels): CUDA records an event before
/// the first kernel of a launch and after the last; the time between them
/// excludes what the launch does on the host and its copies.
/// Unimplemented on HIP.
class GpuBackend : public AcceleratorBackend {
public:
  ~GpuBackend() override;

  /// The threads of the resident grid parallel tasks of `kernel` run on
  /// (lastLaunchThreads: what a launch used; fewer for tasks with fewer
  /// iterations or a local-tape launch under
  /// CudaBackendOptions::localTapeBytesPerSm).
  absl::StatusOr<int64_t> gridThreads(const Kernel &kernel, bool boundsChecked = false);
  std::optional<AdStackHeapUsage> lastAdStackHeapUsage() const override {
    AdStackHeapUsage u = lastAdStackUsage();
    u.threadKind = "GPU threads";
    return u;
  }
  /// Launches whose launch block (context, buffer addresses, shapes, heap
  /// layout, error record) the device held already, so it was not copied.
  int64_t skippedLaunchUploads() const;
  /// Launches queued as one recorded graph (CudaBackendOptions::
  /// launchGraphs; HIP has none).
  int64_t graphLaunches() const;
  /// An ndarray over device memory the caller owns (a device address of
  /// this backend's GPU, e.g. a framework's tensor): launches on this
  /// backend use it in place, without copies; host reads copy it back. The
  /// pointer must lie in one allocation of the device with room for the
  /// whole array, and the memory must outlive the buffer.
  absl::StatusOr<Buffer> borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                           uint64_t devicePointer);

protected:
  explicit GpuBackend(std::unique_ptr<gpu::GpuRuntime> runtime);
  /// The code the driver loaded for `kernel` (compiles it if needed).
  absl::StatusOr<std::string> loadedCode(const Kernel &kernel, bool boundsChecked);
  gpu::GpuRuntime &runtime() const { return runtime_; }

private:
  gpu::GpuRuntime &runtime_;
};

} // namespace qd
