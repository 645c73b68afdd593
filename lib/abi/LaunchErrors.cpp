//===- LaunchErrors.cpp - Launch diagnostics ------------------------------===//
#include "qd/abi/LaunchErrors.h"

#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace qd {

const Stmt *taskOf(const Stmt *s) {
  while (s && s->parentStmt())
    s = s->parentStmt();
  return s && s->isTask() ? s : nullptr;
}

std::string launchWhere(const Kernel &kernel, const Stmt *task) {
  return task ? fmt::format("kernel @{}, task at {}", kernel.name(), task->loc().str())
              : fmt::format("kernel @{}", kernel.name());
}

absl::Status statementError(const Kernel &kernel, const Stmt &s, const Stmt *task,
                            std::string_view what) {
  return absl::FailedPreconditionError(fmt::format("{}: error: {} (in {}: {})", s.loc().str(), what,
                                                   launchWhere(kernel, task), printStmtHeader(s)));
}

std::string globalName(bool field, std::string_view name, Component c) {
  std::string out(1, field ? '@' : '%');
  out += name;
  if (c != Component::Primal) {
    // Appended piecewise: `"." + std::string(...)` trips a false GCC 12
    // -Wrestrict at -O3.
    out += '.';
    out += toString(c);
  }
  return out;
}

std::string globalAccessName(const GlobalAccessStmt &g) {
  return globalName(g.field() != nullptr, g.field() ? g.field()->name() : g.ndarray()->name(),
                    g.component());
}

std::string indexOutOfRangeText(std::string_view global, std::span<const int64_t> indices,
                                std::span<const int64_t> shape, bool truncated) {
  std::string shown = fmt::format("{}", fmt::join(indices, ", "));
  if (truncated)
    shown += ", ...";
  return fmt::format("index [{}] is out of range for '{}' of shape [{}]", shown, global,
                     fmt::join(shape, ", "));
}

std::string adStackUnderflowText(const AdStackAllocaStmt *stack) {
  return fmt::format("adstack underflow: the adstack declared at {} is empty",
                     stack ? stack->loc().str() : "<unknown>");
}

absl::Status adStackNoCapacityError(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                    const Stmt *task) {
  return absl::FailedPreconditionError(
      fmt::format("{}: error: adstack has no capacity: size it (qd sizing passes) or set "
                  "LaunchOptions::defaultAdStackCapacity ({})",
                  stack.loc().str(), launchWhere(kernel, task)));
}

absl::Status adStackTooLargeError(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                  const Stmt *task, int64_t capacity) {
  return absl::ResourceExhaustedError(
      fmt::format("{}: error: adstack capacity {} is too large: the limit is 2^40 ({}) entries on "
                  "every backend; give the stack a smaller capacity ({})",
                  stack.loc().str(), capacity, kMaxAdStackCapacity, launchWhere(kernel, task)));
}

absl::Status adStackOverflowError(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                  const Stmt *task, int64_t capacity, int64_t needed) {
  return absl::ResourceExhaustedError(fmt::format(
      "{}: error: adstack overflow: the adstack declared at {} ({}) has capacity {} and this "
      "launch needed {}; give it a larger capacity or let Program::launch size it",
      stack.loc().str(), stack.loc().str(), launchWhere(kernel, task), capacity, needed));
}

namespace {

/// "in kernel @k, task at f.qd:3:3: `for` loop": the loop by its keyword
/// (printing it would print its whole body).
std::string loopWhere(const Kernel &kernel, const Stmt &loop, const Stmt *task) {
  auto *f = dyn_cast<ForStmt>(&loop);
  return fmt::format("in {}: `{}{}` loop", launchWhere(kernel, task),
                     f && f->isParallel() ? "parallel " : "", mnemonic(loop.kind()));
}

} // namespace

absl::Status launchStoppedError(const Kernel &kernel, const Stmt &loop, const Stmt *task,
                                StopReason reason, int64_t limit) {
  std::string where = loopWhere(kernel, loop, task);
  switch (reason) {
  case StopReason::Timeout:
    return absl::DeadlineExceededError(fmt::format(
        "{}: error: the launch ran past its timeout of {:g} ms and was stopped in this loop; check "
        "the loop's exit condition or allow more time (LaunchOptions::timeout, qd-run "
        "--timeout-ms) ({})",
        loop.loc().str(), double(limit) / 1e6, where));
  case StopReason::Cancelled:
    return absl::CancelledError(
        fmt::format("{}: error: the launch was cancelled (LaunchOptions::cancel) while in this "
                    "loop ({})",
                    loop.loc().str(), where));
  case StopReason::LoopLimit:
    return absl::ResourceExhaustedError(fmt::format(
        "{}: error: the launch ran its limit of {} loop iterations and was stopped in this loop; "
        "check the loop's exit condition or raise the limit (LaunchOptions::maxLoopIterations, "
        "qd-run --max-loop-iterations) ({})",
        loop.loc().str(), limit, where));
  case StopReason::None:
    break;
  }
  return absl::InternalError(fmt::format("{}: the launch reported stop reason {} ({})",
                                         loop.loc().str(), int(reason), where));
}

absl::Status loopEndedEarlyError(const Kernel &kernel, const Stmt &loop, const Stmt *task) {
  auto *f = dyn_cast<ForStmt>(&loop);
  bool isLoop = f || isa<WhileStmt>(loop);
  std::string what, fix, where;
  if (f && f->isParallel()) {
    what = "this parallel task's grid-stride loop";
    fix = "give the task more invocations (VulkanBackendOptions::maxThreads) so that each runs "
          "fewer of its iterations, or run the kernel on another Vulkan device or backend";
  } else {
    what = isLoop ? fmt::format("this `{}` loop", mnemonic(loop.kind()))
                  : fmt::format("the compare-exchange loop of this `{}`", mnemonic(loop.kind()));
    const auto *t = dyn_cast<ForStmt>(task);
    fix = t && t->isParallel()
              ? "run the kernel on another Vulkan device or backend, or give each invocation "
                "fewer loop iterations to run (fewer in the task's loops, or more invocations, "
                "VulkanBackendOptions::maxThreads, so that each runs fewer of the task's "
                "iterations)"
              : "run the kernel on another Vulkan device or backend, or spread the work over "
                "the iterations of a parallel task";
  }
  where = isLoop ? loopWhere(kernel, loop, task)
                 : fmt::format("in {}: {}", launchWhere(kernel, task), printStmtHeader(loop));
  return absl::ResourceExhaustedError(fmt::format(
      "{}: error: the Vulkan driver ended {} before the program did (Mesa's lavapipe ends the "
      "loops of an invocation after {} iterations in all, and the result would have been "
      "wrong); {} ({})",
      loop.loc().str(), what, kLavapipeLoopIterations, fix, where));
}

} // namespace qd
