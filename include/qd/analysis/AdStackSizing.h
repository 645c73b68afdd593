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
//               (balanced loops of any trip count, while loops included).
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

#include "qd/analysis/SizeExpr.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qd {

class AdStackAllocaStmt;
class Kernel;

enum class SizingTier : uint8_t { Declared, Constant, LaunchTime, Default };
enum class SizingMethod : uint8_t {
  Declared,    // capacity written in the IR
  Unused,      // no push: capacity 1
  Structural,  // tier 1, structured depth algebra with constant trip counts
  BellmanFord, // tier 1, longest path on the CFG
  Evaluated,   // tier 1, a SizeExpr with no launch-time leaf, evaluated now
  SizeExpr,    // tier 2
  Default,     // tier 3
};
std::string_view toString(SizingTier tier);
std::string_view toString(SizingMethod method);

struct AdStackSize {
  const AdStackAllocaStmt *stack = nullptr;
  /// The stack's printed name (`%s`).
  std::string name;
  SizingTier tier = SizingTier::Default;
  SizingMethod method = SizingMethod::Default;
  /// The capacity for Declared, Constant and Default stacks.
  int64_t capacity = 0;
  /// The bound for LaunchTime stacks (the capacity is max(value, 1)).
  SizeExprRef expr;
  /// True when the bound equals the largest depth some execution reaches
  /// (no approximation was made); false for a sound upper bound.
  bool exact = false;
  /// Tier 3: why the stack is outside the grammar.
  std::string reason;
};

struct SizingOptions {
  /// Capacity of tier-3 stacks.
  int64_t defaultCapacity = 256;
  /// Run the individual tier-1 analyses (tests switch them off to compare).
  bool structural = true;
  bool bellmanFord = true;
  /// Step budget for evaluating a closed SizeExpr at compile time.
  int64_t compileTimeEvalSteps = int64_t(1) << 24;
};

class KernelSizing {
public:
  const std::vector<AdStackSize> &stacks() const { return stacks_; }
  const AdStackSize *find(const AdStackAllocaStmt *stack) const;
  /// `file:line:col: warning: ...` for every tier-3 stack.
  const std::vector<std::string> &warnings() const { return warnings_; }
  /// Names for printing the SizeExprs of this kernel (`%n`, `%i`).
  const SizeExprNames &names() const { return names_; }
  /// `= 5`, `= max(%n, 0)`, with the tier and method; one line per stack.
  std::string describe(const AdStackSize &s) const;

private:
  friend KernelSizing sizeAdStacks(const Kernel &, const SizingOptions &);
  std::vector<AdStackSize> stacks_;
  std::vector<std::string> warnings_;
  SizeExprNames names_;
  std::vector<std::string> varNames_;
};

/// Sizes every adstack of `kernel` (in program order).
KernelSizing sizeAdStacks(const Kernel &kernel, const SizingOptions &options = {});

/// Statistics of the tier-1 Bellman-Ford analysis alone, for tests: the
/// largest net push depth from `stack` along any CFG path, or nullopt when a
/// cycle has a positive net (loop-dependent).
std::optional<int64_t> bellmanFordDepth(const Kernel &kernel, const AdStackAllocaStmt &stack);

} // namespace qd
