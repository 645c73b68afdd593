//===- qd/analysis/KernelSizing.h - Adstack capacities of a kernel -*- C++ -*-===//
//
// The result of sizing a kernel's adstacks (AdStackSizing.h computes it): per
// stack its tier, the method that sized it and a capacity or a launch-time
// SizeExpr. This header and SizeExpr.h belong to the `qd::sizeexpr` library,
// which a runtime links to evaluate the bounds at launch without the
// compile-time analyses (CFG, Bellman-Ford) of `qd::analysis`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/SizeExpr.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qd {

class AdStackAllocaStmt;
class Field;
class Kernel;
enum class Component : uint8_t;
class LazyValueNamer;
struct SizingOptions;

enum class SizingTier : uint8_t { Declared, Constant, LaunchTime, Measured, Default };
enum class SizingMethod : uint8_t {
  Declared,    // capacity written in the IR
  Unused,      // no push: capacity 1
  Structural,  // tier 1, structured depth algebra with constant trip counts
  BellmanFord, // tier 1, longest path on the CFG
  Evaluated,   // tier 1, a SizeExpr with no launch-time leaf, evaluated now
  SizeExpr,    // tier 2
  Counted,     // tier 2, measured at launch by the counting kernel
  Default,     // tier 3
};
std::string_view toString(SizingTier tier);
std::string_view toString(SizingMethod method);

struct AdStackSize {
  const AdStackAllocaStmt *stack = nullptr;
  /// The stack's printed name (`%s`), made when first asked for (naming
  /// walks the whole kernel, and most launches print nothing); empty
  /// without a namer.
  const std::string &name() const;
  /// The names of the sized kernel's stacks and loops (sizeAdStacks).
  std::shared_ptr<const LazyValueNamer> namer;
  SizingTier tier = SizingTier::Default;
  SizingMethod method = SizingMethod::Default;
  /// The capacity for Declared, Constant and Default stacks (and for
  /// Measured ones when the counting kernel does not run).
  int64_t capacity = 0;
  /// The bound for LaunchTime stacks (the capacity is max(value, 1)).
  SizeExprRef expr;
  /// True when the capacity the bound gives, max(bound, 1), is max(1, the
  /// largest depth an execution that runs the alloca reaches): no
  /// approximation was made, or none that matters (a bound of 1, a bound
  /// the code after the alloca reaches on every path); a launch that never
  /// runs the alloca needs no stack. False for a sound upper bound, and for
  /// a declared capacity.
  bool exact = false;
  /// Measured stacks: the stack's element of the counting kernel's `need`
  /// argument.
  int countSlot = -1;
  /// Measured and tier-3 stacks: why the stack is outside the grammar (and,
  /// for tier 3, why it cannot be counted either).
  std::string reason;
  /// A Constant or LaunchTime stack whose bound is an upper bound that the
  /// optimistic launch measures too (*refined*; `countSlot` is its slot): a
  /// launch that measures nothing (no optimistic launch, no other stack to
  /// count) uses the bound.
  bool refined = false;
  /// Whether launches may measure the stack (`countSlot` is set).
  bool measuredAtLaunch() const { return tier == SizingTier::Measured || refined; }
};

/// The counting kernel and the optimistic launch's try kernel count pushes
/// in i32 (i64 counters made each a fifth slower on the CPU's 32 lanes),
/// saturating at this value: a count this large only says that the need is
/// at least this, and the launch fails instead (no heap that large fits).
inline constexpr int32_t kAdStackCountSaturated = 0x7fffffff;
/// The bits of a try kernel's `mode` argument (OptimisticLaunch::tryKernel).
inline constexpr int32_t kIterationRowsStoreNeeds = 1;
inline constexpr int32_t kIterationRowsReadCapacities = 2;

/// The optimistic launch of a kernel's measured stacks
/// (AdStackOptimistic.h builds it; docs/sizing.md, "Measured at launch").
struct OptimisticLaunch {
  /// The try kernel: the source kernel's arguments, then `need` (as the
  /// counting kernel's, raised by every iteration of the measured task, plus
  /// one last element that counts the iterations that overflowed),
  /// `failed` (`ndarray<i32, 1>`, at least `iterations` elements, zero
  /// before the launch; an iteration that overflowed sets its element,
  /// `i - begin`, to 1), then one i32 capacity per measured stack (in
  /// `need` order, below kAdStackCountSaturated), then `rows`
  /// (`ndarray<i64, 2>`) and `mode` (i32, kIterationRows* bits): with
  /// kIterationRowsStoreNeeds each iteration stores its need of the stack
  /// of slot k at rows[k, i - begin], with kIterationRowsReadCapacities it
  /// takes its capacity from rows[slots + k, i - begin] instead of the
  /// argument (the capacity a compacted heap gives its group; `rows` then
  /// has at least the iterations' columns; mode 0 leaves it alone). Run
  /// with those capacities, it cannot overflow them.
  std::shared_ptr<Kernel> tryKernel;
  /// The rerun kernel: the measured task alone, for the iterations whose
  /// `failed` element is set (it clears them); the source kernel's
  /// arguments, then `failed`.
  std::shared_ptr<Kernel> rerunKernel;
  /// Every adstack of the source kernel with its copy in each variant.
  struct Copies {
    const AdStackAllocaStmt *source = nullptr;
    const AdStackAllocaStmt *inTry = nullptr;
    /// Null for a stack of a task the rerun kernel does not keep.
    const AdStackAllocaStmt *inRerun = nullptr;
  };
  std::vector<Copies> stacks;
  /// The number of iterations of the measured task, for this launch.
  SizeExprRef iterations;
};

class KernelSizing {
public:
  const std::vector<AdStackSize> &stacks() const { return stacks_; }
  const AdStackSize *find(const AdStackAllocaStmt *stack) const;
  /// `file:line:col: warning: ...` for every tier-3 stack.
  const std::vector<std::string> &warnings() const { return warnings_; }
  /// The counting kernel of the measured stacks (AdStackCounting.h), or
  /// null when there are none: run it before each launch, with the
  /// kernel's arguments and a zeroed `need` ndarray of
  /// `numCounted() * kCountSpread` i64 elements after them, and give each
  /// measured stack max(1, the largest of need[countSlot * kCountSpread,
  /// (countSlot + 1) * kCountSpread)).
  const Kernel *countKernel() const { return countKernel_.get(); }
  int numCounted() const { return numCounted_; }
  /// Elements of `need` per measured stack: thread `i` raises element
  /// `i mod kCountSpread` of its stack's range, so that a GPU's threads do
  /// not all update one address. The counting kernel reads the spread
  /// from the extent of `need` (any power of two: a runtime that lays out
  /// a compacted heap passes one of at least the task's iterations, so
  /// that element `i mod spread` is iteration i's own need).
  static constexpr int64_t kCountSpread = 1024;
  /// Memory the counting kernel writes, as copies (AdStackCounting): after
  /// `need`, one ndarray argument per field component here, holding a copy
  /// of its contents; and the ndarray arguments to pass as copies.
  const std::vector<std::pair<const Field *, Component>> &countShadowFields() const {
    return countShadowFields_;
  }
  const std::vector<unsigned> &countShadowArgs() const { return countShadowArgs_; }
  /// Per measured stack (in `need` order), -1, or the counting kernel's
  /// argument that bounds it there (AdStackCounting::boundArgs): pass a
  /// bound, and run again with a larger one while its need exceeds it.
  const std::vector<int> &countBoundArgs() const { return countBoundArgs_; }
  /// The optimistic launch of the measured stacks, or null when the kernel
  /// has none or does not meet its static condition (then
  /// `optimisticRefusal()` says why).
  const OptimisticLaunch *optimistic() const { return optimistic_.get(); }
  const std::string &optimisticRefusal() const { return optimisticRefusal_; }
  /// Names for printing the SizeExprs of this kernel (`%n`, `%i`).
  const SizeExprNames &names() const { return names_; }
  /// One line on stack `s`, its name, type and location, its tier and
  /// method, its bound, and whether the bound is exact:
  ///   adstack %s (f32) at k.qd:7:5: tier 1 constant [structural] = 5 (exact)
  ///   adstack %t (f32) at k.qd:9:5: tier 2 launch-time [size-expr] = max(%n, 0) (upper bound)
  ///   adstack %c (f32) at k.qd:11:5: declared [declared] = 7
  /// then, where they apply, `, refined at launch [count-kernel] = need[k]`
  /// and `: ` with the reason it is outside the grammar. A declared
  /// capacity (a constant or a capacity argument) is neither exact nor an
  /// upper bound: it is what the IR asks for.
  std::string describe(const AdStackSize &s) const;
  /// Says where a stack lives, for `report`: text appended to its line
  /// (empty: nothing to add).
  using StackNote = std::function<std::string(const AdStackSize &)>;
  /// The report of kernel `kernelName`'s stacks, as `qd-opt
  /// --report-ad-stacks` prints it: `@k: ` and `describe(s)`, then
  /// `note(s)`, one line (ending with a newline) per stack, in program order.
  std::string report(std::string_view kernelName, const StackNote &note = {}) const;

private:
  // Filled by the sizing computation (AdStackSizing.h).
  friend KernelSizing sizeAdStacks(const Kernel &, const SizingOptions &);
  std::vector<AdStackSize> stacks_;
  std::vector<std::string> warnings_;
  std::shared_ptr<Kernel> countKernel_;
  int numCounted_ = 0;
  std::vector<std::pair<const Field *, Component>> countShadowFields_;
  std::vector<unsigned> countShadowArgs_;
  std::vector<int> countBoundArgs_;
  std::shared_ptr<const OptimisticLaunch> optimistic_;
  std::string optimisticRefusal_;
  SizeExprNames names_;
};

} // namespace qd
