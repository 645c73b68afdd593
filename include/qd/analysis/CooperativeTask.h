//===- qd/analysis/CooperativeTask.h - Groups sharing a serial loop -*- C++ -*-===//
//
// A parallel task with few iterations and a long serial loop inside each
// (a hidden unit summing over every mass, a row reduced over its columns)
// leaves a GPU almost idle when each iteration runs on one thread. A
// *cooperative* task runs each iteration on a whole group of threads
// (a CUDA block, an AMDGPU workgroup):
//
//  - every thread of the group runs the statements outside the shared loop
//    itself, with the same operands, so it computes the same values; the
//    statements that change global memory there (stores, atomics) run on
//    the group's first thread only;
//  - the shared loop's iterations are spread over the group's threads
//    (thread k runs iterations begin + k, begin + k + size, ...);
//  - the locals the loop adds into (sums) start at 0 on each thread, and
//    after the loop the group adds the threads' partial sums in a fixed
//    tree order and every thread adds the total to the local's value
//    before the loop. Floating-point sums are therefore reassociated (the
//    result is deterministic from launch to launch, within rounding of the
//    serial order).
//
// Every long loop of the task's body (a run-time trip count, or a literal
// one of at least leastLoopIterations) must qualify, and is shared. The plan says
// whether a task may run so: the loop's iterations must be
// independent apart from those sums (other locals it writes must be
// defined inside it, or hold at the end of each iteration the value they
// held at its start, the adjoint pattern of a reverse loop: `load`, store
// -0.0, add back); the loop neither stores to global memory nor reads what
// it updates atomically; nothing in the task uses an adstack or leaves the
// loop early. A store outside the loop to memory the task reads is
// *fenced*: the group waits before it (every thread has read the old
// value) and after it (every thread sees the new one); such statements must
// be at the task's top level, where every thread of the group runs the
// same control flow.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/ElementOwnership.h"

#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace qd {

class AllocaStmt;
class ForStmt;
class Kernel;
class Stmt;

/// The code generators' and backends' defaults: a task of at most this many
/// iterations runs a group per iteration, and at most the second when a
/// shared loop scatters. The two are equal: a task of a few thousand
/// iterations leaves all but a few percent of a GPU idle when each runs on
/// one thread, which costs far more than making each scattered add its own
/// atomic (billiards' collision gradient, 3 241 balls: 3.08 ms per step one
/// iteration per thread, 0.43 ms cooperative on an H200).
constexpr int64_t kDefaultCooperativeTaskIterations = 4096;
constexpr int64_t kDefaultCooperativeScatteringIterations = kDefaultCooperativeTaskIterations;
/// A shared loop worth a group: a literal trip count of at least this many
/// iterations (a run-time one qualifies at compile time; the runtime then
/// checks it at launch, KernelLayout::Launch::cooperativeLoops).
constexpr int64_t kLeastSharedLoopIterations = 64;

/// When a task is worth running cooperatively.
struct CooperativeTaskOptions {
  /// Tasks with a literal trip count of at most this many iterations (0:
  /// never cooperative).
  int64_t mostTaskIterations = 0;
  /// A shared loop with a literal trip count needs at least this many
  /// iterations (one with a run-time trip count always qualifies).
  int64_t leastLoopIterations = kLeastSharedLoopIterations;
  /// A task whose trip count is known only at launch qualifies too (its
  /// code generator then emits both forms, and the runtime chooses).
  bool runTimeTrips = false;
  /// Most iterations of a task whose shared loop scatters: adds atomically
  /// to elements chosen by the loop's index. One iteration per thread, the
  /// threads of a warp add to the same element at once and the warp sums
  /// its adds first (uniformAtomicUpdate); shared, every add is its own.
  int64_t mostScatteringIterations = kDefaultCooperativeScatteringIterations;
  NdarrayAliasing aliasing = NdarrayAliasing::MayAlias;
};

struct CooperativeTaskPlan {
  /// A serial loop the group's threads share (a statement of the task's
  /// body), and the locals declared outside it that it only adds into.
  struct SharedLoop {
    const ForStmt *loop = nullptr;
    std::vector<const AllocaStmt *> sums;
  };
  /// In body order; empty when the task runs one iteration per thread.
  std::vector<SharedLoop> loops;
  /// Global stores and atomics outside the shared loops (run by the first
  /// thread).
  std::set<const Stmt *> guarded;
  /// Those of `guarded` the group waits around (top-level statements).
  std::set<const Stmt *> fenced;
  /// Why the task is not cooperative (empty when it is, or when it has no
  /// candidate loop at all).
  std::string refused;
  /// The most iterations for which the cooperative form pays
  /// (CooperativeTaskOptions::mostTaskIterations, or
  /// ::mostScatteringIterations when a shared loop scatters).
  int64_t mostIterations = 0;

  bool cooperative() const { return !loops.empty(); }
  /// The shared loop `s` is, or null.
  const SharedLoop *shared(const Stmt *s) const {
    for (const SharedLoop &l : loops)
      if (l.loop == s)
        return &l;
    return nullptr;
  }
  /// Whether `s` is inside one of the shared loops, where the group's
  /// threads run different iterations of the loop at once: an atomic add
  /// there stays atomic even to an element only its task iteration touches
  /// (a private atomic elsewhere).
  bool inSharedLoop(const Stmt &s) const;
};

/// Plans `task` (a top-level parallel for).
CooperativeTaskPlan planCooperativeTask(const ForStmt &task, const CooperativeTaskOptions &options);

/// Prints, for every parallel task of `kernel`, the plan the GPU code
/// generators make under `options` (aliasing both ways): the shared loops
/// and their sums, or why the task runs one iteration per thread (the
/// `print-cooperative-tasks` pass).
void printCooperativeTasks(const Kernel &kernel, CooperativeTaskOptions options, std::ostream &os);

} // namespace qd
