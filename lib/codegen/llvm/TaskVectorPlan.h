//===- TaskVectorPlan.h - Which parts of a task vary across lanes -*- C++ -*-===//
//
// The CPU code of a parallel task can run `W` consecutive iterations at once,
// one per SIMD lane (docs/codegen.md, "Vectorised tasks"). This analysis
// decides whether a task may, and for each statement whether it is
//
//  - *varying*: its value differs between lanes (it depends on the task
//    index, on a per-lane load, or on a local written with per-lane values or
//    under a partial mask), so it lives in a vector; otherwise it is uniform
//    and stays a scalar;
//  - *divergent*: it runs under a partial mask (inside an if whose condition
//    varies, a loop whose bounds vary or that some lanes leave early);
//  - a *masked loop*: lanes may leave it at different times, so its control
//    is a lane mask instead of a branch;
//  - a *lane stack*: an adstack some operation of which is divergent, so each
//    lane keeps its own depth (otherwise one depth serves all lanes);
//  - a *private atomic*: an atomic add to a global that every statement of
//    the task accesses at the iteration's own element, so no other
//    iteration (lane or thread) touches that element during the task: a
//    plain read-modify-write does the same;
//  - an *all-lanes store*: a store to a local (or its zeroing alloca) at the
//    top level of a masked loop's body that may write every lane, inactive
//    ones too. Under a mask a store keeps the inactive lanes' old values,
//    which keeps everything that computed them alive (a reversed loop would
//    recompute the forward `sin` it replays only to carry it in the
//    inactive lanes). It may write them when the local is overwritten at
//    the start of every iteration before it is read, and nothing reads it
//    after the loop.
//
// A task is refused (and keeps scalar code) when lanes could observe each
// other's memory effects in a different order than consecutive iterations
// would: a global written by a plain store must be accessed by every
// statement at the lane's own element (one index is the task index itself),
// unless it is only ever atomically added to. Ndarray arguments may alias,
// so they count as one global.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Stmt.h"

#include <string>
#include <unordered_set>

namespace qd {

struct TaskVectorPlan {
  /// Empty when the task can be vectorised, else why not.
  std::string refused;
  std::unordered_set<const Value *> varying;
  std::unordered_set<const Stmt *> divergent;
  std::unordered_set<const Stmt *> maskedLoops;
  std::unordered_set<const Stmt *> laneStacks;
  std::unordered_set<const Stmt *> allLanesStores;
  std::unordered_set<const Stmt *> privateAtomics;

  bool ok() const { return refused.empty(); }
  bool isVarying(const Value *v) const { return varying.count(v) != 0; }
  bool isDivergent(const Stmt *s) const { return divergent.count(s) != 0; }
  bool isMaskedLoop(const Stmt *s) const { return maskedLoops.count(s) != 0; }
  bool isPrivateAtomic(const Stmt *s) const { return privateAtomics.count(s) != 0; }
  bool storesAllLanes(const Stmt *s) const { return allLanesStores.count(s) != 0; }
  bool isLaneStack(const Value *s) const {
    return laneStacks.count(static_cast<const Stmt *>(s)) != 0;
  }
};

/// Plans the lanes of parallel task `task` (a top-level parallel for).
TaskVectorPlan planTaskVectorization(const ForStmt &task);

} // namespace qd
