//===- LaunchQueue.cpp - GPU launches the host has not waited for ---------===//
#include "LaunchQueue.h"

#include <fmt/format.h>

namespace qd::gpu {

LaunchQueue::~LaunchQueue() {
  (void)waitAll();
  for (Slot &s : slots_)
    device_->destroyEvent(s.event);
  device_->destroyEvent(defaultEvent_);
}

absl::StatusOr<size_t> LaunchQueue::acquire(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < kSlots; ++i) {
    Slot &s = slots_[i];
    if (s.taken)
      continue;
    if (!s.event) {
      absl::StatusOr<Event> e = device_->createEvent();
      if (!e.ok())
        return e.status();
      s.event = *e;
    }
    if (s.bytes < bytes) {
      // Grown by doubling: launch blocks of one backend differ little.
      size_t grown = std::max(bytes, 2 * s.bytes);
      if (s.memory)
        ++reallocations_;
      s.memory.reset();
      s.bytes = 0;
      auto m = MappedHostMemory::allocate(*device_, grown);
      if (!m.ok())
        return absl::Status(m.status().code(),
                            fmt::format("cannot allocate {} bytes of pinned staging memory: {}",
                                        grown, std::string(m.status().message())));
      s.memory = *std::move(m);
      s.bytes = grown;
    }
    s.taken = true;
    s.submitted = false;
    return i;
  }
  return absl::ResourceExhaustedError(
      fmt::format("{}: all {} launch slots are in flight", device_->apiName(), kSlots));
}

uint64_t LaunchQueue::reallocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reallocations_;
}

std::byte *LaunchQueue::staging(size_t slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<std::byte *>(slots_[slot].memory->host());
}

absl::Status LaunchQueue::order(Stream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (last_ >= 0 && slots_[last_].submitted && slots_[last_].stream != stream)
    if (absl::Status s = device_->streamWaitEvent(stream, slots_[last_].event); !s.ok())
      return s;
  if (!stream || !device_->takeDefaultStreamWork())
    return absl::OkStatus();
  if (!defaultEvent_) {
    absl::StatusOr<Event> e = device_->createEvent();
    if (!e.ok())
      return e.status();
    defaultEvent_ = *e;
  }
  if (absl::Status s = device_->recordEvent(defaultEvent_, nullptr); !s.ok())
    return s;
  return device_->streamWaitEvent(stream, defaultEvent_);
}

absl::Status LaunchQueue::submit(size_t slot, Stream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot &s = slots_[slot];
  if (absl::Status st = device_->recordEvent(s.event, stream); !st.ok())
    return st;
  s.submitted = true;
  s.stream = stream;
  last_ = int(slot);
  return absl::OkStatus();
}

absl::Status LaunchQueue::wait(size_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_[slot].submitted ? device_->waitEvent(slots_[slot].event) : absl::OkStatus();
}

void LaunchQueue::release(size_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[slot].taken = slots_[slot].submitted = false;
  if (last_ == int(slot))
    last_ = -1;
}

absl::Status LaunchQueue::waitAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  absl::Status first;
  for (Slot &s : slots_)
    if (s.taken && s.submitted)
      if (absl::Status st = device_->waitEvent(s.event); !st.ok() && first.ok())
        first = st;
  return first;
}

} // namespace qd::gpu
