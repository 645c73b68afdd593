//===- qd/abi/LaunchErrors.h - Launch diagnostics -----------*- C++ -*-===//
//
// The texts of launch-time errors, written once for the interpreter and every
// backend, so that a failure reads the same wherever it happens:
//
//   <loc>: error: <what> (in kernel @k, task at <loc>: <statement>)
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/LaunchContext.h"

#include <absl/status/status.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace qd {

class AdStackAllocaStmt;
class GlobalAccessStmt;
class Kernel;
class Stmt;
enum class Component : uint8_t;

/// The top-level task that holds `s` (null outside tasks).
const Stmt *taskOf(const Stmt *s);

/// "kernel @k" or "kernel @k, task at file:line:col".
std::string launchWhere(const Kernel &kernel, const Stmt *task);

/// `<loc of s>: error: <what> (in <launchWhere>: <s printed>)`, as a
/// FailedPrecondition status: what every error site of a kernel reports.
absl::Status statementError(const Kernel &kernel, const Stmt &s, const Stmt *task,
                            std::string_view what);

/// "@x", "%a", "@x.grad": a field's (`field`) or an ndarray argument's
/// component by name.
std::string globalName(bool field, std::string_view name, Component c);
/// globalName of the global a statement accesses.
std::string globalAccessName(const GlobalAccessStmt &g);

/// "index [4, 1] is out of range for '@x' of shape [4, 4]". `truncated`:
/// more indices existed than `indices` holds (printed as ", ...").
std::string indexOutOfRangeText(std::string_view global, std::span<const int64_t> indices,
                                std::span<const int64_t> shape, bool truncated = false);

/// "adstack underflow: the adstack declared at <loc> is empty".
std::string adStackUnderflowText(const AdStackAllocaStmt *stack);

/// A stack that reached a launch with no capacity.
absl::Status adStackNoCapacityError(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                    const Stmt *task);
/// The largest adstack capacity a launch accepts, on every backend (2^40
/// entries: far above any heap, and small enough that capacity x entry
/// bytes x threads cannot overflow 64 bits before the heap is checked).
inline constexpr int64_t kMaxAdStackCapacity = int64_t(1) << 40;

/// A capacity above kMaxAdStackCapacity.
absl::Status adStackTooLargeError(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                  const Stmt *task, int64_t capacity);
/// A launch whose pushes went past `capacity`: `needed` is the depth the
/// launch reached (every backend counts the pushes that do not fit and
/// carries on without storing them, so the number is the real need).
absl::Status adStackOverflowError(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                  const Stmt *task, int64_t capacity, int64_t needed);
/// A launch the host stopped while a thread was in `loop` (a `for` or
/// `while`): DeadlineExceeded, Cancelled or ResourceExhausted by `reason`.
/// `limit`: the timeout in nanoseconds (Timeout) or the iteration limit
/// (LoopLimit).
absl::Status launchStoppedError(const Kernel &kernel, const Stmt &loop, const Stmt *task,
                                StopReason reason, int64_t limit);
/// The Vulkan driver ended `loop` (a `for`, a `while`, a parallel task's
/// grid-stride loop, or the compare-exchange loop of a float atomic add)
/// before the program did: Mesa's lavapipe leaves an invocation's loops
/// after 65535 iterations in all (SpirvOptions::checkLoopExits). A
/// ResourceExhausted status: the launch ran out of the driver's iteration
/// budget, and runs elsewhere.
absl::Status loopEndedEarlyError(const Kernel &kernel, const Stmt &loop, const Stmt *task);
/// The iterations lavapipe (Mesa's llvmpipe, gallivm's loop limiter) lets
/// the loops of one invocation run in all.
inline constexpr int64_t kLavapipeLoopIterations = 65535;

} // namespace qd
