//===- AdStackGroupTable.h - The table of a compacted adstack heap -*- C++ -*-===//
//
// A compacted heap (docs/runtime.md, "Compacted heap") gives each group of
// G threads of a parallel task (G a power of two up to
// abi::kAdStackGroupThreads, per launch), per stack, a region
// sized by the largest need among the iterations its threads run (thread t
// runs iterations begin + t, begin + t + T, ...), at an offset from an
// exclusive scan of the groups' bytes. The table is computed on the device
// by a qd kernel (`@adstack_group_table`), which every accelerator backend
// compiles like any other, from the needs the counting kernel or an
// optimistic launch measured for each iteration (LaunchOptions::
// measuredNeeds); for an optimistic launch it also writes each iteration's
// capacity where the try kernel reads it (LaunchOptions::
// iterationCapacities).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/LaunchPlan.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace qd::accel {

/// What the table kernel needs besides the per-iteration needs.
struct GroupTableShape {
  /// Per stack id (KernelLayout::stacks), kDescElements each: bytes per
  /// entry (0 for a stack outside the heap), slot in `need` (-1: not
  /// measured), capacity (of a stack that is not measured; 1 otherwise),
  /// the row of `rows` that gets each iteration's capacity (-1: none), its
  /// column of the table, its bytes before it in each of its column's
  /// entries (prefix), its column's entry bytes and whether it is its
  /// column's first stack (1 or 0).
  std::vector<int64_t> desc;
  static constexpr int64_t kDescElements = 8;
  int64_t stacks = 0;
  /// The table's entries per group (columns, in the order of their first
  /// stacks): a column's stacks share one region per group, at its
  /// largest capacity, their entries interleaved level by level.
  int64_t columns = 0;
  /// The task's bounds.
  int64_t begin = 0, end = 0;
  /// `need` holds an optimistic launch's rows (MeasuredAdStackNeeds::rows).
  bool rows = false;
  /// This shape with every stack in one column: stacks whose entries are
  /// multiples of `align` bytes first (in stack id order), then the rest,
  /// the column's entry padded to `align` where it holds any of the first
  /// (on CUDA and HIP, 8: an f64 or i64 entry of a group of one thread
  /// stays 8-byte aligned).
  GroupTableShape shareColumn(int64_t align) const;
};

/// The table's shape for `plan` (after layoutAdStacks), when the launch
/// may be compacted: every heap stack in one 1-D parallel task whose bounds
/// are known now, at least one of them measured per iteration in `needs`;
/// with `capacities`, each measured stack's row there.
std::optional<GroupTableShape> groupTableShape(const LaunchPlan &plan,
                                               const MeasuredAdStackNeeds &needs,
                                               const AdStackIterationCapacities *capacities);

/// The group sizes the table kernel weighs: 1 << k threads for k below
/// this (1-32).
inline constexpr int kGroupShifts = 6;

/// Elements of the table kernel's scratch buffer for `groups` groups of
/// `lanes` threads: one per group and stack (its column's capacity), then
/// four per group the kernel uses for its sums, and with lanes 32,
/// kGroupShifts per group for the candidates.
int64_t groupTableElements(int64_t groups, int64_t stacks, int64_t lanes);

/// The u32 words of the table's header: the columns, then per stack id its
/// column, prefix bytes and column entry bytes.
int64_t groupTableHeader(int64_t stacks);

/// The u32 words of the launch's table (docs/runtime.md, "Compacted
/// heap"): the header, one offset per group and column, and the heap's
/// end; the heap keeps its first bytes for them on a device that reads
/// them there.
int64_t groupTableWords(int64_t groups, int64_t stacks, int64_t columns);

/// Groups per block of the table kernel's scan: about the square root of
/// `groups` (a power of two, at least 32), so that the blocks' scans (in
/// parallel, one thread each) and the scan of their sums (one thread) are
/// both about that long.
int64_t groupTableBlock(int64_t groups);

/// Elements of the table kernel's `sums` for `groups` in blocks of `block`.
int64_t groupTableSums(int64_t groups, int64_t block);

/// The table kernel (parsed once) for needs in the counting kernel's
/// layout or, with `rows`, an optimistic launch's rows. Its arguments:
/// need, desc, table (the scratch: groupTableElements), sums
/// (ndarray<i64, 1> of groupTableSums(groups, block) elements: sums[0]
/// the groups' bytes, sums[1] the bytes of each thread's own need,
/// sums[2 + k] (a run with lanes 32) the regions' bytes as groups of
/// 1 << k threads with one column per stack, sums[8] and sums[9] the
/// regions' bytes with one column per stack and with one column for all
/// of them, then 4 + kGroupShifts per block for its scan), rows (ndarray<i64, 2>: where desc's
/// capacity rows are), offsets (ndarray<i32, 1> of groupTableWords: the launch's table), then
/// groups, stacks, columns, threads, begin, end, spread (i32), unit and base (i64: offsets are
/// (base + bytes) / unit, each region rounded up to unit bytes), block (i32: groups per block of
/// the scan, groupTableBlock) and blocks (i32: the blocks; every bound is an argument, so the
/// device runs only the threads the tasks need) and lanes (i32: the threads of a group, a power of
/// two up to 32).
absl::StatusOr<const Kernel *> groupTableKernel(bool rows);

/// @adstack_fill_rows(rows, values, first, count, columns): values[r] to
/// rows[first + r, j] for every column j < columns.
absl::StatusOr<const Kernel *> fillRowsKernel();

/// @adstack_zero_needs(b, count): 0 to b[i] for i < count.
absl::StatusOr<const Kernel *> zeroNeedsKernel();

} // namespace qd::accel
