//===- qd/abi/DeviceEntries.h - How GPU targets split a kernel -*- C++ -*-===//
//
// What every GPU code generator (NVPTX, SPIR-V) decides the same way about
// a kernel's launches (KernelLayout::launches): the device entries — a
// maximal run of top-level statements and serial tasks, or one parallel
// task — and the top-level values a later entry uses, which travel through
// 8-byte value slots (QdLaunchContext::values). Top-level values that only
// combine launch inputs (constants, scalar arguments, ndarray extents)
// with arithmetic that cannot fail are recomputed by each entry that uses
// them instead: `%n = shape %x, 0` before a task, what a front-end writes
// for every ndarray kernel, costs no serial entry (one dispatch and
// barrier less per launch). Also what a runtime can read of a task bound
// before the launch (KernelLayout::TaskBound).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"

#include <map>
#include <set>
#include <vector>

namespace qd {

struct DeviceEntryPlan {
  /// A parallel task (`task`, alone in `stmts`) or a run of other
  /// top-level statements (`task` null).
  struct Entry {
    ForStmt *task = nullptr;
    std::vector<Stmt *> stmts;
  };
  std::vector<Entry> entries;
  /// The value slot of each top-level value a later entry uses, numbered in
  /// kernel order.
  std::map<const Value *, unsigned> slotOf;
  unsigned numValues = 0;
  /// Per entry: the values it reads from slots, in slot order.
  std::vector<std::vector<const Stmt *>> imports;
  /// Per entry: the recomputed top-level values it uses (directly or
  /// through another), in kernel order; it emits them first. They are in
  /// no entry's `stmts` and have no slot.
  std::vector<std::vector<Stmt *>> recomputes;
};

/// Whether top-level `s` is one an entry recomputes: a constant, an
/// ndarray argument's extent, or add/sub/mul/min/max/and/or/xor, neg, abs,
/// not, a comparison, a select or a cast from an integer whose operands
/// are scalar arguments or such values (`recomputed` holds the earlier
/// top-level ones found so).
bool isRecomputedTopLevel(const Stmt &s, const std::set<const Stmt *> &recomputed);

/// Splits `kernel` into device entries.
DeviceEntryPlan planDeviceEntries(Kernel &kernel);

/// What the runtime can read of task bound `b` before the launch: a
/// constant, a scalar argument, an ndarray extent, or a field element at
/// constant in-range indices.
KernelLayout::TaskBound taskBoundOf(Bound b);

/// taskBoundOf of each dimension's begin and end of `loop`, in order.
std::vector<KernelLayout::TaskBound> boundsOf(const ForStmt &loop);
/// KernelLayout::Task::band of `task`: boundsOf a band, nothing for a
/// task of one dimension.
std::vector<KernelLayout::TaskBound> bandBoundsOf(const ForStmt &task);
/// KernelLayout::Task::loopFree of `task`: its body holds no loop.
bool loopFreeTask(const ForStmt &task);
/// Whether `task` holds an adstack kept in the heap (one without entries in
/// `localEntries`, the stacks a variant keeps in local arrays): its threads
/// may run in windows of a compacted heap (QdLaunchContext::threadOffset).
bool taskHasHeapAdStack(const ForStmt &task,
                        const std::map<const AdStackAllocaStmt *, int64_t> &localEntries);

} // namespace qd
