//===- AdStackReport.cpp - A kernel's sizing report from its backend ------===//
#include "qd/analysis/KernelSizing.h"
#include "qd/runtime/Program.h"

#include <fmt/format.h>

namespace qd {

namespace {

// Whether `placed` is `s`'s stack or a copy of it in one of the kernel's
// optimistic variants (the try and rerun kernels an optimistic launch ran).
bool placedFor(const KernelSizing &sizing, const AdStackSize &s, const AdStackAllocaStmt *placed) {
  if (placed == s.stack)
    return true;
  if (const OptimisticLaunch *o = sizing.optimistic())
    for (const OptimisticLaunch::Copies &c : o->stacks)
      if (c.source == s.stack && (c.inTry == placed || c.inRerun == placed))
        return true;
  return false;
}

std::string describePlacement(const AdStackPlacement &p) {
  std::string where = p.memory == AdStackPlacement::Memory::LocalTape
                          ? fmt::format("local tape of {} entries", p.entries)
                          : std::string("heap");
  return fmt::format("; last launch: capacity {}, {} ({} bytes per thread)", p.capacity, where,
                     p.bytesPerThread);
}

} // namespace

absl::StatusOr<std::string> Backend::sizingReport(const Kernel &kernel) {
  absl::StatusOr<const KernelSizing *> sizing = adStackSizing(kernel);
  if (!sizing.ok())
    return sizing.status();
  std::vector<AdStackPlacement> placement = lastAdStackPlacement();
  return (*sizing)->report(kernel.name(), [&](const AdStackSize &s) {
    for (const AdStackPlacement &p : placement)
      if (placedFor(**sizing, s, p.stack))
        return describePlacement(p);
    return std::string();
  });
}

} // namespace qd
