//===- GpuDevice.cpp - What every GPU driver API offers -------------------===//
#include "qd/runtime/GpuDevice.h"

#include <fmt/format.h>

namespace qd::gpu {

absl::StatusOr<std::unique_ptr<StreamTimer>> Device::createTimer() const {
  return absl::UnimplementedError(
      fmt::format("{}: timing GPU work is not implemented for this driver API", apiName()));
}

absl::Status Device::noStreams(std::string_view call) const {
  return absl::UnimplementedError(
      fmt::format("{}: {} is not implemented for this driver API (no streams)", apiName(), call));
}

absl::Status Device::copyToDeviceAsync(DevicePtr, const void *, size_t, Stream) const {
  return noStreams("copyToDeviceAsync");
}

absl::Status Device::copyToHostAsync(void *, DevicePtr, size_t, Stream) const {
  return noStreams("copyToHostAsync");
}

absl::StatusOr<Event> Device::createEvent() const {
  return noStreams("createEvent");
}

void Device::destroyEvent(Event) const {}

absl::Status Device::recordEvent(Event, Stream) const {
  return noStreams("recordEvent");
}

absl::Status Device::streamWaitEvent(Stream, Event) const {
  return noStreams("streamWaitEvent");
}

absl::Status Device::waitEvent(Event) const {
  return noStreams("waitEvent");
}

absl::Status Device::noGraphs(std::string_view call) const {
  return absl::UnimplementedError(
      fmt::format("{}: {} is not implemented for this driver API (no graphs)", apiName(), call));
}

absl::StatusOr<Stream> Device::beginCapture() const {
  return noGraphs("beginCapture");
}

absl::StatusOr<Graph> Device::endCapture(Stream) const {
  return noGraphs("endCapture");
}

absl::Status Device::launchGraph(Graph, Stream) const {
  return noGraphs("launchGraph");
}

void Device::destroyGraph(Graph) const {}

absl::StatusOr<std::unique_ptr<MappedHostMemory>> MappedHostMemory::allocate(const Device &device,
                                                                             size_t bytes) {
  auto mapped = device.allocMapped(bytes);
  if (!mapped.ok())
    return mapped.status();
  return std::unique_ptr<MappedHostMemory>(
      new MappedHostMemory(device, mapped->first, mapped->second));
}

MappedHostMemory::~MappedHostMemory() {
  owner_.freeMapped(host_);
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    reset();
    device_ = o.device_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.device_ = nullptr;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (device_ && ptr_)
    device_->free(ptr_);
  device_ = nullptr;
  ptr_ = 0;
  bytes_ = 0;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::allocate(const Device &d, size_t bytes) {
  absl::StatusOr<DevicePtr> p = d.alloc(bytes);
  if (!p.ok())
    return p.status();
  return DeviceBuffer(d, *p, bytes);
}

} // namespace qd::gpu
