//===- GpuRuntime.h - What the GPU backends do alike ------------*- C++ -*-===//
//
// Private to the GPU runtimes (qd::runtime_gpu). The CUDA and HIP backends
// run a kernel the same way: compile it for their LLVM target, load the
// code, size one grid for every parallel entry from the occupancy of its
// entries, keep the bound buffers resident on the device (GpuMirror),
// grow one adstack heap by amortised doubling, pack each launch's arrays
// into one device block (LaunchArena), launch the entries in
// KernelLayout::launches order and copy the error record and overflow
// counters back in one copy (see qd/runtime/CudaBackend.h). GpuRuntime is
// all of that against gpu::Device; a backend supplies the code (PTX, a code
// object) and how its driver loads it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GpuMemory.h"

#include "qd/abi/KernelLayout.h"
#include "qd/analysis/AdStackSizing.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/runtime/Program.h"

#include <map>
#include <mutex>
#include <tuple>

namespace llvm {
class Module;
} // namespace llvm

namespace qd {
class LaunchPlan;
} // namespace qd

namespace qd::gpu {

class GpuRuntime {
public:
  struct Compiled {
    KernelLayout layout;
    /// The code the driver loaded: PTX text or a code object.
    std::string code;
    std::unique_ptr<LoadedModule> module;
    std::vector<Function> functions; // per layout.launches entry
    int64_t blocks = 1;              // of every parallel entry
    /// The module's launch words (kLaunchWordsSymbol; 0 when it has none).
    DevicePtr launchWords = 0;
    /// The values the device's launch words hold (empty: unknown); a
    /// launch with the same values skips the copy.
    std::vector<int64_t> wordsOnDevice;
    /// Heap code: the local array sizes its local-tape variants were
    /// compiled for (at most kMaxLocalVariants).
    std::vector<std::vector<int64_t>> localVariants;
  };
  static constexpr size_t kMaxLocalVariants = 4;

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
        reducer_(std::move(reducer)), blockSize_(blockSize), maxThreads_(maxThreads),
        localTapeBytes_(localTapeBytes), localTapeBytesPerSm_(localTapeBytesPerSm) {}
  virtual ~GpuRuntime() = default;

  const Device &device() const { return *device_; }
  /// Compiles `kernel` (once per options) and loads it; with `local`
  /// (entries per stack id, of the heap code's layout `heapLayout`), the
  /// variant that keeps those stacks in per-thread local arrays.
  absl::StatusOr<Compiled *> compile(const Kernel &kernel, bool boundsChecked,
                                     bool stopChecks = false,
                                     const std::vector<int64_t> &local = {},
                                     const KernelLayout *heapLayout = nullptr);
  int64_t threadsOf(const Compiled &c) const { return c.blocks * int64_t(blockSize_); }
  absl::StatusOr<const KernelSizing *> sizing(const Kernel &kernel);
  int64_t lastHeapBytes() const;
  /// The grid threads of the last launch (0 before the first).
  int64_t lastLaunchThreads() const;
  /// GPU timing of every launch's kernels (GpuBackend::timeKernels).
  absl::Status timeKernels(bool on);
  absl::StatusOr<double> lastKernelMs() const;
  /// Launch-block uploads skipped because the device held them already.
  int64_t skippedUploads() const;
  /// Backend::launch.
  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options);
  /// An ndarray over caller device memory (GpuBackend::borrowDeviceArray).
  absl::StatusOr<Buffer> borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                           uint64_t devicePointer);

protected:
  /// The LLVM target kernels are emitted for.
  virtual CodegenTarget target() const = 0;
  /// What the driver loads for `module` (emitted for target()).
  virtual absl::StatusOr<std::string> translate(llvm::Module &module) = 0;
  /// Loads `code` (translate's output); the error says what the driver
  /// rejected.
  virtual absl::StatusOr<std::unique_ptr<LoadedModule>> load(const std::string &code) = 0;

private:
  const KernelSizing &sizingOfLocked(const Kernel &kernel);
  absl::Status growHeap(const Kernel &kernel, int64_t bytes);

  /// The values of `c`'s launch words for a launch of `plan` over
  /// `threads` threads whose bound buffers are at `slots`.
  absl::StatusOr<std::vector<int64_t>> launchWords(const Compiled &c, const LaunchPlan &plan,
                                                   std::span<const DevicePtr> slots,
                                                   int64_t threads) const;

  const char *backend_, *options_;
  std::shared_ptr<const Device> device_;
  std::shared_ptr<Reducer> reducer_;
  unsigned blockSize_;
  int64_t maxThreads_;
  int64_t localTapeBytes_, localTapeBytesPerSm_;
  mutable std::mutex compileMutex_, launchMutex_;
  /// Keyed by (kernel, bounds checks, stop checks, local array entries per
  /// stack id: empty for the code that keeps every stack in the heap).
  std::map<std::tuple<uint64_t, bool, bool, std::vector<int64_t>>, Compiled> cache_;
  std::map<uint64_t, std::unique_ptr<KernelSizing>> sizings_;
  DeviceBuffer heap_;
  LaunchArena arena_;
  /// QdLaunchContext::stop: a host word the device reads (allocated at the
  /// first launch).
  std::unique_ptr<MappedHostMemory> stopWord_;
  int64_t lastHeapBytes_ = 0, lastLaunchThreads_ = 0;
  /// Set while timing is on; lastKernelMs_ < 0: no launch timed since.
  std::unique_ptr<StreamTimer> timer_;
  double lastKernelMs_ = -1;
};

} // namespace qd::gpu
