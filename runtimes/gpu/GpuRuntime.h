//===- GpuRuntime.h - The LLVM GPU device of the launch ---------*- C++ -*-===//
//
// Private to the GPU runtimes (qd::runtime_gpu). The CUDA and HIP backends
// are the one accelerator launch (qd/runtime/AcceleratorBackend.h) over a
// device that compiles kernels with an LLVM GPU target and runs them
// through a driver API (gpu::Device): GpuRuntime is that device. It loads
// the code, sizes the resident grid from the occupancy of the entries,
// keeps the bound buffers resident (GpuMirror), packs each launch's arrays
// into one device block (LaunchArena), launches the entries in
// KernelLayout::launches order on the launch's stream and copies the error
// record and overflow counters back in one copy, through pinned staging
// memory of a LaunchQueue slot; a synchronous launch waits for the slot's
// event, an asynchronous one leaves the report there for collect() (see
// qd/runtime/CudaBackend.h). A backend
// supplies the code (PTX, a code object) and how its driver loads it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GpuMemory.h"

#include "qd/abi/KernelLayout.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/runtime/AcceleratorBackend.h"

#include <array>
#include <compare>
#include <map>
#include <mutex>

namespace llvm {
class Module;
} // namespace llvm

namespace qd::gpu {

/// A kernel variant loaded on the GPU.
struct GpuKernel final : accel::DeviceKernel {
  /// Frees the graphs before the module their kernels belong to.
  ~GpuKernel() override { dropGraphs(); }
  const KernelLayout &layout() const override { return kernelLayout; }
  int64_t gridThreads() const override { return threads; }
  bool readsStopWord() const override { return stopChecks; }

  KernelLayout kernelLayout;
  /// The code the driver loaded: PTX text or a code object.
  std::string code;
  std::unique_ptr<LoadedModule> module;
  std::vector<Function> functions; // per layout.launches entry
  /// Threads per block of each parallel entry: the backend's block size,
  /// or for a cooperative task the most (up to 1024) its code can run.
  std::vector<unsigned> blockSizes;
  /// Per launch entry: its cooperative form (KernelLayout::Launch::
  /// cooperativeFunction; null where there is none) and that form's block.
  std::vector<Function> cooperative;
  std::vector<unsigned> cooperativeBlockSizes;
  /// KernelLayout::fusedFunction (null where there is none) and the most
  /// threads one block of it may have.
  Function fused{};
  int64_t fusedThreads = 0;
  /// The resident grid of every parallel entry (whole blocks).
  int64_t threads = 1;
  bool stopChecks = false;
  /// The module's launch words (kLaunchWordsSymbol; 0 when it has none).
  DevicePtr launchWords = 0;
  /// The values the device's launch words hold (empty: unknown); a
  /// launch with the same values skips the copy.
  std::vector<int64_t> wordsOnDevice;

  /// What a recorded launch depends on besides the bytes it copies: its
  /// queue slot (the staging memory), the launch block's address and
  /// size, the context's address (the entries' one argument), where the
  /// report lies, and the entries' grids and forms. (A slot's staging
  /// memory or the launch block that moved drops every graph: graphsMemory.)
  struct GraphKey {
    size_t slot = 0;
    uint64_t block = 0, context = 0;
    bool upload = false, copyWords = false;
    size_t blockBytes = 0, reportFrom = 0, reportAt = 0, reportBytes = 0;
    std::vector<uint32_t> groups;
    std::vector<bool> cooperative;
    bool fused = false;
    auto operator<=>(const GraphKey &) const = default;
  };
  struct GraphEntry {
    int queued = 0;
    Graph graph = nullptr;
  };
  /// Launches of this code by shape (GpuRuntime::enqueue): how often each
  /// was queued and, from the second time, its graph.
  std::map<GraphKey, GraphEntry> graphs;
  const Device *graphDevice = nullptr;
  /// GpuRuntime::memoryMoves when `graphs` were recorded: a graph's copies
  /// and its kernels' argument hold the addresses of the staging memory
  /// and the launch block, which the driver may hand out again once freed
  /// (replaying such a graph crashed inside cuGraphLaunch or failed with
  /// CUDA_ERROR_INVALID_VALUE).
  uint64_t graphsMemory = 0;
  /// Destroys every recorded graph.
  void dropGraphs();
};

class GpuRuntime : public accel::AcceleratorDevice {
public:
  /// `backend` names the backend in messages ("cuda", "amdgpu"),
  /// `options` its options struct ("CudaBackendOptions").
  /// `localTapeBytes`: local tapes (CudaBackendOptions::localTapeBytes; 0
  /// keeps every adstack in the heap); `localTapeBytesPerSm`: at most this
  /// many bytes of local tapes resident on one multiprocessor
  /// (CudaBackendOptions::localTapeBytesPerSm; 0: no limit).
  GpuRuntime(const char *backend, const char *options, std::shared_ptr<const Device> device,
             std::shared_ptr<Reducer> reducer, unsigned blockSize, int64_t maxThreads,
             int64_t localTapeBytes = 0, int64_t localTapeBytesPerSm = 0)
      : backend_(backend), options_(options), device_(std::move(device)),
        reducer_(std::move(reducer)), queue_(std::make_shared<LaunchQueue>(device_)),
        blockSize_(blockSize), maxThreads_(maxThreads), localTapeBytes_(localTapeBytes),
        localTapeBytesPerSm_(localTapeBytesPerSm) {}

  /// Waits for the launches in flight: they use the heap and the launch
  /// block freed with the runtime.
  ~GpuRuntime() override { (void)queue_->waitAll(); }

  const Device &device() const { return *device_; }
  /// Launch-block uploads skipped because the device held them already.
  int64_t skippedUploads() const;
  /// Launches queued as one recorded graph (useGraphs).
  int64_t graphLaunches() const;
  /// Queue a launch shape seen before as a graph of its copies and
  /// entries (where the device has graphs): one driver call instead of one
  /// per entry and copy.
  void useGraphs(bool on) { useGraphs_ = on; }
  /// An ndarray over caller device memory (GpuBackend::borrowDeviceArray).
  absl::StatusOr<Buffer> borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                           uint64_t devicePointer);

  // accel::AcceleratorDevice
  const char *backendName() const override { return backend_; }
  const char *optionsName() const override { return options_; }
  std::string deviceName() const override;
  accel::DeviceLimits limits() const override;
  uint64_t freeMemoryBytes() const override { return device_->freeMemory(); }
  /// The code reads a compacted heap's table from its own buffer, through
  /// the launch word of ctx->groupTable; offsets are in units of
  /// abi::kAdStackGroupTableUnit bytes.
  unsigned groupTableUnit() const override { return abi::kAdStackGroupTableUnit; }
  bool compilesDistinctNdarrays() const override { return distinctNdarrays_; }
  bool compilesNarrowNdarrayOffsets() const override { return narrowNdarrayOffsets_; }
  absl::StatusOr<std::unique_ptr<accel::DeviceKernel>>
  compile(const Kernel &kernel, const accel::CompileRequest &request) override;
  absl::Status allocateHeap(size_t bytes) override;
  absl::Status checkFrame(const accel::DeviceKernel &kernel,
                          const accel::LaunchFrame &frame) const override;
  absl::StatusOr<std::unique_ptr<DeviceMirror>> mirror(const Buffer &buffer) override;
  absl::StatusOr<int32_t *> stopWord() override;
  absl::Status timeKernels(bool on) override;
  absl::Status execute(accel::DeviceKernel &kernel, const accel::LaunchFrame &frame,
                       accel::LaunchReport &report) override;
  bool streams() const override { return device_->hasStreams(); }
  size_t maxInFlight() const override { return LaunchQueue::kSlots; }
  absl::Status collect(uint64_t ticket, accel::LaunchReport &report) override;

protected:
  /// The LLVM target kernels are emitted for.
  virtual CodegenTarget target() const = 0;
  /// What the driver loads for `module` (emitted for target()).
  virtual absl::StatusOr<std::string> translate(llvm::Module &module) = 0;
  /// Loads `code` (translate's output); the error says what the driver
  /// rejected.
  virtual absl::StatusOr<std::unique_ptr<LoadedModule>> load(const std::string &code) = 0;

private:
  /// Buffers' device copies belong to the device (Buffer::prepareOnDevice).
  const void *owner() const { return static_cast<const accel::AcceleratorDevice *>(this); }
  /// The resident grid of `c`'s parallel entries, in blocks.
  /// Threads per block of a cooperative function `f`: the most, up to 1024,
  /// it can run (at least the backend's block size).
  unsigned cooperativeBlock(Function f) const;
  absl::StatusOr<int64_t> residentBlocks(const GpuKernel &c,
                                         const accel::CompileRequest &request) const;
  /// The values of `c`'s launch words for `frame` whose bound buffers are
  /// at `slots`.
  std::vector<int64_t> launchWords(const GpuKernel &c, const accel::LaunchFrame &frame,
                                   std::span<const DevicePtr> slots) const;
  /// Where a launch's report lies in its queue slot, and what it holds.
  struct SlotReport {
    // Where the record starts in the slot's staging memory, and where the
    // counters start after it (the arena aligns them past the record).
    size_t offset = 0, neededOffset = 0, neededCount = 0;
  };
  /// Lays out `frame`'s launch block in the arena; returns the offset of
  /// the context and sets `record`, the offset of the record and the
  /// counters (the report, last), and `reportBytes`.
  size_t layoutArena(const GpuKernel &c, const accel::LaunchFrame &frame,
                     std::span<const DevicePtr> slots, size_t neededCount, size_t &record,
                     size_t &reportBytes);
  /// Queues `frame` in queue slot `slot`: the launch block's copy (unless
  /// the device holds it), the launch words', the entries and the report's
  /// copy back into the slot at `reportAt` (or the graph recorded for
  /// them, setting `graphed`).
  absl::Status enqueue(GpuKernel &c, const accel::LaunchFrame &frame, size_t slot, size_t ctxOff,
                       std::span<const DevicePtr> slots, size_t recordOff, size_t reportBytes,
                       size_t reportAt, bool &graphed);
  /// What one launch queues, besides its entries: whether it copies the
  /// launch block and the launch words (from the slot's staging memory,
  /// the words at `wordsAt`), and where the context and the report lie.
  struct Work {
    bool upload = false, copyWords = false;
    size_t ctxOff = 0, recordOff = 0, reportBytes = 0, reportAt = 0, wordsAt = 0;
  };
  /// Queues `work` of `frame` on `stream`; `timer` (or null) brackets the
  /// entries.
  /// Whether `frame` runs `c`'s fused entry, one block of frame.threads.
  static bool runsFused(const GpuKernel &c, const accel::LaunchFrame &frame);
  absl::Status enqueueWork(GpuKernel &c, const accel::LaunchFrame &frame, const Work &work,
                           std::byte *staging, StreamTimer *timer, Stream stream);
  /// The graph of enqueueWork for `frame`'s launch shape in `slot`,
  /// recorded the second time the shape is queued; null where there is
  /// none (yet, or the device cannot record one).
  absl::StatusOr<Graph> graphFor(GpuKernel &c, const accel::LaunchFrame &frame, size_t slot,
                                 const Work &work);
  /// Fills `report` from the report in `slot` (the launch has finished).
  void readReport(size_t slot, accel::LaunchReport &report) const;
  MirrorContext mirrorContext() const { return {device_, reducer_, queue_}; }

  const char *backend_, *options_;
  std::shared_ptr<const Device> device_;
  std::shared_ptr<Reducer> reducer_;
  /// The launches in flight and their staging memory (shared with the
  /// buffers' device copies, which wait for them).
  std::shared_ptr<LaunchQueue> queue_;
  std::array<SlotReport, LaunchQueue::kSlots> slotReports_;
  unsigned blockSize_;
  int64_t maxThreads_;
  int64_t localTapeBytes_, localTapeBytesPerSm_;

protected:
  /// CodegenOptions::cooperativeTaskIterations of the backend's code.
  int64_t cooperativeTaskIterations_ = CodegenOptions().cooperativeTaskIterations;
  /// DeviceLimits::gridWaves (CudaBackendOptions::gridWaves).
  int64_t gridWaves_ = 0;
  int64_t cooperativeScatteringIterations_ = CodegenOptions().cooperativeScatteringIterations;
  /// The most threads of a launch that runs as one fused block
  /// (KernelLayout::fusedFunction; docs/runtime.md, "Fused launches"); 0:
  /// no fused entries are compiled.
  int64_t fusedLaunchThreads_ = 0;
  /// Whether launches whose ndarray buffers do not overlap get their own
  /// code (compilesDistinctNdarrays).
  bool distinctNdarrays_ = true;
  /// Whether launches whose ndarrays fit 32-bit offsets get their own code
  /// (compilesNarrowNdarrayOffsets).
  bool narrowNdarrayOffsets_ = false;
  /// Guards the launch state below against skippedUploads().
  mutable std::mutex mutex_;
  DeviceBuffer heap_;
  LaunchArena arena_;
  /// How often the launch block was freed for a larger one.
  uint64_t arenaMoves_ = 0;
  /// Frees of memory that recorded graphs may hold the address of (the
  /// launch block's and the queue slots' staging).
  uint64_t memoryMoves() const;
  /// QdLaunchContext::stop: a host word the device reads (allocated at the
  /// first launch that may be stopped).
  std::unique_ptr<MappedHostMemory> stopWord_;
  /// Set while timing is on.
  std::unique_ptr<StreamTimer> timer_;
  bool useGraphs_ = true;
  int64_t graphLaunches_ = 0;
};

} // namespace qd::gpu
