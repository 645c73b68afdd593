//===- TaskVectorPlan.cpp - Which parts of a task vary across lanes -------===//
#include "TaskVectorPlan.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>

namespace qd {

namespace {

class Planner {
public:
  Planner(const ForStmt &task, TaskVectorPlan &plan) : task_(task), plan_(plan) {}

  void run() {
    checkMemory();
    if (!plan_.ok())
      return;
    // Varying values make statements divergent and divergent stores make
    // locals varying: iterate to the (monotone) fixpoint.
    plan_.varying.insert(&task_);
    do {
      changed_ = false;
      // A continue only some lanes take masks the rest of the body.
      bool masked = hasDivergentJump(task_);
      if (masked)
        mark<const Stmt *>(plan_.maskedLoops, &task_);
      visitBlock(task_.body(), masked);
    } while (changed_);
    findAllLanesStores();
  }

private:
  template <typename T> void mark(std::unordered_set<T> &set, T v) {
    if (set.insert(v).second)
      changed_ = true;
  }
  bool varying(const Value *v) const { return v && plan_.isVarying(v); }
  bool anyOperandVarying(const Stmt &s) const {
    for (unsigned i = 0; i < s.numOperands(); ++i)
      if (varying(s.operand(i)))
        return true;
    return false;
  }

  /// A break or continue that only some of the lanes in its loop reach.
  bool jumpDivergesIn(const Stmt &jump, const Stmt &loop) const {
    for (const Stmt *p = jump.parentStmt(); p && p != &loop; p = p->parentStmt())
      if (auto *i = dyn_cast<IfStmt>(p); i && varying(i->cond()))
        return true;
    return false;
  }
  bool hasDivergentJump(const Stmt &loop) const {
    bool found = false;
    walk(loop.block(0), [&](Stmt &s) {
      if ((s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) &&
          jumpTarget(s) == &loop && jumpDivergesIn(s, loop))
        found = true;
    });
    return found;
  }

  void visitBlock(Block &b, bool div) {
    for (Stmt &s : b)
      visit(s, div);
  }

  void visit(Stmt &s, bool div) {
    if (div)
      mark<const Stmt *>(plan_.divergent, &s);
    switch (s.kind()) {
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      bool d = div || varying(i.cond());
      visitBlock(i.thenBlock(), d);
      visitBlock(i.elseBlock(), d);
      return;
    }
    case StmtKind::For: {
      auto &f = cast<ForStmt>(s);
      if (varying(f.beginValue()))
        mark<const Value *>(plan_.varying, &s); // each lane counts from its own start
      bool masked = varying(f.beginValue()) || varying(f.endValue()) || hasDivergentJump(s);
      if (masked)
        mark<const Stmt *>(plan_.maskedLoops, &s);
      visitBlock(f.body(), div || masked);
      return;
    }
    case StmtKind::While: {
      bool masked = hasDivergentJump(s);
      if (masked)
        mark<const Stmt *>(plan_.maskedLoops, &s);
      visitBlock(cast<WhileStmt>(s).body(), div || masked);
      return;
    }
    case StmtKind::Serial:
      visitBlock(s.block(0), div);
      return;
    case StmtKind::Alloca:
      if (div) // zeroed under a partial mask: the lanes hold different values
        mark<const Value *>(plan_.varying, &s);
      return;
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(s);
      if (div || varying(st.value()))
        mark<const Value *>(plan_.varying, st.local());
      return;
    }
    case StmtKind::LocalLoad:
      if (varying(cast<LocalLoadStmt>(s).local()))
        mark<const Value *>(plan_.varying, &s);
      return;
    case StmtKind::GlobalLoad: {
      auto &g = cast<GlobalLoadStmt>(s);
      if (anyOperandVarying(s) || written_.count(keyOf(g)))
        mark<const Value *>(plan_.varying, &s);
      return;
    }
    case StmtKind::AdStackAlloca:
      if (div)
        mark<const Stmt *>(plan_.laneStacks, &s);
      return;
    case StmtKind::AdStackPush:
    case StmtKind::AdStackPop:
    case StmtKind::AdStackAccAdjoint:
    case StmtKind::AdStackLoadTop:
    case StmtKind::AdStackLoadTopAdj: {
      auto *stack = cast<Stmt>(cast<AdStackOpStmt>(s).stack());
      if (div)
        mark<const Stmt *>(plan_.laneStacks, stack);
      // Entries are per lane: what a lane reads back is its own.
      if (s.kind() == StmtKind::AdStackLoadTop || s.kind() == StmtKind::AdStackLoadTopAdj)
        mark<const Value *>(plan_.varying, &s);
      return;
    }
    default:
      if (anyOperandVarying(s))
        mark<const Value *>(plan_.varying, &s);
      return;
    }
  }

  /// The local a statement writes (a store, or an alloca zeroing itself),
  /// or reads.
  static const Value *written(const Stmt &s) {
    if (auto *st = dyn_cast<LocalStoreStmt>(&s))
      return st->local();
    return s.kind() == StmtKind::Alloca ? &s : nullptr;
  }
  static const Value *read(const Stmt &s) {
    auto *ld = dyn_cast<LocalLoadStmt>(&s);
    return ld ? ld->local() : nullptr;
  }

  void findAllLanesStores() {
    std::unordered_map<const Stmt *, size_t> order; // pre-order position in the task
    walk(task_.body(), [&](Stmt &s) { order.emplace(&s, order.size()); });
    for (const Stmt *loop : plan_.maskedLoops) {
      if (loop == &task_)
        continue;
      Block &body = loop->block(0);
      for (Stmt &s : body) {
        const Value *local = written(s);
        if (local && plan_.isVarying(local) && killedAtStart(local, body) &&
            deadAfter(local, *loop, order))
          plan_.allLanesStores.insert(&s);
      }
    }
  }

  /// The first access to `local` in `body` (in program order) is a write at
  /// its top level.
  static bool killedAtStart(const Value *local, Block &body) {
    for (Stmt &s : body) {
      if (written(s) == local)
        return true;
      bool touched = read(s) == local;
      for (unsigned b = 0; b < s.numBlocks(); ++b)
        walk(s.block(b),
             [&](Stmt &inner) { touched |= written(inner) == local || read(inner) == local; });
      if (touched)
        return false;
    }
    return false;
  }

  /// No read of `local` can run after `loop`: every read outside it comes
  /// earlier in program order (a per-lane if runs its else arm after its
  /// then arm, which program order reflects), and no loop around `loop`
  /// reads it outside `loop` (its next iteration would).
  bool deadAfter(const Value *local, const Stmt &loop,
                 const std::unordered_map<const Stmt *, size_t> &order) const {
    bool dead = true;
    walk(task_.body(), [&](Stmt &s) {
      if (read(s) != local || s.parent()->isNestedIn(&loop.block(0)))
        return;
      if (order.at(&s) > order.at(&loop))
        dead = false;
      for (const Stmt *a = loop.parentStmt(); a && a != &task_; a = a->parentStmt())
        if ((a->kind() == StmtKind::For || a->kind() == StmtKind::While) &&
            s.parent()->isNestedIn(&a->block(0)))
          dead = false;
    });
    return dead;
  }

  // Ndarray arguments may share storage: one key for all of them.
  using Key = std::tuple<const Field *, int>;
  static Key keyOf(const GlobalAccessStmt &g) {
    return g.isField() ? Key(g.field(), static_cast<int>(g.component())) : Key(nullptr, -1);
  }

  /// Lanes must not see each other's writes in another order than
  /// consecutive iterations would.
  void checkMemory() {
    struct Uses {
      bool store = false, atomic = false, load = false;
      uint64_t ownPositions = ~uint64_t(0); // index positions that hold the task index
      const Stmt *first = nullptr;
      std::vector<const Stmt *> atomics;
    };
    std::map<Key, Uses> uses;
    walk(task_.body(), [&](Stmt &s) {
      auto *g = dyn_cast<GlobalAccessStmt>(&s);
      if (!g)
        return;
      Uses &u = uses[keyOf(*g)];
      if (!u.first)
        u.first = g;
      u.store |= s.kind() == StmtKind::GlobalStore;
      u.atomic |= s.kind() == StmtKind::AtomicAdd;
      if (s.kind() == StmtKind::AtomicAdd)
        u.atomics.push_back(&s);
      u.load |= s.kind() == StmtKind::GlobalLoad;
      uint64_t own = 0;
      for (unsigned d = 0; d < g->numIndices() && d < 64; ++d)
        if (g->index(d) == &task_)
          own |= uint64_t(1) << d;
      u.ownPositions &= own;
    });
    for (auto &[key, u] : uses) {
      if (u.store || u.atomic)
        written_.insert(key);
      bool ownElements = u.ownPositions != 0;
      if (ownElements)
        plan_.privateAtomics.insert(u.atomics.begin(), u.atomics.end());
      if (u.store && !ownElements)
        plan_.refused = fmt::format("'{}' at {} is stored to at an element that is not the "
                                    "iteration's own",
                                    printStmt(*u.first), u.first->loc().str());
      else if (u.atomic && u.load && !ownElements)
        plan_.refused = fmt::format("'{}' at {} is both atomically added to and loaded",
                                    printStmt(*u.first), u.first->loc().str());
      if (!plan_.ok())
        return;
    }
  }

  const ForStmt &task_;
  TaskVectorPlan &plan_;
  std::set<Key> written_;
  bool changed_ = false;
};

} // namespace

TaskVectorPlan planTaskVectorization(const ForStmt &task) {
  TaskVectorPlan plan;
  Planner(task, plan).run();
  return plan;
}

} // namespace qd
