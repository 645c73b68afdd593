//===- GpuMemory.h - Device copies of buffers, reductions, launch arenas -*- C++ -*-===//
//
// Private to the GPU runtimes (qd::runtime_gpu, shared by qd::runtime_cuda
// and qd::runtime_hip), written against gpu::Device.
//
//  - GpuMirror: the device copy of a Buffer (qd/runtime/Buffer.h), owned
//    (allocated by the backend, freed with the buffer) or borrowed (caller
//    memory). It keeps the device alive through a shared pointer, so a
//    program may outlive the backend that mirrored its buffers.
//  - Reducer: the max of an integer range, computed on the device, for
//    launch-time sizing (kernels `qd_max_u8`, `qd_max_i32`, `qd_max_i64`
//    taking (data, begin, end, out), in a module the backend supplies: PTX
//    on CUDA, a code object on AMD; loaded on first use).
//  - LaunchArena: the per-launch arrays (context, slot pointers, shapes,
//    scalars, heap layout, error record, overflow counters) packed into one
//    device block, so a launch costs one copy there and one copy back
//    (both through pinned staging memory of the LaunchQueue).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "LaunchQueue.h"

#include "qd/runtime/Buffer.h"
#include "qd/runtime/GpuDevice.h"

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace qd::gpu {

/// Max of integer ranges on the device.
class Reducer {
public:
  /// Loads the module of the reduction kernels (the backend's code for
  /// them; see the file comment).
  using Loader = std::function<absl::StatusOr<std::unique_ptr<LoadedModule>>()>;
  /// The kernels' names, for u8 (i1), i32 and i64 elements.
  static constexpr const char *kNames[3] = {"qd_max_u8", "qd_max_i32", "qd_max_i64"};
  /// Threads per block of their launches (whole warps and wavefronts).
  static constexpr unsigned kBlock = 256;

  Reducer(std::shared_ptr<const Device> device, Loader loader)
      : device_(std::move(device)), loader_(std::move(loader)) {}
  /// max of elements [begin, end) of `elem` integers at `data` (i1: 0 or 1).
  absl::StatusOr<int64_t> max(DevicePtr data, ScalarType elem, int64_t begin, int64_t end);

private:
  std::shared_ptr<const Device> device_;
  Loader loader_;
  std::mutex mutex_;
  std::unique_ptr<LoadedModule> module_;
  Function fns_[3] = {}; // u8, i32, i64
  DeviceBuffer result_;
};

/// What a mirror shares with its runtime: the device, the reductions and
/// the launches in flight (copies and frees on the default stream wait for
/// them first: they may use the memory).
struct MirrorContext {
  std::shared_ptr<const Device> device;
  std::shared_ptr<Reducer> reducer;
  std::shared_ptr<LaunchQueue> queue;
};

class GpuMirror : public DeviceMirror {
public:
  /// Device memory of `bytes` bytes owned by the mirror.
  static absl::StatusOr<std::unique_ptr<GpuMirror>>
  allocate(const void *owner, const MirrorContext &context, size_t bytes);
  /// Caller memory at `ptr` (checked to be an allocation of the device's
  /// context holding `bytes` bytes from `ptr`).
  static absl::StatusOr<std::unique_ptr<GpuMirror>>
  borrow(const void *owner, const MirrorContext &context, DevicePtr ptr, size_t bytes);
  ~GpuMirror() override;

  const void *owner() const override { return owner_; }
  uint64_t address() const override { return ptr_; }
  bool borrowed() const override { return !owned_.get(); }
  absl::Status download(std::byte *host, size_t bytes) override;
  absl::Status upload(const std::byte *host, size_t bytes) override;
  absl::StatusOr<int64_t> readInteger(ScalarType elem, int64_t flat) override;
  absl::StatusOr<int64_t> maxInteger(ScalarType elem, int64_t begin, int64_t end) override;
  bool reducesOnDevice() const override { return true; }

private:
  GpuMirror(const void *owner, const MirrorContext &context)
      : owner_(owner), device_(context.device), reducer_(context.reducer), queue_(context.queue) {}
  /// Waits for the launches in flight.
  absl::Status settle() const { return queue_ ? queue_->waitAll() : absl::OkStatus(); }
  const void *owner_;
  std::shared_ptr<const Device> device_; // declared first: outlives owned_
  std::shared_ptr<Reducer> reducer_;
  std::shared_ptr<LaunchQueue> queue_;
  DeviceBuffer owned_;
  DevicePtr ptr_ = 0;
};

/// One launch's arrays in one device block, reused across launches. The
/// block is uploaded only when the layout's bytes differ from what the
/// device holds: launches that repeat one another (the same buffers,
/// shapes, heap layout and a clean error record) skip the copy.
class LaunchArena {
public:
  /// Starts a layout: everything placed after this is laid out anew.
  void clear() { host_.clear(); }
  /// Reserves `bytes` (16-byte aligned, zeroed) and returns the offset.
  size_t place(size_t bytes);
  /// Copies `bytes` bytes from `src` to `offset` of the staging copy.
  void write(size_t offset, const void *src, size_t bytes);
  template <typename T> size_t put(std::span<const T> v) {
    size_t off = place(v.size_bytes());
    write(off, v.data(), v.size_bytes());
    return off;
  }
  /// Whether the device block is too small for the layout (reserve then
  /// frees it: the launches in flight must have finished).
  bool mustGrow() const { return host_.size() > block_.size(); }
  /// Makes the device block at least as large as the layout (it may move,
  /// so call before computing device addresses).
  absl::Status reserve(const Device &device);
  DevicePtr base() const { return block_.get(); }
  size_t size() const { return host_.size(); }
  /// Whether the device block holds the layout already (counted as a
  /// skipped upload when `mayKeep`); otherwise the layout is now taken to
  /// be on the device, and the caller uploads it with upload().
  bool held(bool mayKeep);
  /// Copies the layout to `staging` (pinned), where a recorded copy reads it.
  void stage(std::byte *staging) const;
  /// stage(), then queues the copy into the device block on `stream`.
  absl::Status upload(const Device &device, std::byte *staging, Stream stream) const;
  /// What the code left in [offset, offset + bytes) of the device block,
  /// read back as `got`: where it differs from the layout the kernel wrote
  /// there, and the next upload copies again. Regions the kernel writes
  /// before it reads them (placed with nothing put there) may differ
  /// freely.
  void readBack(size_t offset, const void *got, size_t bytes);
  /// The device block may differ from the layout (a failed launch).
  void forget() { onDevice_.clear(); }
  /// Uploads skipped since the arena was created (for tests).
  int64_t skippedUploads() const { return skipped_; }

private:
  std::vector<std::byte> host_;
  /// What the device block holds (empty: unknown).
  std::vector<std::byte> onDevice_;
  DeviceBuffer block_;
  int64_t skipped_ = 0;
};

} // namespace qd::gpu
