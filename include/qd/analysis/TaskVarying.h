//===- qd/analysis/TaskVarying.h - What differs between iterations -*- C++ -*-===//
//
// The values of a parallel task that may differ from one iteration to the
// next: its indices and what depends on them through operands, locals and
// adstacks. Control flow is not followed (a local stored different
// constants under a varying condition counts as the same everywhere), so
// the set serves heuristics whose code checks at run time: the GPU targets
// sum the atomic adds to an element no index of which is in the set over a
// warp or subgroup first, when every lane there updates one address.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <unordered_set>

namespace qd {

class ForStmt;
class GlobalAccessStmt;
class Value;

/// The values of parallel task `task` that may differ between iterations
/// (of any `for` loop: what depends on its index).
std::unordered_set<const Value *> taskVaryingValues(const ForStmt &task);

/// Whether an index of `access` (not the value it stores or adds) is one
/// of `varying`: the element it touches may differ between iterations.
bool hasVaryingIndex(const GlobalAccessStmt &access,
                     const std::unordered_set<const Value *> &varying);

} // namespace qd
