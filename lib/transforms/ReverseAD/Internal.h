//===- Internal.h - The parts of reverse mode (see ReverseAD.cpp) ---------===//
//
// Reverse mode in four steps, one file each:
//  1. JumpLowering.cpp: break/continue become flags in a private copy of
//     the kernel (the *source*), so every loop body is straight-line code
//     and ifs plus at most one final `if <flag> { break }`;
//  2. NeededValues.cpp: which primal values the reverse sweep reads;
//  3. LoopPlanning.cpp: per loop, which locals are pushed on adstacks every
//     iteration, saved once at entry, and which nested loops are taped;
//  4. PrimalReplay.cpp (forward code: frames, Record, Plain) and
//     AdjointSweep.cpp (reverse code: adjoints and Rev) build the gradient
//     kernel; Checkpointing.cpp the forward and reverse code of
//     checkpointed loops.
//
// Terms used (see also qd/transforms/AutoDiff.h):
//  - a *frame* is a block of the gradient kernel that runs the forward code
//    of a source block (Fwd) followed by its reverse (Adj): a task body, or
//    one iteration of a reversed loop. Forward values at the frame's top
//    level dominate the reverse code; values computed inside if arms are
//    saved to locals ("backups") declared at the frame's top;
//  - *Record(L)* runs loop L forward once, pushing the loop-carried locals
//    the reverse needs at the start of every iteration; *Rev(L)* runs the
//    iterations backwards, each one a new frame.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/Activity.h"
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/transforms/AutoDiff.h"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace qd::reverse {

/// Sets of a kernel's values and statements: the planner's sets hold a
/// large gradient's every statement, where open addressing stays in cache
/// far better than a node per element. Nothing iterates them in an order
/// that reaches the output.
using ValueSet = absl::flat_hash_set<const Value *>;
using StmtSet = absl::flat_hash_set<const Stmt *>;

//===--- 1. jumps ---------------------------------------------------------===//

/// Lowers the break/continue of every loop of `k` to flags; returns the
/// loops that may break.
StmtSet lowerJumps(Kernel &k);

//===--- 2. needed values -------------------------------------------------===//

/// The values whose primal the reverse of some statements needs (non-linear
/// operands, conditions, bounds, indices, and what they are computed from).
class NeededValues {
public:
  explicit NeededValues(const Activity &activity) : activity_(activity) {}

  /// Adds to `values` what the reverse of `stmts` needs, and to `locals`
  /// the locals whose loads are needed, following operands only within
  /// `scope` when it is given (the statements of one loop body). `roots`
  /// are needed in any case; values outside `scope` that would be needed
  /// are listed in `outside`.
  /// Statements whose derivative factor is taped: the reverse reads
  /// nothing for them (null: none).
  void setTapedFactors(const StmtSet *taped) { tapedFactors_ = taped; }

  void compute(const std::vector<Stmt *> &stmts, const StmtSet *scope, ValueSet &values,
               ValueSet &locals, const std::vector<const Value *> &roots = {},
               std::vector<const Value *> *outside = nullptr);

private:
  void need(const Value *v);
  void needDirectReads(Stmt &s);

  const Activity &activity_;
  const StmtSet *tapedFactors_ = nullptr;
  ValueSet *target_ = nullptr;
  const StmtSet *scope_ = nullptr;
  std::vector<const Value *> *outside_ = nullptr;
  ValueSet outsideSeen_;
  std::vector<const Value *> work_;
};

//===--- 3. loop plans ----------------------------------------------------===//

/// Per source loop: what Record/Rev need.
struct LoopPlan {
  std::vector<AllocaStmt *> perIteration; // source locals pushed every iteration
  std::vector<AllocaStmt *> atEntry;      // source locals saved once before the loop
  bool counted = false;                   // while loop or a loop that may break
  /// Taped: a range-for nested in another range-for P whose iterations it
  /// records while P is recorded (pushes in Plain(P)), so that the reverse
  /// frames of P reverse it without running it again (see decideTaping).
  bool taped = false;
  /// Values defined outside the loop that its reverse needs.
  std::vector<const Value *> outsideNeeds;
  /// Statements of the body (at its top level) whose derivative factor is
  /// pushed every iteration (ReverseADOptions::tapeFactors). When there are
  /// any, the reverse frames of the loop replay only `replayValues` and the
  /// locals `replayLocals` (what the reverse of the body reads), not
  /// everything the forward sweep computes.
  std::vector<const Stmt *> tapedFactors;
  ValueSet replayValues, replayLocals;
  /// Checkpointed (ReverseADOptions::checkpointLoops; see Checkpointing.cpp):
  /// Record(L) tapes no iteration unless the launch's interval k covers the
  /// trip count; it stores `checkpointState` every k iterations instead, and
  /// Rev(L) records and reverses one segment of k iterations at a time.
  bool checkpointed = false;
  /// The locals declared outside the loop that it writes and reads: the
  /// state a segment starts from.
  std::vector<AllocaStmt *> checkpointState;
};

/// What the gradient builder keeps of the source kernel.
struct ReversePlan {
  /// Source values (and locals, through their loads) the reverse needs.
  ValueSet needed, neededLocals;
  /// Every non-task loop of the source.
  std::unordered_map<const Stmt *, LoopPlan> loops;
  /// The field checkpointed loops read their interval from (null: none is
  /// checkpointed; qd/ir/Checkpointing.h).
  Field *checkpointInterval = nullptr;
};

/// Plans the gradient of `source`. `breaking`: the loops that may break.
ReversePlan planReverse(Kernel &source, const Activity &activity, const StmtSet &breaking,
                        const ReverseADOptions &options);

//===--- 4. the gradient kernel -------------------------------------------===//

struct Frame;
/// Per source value, the innermost live frame that holds it.
using FrameIndex = absl::flat_hash_map<const Value *, Frame *>;

/// Frames live on the C++ stack, each inside its parent's lifetime, so the
/// live frames form one chain, and those of a depth at most `f.depth` are
/// `f` and its parents: `PrimalReplay::primal` finds the nearest frame that
/// holds a value through the index and the `outer` links of its holders
/// instead of walking up the chain (which made every lookup from inside a
/// nest of depth D cost D).
struct Frame {
  /// A source value's forward value here: `value`, else a load of `backup`.
  struct Held {
    Value *value = nullptr;
    AllocaStmt *backup = nullptr;
    Frame *outer = nullptr; // the next frame out that holds it
  };

  Frame(Frame *parent, FrameIndex &index)
      : parent(parent), depth(parent ? parent->depth + 1 : 0), index_(index) {}
  Frame(const Frame &) = delete;
  Frame &operator=(const Frame &) = delete;
  ~Frame() { // the innermost holder of all it holds: frames inside it are gone
    for (const auto &[v, h] : held)
      index_.at(v) = h.outer;
  }

  void setDirect(const Value *v, Value *x) { hold(v).value = x; }
  void setBackup(const Value *v, AllocaStmt *a) { hold(v).backup = a; }
  bool holdsDirect(const Value *v) const {
    auto it = held.find(v);
    return it != held.end() && it->second.value;
  }

  Frame *const parent;
  const unsigned depth;
  Block *block = nullptr;
  /// A reverse frame of a loop with taped factors: the loop, and what its
  /// reverse frames replay.
  const Stmt *replayLoop = nullptr;
  const LoopPlan *replay = nullptr;
  absl::flat_hash_map<const Value *, Held> held; // written through setDirect, setBackup
  absl::flat_hash_map<const Value *, AllocaStmt *> adj;

private:
  Held &hold(const Value *v) {
    auto [it, fresh] = held.try_emplace(v);
    if (fresh)
      if (auto [top, first] = index_.try_emplace(v, this); !first)
        it->second.outer = std::exchange(top->second, this);
    return it->second;
  }

  FrameIndex &index_;
};

/// The forward side of the gradient kernel: primal values in frames,
/// Fwd(B), Record(L), Plain(B) and the adstacks they push.
class PrimalReplay {
public:
  PrimalReplay(Kernel &source, Kernel &grad, const ReversePlan &plan)
      : src_(source), grad_(grad), plan_(plan) {}

  const std::string &internalError() const { return internalError_; }
  /// Counts the frames `primal` looks into (ReverseADWork::frameProbes).
  void countWork(ReverseADWork *work) { work_ = work; }

protected:
  using LoopLocal = std::pair<const Stmt *, const AllocaStmt *>;
  struct PairHash {
    size_t operator()(const LoopLocal &p) const {
      return std::hash<const void *>()(p.first) * 31 + std::hash<const void *>()(p.second);
    }
  };

  const LoopPlan &loopPlan(const Stmt &loop) const { return plan_.loops.at(&loop); }
  void markOwner(Block &b, Frame *f);
  /// The forward value of source value `v` at the builder's position.
  Value *primal(const Value *v, Frame &f, IRBuilder &b);
  Bound bound(Bound src, Frame &f, IRBuilder &b);
  IRBuilder atTop(Frame &f);
  bool wanted(const Stmt &s) const;
  /// Whether Fwd(B) replays `s` in frame `f`.
  bool wantedIn(const Stmt &s, const Frame &f) const;
  /// Pushes the derivative factor of `s` if its loop tapes it, where
  /// `clone` is its forward value (Record(L), Plain(P)).
  void pushFactor(const Stmt &s, Value *clone, IRBuilder &b, ValueMap &map, Frame &f);
  Value *cloneLeaf(const Stmt &s, IRBuilder &b, Frame &f, bool inArm);
  /// Fwd(B): the forward code of a frame's block (and of its if arms).
  void forward(Block &block, IRBuilder &b, Frame &f, bool inArm);
  void plain(Block &block, IRBuilder &b, Frame &f, ValueMap &map, bool taping);
  Value *lookup(const Value *v, Frame &f, IRBuilder &b, ValueMap &map);
  AllocaStmt *counterOf(const Stmt &loop, Frame &f);
  void saveAtEntry(Stmt &loop, IRBuilder &b, Frame &f);
  void allocateStacks(Stmt &loop, Frame &f);
  /// Bounds that replace a range-for's own in Record(L) and Rev(L): values
  /// of the gradient kernel (a segment of a checkpointed loop).
  using Range = std::optional<std::pair<Bound, Bound>>;
  /// Record(L), over `range` when given.
  void record(Stmt &loop, IRBuilder &b, Frame &f, Range range = {});
  static const IfStmt *exitGuard(const Stmt &loop);

  /// A checkpointed loop's bounds and segments for this launch
  /// (Checkpointing.cpp).
  struct Segments {
    Value *begin, *end, *interval;
    Value *fullEnd; // `end` when the interval covers the trip count, else `begin`
    Value *count;   // segments of the checkpointed path (0 on the full path)
  };
  Segments segments(const ForStmt &loop, Frame &f, IRBuilder &b);
  /// The bounds of segment `s` (0-based, in forward order).
  std::pair<Bound, Bound> segmentRange(const Segments &g, Value *s, IRBuilder &b);
  /// Record(L) of a checkpointed loop: the fully taped loop, then the
  /// untaped segments that store their start states.
  void recordCheckpointed(ForStmt &loop, IRBuilder &b, Frame &f);

  Kernel &src_;
  Kernel &grad_;
  const ReversePlan &plan_;
  absl::flat_hash_map<const Stmt *, Frame *> owner_;
  FrameIndex frames_; // declared before any frame lives
  ReverseADWork *work_ = nullptr;
  std::vector<std::unordered_map<const Value *, Value *>> armScopes_;
  std::unordered_map<LoopLocal, AdStackAllocaStmt *, PairHash> stacks_;
  std::unordered_map<LoopLocal, AllocaStmt *, PairHash> entrySaves_;
  /// The stack of each taped derivative factor.
  std::unordered_map<const Stmt *, AdStackAllocaStmt *> factorStacks_;
  std::unordered_map<const Stmt *, AllocaStmt *> counters_;
  /// The checkpoint stacks of each checkpointed loop (LoopPlan::checkpointState order).
  std::unordered_map<const Stmt *, std::vector<AdStackAllocaStmt *>> checkpoints_;
  /// Record(L) of a while loop that leaves at its top: the guard whose
  /// block starts each completed iteration, and what to emit there.
  const Stmt *pushGuard_ = nullptr;
  std::function<void()> atPushGuard_;
  std::string internalError_;
};

/// Builds the gradient kernel: the tasks in reverse order, each a frame
/// (Fwd then Adj), loops reversed by Rev(L).
class GradientBuilder : public PrimalReplay {
public:
  GradientBuilder(Kernel &source, Kernel &grad, const ReversePlan &plan, const Activity &activity)
      : PrimalReplay(source, grad, plan), activity_(activity) {}

  void run();

private:
  AllocaStmt *adjointOf(const Value *v);
  /// adj(v) += x, for active float values (and locals).
  void accumulate(const Value *v, Value *x, IRBuilder &b);
  /// The adjoint of `s` if anything accumulated into it, else null.
  Value *adjointValue(const Stmt &s, IRBuilder &b);
  void reverse(Block &block, IRBuilder &b, Frame &f);
  /// Rev(L), over `range` when given.
  void reverseLoop(Stmt &loop, IRBuilder &b, Frame &f, Range range = {});
  /// Rev(L) of a checkpointed loop: the fully taped loop's reverse, then
  /// the segments, last first, each restored, recorded and reversed in a
  /// frame of its own (Checkpointing.cpp).
  void reverseCheckpointed(ForStmt &loop, IRBuilder &b, Frame &f);
  /// One frame: Fwd(B) then Adj(B), appended at the end of the frame block.
  void frame(Block &src, Frame &f, IRBuilder *at = nullptr);
  void adjoint(Stmt &s, IRBuilder &b, Frame &f);

  const Activity &activity_;
  /// Stores of the task being reversed whose adjoint zeroing waits for the
  /// end of the reversed iteration (deferredZeroings), and the zeroing
  /// stores waiting.
  StmtSet deferZeroing_;
  struct PendingZero {
    GlobalRef ref;
    std::vector<Value *> indices;
    ScalarType type;
    Location loc;
  };
  std::vector<PendingZero> pendingZeroes_;
};

} // namespace qd::reverse
