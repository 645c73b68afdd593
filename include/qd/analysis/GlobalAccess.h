//===- qd/analysis/GlobalAccess.h - Write-after-read checks -----*- C++ -*-===//
//
// Reverse mode replays a kernel's reads from memory, so a kernel must never
// write a field or ndarray element after reading it in the same launch. This
// static check reports the reads and writes of a global (primal data) that
// may violate the rule: a write in a later task than a read, a write after a
// read in the same iteration, or a read and a write in a loop (the write of
// one iteration may follow the read of another). Accesses of a parallel task
// that all use the same index list containing the task index touch a
// different element in every iteration and only conflict within one. The
// interpreter's LaunchOptions::checkGlobalAccesses is the exact, dynamic
// counterpart.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace qd {

class Kernel;
class Stmt;

struct GlobalAccessConflict {
  std::string global; // `@x` or `%a`
  const Stmt *read = nullptr;
  const Stmt *write = nullptr;
};

/// At most one conflict per global, in program order of the globals' first
/// access.
std::vector<GlobalAccessConflict> findGlobalAccessConflicts(const Kernel &kernel);

} // namespace qd
