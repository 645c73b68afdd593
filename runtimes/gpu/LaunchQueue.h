//===- LaunchQueue.h - GPU launches the host has not waited for -*- C++ -*-===//
//
// Private to the GPU runtimes. A launch stages its launch block in pinned
// host memory, queues the copy there, its kernels and the copy of its error
// record back on one stream, and records an event after them. LaunchQueue
// owns that memory: a ring of slots, each pinned staging memory and an
// event, so an asynchronous launch's staging memory is not reused before
// the stream has read it, and its report (the error record and overflow
// counters, copied into the slot) stays until the host collects it.
//
// It also keeps launches on different streams in order (a launch on
// another stream than the last one waits on the device for the last one's
// event: one adstack heap and one launch block serve them all) and after
// the default stream's copies (buffer uploads, fills) that a caller's
// stream does not wait for by itself. Code that touches device memory a
// pending launch may use (buffer copies on the default stream, freeing
// device memory) calls waitAll() first.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/GpuDevice.h"

#include <absl/status/statusor.h>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>

namespace qd::gpu {

class LaunchQueue {
public:
  /// Launches in flight at most: the slots of the ring.
  static constexpr size_t kSlots = 16;

  explicit LaunchQueue(std::shared_ptr<const Device> device) : device_(std::move(device)) {}
  /// Waits for the launches in flight (their staging memory is freed).
  ~LaunchQueue();
  LaunchQueue(const LaunchQueue &) = delete;
  LaunchQueue &operator=(const LaunchQueue &) = delete;

  /// A free slot with at least `bytes` bytes of pinned memory (grown as
  /// needed), now taken; ResourceExhausted when every slot is taken (the
  /// caller collects one first).
  absl::StatusOr<size_t> acquire(size_t bytes);
  /// The slot's pinned memory.
  std::byte *staging(size_t slot) const;
  /// How often a slot's pinned memory was freed for a larger one: what was
  /// recorded against the old memory (a launch graph's copies) is stale.
  uint64_t reallocations() const;
  /// Orders `stream` after the last submitted launch still in flight on
  /// another stream, and after the default stream's work when `stream` is
  /// not the default stream and there was some (Device::
  /// takeDefaultStreamWork): device-side waits, none on the host.
  absl::Status order(Stream stream);
  /// Marks the end of the slot's launch on `stream` (records its event).
  absl::Status submit(size_t slot, Stream stream);
  /// The host waits for the slot's launch; the slot stays taken.
  absl::Status wait(size_t slot);
  /// Frees the slot (after wait, or when nothing was submitted).
  void release(size_t slot);
  /// The host waits for every submitted launch; their slots stay taken.
  absl::Status waitAll();

private:
  struct Slot {
    std::unique_ptr<MappedHostMemory> memory;
    size_t bytes = 0;
    Event event = nullptr;
    bool taken = false, submitted = false;
    Stream stream = nullptr;
  };
  std::shared_ptr<const Device> device_;
  mutable std::mutex mutex_;
  std::array<Slot, kSlots> slots_;
  uint64_t reallocations_ = 0;
  /// The slot of the last submitted launch (-1: none in flight).
  int last_ = -1;
  /// Recorded on the default stream for a caller's stream to wait on.
  Event defaultEvent_ = nullptr;
};

} // namespace qd::gpu
