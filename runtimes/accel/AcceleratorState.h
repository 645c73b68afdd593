//===- AcceleratorState.h - The state of one accelerator backend -*- C++ -*-===//
//
// Private to qd::runtime_accel: AcceleratorBackend's state (its variants,
// heap, budget and the compacted heap's kernels), shared by
// AcceleratorBackend.cpp (the launch) and AdStackCompaction.cpp (the
// compacted heap's table and the per-iteration capacities).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "AdStackGroupTable.h"

#include "qd/codegen/KernelSizingCache.h"
#include "qd/runtime/AcceleratorBackend.h"
#include "qd/runtime/LaunchPlan.h"

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

namespace qd {

struct AcceleratorBackend::State {
  explicit State(accel::AcceleratorDevice &d) : device(d), limits(d.limits()) {}

  struct Variant {
    std::unique_ptr<accel::DeviceKernel> code;
    /// Heap code: the local array sizes its local-tape variants were
    /// compiled for (at most kMaxLocalVariants; guarded by launchMutex).
    std::vector<std::vector<int64_t>> localVariants;
    /// Compiled for ndarray buffers that do not overlap (CompileRequest::
    /// distinctNdarrays).
    bool distinct = false;
    /// Compiled for 32-bit ndarray offsets (CompileRequest::
    /// narrowNdarrayOffsets).
    bool narrow = false;
  };
  static constexpr size_t kMaxLocalVariants = 4;

  accel::AcceleratorDevice &device;
  /// The device's limits, fixed when it was created (read once, not per
  /// launch).
  const accel::DeviceLimits limits;
  KernelSizingCache sizings;
  std::mutex compileMutex;
  /// Keyed by (kernel, bounds checks, stop checks, distinct ndarrays, narrow
  /// offsets, local
  /// array entries per stack id: empty for the code that keeps every stack
  /// in the heap).
  std::map<std::tuple<uint64_t, bool, bool, bool, bool, std::vector<int64_t>>, Variant> cache;
  mutable std::mutex launchMutex;
  size_t heapBytes = 0;
  bool heapAllocated = false;
  int64_t lastThreads = 0;
  AdStackHeapUsage lastUsage;
  std::vector<AdStackPlacement> lastPlacement;
  bool timing = false;
  double lastKernelMs = -1;
  /// Asynchronous launches not collected yet, oldest first (guarded by
  /// launchMutex): the device's ticket and the plan that decodes the
  /// report.
  struct Pending {
    uint64_t ticket;
    LaunchPlan plan;
  };
  std::deque<Pending> pending;
  /// The compacted heap's table kernel's buffers (kept between launches),
  /// and the fill kernel's values.
  std::optional<Buffer> tableDesc, table, tableSums, tableOffsets, noRows, fillValues;
  /// The rows the fill kernel wrote last and what (first row, values): a
  /// launch that would write the same skips it (a try kernel never writes
  /// those rows; the table kernel does, and then forgets them).
  std::weak_ptr<Buffer> filledRows;
  int64_t filledFirst = 0;
  std::vector<int64_t> filled;
  /// Per kernel, threads and forced group size (LaunchOptions::
  /// adStackGroupThreads, 0: none), what its last compacted launch chose
  /// (the group size, one column for all stacks or one each) and for what
  /// sum of own needs: the next such launch runs the table kernel once at
  /// that layout, and weighs the group sizes again (a run in groups of
  /// 32) only where the sum of own needs moved by more than 5%.
  struct ChosenGroups {
    int64_t lanes = 0, needBytes = 0;
    bool oneColumn = false;
  };
  std::map<std::tuple<const Kernel *, int64_t, int64_t>, ChosenGroups> chosenGroups;
  /// Per kernel, threads of one wave, the largest heap and forced group
  /// size, the threads its last compacted launch that had to halve its
  /// grid fitted and their sum of own needs: the next such launch starts
  /// there (one run of the table kernel where the needs look the same).
  struct FittedThreads {
    int64_t threads = 0, needBytes = 0;
  };
  std::map<std::tuple<const Kernel *, int64_t, int64_t, int64_t>, FittedThreads> fittedThreads;

  absl::StatusOr<Variant *> variant(const Kernel &kernel, bool boundsChecked, bool stopChecks,
                                    const std::vector<int64_t> &local,
                                    const KernelLayout *heapLayout, bool distinct = false,
                                    bool narrow = false);
  absl::StatusOr<Variant *> localTapeVariant(Variant &heapCode, absl::StatusOr<LaunchPlan> &plan,
                                             Program &program, const Kernel &kernel,
                                             std::span<const LaunchArg> args,
                                             const LaunchOptions &options);
  /// The adstack memory budget of a launch and where it comes from.
  struct Budget {
    int64_t bytes = INT64_MAX;
    std::string source;
  };
  Budget budget(const LaunchPlan &plan) const;
  /// The default budget (LaunchOptions::adStackMemoryBudget = 0): a
  /// fraction of the device's free memory and the heap held.
  Budget defaultBudget() const;
  absl::StatusOr<int64_t> grid(const accel::DeviceKernel &code, const LaunchPlan &plan,
                               const Budget &budget) const;
  std::vector<uint32_t> groups(const accel::DeviceKernel &code, const LaunchPlan &plan,
                               int64_t threads, std::vector<bool> &cooperative) const;
  /// Grows the heap to at least `bytes` (with `doubling`, to twice the
  /// heap held where that is more, but never past the device's largest
  /// buffer or `budget`; a compacted heap grows to its bytes exactly).
  absl::Status growHeap(const Kernel &kernel, int64_t bytes, int64_t budget, bool doubling);
  /// The threads of a compacted launch in one wave: one per iteration of
  /// the task `shape` describes, in whole groups, at most what the device
  /// runs in one launch.
  int64_t oneWave(const accel::DeviceKernel &code, const accel::GroupTableShape &shape) const;
  absl::StatusOr<std::vector<DeviceMirror *>> mirrorSlots(const Kernel &kernel,
                                                          const LaunchPlan &plan);
  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options);
  /// Runs `frame` (the stop word and the watchdog of `options`), brings the
  /// bound buffers' states up to date and decodes the outcome, or keeps
  /// the plan of an asynchronous frame for later.
  absl::Status run(accel::DeviceKernel &code, accel::LaunchFrame &frame, const LaunchPlan &plan,
                   const LaunchOptions &options);
  /// Collects asynchronous launches, oldest first, until at most `keep`
  /// are in flight; the first error one reported (deferredError).
  absl::Status drain(size_t keep);
  /// Whether a launch with `options` returns before its kernels ran: only
  /// on a device with streams, never with a stop word or kernel timing.
  bool runsAsync(const LaunchOptions &options) const {
    return options.async && device.streams() && !options.stoppable() && !timing;
  }
  /// launch() with launchMutex held and the heap code compiled.
  absl::Status launchLocked(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                            const LaunchOptions &options, Variant &heapCode);
  /// A compacted heap for a launch over at most `threads` threads in
  /// groups of `lanes`: the heap to allocate (heapBytes: the regions, after
  /// the table where the device reads it from the heap) and what it takes
  /// in all (bytes: the table's pairs and the regions).
  struct Compacted {
    int64_t threads = 0, lanes = 0, groups = 0, columns = 0, tableBytes = 0, heapBytes = 0,
            bytes = 0, needBytes = 0;
    /// The table kernel's runs of the launch so far.
    int64_t runs = 0;
    /// Every stack in one column of the table (GroupTableShape::
    /// shareColumn), or one each.
    bool oneColumn = false;
    /// The regions' bytes with one column per stack and with one column
    /// (this run's group size), and (a run in groups of 32) as groups of
    /// 1 << k threads with one column per stack.
    std::array<int64_t, 2> columnBytes{};
    std::array<int64_t, accel::kGroupShifts> candidates{};
    DeviceMirror *table = nullptr;
    /// Over the budget: windows of consecutive threads, a dispatch each
    /// (docs/runtime.md, "Windows"), each window's regions at the heap's
    /// start (after the table where the device reads it there), `shift`
    /// bytes before where the table puts them, and their bytes; heapBytes
    /// and bytes hold the largest window's. Empty: one dispatch of every
    /// thread.
    struct Window {
      int64_t first = 0, threads = 0, shift = 0, bytes = 0;
    };
    std::vector<Window> windows;
  };
  /// The most windows a compacted launch runs (each a dispatch, and a read
  /// of the table where it starts); past it the grid halves instead.
  static constexpr int64_t kMaxWindows = 64;
  /// Windows of `c`'s threads whose regions each fit `largest` bytes with
  /// the table: the fewest windows of equal threads (whole groups of the
  /// table and of the device) tried, from the regions over the room up, a
  /// quarter more per try; none where kMaxWindows do not fit.
  absl::StatusOr<std::vector<Compacted::Window>>
  windowsOf(const Compacted &c, const accel::GroupTableShape &shape, int64_t largest);
  /// Runs `frame` once per window of `windows` (the rest of the launch's
  /// timeout for each).
  absl::Status runWindows(accel::DeviceKernel &code, accel::LaunchFrame &frame,
                          const LaunchPlan &plan, const LaunchOptions &options,
                          std::span<const Compacted::Window> windows);
  /// The compacted heap of a launch whose stacks `shape` describes, on the
  /// most threads up to `threads` (with `windowBytes`, in windows of them
  /// where they do not fit `budget` together, their heap at most that
  /// many bytes too; else, or where even kMaxWindows do not fit, halved
  /// while it does not fit),
  /// in groups of LaunchOptions::adStackGroupThreads or else of the
  /// largest size whose bytes are within 1.05x of the fewest,
  /// or nullopt where even one group's does not (the interleaved layout
  /// then decides).
  absl::StatusOr<std::optional<Compacted>> compact(Program &program, const LaunchPlan &plan,
                                                   const accel::GroupTableShape &shape,
                                                   const LaunchOptions &options, int64_t threads,
                                                   int64_t budget, int64_t windowBytes);
  /// Writes the launch's capacity of each measured stack to every column
  /// of its row of `capacities` (the fill kernel).
  absl::Status fillCapacities(Program &program, const LaunchPlan &plan,
                              const AdStackIterationCapacities &capacities);
  /// Zeroes the counting kernel's per-iteration needs on the device where
  /// the launch allows it (MeasuredAdStackNeeds::zeroAfterUse) and says so
  /// (::zeroed).
  absl::Status zeroNeeds(Program &program, const LaunchPlan &plan,
                         const MeasuredAdStackNeeds &needs);
  /// Runs one of the backend's own kernels (the table or fill kernel) for
  /// `plan`'s launch; errors name that launch.
  absl::Status runOwnKernel(Program &program, const LaunchPlan &plan, const Kernel &kernel,
                            std::span<const LaunchArg> args);
  /// Runs the table kernel for `threads` threads in groups of `lanes`
  /// (a power of two up to 32), the regions starting
  /// `base` bytes into the heap: the groups' bytes and the bytes of each
  /// thread's own need (sums[0], sums[1]), and each iteration's capacity
  /// where `options` asks for it (LaunchOptions::iterationCapacities).
  absl::Status runGroupTable(Program &program, const LaunchPlan &plan,
                             const accel::GroupTableShape &shape, const LaunchOptions &options,
                             int64_t threads, int64_t lanes, int64_t base);
  /// The layout of a compacted heap on `t` threads: the one the last such
  /// launch chose where the needs look the same, else the columns and
  /// group size of fewer bytes (ChosenGroups); `runs` counts the table
  /// kernel's runs.
  absl::StatusOr<Compacted> chooseLayout(Program &program, const LaunchPlan &plan,
                                         const accel::GroupTableShape &shape,
                                         const LaunchOptions &options, int64_t t, int64_t &runs);
  /// One run of the table kernel for `threads` threads in groups of
  /// `lanes`, the columns of `shape`, and its sums (one copy back).
  absl::StatusOr<Compacted> layOut(Program &program, const LaunchPlan &plan,
                                   const accel::GroupTableShape &shape,
                                   const LaunchOptions &options, int64_t threads, int64_t lanes);
};

} // namespace qd
