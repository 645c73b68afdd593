//===- LoopPlanning.cpp - What each reversed loop keeps -------------------===//
//
// Per loop of the source: the loop-carried locals Record(L) pushes every
// iteration (those whose value at the start of an iteration the reverse of
// the body needs), the locals saved once at entry (read, never written),
// whether the trip count is recorded (while loops, loops that break), and
// which nested range-fors are taped.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "../DerivativeRules.h"

#include "qd/ir/Visitor.h"

#include <algorithm>

namespace qd::reverse {
namespace {

class LoopPlanner {
public:
  LoopPlanner(Kernel &source, const Activity &activity, const StmtSet &breaking,
              const ReverseADOptions &options)
      : src_(source), activity_(activity), breaking_(breaking), options_(options),
        needs_(activity) {}

  ReversePlan run() {
    scan(src_.body(), nullptr, nullptr);
    needs_.compute(order_, nullptr, plan_.needed, plan_.neededLocals);
    planLoops();
    if (options_.checkpointLoops)
      planCheckpoints();
    return std::move(plan_);
  }

private:
  static bool isLoop(const Stmt &s) {
    return (s.kind() == StmtKind::For || s.kind() == StmtKind::While) && !s.isTask();
  }

  /// What planning and taping read of a loop's body, gathered bottom-up in
  /// one walk of the kernel: no loop's body is walked again for its own
  /// plan (in a nest of depth D each such walk made planning O(D^2)).
  struct LoopFacts {
    size_t at = 0;   // the loop's pre-order position
    size_t last = 0; // the last pre-order position inside it
    /// Locals accessed inside, declared outside, by first access.
    std::vector<AllocaStmt *> outsideLocals;
    ValueSet writes; // locals stored inside
    bool hasInnerLoop = false;
  };

  /// Numbers the statements in pre-order (`order_`, `allocaAt_`), lists every
  /// local's loads in that order and fills `facts_`. `facts`, `seen`: those
  /// of the innermost loop around `block` (null: none). A local accessed
  /// inside a loop is declared outside it exactly when its alloca comes
  /// before the loop: the alloca precedes the access in a block around it.
  void scan(Block &block, LoopFacts *facts, ValueSet *seen) {
    auto note = [&](Value *local) {
      if (facts && allocaAt_.at(cast<Stmt>(local)) < facts->at && seen->insert(local).second)
        facts->outsideLocals.push_back(cast<AllocaStmt>(local));
    };
    for (Stmt &s : block) {
      count(1);
      size_t at = order_.size();
      order_.push_back(&s);
      if (isa<AllocaStmt>(&s))
        allocaAt_.emplace(&s, at);
      if (auto *ld = dyn_cast<LocalLoadStmt>(&s)) {
        loads_[ld->local()].push_back(at);
        note(ld->local());
      } else if (auto *st = dyn_cast<LocalStoreStmt>(&s)) {
        if (facts)
          facts->writes.insert(st->local());
        note(st->local());
      }
      if (!isLoop(s)) {
        for (unsigned i = 0; i < s.numBlocks(); ++i)
          scan(s.block(i), facts, seen);
        continue;
      }
      LoopFacts inner;
      inner.at = at;
      ValueSet innerSeen;
      for (unsigned i = 0; i < s.numBlocks(); ++i)
        scan(s.block(i), &inner, &innerSeen);
      inner.last = order_.size() - 1;
      if (facts) {
        facts->hasInnerLoop = true;
        for (AllocaStmt *a : inner.outsideLocals)
          note(a);
        facts->writes.insert(inner.writes.begin(), inner.writes.end());
      }
      facts_.emplace(&s, std::move(inner));
    }
  }

  void count(size_t visits) {
    if (options_.work)
      options_.work->plannerVisits += visits;
  }

  bool anyLoadBetween(const Value *local, size_t from, size_t to) const {
    auto it = loads_.find(local);
    if (it == loads_.end())
      return false;
    auto i = std::lower_bound(it->second.begin(), it->second.end(), from);
    return i != it->second.end() && *i <= to;
  }

  /// The loads of `local` at pre-order positions in [from, to].
  template <typename Fn> void loadsBetween(const Value *local, size_t from, size_t to, Fn &&fn) {
    auto it = loads_.find(local);
    if (it == loads_.end())
      return;
    const std::vector<size_t> &at = it->second;
    for (auto i = std::lower_bound(at.begin(), at.end(), from); i != at.end() && *i <= to; ++i)
      fn(*i);
  }

  void planLoops() {
    if (!options_.tapeNestedLoops) {
      walk(src_.body(), [&](Stmt &s) {
        if (isLoop(s))
          plan_.loops[&s] = planLoop(s);
      });
      return;
    }
    // Which loops are taped depends only on which are counted; then every
    // loop is planned once, inner loops first, each taped loop inside seen
    // as a black box (a loop with taped loops inside needs less). Planning
    // every loop before taping and the loops that hold taped ones again
    // gave the same plans at twice the cost (each plan reads the whole
    // body: quadratic in a nest).
    walk(src_.body(), [&](Stmt &s) {
      if (isLoop(s))
        plan_.loops[&s].counted = isCounted(s);
    });
    decideTaping();
    walkPostOrder(src_.body(), [&](Stmt &s) {
      if (!isLoop(s))
        return;
      LoopPlan &plan = plan_.loops.at(&s);
      bool taped = plan.taped;
      plan = planLoop(s);
      plan.taped = taped;
    });
  }

  bool isCounted(const Stmt &s) const { return s.kind() == StmtKind::While || breaking_.count(&s); }

  /// What Record(L)/Rev(L) keep for `loop`. A loop-carried local is saved
  /// only if the reverse of the loop's own body needs its value; what later
  /// code needs is recomputed by the forward run of the loop. A loop taped
  /// inside (through taped loops only) is a black box: Plain(L) filled its
  /// stacks and its reverse restores its locals from them, so it needs from
  /// `loop`'s reverse frame only its bounds, the locals it saves at entry
  /// and the outside values its reverse reads.
  LoopPlan planLoop(Stmt &s) {
    LoopPlan plan = planLoop(s, nullptr);
    // Innermost loops only: the reverse frames of a loop with loops inside
    // run their Record(L), which reads more of the frame than the reverse.
    if (!options_.tapeFactors || s.kind() != StmtKind::For || plan.counted ||
        facts_.at(&s).hasInnerLoop)
      return plan;
    // The derivative factors worth taping: those of the body's top level
    // (every iteration pushes each once). Only all of them or none, and
    // only if the loop then pushes no more values per iteration: the
    // locals the reverse no longer reads make room for the factors.
    StmtSet factors;
    std::vector<const Stmt *> inOrder;
    for (Stmt &t : s.block(0))
      if (ad::hasDerivativeFactor(t) && activity_.isActive(&t) &&
          activity_.isActive(t.operand(0)) && factors.insert(&t).second)
        inOrder.push_back(&t);
    if (factors.empty())
      return plan;
    LoopPlan taping = planLoop(s, &factors);
    if (taping.perIteration.size() + factors.size() > plan.perIteration.size())
      return plan;
    taping.tapedFactors = std::move(inOrder);
    return taping;
  }

  /// `planLoop` with the factors of `factors` taped (null: none). With
  /// some, the plan also keeps what the loop's reverse frames replay.
  LoopPlan planLoop(Stmt &s, const StmtSet *factors) {
    std::vector<Stmt *> inside;
    std::vector<const Value *> roots;
    // `boxing`: no untaped loop lies between `s` and `block`. Below an
    // untaped loop Q, the taped loops are pushed by Record(Q), which runs
    // in the reverse frames of `s` and needs their values from them.
    auto collect = [&](auto &self, Block &block, bool boxing) -> void {
      for (Stmt &inner : block) {
        inside.push_back(&inner);
        auto it = plan_.loops.find(&inner);
        if (it == plan_.loops.end() || !it->second.taped || !boxing) {
          bool loop = inner.kind() == StmtKind::For || inner.kind() == StmtKind::While;
          for (unsigned i = 0; i < inner.numBlocks(); ++i)
            self(self, inner.block(i), boxing && !loop);
          continue;
        }
        const LoopPlan &child = it->second;
        // The child's loads of its entry locals, in pre-order.
        const LoopFacts &f = facts_.at(&inner);
        std::vector<size_t> entryLoads;
        for (const AllocaStmt *a : child.atEntry)
          loadsBetween(a, f.at + 1, f.last, [&](size_t at) { entryLoads.push_back(at); });
        std::sort(entryLoads.begin(), entryLoads.end());
        for (size_t at : entryLoads) {
          inside.push_back(order_[at]);
          roots.push_back(order_[at]);
        }
        roots.insert(roots.end(), child.outsideNeeds.begin(), child.outsideNeeds.end());
      }
    };
    collect(collect, s.block(0), /*boxing=*/true);
    count(inside.size());
    StmtSet scope(inside.begin(), inside.end());
    ValueSet neededInside, read;
    LoopPlan plan;
    needs_.setTapedFactors(factors);
    needs_.compute(inside, &scope, neededInside, read, roots, &plan.outsideNeeds);
    needs_.setTapedFactors(nullptr);
    const LoopFacts &facts = facts_.at(&s);
    const ValueSet &written = facts.writes;
    // A written local is pushed only if a needed load can see the value it
    // had when the iteration started: not if a store at the top level of
    // the body (which every iteration runs: jumps are flags by now) comes
    // first. Rev(L) replays that store before the load.
    std::unordered_map<const Stmt *, size_t> position;
    for (size_t i = 0; i < inside.size(); ++i)
      position.emplace(inside[i], i);
    std::unordered_map<const Value *, size_t> firstKill;
    for (Stmt &t : s.block(0))
      if (auto *st = dyn_cast<LocalStoreStmt>(&t))
        firstKill.emplace(st->local(), position.at(&t));
    ValueSet exposed;
    for (Stmt *t : inside)
      if (auto *ld = dyn_cast<LocalLoadStmt>(t); ld && neededInside.count(ld)) {
        auto kill = firstKill.find(ld->local());
        if (kill == firstKill.end() || kill->second > position.at(t))
          exposed.insert(ld->local());
      }
    plan.counted = isCounted(s);
    for (AllocaStmt *a : facts.outsideLocals) {
      if (!read.count(a))
        continue;
      if (!written.count(a))
        plan.atEntry.push_back(a);
      else if (exposed.count(a))
        plan.perIteration.push_back(a);
    }
    if (factors) {
      plan.replayValues = std::move(neededInside);
      plan.replayLocals = std::move(read);
    }
    return plan;
  }

  /// Checkpoints every range-for that Record(L) runs (not taped, no break)
  /// and whose record pushes: per-iteration locals, factors, or the tapes of
  /// loops taped inside it. Its state is what it writes and reads of the
  /// locals declared outside it that the gradient replays.
  void planCheckpoints() {
    for (auto &[loop, plan] : plan_.loops) {
      if (loop->kind() != StmtKind::For || plan.counted || plan.taped)
        continue;
      if (plan.perIteration.empty() && plan.tapedFactors.empty() &&
          !tapesInside(const_cast<Stmt &>(*loop)))
        continue;
      const LoopFacts &facts = facts_.at(loop);
      plan.checkpointed = true;
      for (AllocaStmt *a : facts.outsideLocals)
        if (facts.writes.count(a) && plan_.neededLocals.count(a) &&
            anyLoadBetween(a, facts.at + 1, facts.last))
          plan.checkpointState.push_back(a);
    }
  }

  /// Whether a loop taped inside `loop` (through taped loops only) pushes
  /// while Record(loop) runs.
  bool tapesInside(Stmt &loop) const {
    bool found = false;
    auto visit = [&](auto &self, Block &block) -> void {
      for (Stmt &s : block) {
        if (found)
          return;
        auto it = isLoop(s) ? plan_.loops.find(&s) : plan_.loops.end();
        if (it != plan_.loops.end()) {
          found = it->second.taped;
          continue;
        }
        for (unsigned i = 0; i < s.numBlocks(); ++i)
          self(self, s.block(i));
      }
    };
    visit(visit, loop.block(0));
    return found;
  }

  /// A range-for L without a break whose nearest enclosing loop P is a
  /// non-task range-for without a break is taped, unless code after L in
  /// P's body reads a local that L writes. Without taping, every reverse
  /// frame of P runs Record(L) again: L's forward code runs twice in all,
  /// and L's stacks hold one iteration of P at a time. Taped, Plain(P)
  /// pushes L's locals in every iteration of P (the stacks hold all of P's
  /// iterations, sized by a sum over P's range), and the reverse frames of
  /// P only save L's entry locals where L was: the locals L writes keep
  /// the values they had before L, which is why nothing after L may read
  /// them. P must not be a while loop: a stack pushed in a while loop has
  /// no launch-time size.
  void decideTaping() {
    walk(src_.body(), [&](Stmt &s) {
      if (s.kind() != StmtKind::For || s.isTask())
        return;
      LoopPlan &plan = plan_.loops.at(&s);
      Stmt *parent = enclosingLoop(s);
      if (plan.counted || !parent || parent->isTask() || parent->kind() != StmtKind::For ||
          plan_.loops.at(parent).counted)
        return;
      // The statements of P's body after L, outside L, are the pre-order
      // positions (last(L), last(P)]: one search per local L writes.
      const LoopFacts &inner = facts_.at(&s);
      size_t end = facts_.at(parent).last;
      bool readAfter = false;
      count(inner.writes.size());
      for (const Value *local : inner.writes)
        readAfter = readAfter || anyLoadBetween(local, inner.last + 1, end);
      plan.taped = !readAfter;
    });
  }

  std::vector<Stmt *> order_;                                    // pre-order
  std::unordered_map<const Stmt *, size_t> allocaAt_;            // allocas' positions in order_
  std::unordered_map<const Stmt *, LoopFacts> facts_;            // per loop (isLoop)
  std::unordered_map<const Value *, std::vector<size_t>> loads_; // per local, ascending
  Kernel &src_;
  const Activity &activity_;
  const StmtSet &breaking_;
  ReverseADOptions options_;
  NeededValues needs_;
  ReversePlan plan_;
};

} // namespace

ReversePlan planReverse(Kernel &source, const Activity &activity, const StmtSet &breaking,
                        const ReverseADOptions &options) {
  return LoopPlanner(source, activity, breaking, options).run();
}

} // namespace qd::reverse
