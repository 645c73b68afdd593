//===- qd/analysis/StopChecks.h - Which loops read the stop word -*- C++ -*-===//
//
// A launch that may be stopped (a timeout or a cancel flag) runs code that
// reads a stop word at loop back edges. Reading it costs little, but a check
// in a short loop with constant bounds keeps LLVM from unrolling it, so only
// the loops that can run long check:
//
//  - every `while` loop, and every range-for (parallel tasks and bands
//    included) whose trip count is not a compile-time constant;
//  - a range-for with a constant trip count T whose unchecked work
//    reaches `minWork`: T times (1 + the unchecked work of its body), where
//    a loop in the body that checks itself adds nothing and one that does
//    not adds its own unchecked work (saturating arithmetic; both branches
//    of an `if` count).
//
// So a nest of loops without checks runs fewer than `minWork` iterations in
// all, whatever its shape (abi::kStopCheckMinWork on every backend).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>

namespace qd {

class Kernel;
class Stmt;

class StopCheckPlan {
public:
  StopCheckPlan() = default;
  /// Plans the loops of `kernel` (see the file comment).
  StopCheckPlan(const Kernel &kernel, uint64_t minWork);

  /// Whether `loop` (a for, parallel for or while) checks the stop word.
  bool checks(const Stmt &loop) const { return checked_.contains(&loop); }
  size_t size() const { return checked_.size(); }

private:
  std::unordered_set<const Stmt *> checked_;
};

} // namespace qd
