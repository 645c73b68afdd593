//===- GpuBackend.cpp - What GPU backends offer alike ---------------------===//
#include "qd/runtime/GpuBackend.h"

#include "GpuRuntime.h"

namespace qd {

GpuBackend::GpuBackend(std::unique_ptr<gpu::GpuRuntime> runtime)
    : AcceleratorBackend(std::move(runtime)), runtime_(static_cast<gpu::GpuRuntime &>(device())) {}
GpuBackend::~GpuBackend() = default;

absl::StatusOr<int64_t> GpuBackend::gridThreads(const Kernel &kernel, bool boundsChecked) {
  auto c = heapCode(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return (*c)->gridThreads();
}

int64_t GpuBackend::skippedLaunchUploads() const {
  return runtime_.skippedUploads();
}

int64_t GpuBackend::graphLaunches() const {
  return runtime_.graphLaunches();
}

absl::StatusOr<Buffer> GpuBackend::borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                                     uint64_t devicePointer) {
  return runtime_.borrowDeviceArray(elem, std::move(shape), devicePointer);
}

absl::StatusOr<std::string> GpuBackend::loadedCode(const Kernel &kernel, bool boundsChecked) {
  auto c = heapCode(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return static_cast<const gpu::GpuKernel *>(*c)->code;
}

} // namespace qd
