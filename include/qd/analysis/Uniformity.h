//===- qd/analysis/Uniformity.h - What differs between lanes ----*- C++ -*-===//
//
// Lanes are consecutive iterations of a parallel task run together: the SIMD
// lanes of the CPU's vector code (docs/runtime.md, "Vectorised tasks"), and
// the same notion serves the threads of a GPU warp. For each statement of a
// task this analysis says whether it is
//
//  - *varying*: its value differs between lanes (it depends on the task
//    index, on a per-lane load, or on a local written with per-lane values or
//    under a partial mask); otherwise it is *uniform*, one value for all
//    lanes. A global load is varying when its indices are, or when the task
//    writes memory it may read (ElementOwnership.h): lanes see different
//    writes;
//  - *divergent*: it runs under a partial mask (inside an if whose condition
//    varies, a loop whose bounds vary or that some lanes leave early);
//  - a *masked loop*: lanes may leave it at different times (a varying bound,
//    or a break/continue inside a varying if), so its control is a lane mask
//    instead of a branch; the task itself is one when some lanes continue;
//  - a *descending loop*: a masked for loop from a uniform begin to a varying
//    end whose index is used only as `last - index`, `last` being begin +
//    end - 1: the loop reverse-ad emits to run a loop backwards. Its lanes
//    share one counter J that runs down from the largest end - 1 to begin,
//    lane l taking part while J < end_l, so lane l still sees its indices
//    in ascending order, and each `last - index` is J itself: uniform (a
//    *descending counter*). The reversed loop then visits the lanes in the
//    lockstep in which the forward loop (one counter counting up) ran them,
//    and loops bounded by J run unmasked;
//  - a *lane stack*: an adstack some operation of which is divergent, so each
//    lane keeps its own depth (otherwise one depth serves all lanes);
//  - an *all-lanes store*: a store to a local (or its zeroing alloca) at the
//    top level of the body of a masked loop, or of a loop under a partial
//    mask, that may write every lane, inactive ones too. Under a mask a
//    store keeps the inactive lanes' old values, which keeps everything that
//    computed them alive. It may write them when the local is overwritten
//    at the start of every iteration before it is read, and nothing reads it
//    after the loop.
//
// Varying values make statements divergent and divergent stores make locals
// varying: the analysis iterates to the (monotone) fixpoint.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/ElementOwnership.h"
#include "qd/ir/Stmt.h"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <ostream>

namespace qd {

class Uniformity {
public:
  Uniformity() = default;
  /// Analyses parallel task `task`; `ownership` (of the same task) says which
  /// memory the task writes.
  static Uniformity compute(const ForStmt &task, const ElementOwnership &ownership);
  static Uniformity compute(const ForStmt &task) {
    return compute(task, ElementOwnership::compute(task));
  }

  bool isVarying(const Value *v) const { return varying_.count(v) != 0; }
  bool isDivergent(const Stmt *s) const { return divergent_.count(s) != 0; }
  bool isMaskedLoop(const Stmt *s) const { return maskedLoops_.count(s) != 0; }
  bool isLaneStack(const Value *stack) const { return laneStacks_.count(stack) != 0; }
  bool storesAllLanes(const Stmt *s) const { return allLanesStores_.count(s) != 0; }
  bool isDescendingLoop(const Stmt *s) const { return descendingLoops_.count(s) != 0; }
  /// The descending loop whose common counter `v` is (`v` is a
  /// `sub %last, %index` of its index), or null.
  const ForStmt *descendingCounterOf(const Value *v) const {
    auto it = descendingCounters_.find(v);
    return it == descendingCounters_.end() ? nullptr : it->second;
  }

private:
  friend class UniformityBuilder;
  absl::flat_hash_set<const Value *> varying_;
  absl::flat_hash_set<const Stmt *> divergent_;
  absl::flat_hash_set<const Stmt *> maskedLoops_;
  absl::flat_hash_set<const Value *> laneStacks_;
  absl::flat_hash_set<const Stmt *> allLanesStores_;
  absl::flat_hash_set<const Stmt *> descendingLoops_;
  absl::flat_hash_map<const Value *, const ForStmt *> descendingCounters_;
};

/// Prints, for every parallel task of `kernel`, each statement of the task
/// with what the analysis says about it: `varying` or `uniform` (statements
/// that define a value), `divergent`, `masked loop`, `descending loop`,
/// `descending counter`, `lane stack`, `all-lanes store`, or `-` for none of
/// these. The `print-uniformity` pass.
void printUniformity(const Kernel &kernel, std::ostream &os);

} // namespace qd
