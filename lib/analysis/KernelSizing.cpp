//===- KernelSizing.cpp - Adstack capacities of a kernel ------------------===//
#include "qd/analysis/KernelSizing.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"

#include <fmt/format.h>

namespace qd {

const std::string &AdStackSize::name() const {
  static const std::string none;
  return namer ? (*namer)[stack] : none;
}

std::string_view toString(SizingTier tier) {
  switch (tier) {
  case SizingTier::Declared:
    return "declared";
  case SizingTier::Constant:
    return "tier 1 constant";
  case SizingTier::LaunchTime:
    return "tier 2 launch-time";
  case SizingTier::Measured:
    return "tier 2 measured";
  case SizingTier::Default:
    return "tier 3 default";
  }
  return "?";
}

std::string_view toString(SizingMethod method) {
  switch (method) {
  case SizingMethod::Declared:
    return "declared";
  case SizingMethod::Unused:
    return "unused";
  case SizingMethod::Structural:
    return "structural";
  case SizingMethod::BellmanFord:
    return "bellman-ford";
  case SizingMethod::Evaluated:
    return "evaluated";
  case SizingMethod::SizeExpr:
    return "size-expr";
  case SizingMethod::Counted:
    return "count-kernel";
  case SizingMethod::Default:
    return "default";
  }
  return "?";
}

const AdStackSize *KernelSizing::find(const AdStackAllocaStmt *stack) const {
  for (const AdStackSize &s : stacks_)
    if (s.stack == stack)
      return &s;
  return nullptr;
}

std::string KernelSizing::describe(const AdStackSize &s) const {
  std::string bound = s.expr                           ? printSizeExpr(*s.expr, names_)
                      : s.tier == SizingTier::Measured ? fmt::format("need[{}]", s.countSlot)
                                                       : std::to_string(s.capacity);
  std::string out =
      fmt::format("adstack {} ({}) at {}: {} [{}] = {}", s.name(), toString(s.stack->elementType()),
                  s.stack->loc().str(), toString(s.tier), toString(s.method), bound);
  if (s.method != SizingMethod::Declared &&
      (s.tier == SizingTier::Constant || s.tier == SizingTier::LaunchTime ||
       s.tier == SizingTier::Measured))
    out += s.exact ? " (exact)" : " (upper bound)";
  if (s.refined)
    out += fmt::format(", refined at launch [count-kernel] = need[{}]", s.countSlot);
  if (!s.reason.empty())
    out += ": " + s.reason;
  return out;
}

std::string KernelSizing::report(std::string_view kernelName, const StackNote &note) const {
  std::string out;
  for (const AdStackSize &s : stacks_) {
    out += fmt::format("@{}: {}", kernelName, describe(s));
    if (note)
      out += note(s);
    out += '\n';
  }
  return out;
}

} // namespace qd
