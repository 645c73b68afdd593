//===- qd/abi/DeviceEntries.h - How GPU targets split a kernel -*- C++ -*-===//
//
// What every GPU code generator (NVPTX, SPIR-V) decides the same way about
// a kernel's launches (KernelLayout::launches): the device entries — a
// maximal run of top-level statements and serial tasks, or one parallel
// task — and the top-level values a later entry uses, which travel through
// 8-byte value slots (QdLaunchContext::values). Also what a runtime can
// read of a task bound before the launch (KernelLayout::TaskBound).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"

#include <map>
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
};

/// Splits `kernel` into device entries.
DeviceEntryPlan planDeviceEntries(Kernel &kernel);

/// What the runtime can read of task bound `b` before the launch: a
/// constant, a scalar argument, an ndarray extent, or a field element at
/// constant in-range indices.
KernelLayout::TaskBound taskBoundOf(Bound b);

} // namespace qd
