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

#include "qd/ir/Visitor.h"

#include <algorithm>

namespace qd::reverse {
namespace {

class LoopPlanner {
public:
  LoopPlanner(Kernel &source, const Activity &activity,
              const std::unordered_set<const Stmt *> &breaking, const ReverseADOptions &options)
      : src_(source), breaking_(breaking), options_(options), needs_(activity) {}

  ReversePlan run() {
    std::vector<Stmt *> stmts;
    walk(src_.body(), [&](Stmt &s) { stmts.push_back(&s); });
    needs_.compute(stmts, nullptr, plan_.needed, plan_.neededLocals);
    planLoops();
    return std::move(plan_);
  }

private:
  static bool isLoop(const Stmt &s) {
    return (s.kind() == StmtKind::For || s.kind() == StmtKind::While) && !s.isTask();
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
        walk(inner.block(0), [&](Stmt &t) {
          auto *ld = dyn_cast<LocalLoadStmt>(&t);
          if (ld && std::find(child.atEntry.begin(), child.atEntry.end(), ld->local()) !=
                        child.atEntry.end()) {
            inside.push_back(&t);
            roots.push_back(&t);
          }
        });
        roots.insert(roots.end(), child.outsideNeeds.begin(), child.outsideNeeds.end());
      }
    };
    collect(collect, s.block(0), /*boxing=*/true);
    std::unordered_set<const Stmt *> scope(inside.begin(), inside.end());
    std::unordered_set<const Value *> neededInside, read;
    LoopPlan plan;
    needs_.compute(inside, &scope, neededInside, read, roots, &plan.outsideNeeds);
    std::unordered_set<const Value *> written;
    std::vector<AllocaStmt *> order;
    // Whether a local is declared outside the loop, once per local (each
    // answer walks up the nesting: per access it made deep nests cubic).
    std::unordered_map<const AllocaStmt *, bool> outside;
    walk(s.block(0), [&](Stmt &inner) {
      Value *local = nullptr;
      if (auto *ld = dyn_cast<LocalLoadStmt>(&inner)) {
        local = ld->local();
      } else if (auto *st = dyn_cast<LocalStoreStmt>(&inner)) {
        local = st->local();
        written.insert(local);
      }
      if (local) {
        auto *a = cast<AllocaStmt>(local);
        auto [it, fresh] = outside.try_emplace(a, false);
        if (fresh && !a->parent()->isNestedIn(&s.block(0))) {
          it->second = true;
          order.push_back(a);
        }
      }
    });
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
    std::unordered_set<const Value *> exposed;
    for (Stmt *t : inside)
      if (auto *ld = dyn_cast<LocalLoadStmt>(t); ld && neededInside.count(ld)) {
        auto kill = firstKill.find(ld->local());
        if (kill == firstKill.end() || kill->second > position.at(t))
          exposed.insert(ld->local());
      }
    plan.counted = isCounted(s);
    for (AllocaStmt *a : order) {
      if (!read.count(a))
        continue;
      if (!written.count(a))
        plan.atEntry.push_back(a);
      else if (exposed.count(a))
        plan.perIteration.push_back(a);
    }
    return plan;
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
      std::unordered_set<const Value *> writes;
      std::unordered_set<const Stmt *> insideS;
      walk(s.block(0), [&](Stmt &inner) {
        insideS.insert(&inner);
        if (auto *st = dyn_cast<LocalStoreStmt>(&inner))
          writes.insert(st->local());
      });
      bool after = false, readAfter = false;
      walk(parent->block(0), [&](Stmt &t) {
        if (&t == &s) {
          after = true;
          return;
        }
        if (!after || insideS.count(&t))
          return;
        if (auto *ld = dyn_cast<LocalLoadStmt>(&t); ld && writes.count(ld->local()))
          readAfter = true;
      });
      plan.taped = !readAfter;
    });
  }

  Kernel &src_;
  const std::unordered_set<const Stmt *> &breaking_;
  ReverseADOptions options_;
  NeededValues needs_;
  ReversePlan plan_;
};

} // namespace

ReversePlan planReverse(Kernel &source, const Activity &activity,
                        const std::unordered_set<const Stmt *> &breaking,
                        const ReverseADOptions &options) {
  return LoopPlanner(source, activity, breaking, options).run();
}

} // namespace qd::reverse
