//===- qd/analysis/TaskVectorPlan.h - Lanes of a parallel task --*- C++ -*-===//
//
// The CPU code of a parallel task can run `W` consecutive iterations at once,
// one per SIMD lane (docs/runtime.md, "Vectorised tasks"). The plan combines
// the two analyses that decide it: ElementOwnership.h (may lanes run
// together at all; which atomics are private) and Uniformity.h (what varies
// between lanes, what runs under a partial mask). See docs/analyses.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/ElementOwnership.h"
#include "qd/analysis/Uniformity.h"

#include <string>

namespace qd {

struct TaskVectorPlan {
  ElementOwnership ownership;
  /// Computed only when the task can be vectorised (else all uniform).
  Uniformity uniformity;

  /// Whether the task can be vectorised.
  bool ok() const { return ownership.lanesAllowed(); }
  /// Empty when the task can be vectorised, else why not
  /// (ElementOwnership::lanesRefused; the second form prints the culprit
  /// statement with a namer of its kernel).
  std::string refused() const { return ownership.lanesRefused(); }
  std::string refused(const ValueNamer &names) const { return ownership.lanesRefused(names); }
  bool isVarying(const Value *v) const { return uniformity.isVarying(v); }
  bool isDivergent(const Stmt *s) const { return uniformity.isDivergent(s); }
  bool isMaskedLoop(const Stmt *s) const { return uniformity.isMaskedLoop(s); }
  bool isLaneStack(const Value *s) const { return uniformity.isLaneStack(s); }
  bool storesAllLanes(const Stmt *s) const { return uniformity.storesAllLanes(s); }
  bool isDescendingLoop(const Stmt *s) const { return uniformity.isDescendingLoop(s); }
  const ForStmt *descendingCounterOf(const Value *v) const {
    return uniformity.descendingCounterOf(v);
  }
  /// Valid whether or not the task is vectorised (the scalar code uses it).
  bool isPrivateAtomic(const Stmt *s) const { return ownership.isPrivateAtomic(s); }
  /// Valid whether or not the task is vectorised; a plain update, found
  /// only for a backend that keeps iterations nearReach() apart
  /// (TaskAssumptions::nearIterationsApart, ElementOwnership.h).
  bool isNearAtomic(const Stmt *s) const { return ownership.isNearAtomic(s); }
};

/// Plans the lanes of parallel task `task` (a top-level parallel for),
/// under what its backend guarantees (ElementOwnership.h).
TaskVectorPlan planTaskVectorization(const ForStmt &task, TaskAssumptions assume = {});

} // namespace qd
