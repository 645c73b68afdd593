//===- qd/transforms/Passes.h - Built-in passes -----------------*- C++ -*-===//
//
// The factories of the built-in passes. Names, summaries, options and
// aliases are declared once, in qd/transforms/Passes.def.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/transforms/Pass.h"

#include <iostream>

namespace qd {

/// `fold`: replaces statements whose operands are constants by their exact
/// value (see qd/analysis/ConstantFolding.h for what is never folded) and
/// turns constant loop bounds into literals.
std::unique_ptr<Pass> createFoldPass();

/// `dce`: removes statements without side effects whose results are unused,
/// locals that are only written, loops and ifs with empty bodies.
std::unique_ptr<Pass> createDcePass();

/// `simplify`: algebraic identities that hold exactly for the type (x + 0,
/// x * 1, x - x on integers, select with equal arms, casts to the same
/// type, double negation), ifs with a constant condition and loops that
/// never run.
std::unique_ptr<Pass> createSimplifyPass();

/// `bound-capped-loops`: a `while` loop that breaks whenever a local
/// counter has reached a constant (the counter a constant when the loop
/// starts, one added to it by each iteration that goes on, no `continue`;
/// the forms of the check: docs/passes.md)
/// becomes a `for` loop of the iterations it runs at most, with the same
/// body (`boundCappedLoops`): the sizing analysis then bounds the adstacks
/// its gradient fills. `reverse-ad` does it to its copy of the kernel.
std::unique_ptr<Pass> createBoundCappedLoopsPass();
/// Rewrites `kernel`'s capped `while` loops (above); whether one changed.
bool boundCappedLoops(Kernel &kernel);

/// `size-adstacks`: writes the capacity of every adstack whose size is a
/// compile-time constant (tier 1 of qd/analysis/AdStackSizing.h) into its
/// `adstack.alloca`; the others stay 0 and are sized at launch.
std::unique_ptr<Pass> createSizeAdStacksPass();

/// `reverse-ad`: adds the gradient kernel `@<k>_grad` of every kernel `@k`
/// (qd/transforms/AutoDiff.h, docs/autodiff.md). Option
/// `tape-nested-loops` (default true) is `ReverseADOptions::tapeNestedLoops`;
/// `reverse-ad-recompute` is an alias of `reverse-ad{tape-nested-loops=false}`.
std::unique_ptr<Pass> createReverseAdPass(const PassOptionValues &options);

/// `forward-ad`: adds the forward-mode kernel `@<k>_dual` of every kernel
/// `@k`, which computes tangents into dual companions.
std::unique_ptr<Pass> createForwardAdPass();

/// `check-global-accesses`: fails, naming both statements, when a kernel may
/// write a field or ndarray element after reading it in the same launch.
std::unique_ptr<Pass> createCheckGlobalAccessesPass();

/// `print-activity`: changes nothing; prints, for every kernel, the active
/// values of reverse mode and of forward mode (qd/analysis/Activity.h) to
/// stdout (`qd-opt` prints the module after it).
std::unique_ptr<Pass> createPrintActivityPass();

/// `print-uniformity`: changes nothing; prints, for every parallel task, what
/// varies between lanes, what runs under a partial mask, masked loops, lane
/// stacks and all-lanes stores (qd/analysis/Uniformity.h) to stdout.
std::unique_ptr<Pass> createPrintUniformityPass();

/// `print-element-ownership`: changes nothing; prints, for every parallel
/// task, whether each global access touches an element its iteration owns,
/// private atomics and whether lanes are refused
/// (qd/analysis/ElementOwnership.h) to stdout.
std::unique_ptr<Pass> createPrintElementOwnershipPass();

/// `print-cooperative-tasks`: changes nothing; prints, for every parallel
/// task, whether the GPU code generators run a thread group per iteration
/// (qd/analysis/CooperativeTask.h, their default limits), with and without
/// distinct ndarrays, or why not, to stdout.
std::unique_ptr<Pass> createPrintCooperativeTasksPass();

/// Registers every pass and alias of qd/transforms/Passes.def in `registry`
/// (done automatically for `PassRegistry::global()`).
/// Fails (with the first problem) only if Passes.def is malformed.
absl::Status registerBuiltinPasses(PassRegistry &registry);

} // namespace qd
