//===- CooperativeTask.cpp - Groups sharing a serial loop -----------------===//
//
// The loop check evaluates one iteration of the candidate loop
// symbolically over the locals declared outside it: each such local X
// starts as Entry(X); `add`/`sub` of Entry(X) (or of a sum of X) and a term
// that does not depend on X is Sum(X); adding -0.0 (or integer 0) is exact
// and keeps its operand. At the end of the iteration a local holding
// Entry(X) again is invariant, one holding Sum(X) whose value fed nothing
// but its own chain is a sum; anything else is carried from iteration to
// iteration and the task stays one iteration per thread.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/CooperativeTask.h"

#include "TaskPrinting.h"
#include "qd/analysis/TaskVarying.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"

#include "qd/ir/Casting.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <unordered_map>

namespace qd {
namespace {

/// A value of one symbolic iteration: what it depends on among the locals
/// declared outside the loop (bit k: local k's value at the iteration's
/// start).
struct Sym {
  enum Kind : uint8_t { Opaque, Zero, Entry, Sum } kind = Opaque;
  int var = -1; // Entry and Sum: the local
  uint64_t deps = 0;
};

bool isIdentityZero(const ConstStmt &c) {
  Scalar v = c.value();
  if (v.isFloat())
    return v.f == 0 && std::signbit(v.f); // -0.0: x + -0.0 == x bit for bit
  return v.i == 0;
}

/// Integer operations whose code may raise an error (and leave the thread,
/// which its group would then wait for).
bool mayRaise(const Stmt &s) {
  auto *b = dyn_cast<BinaryStmt>(&s);
  if (!b || !s.type().isIntegerScalar())
    return false;
  switch (b->op()) {
  case BinaryOp::Div:
  case BinaryOp::Rem:
  case BinaryOp::Shl:
  case BinaryOp::Shr:
    return true;
  default:
    return false;
  }
}

class LoopCheck {
public:
  LoopCheck(const ForStmt &loop, NdarrayAliasing aliasing) : loop_(loop), aliasing_(aliasing) {}

  /// Empty when the loop may be shared; else why not.
  std::string run(std::vector<const AllocaStmt *> &sums) {
    if (std::string bad = checkMemory(); !bad.empty())
      return bad;
    for (Stmt &s : loop_.body())
      if (std::string bad = step(s); !bad.empty())
        return bad;
    if (tooMany_)
      return "the loop touches too many locals declared outside it";
    for (auto &[alloca, index] : outer_) {
      Sym end = content(alloca);
      if (!written_.count(alloca) || (end.kind == Sym::Entry && end.var == index))
        continue; // read only, or the same at the end of every iteration
      uint64_t bit = uint64_t(1) << index;
      bool sum = end.kind == Sym::Sum && end.var == index && !(leaked_ & bit) &&
                 alloca->elementType() != ScalarType::I1;
      if (!sum)
        return fmt::format("local %{} carries a value from one iteration of the loop to the next",
                           alloca->name());
      sums.push_back(alloca);
    }
    return "";
  }

private:
  /// The loop may not store to global memory, nor read what it updates
  /// atomically, nor leave early.
  std::string checkMemory() {
    std::vector<const GlobalAccessStmt *> loads, atomics;
    std::string bad;
    auto visit = [&](Block &body, int depth, auto &self) -> void {
      for (Stmt &s : body) {
        if (s.kind() == StmtKind::GlobalStore)
          bad = "the loop stores to global memory";
        else if (s.kind() == StmtKind::Break && depth == 0)
          bad = "the loop may leave early (break)";
        else if (auto *g = dyn_cast<GlobalLoadStmt>(&s))
          loads.push_back(g);
        else if (auto *a = dyn_cast<AtomicRmwStmt>(&s))
          atomics.push_back(a);
        bool nestedLoop = s.kind() == StmtKind::For || s.kind() == StmtKind::While;
        for (unsigned i = 0; i < s.numBlocks(); ++i)
          self(s.block(i), depth + nestedLoop, self);
      }
    };
    visit(loop_.body(), 0, visit);
    for (const GlobalAccessStmt *a : atomics)
      for (const GlobalAccessStmt *l : loads)
        if (bad.empty() && mayAlias(*a, *l, aliasing_))
          bad = fmt::format("the loop reads {}, which it updates atomically",
                            describe(aliasClassOf(*a, aliasing_)));
    return bad;
  }

  int outerIndex(const AllocaStmt *a) {
    if (a->parent()->isNestedIn(&loop_.body()))
      return -1;
    auto [it, added] = outer_.try_emplace(a, int(outer_.size()));
    if (it->second >= kMostOuter) {
      tooMany_ = true; // the plan is refused: no bit to track it with
      return -1;
    }
    return it->second;
  }

  Sym content(const AllocaStmt *a) {
    if (auto it = contents_.find(a); it != contents_.end())
      return it->second;
    int k = outerIndex(a);
    return k < 0 ? Sym{} : Sym{Sym::Entry, k, uint64_t(1) << k};
  }

  Sym of(const Value *v) {
    auto it = values_.find(v);
    return it == values_.end() ? Sym{} : it->second;
  }

  /// Records that `v`'s value feeds something other than its own sum.
  void use(const Value *v) { leaked_ |= of(v).deps; }

  std::string step(Stmt &s) {
    if (tooMany_)
      return "the loop touches too many locals declared outside it";
    if (auto *i = dyn_cast<IfStmt>(&s); i && !leavesBlock(*i))
      return branch(*i);
    if (s.isContainer())
      return nested(s);
    if (auto *c = dyn_cast<ConstStmt>(&s)) {
      values_[&s] = isIdentityZero(*c) ? Sym{Sym::Zero} : Sym{};
    } else if (auto *l = dyn_cast<LocalLoadStmt>(&s)) {
      values_[&s] = content(cast<AllocaStmt>(l->local()));
    } else if (auto *st = dyn_cast<LocalStoreStmt>(&s)) {
      auto *a = cast<AllocaStmt>(st->local());
      Sym v = of(st->value());
      int k = outerIndex(a);
      if (k >= 0) {
        written_.insert(a);
        // Storing X's own chain back into X is not a use of it.
        bool chain = (v.kind == Sym::Sum || v.kind == Sym::Entry) && v.var == k;
        if (!chain)
          leaked_ |= v.deps;
      }
      contents_[a] = v;
    } else if (auto *b = dyn_cast<BinaryStmt>(&s);
               b && (b->op() == BinaryOp::Add || b->op() == BinaryOp::Sub)) {
      values_[&s] = add(*b);
    } else {
      // Any other use of a partial sum leaks it.
      Sym r;
      for (unsigned i = 0; i < s.numOperands(); ++i) {
        r.deps |= of(s.operand(i)).deps;
        use(s.operand(i));
      }
      values_[&s] = r;
    }
    return "";
  }

  Sym add(const BinaryStmt &b) {
    Sym x = of(b.lhs()), y = of(b.rhs());
    if (b.op() == BinaryOp::Add && x.kind == Sym::Zero)
      return y;
    // x - (-0.0) is x + 0.0, which turns -0.0 into +0.0; x - 0 is exact
    // for integers.
    if (y.kind == Sym::Zero && (b.op() == BinaryOp::Add || !b.type().isFloatScalar()))
      return x;
    auto chain = [](const Sym &s) { return s.kind == Sym::Entry || s.kind == Sym::Sum; };
    if (chain(x) && !(y.deps >> x.var & 1)) {
      use(b.rhs());
      return Sym{Sym::Sum, x.var, x.deps | y.deps};
    }
    if (b.op() == BinaryOp::Add && chain(y) && !(x.deps >> y.var & 1)) {
      use(b.lhs());
      return Sym{Sym::Sum, y.var, x.deps | y.deps};
    }
    use(b.lhs());
    use(b.rhs());
    return Sym{Sym::Opaque, -1, x.deps | y.deps};
  }

  /// Whether a `break` or `continue` inside `s` (outside loops nested in
  /// it) leaves the block around it.
  static bool leavesBlock(Stmt &s) {
    bool leaves = false;
    for (unsigned b = 0; b < s.numBlocks(); ++b)
      walk(s.block(b), [&](Stmt &x) {
        if (x.kind() != StmtKind::Break && x.kind() != StmtKind::Continue)
          return;
        bool inLoop = false;
        for (Stmt *p = x.parentStmt(); p != &s && !inLoop; p = p->parentStmt())
          inLoop = p->kind() == StmtKind::For || p->kind() == StmtKind::While;
        leaves |= !inLoop;
      });
    return leaves;
  }

  /// An `if` evaluated arm by arm: a local declared outside the loop that
  /// either arm adds into (and the other adds into or leaves) is still a
  /// sum; `s = s + t` under a condition adds t or nothing.
  std::string branch(IfStmt &s) {
    use(s.cond());
    const auto before = contents_;
    std::unordered_map<const AllocaStmt *, Sym> arms[2];
    for (unsigned b = 0; b < 2; ++b) {
      contents_ = before;
      for (Stmt &x : s.block(b))
        if (std::string bad = step(x); !bad.empty())
          return bad;
      arms[b] = contents_;
    }
    contents_ = before;
    auto chainOf = [](const Sym &v, int k) {
      return (v.kind == Sym::Entry || v.kind == Sym::Sum) && v.var == k;
    };
    for (const auto &arm : arms)
      for (const auto &[a, unused] : arm) {
        auto in = [&](const std::unordered_map<const AllocaStmt *, Sym> &m) {
          auto it = m.find(a);
          return it != m.end() ? it->second : content(a);
        };
        Sym x = in(arms[0]), y = in(arms[1]), was = in(before);
        auto same = [](const Sym &p, const Sym &q) {
          return p.kind == q.kind && p.var == q.var && p.deps == q.deps;
        };
        if (same(x, was) && same(y, was))
          continue; // neither arm writes it
        int k = outerIndex(a);
        if (k >= 0 && !(chainOf(x, k) && chainOf(y, k)))
          return fmt::format("the loop writes local %{} under control flow", a->name());
        if (k >= 0)
          contents_[a] = Sym{x.kind == Sym::Sum || y.kind == Sym::Sum ? Sym::Sum : Sym::Entry, k,
                             x.deps | y.deps | of(s.cond()).deps};
        else if (same(x, y))
          contents_[a] = x;
        else
          contents_[a] = Sym{Sym::Opaque, -1, x.deps | y.deps | of(s.cond()).deps};
      }
    return "";
  }

  /// A statement with nested blocks: locals declared outside the loop may
  /// be read there but not written; everything it computes depends on
  /// everything its statements read (to a fixed point over its loops).
  std::string nested(Stmt &container) {
    std::string bad;
    uint64_t deps = 0;
    for (bool changed = true; changed && bad.empty();) {
      changed = false;
      auto visit = [&](Stmt &s) {
        for (unsigned i = 0; i < s.numOperands(); ++i)
          deps |= of(s.operand(i)).deps;
        if (auto *l = dyn_cast<LocalLoadStmt>(&s))
          deps |= content(cast<AllocaStmt>(l->local())).deps;
        if (auto *st = dyn_cast<LocalStoreStmt>(&s)) {
          auto *a = cast<AllocaStmt>(st->local());
          if (outerIndex(a) >= 0) {
            bad = fmt::format("the loop writes local %{} under control flow", a->name());
            return;
          }
          Sym before = content(a);
          if ((before.deps | deps) != before.deps || before.kind != Sym::Opaque) {
            contents_[a] = Sym{Sym::Opaque, -1, before.deps | deps};
            changed = true;
          }
        }
      };
      visit(container);
      for (unsigned i = 0; i < container.numBlocks(); ++i)
        walk(container.block(i), visit);
    }
    // Values defined inside are used only inside.
    for (unsigned i = 0; i < container.numBlocks(); ++i)
      walk(container.block(i), [&](Stmt &s) { values_[&s] = Sym{Sym::Opaque, -1, deps}; });
    leaked_ |= deps;
    return bad;
  }

  /// Locals declared outside the loop that one evaluation tracks (a bit
  /// each in Sym::deps).
  static constexpr int kMostOuter = 60;

  const ForStmt &loop_;
  NdarrayAliasing aliasing_;
  bool tooMany_ = false;
  std::map<const AllocaStmt *, int> outer_;
  std::set<const AllocaStmt *> written_;
  std::unordered_map<const Value *, Sym> values_;
  std::unordered_map<const AllocaStmt *, Sym> contents_;
  uint64_t leaked_ = 0;
};

int64_t literalTrips(const ForStmt &f) {
  if (!f.begin().isConstant() || !f.end().isConstant())
    return -1;
  return std::max<int64_t>(f.endConstant() - f.beginConstant(), 0);
}

/// Why `task` cannot run cooperatively whatever its loops, or "".
std::string checkTask(const ForStmt &task, const CooperativeTaskOptions &o) {
  if (task.numDims() != 1)
    return "a band";
  int64_t trips = literalTrips(task);
  if (trips < 0 && !o.runTimeTrips)
    return "its trip count is known only at launch";
  if (trips > o.mostTaskIterations)
    return fmt::format("{} iterations, more than {}", trips, o.mostTaskIterations);
  std::string bad;
  walk(task.body(), [&](Stmt &s) {
    if (!bad.empty())
      return;
    if (s.type().isAdStack() || isa<AdStackOpStmt>(s))
      bad = "it uses an adstack";
    else if (mayRaise(s))
      bad = "an integer operation may raise an error";
  });
  return bad;
}

/// Guarded and fenced statements outside the plan's loops; an error when
/// a fenced one is not at the task's top level.
std::string guardOutside(const ForStmt &task, NdarrayAliasing aliasing, CooperativeTaskPlan &plan) {
  std::vector<const GlobalAccessStmt *> loads;
  walk(task.body(), [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalLoadStmt>(&s))
      loads.push_back(g);
  });
  std::string bad;
  walk(task.body(), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g || isa<GlobalLoadStmt>(s) || !bad.empty())
      return;
    for (const CooperativeTaskPlan::SharedLoop &l : plan.loops)
      if (s.parent()->isNestedIn(&l.loop->body()))
        return;
    plan.guarded.insert(&s);
    bool read = false;
    for (const GlobalAccessStmt *l : loads)
      read |= mayAlias(*g, *l, aliasing);
    if (!read)
      return;
    if (s.parent() != &task.body())
      bad = fmt::format("it writes {}, which it reads, under control flow outside the loop",
                        describe(aliasClassOf(*g, aliasing)));
    plan.fenced.insert(&s);
  });
  return bad;
}

} // namespace

bool CooperativeTaskPlan::inSharedLoop(const Stmt &s) const {
  for (const Stmt *p = s.parentStmt(); p; p = p->parentStmt())
    if (shared(p))
      return true;
  return false;
}

CooperativeTaskPlan planCooperativeTask(const ForStmt &task, const CooperativeTaskOptions &o) {
  CooperativeTaskPlan plan;
  std::vector<const ForStmt *> candidates;
  for (Stmt &s : task.body())
    if (auto *f = dyn_cast<ForStmt>(&s); f && !f->isParallel()) {
      int64_t trips = literalTrips(*f);
      if (trips < 0 || trips >= o.leastLoopIterations)
        candidates.push_back(f);
    }
  if (candidates.empty() || o.mostTaskIterations <= 0)
    return plan;
  if (std::string bad = checkTask(task, o); !bad.empty()) {
    plan.refused = bad;
    return plan;
  }
  // Every long loop must be shared: one that is not would run on every
  // thread of the group, its stores and atomics on the first one only.
  for (const ForStmt *loop : candidates) {
    std::vector<const AllocaStmt *> sums;
    if (std::string bad = LoopCheck(*loop, o.aliasing).run(sums); !bad.empty()) {
      CooperativeTaskPlan refused;
      refused.refused = bad;
      return refused;
    }
    plan.loops.push_back({loop, std::move(sums)});
  }
  if (std::string bad = guardOutside(task, o.aliasing, plan); !bad.empty()) {
    CooperativeTaskPlan refused;
    refused.refused = bad;
    return refused;
  }
  plan.refused.clear();
  // A loop whose atomic adds follow its index scatters them.
  bool scatters = false;
  for (const CooperativeTaskPlan::SharedLoop &l : plan.loops) {
    std::unordered_set<const Value *> byIndex = taskVaryingValues(*l.loop);
    walk(l.loop->body(), [&](Stmt &s) {
      if (auto *a = dyn_cast<AtomicRmwStmt>(&s))
        scatters |= hasVaryingIndex(*a, byIndex);
    });
  }
  plan.mostIterations =
      scatters ? std::min(o.mostScatteringIterations, o.mostTaskIterations) : o.mostTaskIterations;
  int64_t trips = literalTrips(task);
  if (trips > plan.mostIterations) {
    CooperativeTaskPlan refused;
    refused.refused = fmt::format("{} iterations, more than {} with a loop that scatters atomic "
                                  "adds (one iteration per thread, warps sum them)",
                                  trips, plan.mostIterations);
    return refused;
  }
  return plan;
}

void printCooperativeTasks(const Kernel &kernel, CooperativeTaskOptions options, std::ostream &os) {
  using namespace analysis_detail;
  ValueNamer names(kernel);
  forEachPrintedTask(kernel, names, os, "cooperative plan", [&](ForStmt &task) {
    for (NdarrayAliasing aliasing : {NdarrayAliasing::MayAlias, NdarrayAliasing::Distinct}) {
      options.aliasing = aliasing;
      CooperativeTaskPlan plan = planCooperativeTask(task, options);
      std::string what;
      if (plan.cooperative()) {
        what = fmt::format("cooperative up to {} iterations;", plan.mostIterations);
        for (const CooperativeTaskPlan::SharedLoop &l : plan.loops) {
          what += fmt::format(" shares {} ({})", names[l.loop], lineCol(*l.loop));
          for (const AllocaStmt *sum : l.sums)
            what += fmt::format(", sum {}", names[sum]);
        }
      } else {
        what = plan.refused.empty() ? "no long serial loop"
                                    : "one iteration per thread: " + plan.refused;
      }
      os << fmt::format(
          "  {}: {}\n",
          aliasing == NdarrayAliasing::Distinct ? "distinct ndarrays" : "ndarrays may alias", what);
    }
  });
}

} // namespace qd
