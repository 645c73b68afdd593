//===- KernelVariants.h - Helpers for kernels derived from a kernel -------===//
//
// Shared by the builders of a kernel's sizing variants (the counting kernel,
// AdStackCounting.cpp; the optimistic launch, AdStackOptimistic.cpp). Not a
// public header.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace qd::variants {

/// The task (top-level `parallel for` or `serial`) containing `s`.
inline Stmt *taskOf(Stmt *s) {
  while (s->parentStmt())
    s = s->parentStmt();
  return s;
}

/// `base`, or `base1`, `base2`... when `k` already has an argument of that
/// name.
inline std::string freshArgumentName(const Kernel &k, std::string base) {
  std::string name = base;
  for (int i = 1; k.findArgument(name); ++i)
    name = fmt::format("{}{}", base, i);
  return name;
}

/// The statements of `kernel` in preorder (a clone has the same order).
inline std::vector<Stmt *> preorder(const Kernel &kernel) {
  std::vector<Stmt *> out;
  walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) { out.push_back(&s); });
  return out;
}

/// Each statement of `source` mapped onto the statement of `clone` at the
/// same preorder position.
inline std::unordered_map<const Stmt *, Stmt *> cloneMap(const Kernel &source,
                                                         const Kernel &clone) {
  std::vector<Stmt *> from = preorder(source), to = preorder(clone);
  std::unordered_map<const Stmt *, Stmt *> out;
  for (size_t i = 0; i < from.size() && i < to.size(); ++i)
    out[from[i]] = to[i];
  return out;
}

/// Whether buildAdStackOptimistic(kernel, stacks) succeeds, found without
/// building the launch's kernels (`names`: of `kernel`; its refusals name
/// stacks). Defined in AdStackOptimistic.cpp.
bool mayLaunchOptimistically(const Kernel &kernel, std::span<const AdStackAllocaStmt *const> stacks,
                             const LazyValueNamer &names);

} // namespace qd::variants
