//===- GpuBackend.cpp - What GPU backends offer alike ---------------------===//
#include "qd/runtime/GpuBackend.h"

#include "GpuRuntime.h"

namespace qd {

GpuBackend::GpuBackend(std::unique_ptr<gpu::GpuRuntime> runtime) : runtime_(std::move(runtime)) {}
GpuBackend::~GpuBackend() = default;

absl::Status GpuBackend::launch(Program &program, const Kernel &kernel,
                                std::span<const LaunchArg> args, const LaunchOptions &options) {
  return runtime_->launch(program, kernel, args, options);
}

absl::StatusOr<const KernelSizing *> GpuBackend::adStackSizing(const Kernel &kernel) {
  return runtime_->sizing(kernel);
}

absl::StatusOr<int64_t> GpuBackend::gridThreads(const Kernel &kernel, bool boundsChecked) {
  auto c = runtime_->compile(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return runtime_->threadsOf(**c);
}

int64_t GpuBackend::lastLaunchThreads() const {
  return runtime_->lastLaunchThreads();
}

int64_t GpuBackend::lastAdStackHeapBytes() const {
  return runtime_->lastHeapBytes();
}

absl::Status GpuBackend::timeKernels(bool on) {
  return runtime_->timeKernels(on);
}

absl::StatusOr<double> GpuBackend::lastKernelMs() const {
  return runtime_->lastKernelMs();
}

int64_t GpuBackend::skippedLaunchUploads() const {
  return runtime_->skippedUploads();
}

absl::StatusOr<Buffer> GpuBackend::borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                                     uint64_t devicePointer) {
  return runtime_->borrowDeviceArray(elem, std::move(shape), devicePointer);
}

absl::StatusOr<std::string> GpuBackend::loadedCode(const Kernel &kernel, bool boundsChecked) {
  auto c = runtime_->compile(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return (*c)->code;
}

} // namespace qd
