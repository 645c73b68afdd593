//===- qd/runtime/LaunchPlan.h - What a launch binds and reports -*- C++ -*-===//
//
// Everything a backend does for a launch besides running code, written once:
//
//  1. bind: the buffer of every global slot of the kernel's layout (fields
//     of the program, components of ndarray arguments), the packed ndarray
//     extents and the scalar arguments in their ABI form;
//  2. read the task bounds a runtime can know before the launch;
//  3. lay out the adstack heap: each stack's capacity for this launch (from
//     LaunchOptions, which Program::launch fills from the kernel's sizing),
//     its byte offset in one thread's slice, and the slice size;
//  4. decode what the code reported: adstack overflow (the depth each stack
//     needed) and the first error site, as the errors of LaunchErrors.h.
//
// A host backend runs its code on the bound pointers directly (see
// `hostContext`); a device backend copies the bound data, allocates
// `heapBytes(threads)` and launches, then hands the error record and the
// `needed` counters back to `finish`. A plan is private to one launch, so
// launches from several threads never share one.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/runtime/Program.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace qd {

/// Where the adstacks of one launch live. Stack `s` of thread `t` starts at
/// heap + t * stride + offsets[s] (a CPU worker's slice), or, on a GPU's
/// interleaved layout, entry `d` at heap + offsets[s] * T + (d * T + t) *
/// entryBytes: the offsets are the same in both.
struct AdStackHeapLayout {
  /// Per stack id of the kernel layout (one extra entry, so the arrays are
  /// never empty): byte offset in a thread's slice, capacity in entries.
  std::vector<int64_t> offsets, capacities;
  /// Bytes of one thread's slice: the largest over the tasks.
  int64_t stride = 0;
  /// Per stack id: the bytes one thread's copy takes (in the heap, or in
  /// its local array for a stack kept there).
  std::vector<int64_t> stackBytes;
};

class LaunchPlan {
public:
  /// Binds `args` and the program's fields to `layout`, the layout of
  /// `kernel`'s compiled code. Fails (naming the global) when a slot has no
  /// storage, e.g. a grad companion that was not declared or passed.
  static absl::StatusOr<LaunchPlan> bind(Program &program, const Kernel &kernel,
                                         const KernelLayout &layout,
                                         std::span<const LaunchArg> args,
                                         const LaunchOptions &options);

  const Kernel &kernel() const { return *kernel_; }
  const KernelLayout &layout() const { return *layout_; }

  /// The buffer of every global slot, in KernelLayout::slots order.
  const std::vector<Buffer *> &slotBuffers() const { return buffers_; }
  /// Their host data pointers (QdLaunchContext::globals of a host backend).
  std::vector<void *> hostSlotPointers() const;
  /// QdLaunchContext::ndShapes and ::scalars (one extra entry each).
  const std::vector<int64_t> &shapes() const { return shapes_; }
  const std::vector<int64_t> &scalars() const { return scalars_; }

  /// The value of a task bound before the launch, when the runtime can
  /// know it (a field element is read now: an earlier task may change it).
  std::optional<int64_t> taskBound(const KernelLayout::TaskBound &bound) const;
  /// The iterations of `task` (at least 0) when both its bounds (a band's:
  /// of every dimension, whose extents multiply) stay fixed for the whole
  /// launch (constants, scalar arguments, ndarray extents): a GPU grid
  /// need not have more threads.
  std::optional<int64_t> fixedIterations(const KernelLayout::Task &task) const;
  /// The iterations from `begin` to `end` (at least 0) when both stay
  /// fixed for the whole launch.
  std::optional<int64_t> fixedExtent(const KernelLayout::TaskBound &begin,
                                     const KernelLayout::TaskBound &end) const;
  /// Whether launch `l`'s cooperative form has something to share: some
  /// shared loop's extent is unknown at launch or at least
  /// cooperativeLeastLoopIterations.
  bool mayShareLoops(const KernelLayout::Launch &l) const;
  /// GPU layouts: the most iterations of any parallel entry when all are
  /// fixed (0 without one), else nullopt. A grid of more threads would lay
  /// out adstack heap for threads that have no iteration.
  std::optional<int64_t> fixedParallelIterations() const;

  /// Gives every stack its capacity for this launch and lays out the heap.
  /// `lanes[t]` is how many lanes parallel task `t` runs (its stacks' entries
  /// hold one value per lane); empty means 1 everywhere.
  absl::Status layoutAdStacks(std::span<const int32_t> lanes = {});
  const AdStackHeapLayout &heap() const { return heap_; }
  /// Where each stack lives in a launch over `threads` threads (after
  /// layoutAdStacks), in stack id order.
  std::vector<AdStackPlacement> adStackPlacement(int64_t threads) const;
  /// Bytes of heap for `threads` threads (stride x threads), or an error
  /// when the size does not fit in 64 bits.
  absl::StatusOr<int64_t> heapBytes(int64_t threads) const;

  /// The adstack memory budget of this launch: LaunchOptions::
  /// adStackMemoryBudget, or `deviceDefault` (defaultAdStackBudget of the
  /// device's free memory) where it is 0.
  int64_t adStackBudget(int64_t deviceDefault) const;
  /// The most threads whose heap fits `budget` (INT64_MAX without heap).
  int64_t threadsWithin(int64_t budget) const;
  /// ResourceExhausted for a launch where one thread's stacks (one
  /// iteration, or one group of SIMD lanes) need more than `budget` bytes:
  /// names the kernel, the stack with the most bytes, the need and the
  /// budget (`source` says where it came from), and what to change; with
  /// the payload kOverBudgetPayload (isOverBudget).
  absl::Status overBudgetError(int64_t budget, std::string_view source) const;
  /// What the heap of a launch over `threads` threads holds, for reports
  /// (bytes, need, waves; AdStackHeapUsage without the thread kind).
  /// `lanes` as in layoutAdStacks.
  AdStackHeapUsage heapUsage(int64_t threads, int64_t budget,
                             std::span<const int32_t> lanes = {}) const;

  /// A zeroed `needed` array (QdLaunchContext::needed), one per stack id
  /// (plus one entry).
  std::vector<int64_t> zeroNeeded() const {
    return std::vector<int64_t>(layout_->stacks.size() + 1, 0);
  }

  /// The context of a backend that runs the code on the host, in this
  /// plan's storage (`globals` from `hostSlotPointers`, kept alive by the
  /// caller with `needed`, `record`, `taskLanes` and `stop`).
  QdLaunchContext hostContext(std::vector<void *> &globals, char *heap,
                              std::vector<int64_t> &needed, QdErrorRecord &record, void *runtime,
                              const int32_t *taskLanes, const int32_t *stop) const;

  /// The launch's outcome from what its code reported: an adstack overflow
  /// (a nonzero `needed` count: pushes past the capacity) first, then the
  /// first error site (a loop's stop site: launchStoppedError).
  absl::Status finish(const QdErrorRecord &record, std::span<const int64_t> needed) const;
  /// A copy for decoding what an asynchronous launch reported after the
  /// launch call returned (`finish`): it keeps the kernel, its layout, the
  /// heap layout and the bound buffers' shapes, and refers to neither the
  /// program, the arguments, their buffers nor the options. The kernel and
  /// the layout must outlive it.
  LaunchPlan detached() const;

private:
  LaunchPlan() = default;
  std::string indexErrorText(const GlobalAccessStmt &g,
                             std::span<const int64_t, abi::kMaxErrorData> data) const;

  Program *program_ = nullptr;
  const Kernel *kernel_ = nullptr;
  const KernelLayout *layout_ = nullptr;
  std::span<const LaunchArg> args_;
  const LaunchOptions *options_ = nullptr;
  std::vector<Buffer *> buffers_;
  std::vector<int64_t> shapes_, scalars_;
  AdStackHeapLayout heap_;
  /// A detached plan's shapes of the bound buffers, in slot order.
  std::vector<std::vector<int64_t>> slotShapes_;
};

/// Local tapes (CudaBackendOptions::localTapeBytes,
/// VulkanBackendOptions::localTapeBytes): the local array entries per stack
/// of `layout` (the heap code's) for a launch with `capacities`, each a
/// power of two of at least 32 that holds its capacity, if together they
/// fit in `limitBytes` per thread and `known` (the variants compiled so
/// far) has them or fewer than `maxVariants` entries; otherwise empty (run
/// the heap code).
std::vector<int64_t> localTapeEntries(const KernelLayout &layout,
                                      std::span<const int64_t> capacities, int64_t limitBytes,
                                      const std::vector<std::vector<int64_t>> &known,
                                      size_t maxVariants);

} // namespace qd
