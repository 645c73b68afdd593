//===- GpuMemory.cpp - Device copies of buffers, reductions, launch arenas -===//
#include "GpuMemory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace qd::gpu {

namespace {

int reductionIndex(ScalarType elem) {
  return elem == ScalarType::I1 ? 0 : elem == ScalarType::I32 ? 1 : 2;
}

} // namespace

absl::StatusOr<int64_t> Reducer::max(DevicePtr data, ScalarType elem, int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!module_) {
    auto m = loader_();
    if (!m.ok())
      return m.status();
    for (int i = 0; i < 3; ++i) {
      auto fn = (*m)->entry(kNames[i]);
      if (!fn.ok())
        return fn.status();
      fns_[i] = *fn;
    }
    auto r = DeviceBuffer::allocate(*device_, 8);
    if (!r.ok())
      return r.status();
    module_ = *std::move(m);
    result_ = *std::move(r);
  }
  int64_t init = std::numeric_limits<int64_t>::min();
  if (absl::Status s = device_->copyToDevice(result_.get(), &init, 8); !s.ok())
    return s;
  // Enough blocks to fill the GPU, no more than the range needs.
  int64_t blocksNeeded = (end - begin + kBlock - 1) / kBlock;
  int64_t blocks =
      std::clamp<int64_t>(blocksNeeded, 1, int64_t(std::max(device_->multiprocessors(), 1)) * 8);
  uint64_t args[] = {data, uint64_t(begin), uint64_t(end), result_.get()};
  if (absl::Status s =
          device_->launch(fns_[reductionIndex(elem)], unsigned(blocks), kBlock, args, "qd_max");
      !s.ok())
    return s;
  int64_t best = 0;
  if (absl::Status s = device_->copyToHost(&best, result_.get(), 8); !s.ok())
    return s;
  return elem == ScalarType::I1 ? (best != 0 ? 1 : 0) : best;
}

absl::StatusOr<std::unique_ptr<GpuMirror>>
GpuMirror::allocate(const void *owner, const MirrorContext &context, size_t bytes) {
  auto buf = DeviceBuffer::allocate(*context.device, std::max<size_t>(bytes, 8));
  if (!buf.ok())
    return buf.status();
  std::unique_ptr<GpuMirror> m(new GpuMirror(owner, context));
  m->owned_ = *std::move(buf);
  m->ptr_ = m->owned_.get();
  return m;
}

absl::StatusOr<std::unique_ptr<GpuMirror>>
GpuMirror::borrow(const void *owner, const MirrorContext &context, DevicePtr ptr, size_t bytes) {
  const Device &device = *context.device;
  if (ptr == 0)
    return absl::InvalidArgumentError("device pointer is null");
  auto range = device.addressRange(ptr);
  if (!range.ok())
    return absl::InvalidArgumentError(fmt::format(
        "0x{:x} is not device memory of GPU {} ({}); pass a pointer from {} "
        "or a framework's tensor on that GPU",
        ptr, device.ordinal(), std::string(range.status().message()), device.allocCall()));
  auto [base, size] = *range;
  if (ptr + bytes > base + size)
    return absl::InvalidArgumentError(
        fmt::format("the allocation at 0x{:x} holds {} bytes from 0x{:x}, but the array needs {}",
                    base, base + size - ptr, ptr, bytes));
  std::unique_ptr<GpuMirror> m(new GpuMirror(owner, context));
  m->ptr_ = ptr;
  return m;
}

GpuMirror::~GpuMirror() {
  // A launch in flight may still use the memory freed now.
  if (owned_.get())
    (void)settle();
}

absl::Status GpuMirror::download(std::byte *host, size_t bytes) {
  if (absl::Status s = settle(); !s.ok())
    return s;
  return device_->copyToHost(host, ptr_, bytes);
}

absl::Status GpuMirror::upload(const std::byte *host, size_t bytes) {
  if (absl::Status s = settle(); !s.ok())
    return s;
  return device_->copyToDevice(ptr_, host, bytes);
}

absl::StatusOr<int64_t> GpuMirror::readInteger(ScalarType elem, int64_t flat) {
  unsigned bytes = storageBytes(elem);
  unsigned char raw[8] = {};
  if (absl::Status s = settle(); !s.ok())
    return s;
  if (absl::Status s = device_->copyToHost(raw, ptr_ + uint64_t(flat) * bytes, bytes); !s.ok())
    return s;
  switch (elem) {
  case ScalarType::I1:
    return raw[0] ? 1 : 0;
  case ScalarType::I32: {
    int32_t v;
    std::memcpy(&v, raw, 4);
    return v;
  }
  default: {
    int64_t v;
    std::memcpy(&v, raw, 8);
    return v;
  }
  }
}

absl::StatusOr<int64_t> GpuMirror::maxInteger(ScalarType elem, int64_t begin, int64_t end) {
  if (absl::Status s = settle(); !s.ok())
    return s;
  return reducer_->max(ptr_, elem, begin, end);
}

size_t LaunchArena::place(size_t bytes) {
  size_t off = (host_.size() + 15) & ~size_t(15);
  host_.resize(off + std::max<size_t>(bytes, 8));
  return off;
}

void LaunchArena::write(size_t offset, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(host_.data() + offset, src, bytes);
}

absl::Status LaunchArena::reserve(const Device &device) {
  if (host_.size() <= block_.size())
    return absl::OkStatus();
  size_t grown = std::max(host_.size(), 2 * block_.size());
  block_.reset();
  onDevice_.clear();
  auto b = DeviceBuffer::allocate(device, grown);
  if (!b.ok())
    return b.status();
  block_ = *std::move(b);
  return absl::OkStatus();
}

bool LaunchArena::held(bool mayKeep) {
  if (mayKeep && !onDevice_.empty() && onDevice_ == host_) {
    ++skipped_;
    return true;
  }
  onDevice_ = host_;
  return false;
}

void LaunchArena::stage(std::byte *staging) const {
  std::memcpy(staging, host_.data(), host_.size());
}

absl::Status LaunchArena::upload(const Device &device, std::byte *staging, Stream stream) const {
  stage(staging);
  return device.copyToDeviceAsync(block_.get(), staging, host_.size(), stream);
}

void LaunchArena::readBack(size_t offset, const void *got, size_t bytes) {
  if (offset + bytes > onDevice_.size() || std::memcmp(onDevice_.data() + offset, got, bytes) != 0)
    onDevice_.clear();
}

} // namespace qd::gpu
