//===- qd/runtime/CudaBackend.h - NVIDIA GPUs through the CUDA driver -*- C++ -*-===//
//
// Compiles kernels to PTX with LLVM's NVPTX back end (qd::codegen_llvm's
// NVPTX target), loads them with the driver's JIT and runs them on one GPU.
// The driver is opened at run time (qd/runtime/CudaDriver.h): creating the
// backend on a machine without one fails with a clear error.
//
// A kernel runs as the device launches its layout lists
// (KernelLayout::launches): runs of top-level statements on one thread,
// each parallel task as a grid-stride loop over a grid bounded by the
// kernel's occupancy (resident blocks x SMs), so per-thread adstack storage
// does not grow with the element count. A launch that needs no heap (its
// stacks fit local tapes, or it has none) and whose task bounds are known
// at launch runs one thread per iteration instead. Adstacks live in one device heap,
// interleaved across the grid's threads (entry d of stack s of thread t at
// heap + offsets[s]*T + (d*T + t)*entryBytes), sized before every launch by
// the launch plan and grown by amortised doubling.
//
// Data stays on the device: each field component and ndarray buffer a
// launch binds gets a device copy the first time (a DeviceMirror, see
// qd/runtime/Buffer.h) and is copied again only when the host changed it;
// it comes back only when the host reads it. A buffer from
// `borrowDeviceArray` is caller device memory used in place. A launch
// copies its small arrays (context, shapes, scalars, heap layout) in one
// block and its error record and overflow counters back in one copy.
// Launch-time sizing reads device data element by element, and a max over
// a range on the GPU. Launches are serialised per backend, on the device
// too; one may go on the caller's stream and return before its kernels ran
// (LaunchOptions::stream and ::async; docs/runtime.md, "Asynchronous
// launches and streams").
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/analysis/CooperativeTask.h"
#include "qd/runtime/CudaDriver.h"
#include "qd/runtime/GpuBackend.h"

#include <absl/status/statusor.h>

#include <memory>
#include <string>

namespace qd {

struct CudaBackendOptions {
  /// Which GPU (a CUDA device ordinal).
  int device = 0;
  /// PTX architecture, e.g. "sm_80"; empty: the device's own.
  std::string arch;
  /// Threads per block of parallel tasks.
  unsigned blockSize = 128;
  /// A task of at most this many iterations around a long serial loop
  /// runs a block per iteration that shares the loop (CodegenOptions::
  /// cooperativeTaskIterations, docs/runtime.md "Cooperative tasks"); 0:
  /// never.
  int64_t cooperativeTaskIterations = kDefaultCooperativeTaskIterations;
  /// The same for a task whose shared loop adds atomically to elements its
  /// index chooses (CodegenOptions::cooperativeScatteringIterations).
  int64_t cooperativeScatteringIterations = kDefaultCooperativeScatteringIterations;
  /// A launch of a kernel with several entries and no adstacks whose grid
  /// is at most this many threads runs as one block of them, its entries
  /// in order with a barrier between (docs/runtime.md, "Fused launches");
  /// 0: every entry is its own launch.
  int64_t fusedLaunchThreads = 1024;
  /// Launches whose ndarray buffers do not overlap run code compiled for
  /// distinct buffers (CodegenOptions::distinctNdarrays); false: every
  /// launch runs the code that lets buffers overlap.
  bool distinctNdarrays = true;
  /// Launches whose ndarray buffers each hold at most 2^31 - 1 elements run
  /// code that computes their offsets in 32 bits (CodegenOptions::
  /// narrowNdarrayOffsets); false: every launch runs the 64-bit code. Off by
  /// default: on an H200 it made the spring gradient over ndarrays 5%
  /// slower and no simulation faster (docs/runtime.md, "Narrow ndarray
  /// offsets").
  bool narrowNdarrayOffsets = false;
  /// A launch whose shape (kernel code, grids, launch block layout, queue
  /// slot) was queued before is queued as a CUDA graph recorded from it:
  /// one cuGraphLaunch instead of a cuLaunchKernel per entry and the
  /// copies (docs/runtime.md, "Launch graphs"). False: every launch goes
  /// call by call. Launches that time their kernels never use graphs.
  bool launchGraphs = true;
  /// Upper bound of the grid's threads (0: resident blocks from the
  /// kernel's occupancy times the number of SMs).
  int64_t maxThreads = 0;
  /// A launch that needs no heap, whose iterations are known at launch and
  /// whose parallel tasks have no loops runs at most this many times the
  /// resident grid's threads, each thread several iterations where there
  /// are more (0: one thread per iteration, up to 2^31 - 1 threads, as a
  /// launch with loops always does) (docs/runtime.md, "Grid").
  int64_t gridWaves = 4;
  /// Registers per thread the JIT may use (0: its own choice). Fewer
  /// registers, more resident threads: see docs/performance.md.
  unsigned maxRegisters = 0;
  /// Local tapes: a launch whose adstacks all fit in this many bytes per
  /// thread (each stack's capacity rounded up to a power of two, at least
  /// 32 entries) keeps them in each thread's local memory, which the GPU
  /// caches in L1, instead of the interleaved heap. The code is compiled
  /// once per set of array sizes (at most 4 per kernel; further launches use
  /// the heap). 0: always the heap.
  int64_t localTapeBytes = 2048;
  /// A local-tape launch keeps at most this many bytes of local tapes
  /// resident per multiprocessor, capping its grid below the occupancy
  /// (0, the default: the occupancy alone). Which grid is fastest depends
  /// on the kernel, not on the bytes alone (docs/performance.md, "Local
  /// tapes and occupancy"): on an H200 512 KiB took the triangular
  /// gradient (512-byte tapes) from 3.37 to 2.73 ms but the spring chain
  /// (2 KiB) from 1.29 to 2.02.
  int64_t localTapeBytesPerSm = 0;
};

class CudaBackend : public GpuBackend {
public:
  /// Opens the driver and the device. Fails with FailedPrecondition, saying
  /// why, where there is no driver or no such GPU.
  static absl::StatusOr<std::unique_ptr<CudaBackend>>
  create(const CudaBackendOptions &options = {});

  std::string_view name() const override { return "cuda"; }
  /// True: on an H200 a gradient whose measured needs did not grow took
  /// 0.92x-1.31x of the launch with capacities given by hand, counting first
  /// 1.26x-1.86x (docs/performance.md, "Measured sizing").
  bool optimisticAdStacks() const override { return true; }

  const cuda::DeviceInfo &deviceInfo() const;
  /// The PTX architecture kernels are compiled for.
  const std::string &arch() const;
  /// The PTX of a kernel (compiles it if needed).
  absl::StatusOr<std::string> ptx(const Kernel &kernel, bool boundsChecked = false) {
    return loadedCode(kernel, boundsChecked);
  }
  /// The PTX of the reduction kernels launch-time sizing runs (for tests).
  static std::string reductionPtx();

  struct Impl;

private:
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  Impl &impl() const;
};

/// Registers the backend as `cuda` (qd/runtime/BackendRegistry.h; its
/// options set CudaBackendOptions). AlreadyExists when it is registered.
absl::Status registerCudaBackend();

} // namespace qd
