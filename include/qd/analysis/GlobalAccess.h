//===- qd/analysis/GlobalAccess.h - Write-after-read checks -----*- C++ -*-===//
//
// Reverse mode replays a kernel's reads from memory, so a kernel must never
// write a field or ndarray element after reading it in the same launch. This
// static check reports the reads and writes of a global (primal data) that
// may violate the rule: a write in a later task than a read, a write after a
// read in the same iteration, or a read and a write in a loop (the write of
// one iteration may follow the read of another). Accesses of a parallel task
// to elements each iteration owns (ElementOwnership.h: one index position
// holds the task index in every access) only conflict within one iteration.
//
// The check is sound under aliasing: a read through one ndarray argument and
// a write through another may touch the same memory (the caller may pass one
// buffer for both), so they are checked as one global unless their element
// types or ranks differ (ElementOwnership.h, "Alias classes"). The
// interpreter's LaunchOptions::checkGlobalAccesses is the exact, dynamic
// counterpart (it sees the buffers actually passed).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace qd {

class Kernel;
class Stmt;

struct GlobalAccessConflict {
  std::string global;     // the written global: `@x` or `%a`
  std::string readGlobal; // the read one: `global`, or an ndarray that may alias it
  const Stmt *read = nullptr;
  const Stmt *write = nullptr;
  /// The read and the write go through two ndarrays that may alias.
  bool throughAliases() const { return global != readGlobal; }
};

/// At most one conflict per global read, in program order of the globals'
/// first access; a conflict through the global itself is preferred to one
/// through an ndarray that may alias it.
std::vector<GlobalAccessConflict> findGlobalAccessConflicts(const Kernel &kernel);

/// `file:line:col: error: ...` for `conflict`, naming both statements (and
/// both ndarrays when they may alias).
std::string describe(const GlobalAccessConflict &conflict, const Kernel &kernel);

} // namespace qd
