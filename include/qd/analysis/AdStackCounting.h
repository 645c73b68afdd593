//===- qd/analysis/AdStackCounting.h - Counting kernels ---------*- C++ -*-===//
//
// The exact need of adstacks whose depth no launch-time expression bounds
// (a `while` loop that pushes, a bound computed in the kernel): the counting
// kernel of a kernel is its slice that keeps only what decides how often
// each counted stack is pushed and popped (the control flow around the
// pushes and pops and the values it depends on), replaces each counted stack
// by a per-thread counter and its running maximum, writes no program state,
// and raises `need[slot]` to every thread's maximum with `atomic_max`. It is
// an ordinary kernel: every backend runs it right before the kernel it
// counts (docs/sizing.md, "Measured at launch").
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace qd {

class AdStackAllocaStmt;
class Field;
class Kernel;
enum class Component : uint8_t;

struct AdStackCounting {
  /// The counting kernel, detached from any module (its field references
  /// are the source kernel's), or null when no stack can be counted. Its
  /// arguments are the source kernel's followed by `need`, an
  /// `ndarray<i64, 1>` with the same power of two of elements per counted
  /// stack (KernelSizing::kCountSpread, or at least the task's iterations
  /// for one element per iteration), which the caller zeroes before the
  /// launch.
  std::shared_ptr<Kernel> kernel;
  /// The counted stacks of the source kernel, in `need` order.
  std::vector<const AdStackAllocaStmt *> counted;
  /// When a count depends on memory the kernel also writes, the counting
  /// kernel replays those writes on copies: one more ndarray argument per
  /// field component here (after `need`, in this order; the caller passes
  /// a copy of its current contents, a 0-d field as 1 element), and the
  /// indices of the ndarray arguments the caller passes as copies (one copy
  /// per distinct buffer, so arguments that alias still alias).
  std::vector<std::pair<const Field *, Component>> shadowFields;
  std::vector<unsigned> shadowArgs;
  /// Per counted stack, -1, or for a *bounded* stack (one whose count
  /// depends on its own values, so the counting kernel keeps it as a real
  /// stack) the index of the counting kernel's i32 argument that is its
  /// capacity there (the last arguments, after the shadow fields). A thread
  /// that would push a bounded stack past it skips the push, stops its loops
  /// and reports a need above the bound: the caller runs the counting kernel
  /// again with a larger bound until every bounded need fits its bound.
  std::vector<int> boundArgs;
};

/// Builds the counting kernel of `kernel` for `stacks` (stacks of `kernel`).
/// The other stacks of `kernel` must have capacities known before the launch
/// (declared, constant or launch-time): the counting kernel keeps those whose
/// values it needs, with the same sizing.
AdStackCounting buildAdStackCounting(const Kernel &kernel,
                                     std::span<const AdStackAllocaStmt *const> stacks);

} // namespace qd
