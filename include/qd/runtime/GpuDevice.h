//===- qd/runtime/GpuDevice.h - What every GPU driver API offers -*- C++ -*-===//
//
// The CUDA driver (qd/runtime/CudaDriver.h) and HIP (qd/runtime/HipDriver.h)
// both allocate device memory, copy to and from it, map pinned host memory,
// load code, query occupancy and launch on a grid of blocks. gpu::Device is
// that common part, so that everything the GPU backends do alike (device
// copies of buffers, the adstack heap, the launch arena, launch-time
// reductions, the launch itself: runtimes/gpu/) is written once against it.
//
// Device addresses are integers (CUdeviceptr and hipDeviceptr_t are both
// 64-bit addresses); a loaded kernel is an opaque pointer.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace qd::gpu {

/// A device address.
using DevicePtr = unsigned long long;
/// A loaded kernel (a CUfunction, a hipFunction_t).
using Function = void *;
/// A stream (a CUstream, a hipStream_t); null is the default stream.
using Stream = void *;
/// An event (a CUevent, a hipEvent_t).
using Event = void *;
/// An executable graph: stream work recorded once and queued again by one
/// call (a CUgraphExec).
using Graph = void *;

class StreamTimer;

/// One GPU, through its driver API. Every call makes the device current on
/// the calling thread first, so any host thread may use it.
class Device {
public:
  virtual ~Device() = default;

  /// The API's name, the prefix of its messages: "cuda", "hip".
  virtual const char *apiName() const = 0;
  /// The driver call that allocates device memory (named in messages about
  /// caller memory): "cuMemAlloc", "hipMalloc".
  virtual const char *allocCall() const = 0;
  virtual int ordinal() const = 0;
  virtual const std::string &name() const = 0;
  /// Streaming multiprocessors (CUDA) or compute units (AMD).
  virtual int multiprocessors() const = 0;

  virtual absl::StatusOr<DevicePtr> alloc(size_t bytes) const = 0;
  /// The device memory free now (0: unknown).
  virtual uint64_t freeMemory() const { return 0; }
  virtual void free(DevicePtr p) const = 0;
  virtual absl::Status copyToDevice(DevicePtr dst, const void *src, size_t bytes) const = 0;
  virtual absl::Status copyToHost(void *dst, DevicePtr src, size_t bytes) const = 0;
  virtual absl::Status zero(DevicePtr dst, size_t bytes) const = 0;
  /// The base and size of the allocation of this device that holds `p` (an
  /// error when `p` is not device memory of it).
  virtual absl::StatusOr<std::pair<DevicePtr, size_t>> addressRange(DevicePtr p) const = 0;
  /// Pinned host memory of `bytes` bytes, zeroed, mapped into the device's
  /// address space: its host pointer and its device address.
  virtual absl::StatusOr<std::pair<void *, DevicePtr>> allocMapped(size_t bytes) const = 0;
  virtual void freeMapped(void *host) const = 0;

  /// Launches `f` on `grid` blocks of `block` threads on `stream` (null:
  /// the default stream, ordered with the copies above), passing `args` (8
  /// bytes each: addresses and 64-bit integers). `what` names the kernel
  /// in errors.
  virtual absl::Status launch(Function f, unsigned grid, unsigned block,
                              std::span<const uint64_t> args, std::string_view what,
                              Stream stream = nullptr) const = 0;

  // Streams and events. The calls below return Unimplemented, naming the
  // API, where hasStreams() is false (the default).
  virtual bool hasStreams() const { return false; }
  /// Queues a copy on `stream` from or to pinned host memory (allocMapped):
  /// the host does not wait for it.
  virtual absl::Status copyToDeviceAsync(DevicePtr dst, const void *src, size_t bytes,
                                         Stream stream) const;
  virtual absl::Status copyToHostAsync(void *dst, DevicePtr src, size_t bytes, Stream stream) const;
  /// An event without timing (destroyed with destroyEvent).
  virtual absl::StatusOr<Event> createEvent() const;
  virtual void destroyEvent(Event event) const;
  /// Marks the point of `stream` reached so far.
  virtual absl::Status recordEvent(Event event, Stream stream) const;
  /// Work queued on `stream` from now on starts after `event`'s point, with
  /// no wait on the host.
  virtual absl::Status streamWaitEvent(Stream stream, Event event) const;
  /// The host waits until `event`'s point is reached.
  virtual absl::Status waitEvent(Event event) const;
  /// Whether a copy, a fill or a launch went on the default stream since the
  /// last call (which clears it): work on a caller's stream that needs it
  /// must then wait for the default stream.
  bool takeDefaultStreamWork() const { return defaultStreamWork_.exchange(false); }
  // Graphs. The calls below return Unimplemented, naming the API, where
  // hasGraphs() is false (the default).
  virtual bool hasGraphs() const { return false; }
  /// Starts recording on the device's capture stream, which it returns:
  /// the copies and launches queued on it until endCapture are recorded,
  /// not run. One recording at a time per device.
  virtual absl::StatusOr<Stream> beginCapture() const;
  /// Ends the recording begun on `stream`: what it recorded, as an
  /// executable graph (freed with destroyGraph). Ends it also on failure.
  virtual absl::StatusOr<Graph> endCapture(Stream stream) const;
  /// Queues `graph`'s work on `stream` (null: the default stream).
  virtual absl::Status launchGraph(Graph graph, Stream stream) const;
  virtual void destroyGraph(Graph graph) const;
  /// Blocks of `block` threads of `f` one multiprocessor keeps resident.
  virtual absl::StatusOr<int> residentBlocks(Function f, unsigned block) const = 0;
  /// A pair of marks on the default stream that time the GPU work between
  /// them (kernels, copies). The default: an Unimplemented error naming the
  /// API.
  virtual absl::StatusOr<std::unique_ptr<StreamTimer>> createTimer() const;

protected:
  /// The error of a graph call on an API without graphs.
  absl::Status noGraphs(std::string_view call) const;
  /// Notes work queued on the default stream (takeDefaultStreamWork).
  void noteDefaultStreamWork() const { defaultStreamWork_.store(true); }
  /// The error of a stream call on an API without streams.
  absl::Status noStreams(std::string_view call) const;

private:
  mutable std::atomic<bool> defaultStreamWork_{false};
};

/// Times the device work between two points of a stream: call start()
/// before the work, stop() after it, and elapsedMs() once the host has
/// waited for the work (e.g. by a copy back).
class StreamTimer {
public:
  virtual ~StreamTimer() = default;
  virtual absl::Status start(Stream stream = nullptr) = 0;
  virtual absl::Status stop(Stream stream = nullptr) = 0;
  /// Milliseconds between start() and stop() on the GPU; waits for stop().
  virtual absl::StatusOr<double> elapsedMs() = 0;
};

/// Loaded device code (unloaded on destruction).
class LoadedModule {
public:
  virtual ~LoadedModule() = default;
  /// The kernel named `name`.
  virtual absl::StatusOr<Function> entry(const std::string &name) const = 0;
  /// The device address and size of the module's global variable `name`.
  virtual absl::StatusOr<std::pair<DevicePtr, size_t>> global(const std::string &name) const = 0;
};

/// Pinned host memory mapped into the device's address space: the host
/// writes it with plain stores while a kernel runs, and the kernel reads
/// them (volatile loads) through `device()`. Freed on destruction.
class MappedHostMemory {
public:
  static absl::StatusOr<std::unique_ptr<MappedHostMemory>> allocate(const Device &device,
                                                                    size_t bytes);
  ~MappedHostMemory();
  void *host() const { return host_; }
  DevicePtr device() const { return device_; }

private:
  MappedHostMemory(const Device &d, void *h, DevicePtr p) : owner_(d), host_(h), device_(p) {}
  const Device &owner_;
  void *host_;
  DevicePtr device_;
};

/// Device memory that frees itself.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const Device &d, DevicePtr p, size_t bytes) : device_(&d), ptr_(p), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  ~DeviceBuffer() { reset(); }
  static absl::StatusOr<DeviceBuffer> allocate(const Device &d, size_t bytes);

  DevicePtr get() const { return ptr_; }
  size_t size() const { return bytes_; }
  void reset();

private:
  const Device *device_ = nullptr;
  DevicePtr ptr_ = 0;
  size_t bytes_ = 0;
};

} // namespace qd::gpu
