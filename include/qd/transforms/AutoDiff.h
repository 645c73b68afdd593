//===- qd/transforms/AutoDiff.h - Reverse- and forward-mode AD --*- C++ -*-===//
//
// Reverse mode builds, for a kernel @k, a gradient kernel @k_grad with the
// same arguments. It reads the grad companions of the globals @k writes (the
// output adjoints, seeded by the caller) and accumulates into the grad
// companions of the globals @k reads. It must be launched after @k, on the
// same data: it replays @k's computations from the primal values that @k
// left in memory, so @k must never write a global after reading it in the
// same launch (the global-access rule; see checkGlobalAccesses).
//
// Each task of @k becomes a task of @k_grad (in reverse order). Its body
// runs the forward computation, then the reverse sweep:
//  - straight-line code and if/else are reversed in place;
//  - a loop is run forward once, pushing, at the start of every iteration,
//    the values of the loop-carried locals whose per-iteration value the
//    reverse sweep needs (non-linear uses, indices, conditions, bounds) onto
//    adstacks; its reverse runs the iterations backwards, and each iteration
//    restores those locals from the stacks, recomputes its own values and
//    reverses itself. Locals used only linearly get no stack.
//  - a range-for nested in another range-for is taped (by default): it
//    pushes its locals while the enclosing loop records, and the enclosing
//    loop's reverse iterations reverse it without running it again
//    (ReverseADOptions);
//  - a while loop, or a loop with a break, also records its trip count.
//
// docs/autodiff.md describes the supported operations and the errors.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <string>

namespace qd {

/// Work of one `buildGradientKernel`, counted where it could grow faster
/// than the kernel: tests check that it stays linear in the depth of a loop
/// nest (docs/performance.md, "Compile time").
struct ReverseADWork {
  /// Statements the loop planner reads: its walk of the kernel, plus the
  /// statements and searches of every loop's plan and taping decision.
  uint64_t plannerVisits = 0;
  /// Frames looked into for the forward value of a source value.
  uint64_t frameProbes = 0;
};

struct ReverseADOptions {
  /// Tape nested loops: a range-for nested in another range-for P pushes its
  /// per-iteration locals while P is recorded, so P's reversed iterations do
  /// not run it again. Its stacks then hold all iterations of P (a
  /// launch-time size that sums the inner trip counts over P's range)
  /// instead of one. Off, every reversed iteration of P runs the nested
  /// loop forward once more: its forward code runs twice, and its stacks
  /// hold one iteration of P. See docs/autodiff.md.
  bool tapeNestedLoops = true;
  /// Tape derivative factors: in a range-for without a break, a top-level
  /// sin, cos, exp or tanh of the body whose operand the reverse sweep
  /// would otherwise rebuild from pushed locals gets its derivative factor
  /// (cos(x) for sin) computed in the forward sweep and pushed; the
  /// reverse reads it instead of recomputing the operand and the factor.
  /// Applied to a loop only where it pushes no more values per iteration
  /// than before (the locals it no longer needs make room). Gradients are
  /// bit for bit the same. See docs/autodiff.md.
  bool tapeFactors = true;
  /// Checkpoint long loops: every range-for without a break that the
  /// forward sweep records (not taped inside another loop) and that pushes
  /// onto adstacks is compiled so that a launch can run it with an interval
  /// k: the forward sweep then tapes nothing and stores the locals the loop
  /// carries every k iterations, and the reverse sweep records and reverses
  /// one segment of k iterations at a time. k is read at launch from the
  /// field `checkpointIntervalField(<gradient>)` (qd/ir/Checkpointing.h),
  /// which the runtime sets (LaunchOptions::checkpointInterval and
  /// ::adStackMemoryBudget); k >= the trip count runs the fully taped loop.
  /// Gradients are bit for bit those of the taped loop. See
  /// docs/autodiff.md, "Checkpointing long loops".
  bool checkpointLoops = false;
  /// Filled in when set (added to what it holds).
  ReverseADWork *work = nullptr;
};

/// Adds the gradient kernel of `kernel` to `module` (named `<name>_grad`
/// unless `gradName` is given) and returns it. Errors name the statement
/// that cannot be differentiated.
absl::StatusOr<Kernel *> buildGradientKernel(Module &module, const Kernel &kernel,
                                             std::string gradName = {});
absl::StatusOr<Kernel *> buildGradientKernel(Module &module, const Kernel &kernel,
                                             const ReverseADOptions &options,
                                             std::string gradName = {});

/// Adds the forward-mode kernel `<name>_dual`: it computes what `kernel`
/// computes and, for every float value, its tangent; tangents of loads come
/// from the dual companions and stores write them to the dual companions.
absl::StatusOr<Kernel *> buildDualKernel(Module &module, const Kernel &kernel,
                                         std::string dualName = {});

} // namespace qd
