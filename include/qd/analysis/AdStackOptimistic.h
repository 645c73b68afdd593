//===- qd/analysis/AdStackOptimistic.h - Optimistic launches ----*- C++ -*-===//
//
// The other way of sizing measured adstacks (docs/sizing.md, "Measured at
// launch"): instead of counting before the launch, run the kernel with the
// capacities of its previous launch, and rerun only the iterations whose
// stacks did not fit. Two variants of the kernel make that possible:
//   - the *try* kernel counts the pushes of every measured stack (as the
//     counting kernel does), pushes only while the count fits the capacity
//     it is given, and where the last push is behind it, records the
//     iteration's need; an iteration that overflowed flags itself and stops
//     there, before it writes anything visible;
//   - the *rerun* kernel is the measured task alone, run only for flagged
//     iterations (it clears their flags), with capacities that now fit.
// Built only for kernels where that is sound; see buildAdStackOptimistic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/KernelSizing.h"

#include <span>
#include <string>

namespace qd {

class AdStackAllocaStmt;
class Kernel;

/// Builds the optimistic launch of `kernel` for its measured `stacks` (in
/// `need` order: the counting kernel's slots), or returns why it cannot.
/// The static condition: every measured stack lives in one 1-D `parallel
/// for`, the kernel's last task, whose bounds are known before the launch;
/// its allocas are statements of the task body; and some statement of the
/// body (the *split*) has every push of a measured stack before it, and
/// before it
///   - no store or atomic to a field or ndarray (a visible write),
///   - no other operation on a measured stack (so no decision reads one),
///   - no `break`/`continue` of the task,
///   - no load of memory the task writes (a rerun reads what the first run
///     read);
/// and no statement outside the tasks loads memory the kernel writes (the
/// rerun kernel evaluates them again).
/// An iteration that stops at the split has then changed nothing but its
/// own stacks, and its rerun does what its first run would have done.
absl::StatusOr<OptimisticLaunch>
buildAdStackOptimistic(const Kernel &kernel, std::span<const AdStackAllocaStmt *const> stacks);

} // namespace qd
