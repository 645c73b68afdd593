//===- qd/runtime/GpuBackend.h - What GPU backends offer alike --*- C++ -*-===//
//
// The part of the CUDA (qd/runtime/CudaBackend.h) and AMDGPU
// (qd/runtime/HipBackend.h) backends' API that is the same: both are the
// shared GPU runtime (runtimes/gpu/GpuRuntime.h) behind a driver API, and
// differ in what they compile to and how they name their device.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qd {
namespace gpu {
class GpuRuntime;
} // namespace gpu

class GpuBackend : public Backend {
public:
  ~GpuBackend() override;

  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options) override;
  absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &kernel) override;

  /// The threads of the grid parallel tasks of `kernel` run on.
  absl::StatusOr<int64_t> gridThreads(const Kernel &kernel, bool boundsChecked = false);
  /// The grid threads of the last launch: gridThreads; fewer for tasks
  /// with fewer iterations or a local-tape launch under
  /// CudaBackendOptions::localTapeBytesPerSm; one per iteration (whole
  /// blocks) for a launch without adstack heap whose tasks' iterations are
  /// known at launch.
  int64_t lastLaunchThreads() const;
  /// Adstack heap bytes the last launch used.
  int64_t lastAdStackHeapBytes() const;
  std::optional<AdStackHeapUsage> lastAdStackHeapUsage() const override {
    return AdStackHeapUsage{lastAdStackHeapBytes(), lastLaunchThreads(), "GPU threads"};
  }
  /// Times the kernels of every launch on the GPU from now on (`on`), or
  /// stops timing. CUDA records an event before the first kernel of a
  /// launch and after the last; the time between them excludes what the
  /// launch does on the host and its copies. Unimplemented on HIP.
  absl::Status timeKernels(bool on);
  /// Milliseconds the last launch's kernels took on the GPU (timing on).
  /// An error while timing is off or before a launch ran its kernels.
  absl::StatusOr<double> lastKernelMs() const;
  /// Launches whose launch block (context, buffer addresses, shapes, heap
  /// layout, error record) the device held already, so it was not copied.
  int64_t skippedLaunchUploads() const;
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
  gpu::GpuRuntime &runtime() const { return *runtime_; }

private:
  std::unique_ptr<gpu::GpuRuntime> runtime_;
};

} // namespace qd
