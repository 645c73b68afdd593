//===- qd/analysis/AdStackSizing.h - Adstack capacities ---------*- C++ -*-===//
//
// Gives every adstack of a kernel a capacity that is sound (never below the
// depth any execution reaches) and, for shapes inside the grammar, tight
// (equal to the largest depth some execution reaches). The first tier that
// can prove a bound wins and is never overwritten by a later one:
//
//  declared   the alloca already has a non-zero capacity: kept as is.
//  tier 1     compile-time constant:
//             - structural: every loop between the alloca and its push/pop
//               sites has a constant trip count; the depth is computed
//               exactly over the structured IR (sums along sequences, max
//               over if arms, trip count times the net per iteration);
//             - Bellman-Ford: on the control-flow graph, the longest path of
//               net pushes from the alloca, when no cycle has a positive net
//               (balanced loops of any trip count, while loops included);
//               computed in linear time on qd's reducible CFGs, with the
//               answer Bellman-Ford gives (NetPushPaths.h).
//  tier 2     launch-time SizeExpr: loop bounds built from scalar arguments,
//             field and ndarray reads of globals the kernel does not write,
//             ndarray shapes and enclosing loop indices; evaluated before
//             every launch (see SizeExpr.h). An expression with no
//             launch-time leaf is evaluated here and lands in tier 1.
//  tier 3     outside the grammar (while loops with a positive net per
//             iteration, data-dependent bounds, ...): a configurable default
//             and a warning naming the stack's location.
//
// See docs/sizing.md for the algebra and examples of each tier.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/KernelSizing.h"
#include "qd/analysis/NetPushPaths.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qd {

class AdStackAllocaStmt;
class Kernel;

/// What `sizeAdStacks` did, summed over a kernel's stacks: for tests of its
/// cost (docs/performance.md).
struct SizingWork {
  /// CFG nodes the longest-path tier (1b) built its graphs from.
  int64_t pathNodes = 0;
  /// Stacks that tier skipped: a loop around one of their pushes pops
  /// nothing, so its cycle pushes more than it pops.
  int64_t pathSkips = 0;
};

struct SizingOptions {
  /// Capacity of tier-3 stacks.
  int64_t defaultCapacity = 256;
  /// Run the individual tier-1 analyses (tests switch them off to compare).
  bool structural = true;
  bool bellmanFord = true;
  /// Measure the stacks tiers 1 and 2 cannot size with a counting kernel
  /// (AdStackCounting.h) instead of giving them the default capacity.
  bool countKernels = true;
  /// Also build the optimistic launch of the measured stacks
  /// (AdStackOptimistic.h), for kernels that meet its static condition.
  bool optimisticLaunch = true;
  /// Measure, too, the stacks whose tier-1 or tier-2 bound is only an upper
  /// bound (a loop that may leave early, `if` arms that push differently),
  /// where that is cheap: where the kernel has an optimistic launch with
  /// them, or counts other stacks anyway (their bound stays the capacity
  /// of launches that measure nothing; docs/sizing.md, "Refined bounds").
  bool refineUpperBounds = true;
  /// Step budget for evaluating a closed SizeExpr at compile time.
  int64_t compileTimeEvalSteps = int64_t(1) << 24;
  /// Where to add what sizing did, if set.
  SizingWork *work = nullptr;
};

/// Sizes every adstack of `kernel` (in program order).
KernelSizing sizeAdStacks(const Kernel &kernel, const SizingOptions &options = {});

/// The tier-1 CFG analysis alone, for tests: the largest net push depth
/// from `stack` along any CFG path, or nullopt when a cycle has a positive
/// net (loop-dependent), computed by `algorithm` (NetPushPaths.h);
/// `fellBack` as in `longestNetPath`.
std::optional<int64_t> bellmanFordDepth(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                        NetPathAlgorithm algorithm = NetPathAlgorithm::Structured,
                                        bool *fellBack = nullptr);

/// The test tier 1b runs first, alone, for tests: true when it may skip the
/// CFG because some loop's cycle surely pushes more than it pops (then
/// `bellmanFordDepth` is nullopt).
bool pushingCycleIsCertain(const Kernel &kernel, const AdStackAllocaStmt &stack);

} // namespace qd
