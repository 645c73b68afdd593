//===- qd/interp/Interpreter.h - Reference interpreter ----------*- C++ -*-===//
//
// The oracle every backend and transform is checked against. It executes
// every statement with the semantics of docs/ir.md ("Statements"), checks
// every index, and stops a launch with an error naming the kernel, task and
// statement on anything undefined (integer division by zero, shifts by the
// bit width or more, adstack overflow or underflow, out-of-range indices).
// Tasks run one iteration at a time in order, so results are deterministic;
// for race-free kernels this equals any parallel execution.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/codegen/KernelSizingCache.h"
#include "qd/runtime/Program.h"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace qd {

class Interpreter : public Backend {
public:
  std::string_view name() const override { return "interp"; }
  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options) override;
  /// Sizes `kernel` at its first use and keeps the result.
  absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &kernel) override;

  /// The largest depth each adstack reached during the last launch (over
  /// all iterations and tasks); stacks that never executed are absent.
  /// Like every "last launch" statistic, read it while no launch runs.
  const std::unordered_map<const AdStackAllocaStmt *, int64_t> &adStackMaxDepths() const {
    return maxDepths_;
  }
  /// The capacity each adstack was given in the last launch.
  const std::unordered_map<const AdStackAllocaStmt *, int64_t> &adStackCapacities() const {
    return capacities_;
  }

private:
  /// One interpreter may be shared by threads: launches run one at a time
  /// (each keeps the statistics above); sizing is computed once per kernel.
  mutable std::mutex mutex_;
  KernelSizingCache sizings_;
  std::unordered_map<const AdStackAllocaStmt *, int64_t> maxDepths_;
  std::unordered_map<const AdStackAllocaStmt *, int64_t> capacities_;
};

/// Registers the interpreter as the backend `interp`
/// (qd/runtime/BackendRegistry.h; it takes no options). AlreadyExists when
/// it is registered.
absl::Status registerInterpreterBackend();

} // namespace qd
