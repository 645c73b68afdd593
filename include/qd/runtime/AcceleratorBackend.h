//===- qd/runtime/AcceleratorBackend.h - One launch for every device -*- C++ -*-===//
//
// Every accelerator backend (CUDA, HIP, Vulkan) launches a kernel the same
// way; AcceleratorBackend is that launch, written once, over a narrow
// device interface (accel::AcceleratorDevice) in the spirit of Halide's
// device_interface.h:
//
//   - the adstack sizing, computed once per kernel (KernelSizingCache);
//   - the compiled variants of a kernel (bounds checks, stop checks, local
//     tapes: the stacks whose capacities fit LocalTapeBytes run from
//     per-thread arrays), cached by kernel;
//   - the grid: the resident grid of the code, or whole groups enough for
//     the iterations of tasks known at launch (one thread per iteration
//     when the launch needs no heap and the device allows it), shrunk until
//     the heap fits a device's largest buffer and the launch's adstack
//     memory budget (fewer threads: more waves of iterations);
//   - the adstack heap, grown by amortised doubling;
//   - the device copies of the bound buffers (names in errors);
//   - the stop word (a cancel flag set before the launch stops it at its
//     first check) and the watchdog of LaunchOptions::timeout/cancel;
//   - decoding what the code reported (LaunchPlan::finish).
//
// A device supplies only what differs: compiling a variant to its code and
// loading it, allocating memory, and running one frame (upload the launch
// data, dispatch the entries in order, wait, read the error record and the
// overflow counters back). A device with streams may also queue a frame on
// a caller's stream and return before it ran (LaunchOptions::async): the
// backend then keeps the launch's plan, detached, and decodes its report
// when it collects it (synchronize(), or a launch that waits). A new
// accelerator is one AcceleratorDevice plus one code generator.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/abi/LaunchContext.h"
#include "qd/runtime/Buffer.h"
#include "qd/runtime/Program.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qd {

class LaunchPlan;

namespace accel {

/// One compiled variant of a kernel, loaded on its device.
class DeviceKernel {
public:
  virtual ~DeviceKernel() = default;
  /// The layout the code was compiled for.
  virtual const KernelLayout &layout() const = 0;
  /// The resident grid: the threads parallel entries run on when their
  /// iterations are not known before the launch.
  virtual int64_t gridThreads() const = 0;
  /// Whether the code reads the launch's stop word.
  virtual bool readsStopWord() const = 0;
};

/// What a variant is compiled with.
struct CompileRequest {
  bool boundsChecked = false;
  bool stopChecks = false;
  /// The launch's ndarray buffers do not overlap: the code may take every
  /// component of every ndarray argument to be storage of its own
  /// (CodegenOptions::distinctNdarrays). Only for a device whose
  /// compilesDistinctNdarrays().
  bool distinctNdarrays = false;
  /// Every ndarray buffer of the launch has at most INT32_MAX elements
  /// (ndarraysFitNarrowOffsets): element offsets may be computed in 32 bits
  /// (CodegenOptions::narrowNdarrayOffsets). Only for a device whose
  /// compilesNarrowNdarrayOffsets().
  bool narrowNdarrayOffsets = false;
  /// Local tapes: entries of the per-thread array of each stack kept out
  /// of the heap (empty: every stack in the heap).
  std::map<const AdStackAllocaStmt *, int64_t> localAdStackEntries;
};

/// What the launch decides before it runs the code.
struct LaunchFrame {
  const LaunchPlan *plan = nullptr;
  /// T: the threads parallel entries stride over; the heap holds a row of
  /// every stack for each.
  int64_t threads = 0;
  /// Groups (blocks, workgroups) per KernelLayout::launches entry: 1 for a
  /// serial entry, 0 for a parallel one without iterations.
  std::vector<uint32_t> groups;
  /// Per launch: run its cooperative function (KernelLayout::Launch::
  /// cooperativeFunction), `groups` being then its iterations.
  std::vector<bool> cooperative;
  /// The device copies of LaunchPlan::slotBuffers.
  std::vector<DeviceMirror *> slots;
  /// The stop word the code reads (null when it reads none).
  int32_t *stopWord = nullptr;
  /// Time the dispatches (AcceleratorBackend::timeKernels is on).
  bool timed = false;
  /// The stream the frame's copies and dispatches go on (LaunchOptions::
  /// stream; null: the device's own). Only for a device with streams().
  void *stream = nullptr;
  /// Return once the work is queued: the report comes from collect().
  /// Never with a stop word or timing. Only for a device with streams().
  bool async = false;
  /// A compacted heap (docs/runtime.md, "Compacted heap"): the device copy
  /// of its table (u32 words: a header, then per group of 1 << groupShift
  /// threads and column the region's offset from the heap's start in
  /// AcceleratorDevice::groupTableUnit() bytes, then the heap's end), and
  /// its size in bytes; null: the interleaved layout. A device
  /// whose code reads the table from the heap (groupTableInHeap: Vulkan)
  /// copies it to the heap's first bytes, which are kept for it.
  DeviceMirror *groupTable = nullptr;
  int64_t groupTableBytes = 0;
  /// log2 of the compacted heap's threads per group (0-5).
  int64_t groupShift = 0;
  /// A compacted heap run in windows (docs/runtime.md, "Windows"): the
  /// first of the `threads` this frame runs (the parallel entry with the
  /// heap runs `groups` groups from there; 0: every thread), and the bytes
  /// its regions start at in the table past where they start in the heap
  /// (the code's heap is the heap's address less this).
  int64_t threadOffset = 0;
  int64_t heapShift = 0;
  /// The windows after this frame's own (threadOffset, heapShift, groups),
  /// for a device that runs them all in one execute
  /// (AcceleratorDevice::executesWindows): each then runs the frame's one
  /// parallel entry with its first thread, shift and groups.
  struct Window {
    int64_t threadOffset = 0, heapShift = 0;
    uint32_t groups = 0;
  };
  std::vector<Window> moreWindows;
};

/// What a frame's code reported.
struct LaunchReport {
  QdErrorRecord record{};
  /// Per stack id, the depth an overflowing stack needed (0: none).
  std::vector<int64_t> needed;
  /// The dispatches' time on the device (timed frames).
  double kernelMs = -1;
  /// An asynchronous frame's ticket for collect(): the report is not
  /// filled yet.
  uint64_t ticket = 0;
  /// The frame went as one recorded graph (CudaBackendOptions::
  /// launchGraphs).
  bool graph = false;
  /// The frame ran the kernel's fused entry, one block
  /// (KernelLayout::fusedFunction).
  bool fused = false;
};

/// How a device bounds a launch.
struct DeviceLimits {
  /// Threads of one group (block, workgroup).
  unsigned groupSize = 1;
  /// The most threads of a launch of one thread per iteration, which a
  /// launch without heap whose iterations are known may use (0: never).
  int64_t perIterationThreads = 0;
  /// Such a launch whose parallel tasks are all loop-free
  /// (KernelLayout::Task::loopFree) runs at most this many times the
  /// code's resident grid (each thread then runs several iterations
  /// through its task's grid-stride loop); 0: no bound but
  /// perIterationThreads.
  int64_t gridWaves = 0;
  /// The most bytes of the adstack heap (0: what memory allows); the grid
  /// shrinks until its heap fits.
  uint64_t maxHeapBytes = 0;
  /// Where that limit comes from, for messages ("maxStorageBufferRange
  /// 4294967295, VulkanBackendOptions::maxHeapBytes 0").
  std::string maxHeapSource;
  /// Local tapes: a launch whose stacks together fit this many bytes per
  /// thread keeps them in per-thread arrays (0: always the heap).
  int64_t localTapeBytes = 0;
};

class AcceleratorDevice {
public:
  virtual ~AcceleratorDevice() = default;
  /// Names in messages: the backend ("cuda"), its options struct
  /// ("CudaBackendOptions"), the device ("the GPU", "'NVIDIA H200'").
  virtual const char *backendName() const = 0;
  virtual const char *optionsName() const = 0;
  virtual std::string deviceName() const = 0;
  /// Read once, when the backend is created: fixed for the device's life.
  virtual DeviceLimits limits() const = 0;

  /// Compiles and loads a variant of `kernel`.
  virtual absl::StatusOr<std::unique_ptr<DeviceKernel>> compile(const Kernel &kernel,
                                                                const CompileRequest &request) = 0;
  /// The device memory free now, in bytes (0: the device does not say);
  /// the default adstack memory budget is a fraction of it
  /// (defaultAdStackBudget).
  virtual uint64_t freeMemoryBytes() const { return 0; }
  /// The unit of a compacted heap's offsets in bytes, 0 where the device's
  /// code reads no table (LaunchFrame::groupTable): its launches keep the
  /// interleaved layout.
  virtual unsigned groupTableUnit() const { return 0; }
  /// Whether the code reads the table from the heap's first bytes (the
  /// device copies it there, and the regions start after it: Vulkan), or
  /// from its own buffer (LaunchFrame::groupTable's address, the regions
  /// from the heap's start: CUDA, HIP).
  virtual bool groupTableInHeap() const { return false; }
  /// Whether the device compiles separate code for launches whose ndarray
  /// buffers do not overlap (CompileRequest::distinctNdarrays).
  virtual bool compilesDistinctNdarrays() const { return false; }
  /// Whether the device compiles separate code for launches whose ndarray
  /// buffers fit 32-bit offsets (CompileRequest::narrowNdarrayOffsets).
  virtual bool compilesNarrowNdarrayOffsets() const { return false; }
  /// Whether execute() runs a frame's LaunchFrame::moreWindows after its
  /// own window, in one submission (else the backend executes a frame per
  /// window).
  virtual bool executesWindows() const { return false; }
  /// Replaces the adstack heap by one of `bytes` bytes (its contents need
  /// not survive; 0: no heap).
  virtual absl::Status allocateHeap(size_t bytes) = 0;
  /// OK when a kernel may bind `buffer`; otherwise why not ("has N
  /// elements, more than ..."), without the buffer's name.
  virtual absl::Status checkBindable(const Buffer &buffer) const;
  /// OK when the device's code can address `frame` (its capacities, row
  /// sizes); otherwise why not, naming the stack and the option to change.
  virtual absl::Status checkFrame(const DeviceKernel &kernel, const LaunchFrame &frame) const;
  /// A new device copy of `buffer` (Buffer uploads its contents).
  virtual absl::StatusOr<std::unique_ptr<DeviceMirror>> mirror(const Buffer &buffer) = 0;
  /// The word stop checks read, host-visible while a launch runs
  /// (allocated at the first call).
  virtual absl::StatusOr<int32_t *> stopWord() = 0;
  /// Times the dispatches of timed frames from now on (`on`), or stops.
  virtual absl::Status timeKernels(bool on) = 0;
  /// Runs `frame` with `kernel`: uploads the launch data, dispatches the
  /// entries in KernelLayout::launches order, waits for them and fills
  /// `report`. An error here is the device's; the buffers' device copies
  /// may then have been written.
  virtual absl::Status execute(DeviceKernel &kernel, const LaunchFrame &frame,
                               LaunchReport &report) = 0;

  /// Whether frames may go on a caller's stream and be asynchronous
  /// (LaunchFrame::stream, ::async); false by default.
  virtual bool streams() const { return false; }
  /// Asynchronous frames the device keeps in flight at most: collect one
  /// before executing another beyond that.
  virtual size_t maxInFlight() const { return 0; }
  /// Waits for the asynchronous frame of `ticket` and fills `report`'s
  /// record and `needed` (sized as for execute). Each ticket once.
  virtual absl::Status collect(uint64_t ticket, LaunchReport &report);
};

} // namespace accel

/// A backend that runs kernels on an accelerator device through the one
/// launch described above.
class AcceleratorBackend : public Backend {
public:
  ~AcceleratorBackend() override;

  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options) override;
  absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &kernel) override;
  std::vector<AdStackPlacement> lastAdStackPlacement() const override;
  /// Where the device's code reads a compacted heap's table
  /// (AcceleratorDevice::groupTableUnit).
  bool compactsAdStacks() const override;
  /// The budget (or the device's default), at most the device's largest
  /// heap: a thread holds one iteration.
  int64_t adStackIterationBudget(const Kernel &kernel, int64_t budget) override;
  int64_t adStackParallelism(const Kernel &kernel, int64_t iterations) override;

  /// The threads the last launch ran its parallel entries on (0 before the
  /// first): the code's resident grid; fewer where its tasks have fewer
  /// iterations or the heap of the whole grid would not fit the device's
  /// largest buffer; one per iteration for a launch without heap where the
  /// device allows it.
  int64_t lastLaunchThreads() const;
  /// Adstack heap bytes the last launch used.
  int64_t lastAdStackHeapBytes() const;
  /// The last launch's heap (bytes, need, budget, waves), with `threadKind`
  /// left to the backend.
  AdStackHeapUsage lastAdStackUsage() const;
  /// Times the dispatches of every launch on the device from now on (`on`),
  /// or stops timing; an error where the device cannot time them.
  absl::Status timeKernels(bool on);
  /// Milliseconds the last launch's dispatches took on the device (timing
  /// on); an error while timing is off or before a launch ran them.
  absl::StatusOr<double> lastKernelMs() const;
  /// Waits for the asynchronous launches and returns the first error one
  /// reported (see LaunchOptions::async).
  absl::Status synchronize() override;
  /// Asynchronous launches whose report the host has not collected.
  size_t pendingLaunches() const;

protected:
  explicit AcceleratorBackend(std::unique_ptr<accel::AcceleratorDevice> device);
  accel::AcceleratorDevice &device() const { return *device_; }
  /// The variant of `kernel` that keeps every stack in the heap (compiled
  /// and loaded at the first request).
  absl::StatusOr<accel::DeviceKernel *> heapCode(const Kernel &kernel, bool boundsChecked,
                                                 bool stopChecks = false);

private:
  struct State;
  std::unique_ptr<accel::AcceleratorDevice> device_;
  std::unique_ptr<State> state_;
};

} // namespace qd
