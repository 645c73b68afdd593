//===- SizingStructural.cpp - The structural path algebra -----------------===//
#include "SizingStructural.h"

#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace qd::sizing {

KernelFacts::KernelFacts(const Kernel &kernel) {
  uint32_t n = 0;
  Block &body = const_cast<Kernel &>(kernel).body();
  // Positions are compared only within a stack's scope: they are kept for
  // the top-level statements and inside the tasks that hold a stack (the
  // numbers of a whole-kernel preorder), not for every statement of a
  // kernel of many tasks. A task's numbers wait in `pending` until its walk
  // has seen whether it holds a stack.
  std::vector<std::pair<const Stmt *, uint32_t>> pending;
  bool inStackTask = false;
  std::unordered_set<const Stmt *> marked; // statements a jump leaves through
  auto visit = [&](Stmt &s) {
    pending.emplace_back(&s, n++);
    switch (s.kind()) {
    case StmtKind::Break:
    case StmtKind::Continue: {
      fallsThrough = false;
      const Stmt *target = jumpTarget(s);
      for (Stmt *p = &s; p && p != target; p = p->parentStmt())
        if (marked.insert(p).second)
          jumpChildren[p->parent()].push_back(p);
      return;
    }
    case StmtKind::While:
      fallsThrough = false;
      return;
    default:
      break;
    }
    if (auto *a = dyn_cast<AdStackAllocaStmt>(&s)) {
      allocas.push_back(a);
      inStackTask = true;
    } else if (auto *op = dyn_cast<AdStackOpStmt>(&s))
      ops[op->stack()].push_back(op);
    else if (auto *f = dyn_cast<ForStmt>(&s)) {
      varOf[f] = static_cast<unsigned>(loops.size()); // a band's dimensions follow
      for (unsigned d = 0; d < f->numDims(); ++d)
        loops.push_back({f, d});
    } else if (auto *ti = dyn_cast<TaskIndexStmt>(&s)) {
      if (const ForStmt *task = enclosingParallelTask(s); task && ti->dim() < task->numDims())
        varOf[ti] = varOfDim(*task, ti->dim());
    } else if (isa<GlobalStoreStmt>(s) || isa<AtomicRmwStmt>(s)) {
      auto &g = cast<GlobalAccessStmt>(s);
      if (g.component() == Component::Primal) {
        if (g.isField())
          writtenFields.insert(g.field());
        else
          writtenNdarrays.insert(g.ndarray());
      }
    }
  };
  for (Stmt &top : body) {
    inStackTask = false;
    pending.clear();
    visit(top);
    for (unsigned i = 0; i < top.numBlocks(); ++i)
      walk(top.block(i), visit);
    if (!inStackTask)
      pending.resize(1); // the top-level statement's own number
    preorder.insert(pending.begin(), pending.end());
  }
}

E StructuralSizer::size(const AdStackAllocaStmt &a) {
  scope_ = a.parent();
  relevant_.clear();
  seen_.clear();
  // The statement of the scope that holds the last push: the ones after it
  // only pop, so they cannot raise the peak (and the peak is all a stack's
  // bound reads). Skipping them halves a gradient's work: its adjoint
  // loops, which pop the tapes, follow the loops that push them.
  lastPushTop_ = 0;
  std::vector<std::pair<AdStackOpStmt *, uint32_t>> tops; // op, its statement of the scope
  auto it = facts_.ops.find(&a);
  if (it != facts_.ops.end())
    for (AdStackOpStmt *op : it->second) {
      Stmt *child = op;
      while (child->parent() != scope_) {
        Stmt *up = child->parentStmt();
        if (!up)
          return fail(fmt::format("the adstack operation at {} is outside the adstack's block",
                                  op->loc().str()));
        child = up;
      }
      uint32_t top = facts_.preorder.at(child);
      tops.emplace_back(op, top);
      if (op->kind() == StmtKind::AdStackPush)
        lastPushTop_ = std::max(lastPushTop_, top);
    }
  for (auto [op, top] : tops) {
    if (top > lastPushTop_)
      continue;
    Stmt *child = op;
    while (child->parent() != scope_) {
      Stmt *up = child->parentStmt();
      // Constant mode fails at the first loop without a constant trip
      // count that the walk below reaches, and where every statement
      // falls through it reaches every loop around an op: fail here,
      // before walking up the other levels of a nest (the reason is not
      // reported; it may name another such loop than the walk would).
      if (auto *loop = dyn_cast<ForStmt>(up); loop && !symbolic_ && facts_.fallsThrough &&
                                              (loop->numDims() > 1 || !constantTripCount(*loop)))
        return fail(fmt::format("the loop at {} has bounds that are not compile-time constants",
                                loop->loc().str()));
      if (!seen_.insert(child).second)
        break; // the statements above were recorded by an earlier op
      relevant_[child->parent()].push_back(child);
      child = up;
    }
    if (child->parent() == scope_ && seen_.insert(child).second)
      relevant_[scope_].push_back(child);
  }
  Summary s = block(*scope_, facts_.preorder.at(&a) + 1);
  if (failed_)
    return nullptr;
  exact_ = s.exact;
  E depth = s.peak;
  // Loops around the alloca: the capacity is the maximum over their
  // iterations (threads included) of the depth reached in one of them.
  // The maximum is only reached when every iteration runs the alloca: an
  // if, a while or a break/continue between the loop and the alloca may
  // skip it in the iteration that gives the maximum.
  bool mayBeSkipped = false;
  for (Stmt *child = const_cast<AdStackAllocaStmt *>(&a), *up = a.parentStmt(); up && !failed_;
       child = up, up = up->parentStmt()) {
    if (auto it = facts_.jumpChildren.find(child->parent()); it != facts_.jumpChildren.end())
      for (Stmt *j : it->second)
        mayBeSkipped |= facts_.preorder.at(j) < facts_.preorder.at(child);
    auto *loop = dyn_cast<ForStmt>(up);
    if (!loop) {
      mayBeSkipped |= up->kind() == StmtKind::If || up->kind() == StmtKind::While;
      continue;
    }
    // A band's dimensions are loops nested in order (the innermost first).
    for (unsigned d = loop->numDims(); d-- > 0 && !failed_;) {
      unsigned v = facts_.varOfDim(*loop, d);
      if (!depth->usesVar(v)) {
        // The depth does not depend on this loop, so every iteration that
        // runs the alloca reaches it, and a launch where the loop runs 0
        // times needs no stack: the bound stays exact (a task over an
        // ndarray's extent). But the loop may skip the alloca for some
        // values of the loops around it, which matters where the depth
        // depends on those.
        bool runs = loop->begin(d).isConstant() && loop->end(d).isConstant() &&
                    loop->begin(d).constant < loop->end(d).constant;
        mayBeSkipped |= !runs;
        continue;
      }
      if (mayBeSkipped)
        exact_ = false;
      E begin = bound(loop->begin(d), *loop);
      E end = bound(loop->end(d), *loop);
      if (failed_)
        return nullptr;
      depth = SizeExpr::maxOverRange(v, begin, end, depth);
    }
  }
  if (failed_)
    return nullptr;
  return depth;
}

E StructuralSizer::fail(std::string why) {
  if (!failed_)
    reason_ = std::move(why);
  failed_ = true;
  return nullptr;
}

Summary StructuralSizer::block(Block &b, uint32_t from) {
  std::vector<std::pair<uint32_t, Stmt *>> ordered;
  uint32_t until = &b == scope_ ? lastPushTop_ : std::numeric_limits<uint32_t>::max();
  auto add = [&](Stmt *s) {
    uint32_t p = facts_.preorder.at(s);
    if (p >= from && p <= until)
      ordered.emplace_back(p, s);
  };
  if (auto it = relevant_.find(&b); it != relevant_.end())
    for (Stmt *s : it->second)
      add(s);
  if (auto it = facts_.jumpChildren.find(&b); it != facts_.jumpChildren.end())
    for (Stmt *s : it->second)
      if (!seen_.count(s))
        add(s);
  std::sort(ordered.begin(), ordered.end());
  Summary acc = Summary::identity();
  for (auto &[p, s] : ordered) {
    if (failed_ || !acc.fall)
      break;
    acc = seq(acc, stmt(*s));
  }
  return acc;
}

Summary StructuralSizer::stmt(Stmt &s) {
  Summary r = Summary::identity();
  switch (s.kind()) {
  case StmtKind::AdStackPush:
    r.fall = r.peak = cst(1);
    return r;
  case StmtKind::AdStackPop:
    r.fall = cst(-1);
    return r;
  case StmtKind::Break:
    return {nullptr, cst(0), nullptr, cst(0), false};
  case StmtKind::Continue:
    return {nullptr, nullptr, cst(0), cst(0), false};
  case StmtKind::If: {
    auto &i = cast<IfStmt>(s);
    Summary t = block(i.thenBlock(), 0);
    Summary e = block(i.elseBlock(), 0);
    r.fall = maxOpt(t.fall, e.fall);
    r.brk = maxOpt(t.brk, e.brk);
    r.cont = maxOpt(t.cont, e.cont);
    r.peak = SizeExpr::max(t.peak, e.peak);
    r.exact = t.exact && e.exact && sameOpt(t.fall, e.fall) && t.peak->equals(*e.peak);
    return r;
  }
  case StmtKind::Serial:
    return block(s.block(0), 0);
  case StmtKind::For:
    return forLoop(cast<ForStmt>(s));
  case StmtKind::While:
    return whileLoop(cast<WhileStmt>(s));
  default:
    return r; // load_top, load_top_adj, acc_adjoint: depth unchanged
  }
}

Summary StructuralSizer::whileLoop(WhileStmt &w) {
  Summary b = block(w.body(), 0);
  E it = maxOpt(b.fall, b.cont);
  if (it && !(it->isConst() && it->value() <= 0)) {
    fail(fmt::format("the while loop at {} may push more than it pops per iteration, and its "
                     "trip count is not known before it runs",
                     w.loc().str()));
    return Summary::identity();
  }
  // Iteration k starts at k * it <= 0, so the first iteration peaks highest
  // and the exit through a break is at most brk.
  return {b.brk, nullptr, nullptr, b.peak, b.exact && !b.cont};
}

// The begin, end and trip count of `loop`: in symbolic mode through the
// cache shared by the stacks of a kernel (a nest's bounds are captured once).
std::array<E, 3> StructuralSizer::tripBounds(ForStmt &loop, std::optional<int64_t> constantTrip) {
  if (!symbolic_) {
    E trip = cst(*constantTrip);
    return {cst(0), trip, trip};
  }
  auto cached = trips_ ? trips_->find(&loop) : TripCache::iterator();
  if (trips_ && cached != trips_->end())
    return cached->second;
  E begin = bound(loop.begin(), loop);
  E end = bound(loop.end(), loop);
  if (failed_)
    return {};
  std::array<E, 3> bounds{begin, end, SizeExpr::tripCount(begin, end)};
  if (trips_)
    trips_->emplace(&loop, bounds);
  return bounds;
}

Summary StructuralSizer::forLoop(ForStmt &loop) {
  if (loop.numDims() > 1) { // a task: stacks live inside its iterations
    fail(fmt::format("the adstack is used across the iterations of the parallel for at {}",
                     loop.loc().str()));
    return Summary::identity();
  }
  // Constant mode fails on a loop without a constant trip count whatever
  // its body holds (the reason is not reported), so it does before walking
  // the body: a stack under n such loops would walk them all first.
  std::optional<int64_t> constantTrip;
  if (!symbolic_) {
    constantTrip = constantTripCount(loop);
    if (!constantTrip) {
      fail(fmt::format("the loop at {} has bounds that are not compile-time constants",
                       loop.loc().str()));
      return Summary::identity();
    }
  }
  Summary b = block(loop.body(), 0);
  if (failed_)
    return b;
  E it = maxOpt(b.fall, b.cont); // net change of one iteration
  bool nonPositive = !it || (it->isConst() && it->value() <= 0);
  // (Symbolic mode only: with constant trip counts the tier-1 structural
  // pass leaves these shapes to Bellman-Ford, which handles them exactly.)
  auto capturable = [&](Bound bd) { return bd.isConstant() || capture(bd.value) != nullptr; };
  if (symbolic_ && nonPositive && !(capturable(loop.begin()) && capturable(loop.end())) &&
      !b.peak->usesVar(facts_.varOf.at(&loop)) &&
      (!b.brk || !b.brk->usesVar(facts_.varOf.at(&loop)))) {
    // Iterations never raise the depth they start at: the first one peaks
    // highest, whatever the trip count (which may even be data-dependent).
    Summary r;
    r.peak = b.peak;
    r.fall = maxOpt(cst(0), b.brk);
    r.exact = false;
    return r;
  }
  std::array<E, 3> bounds = tripBounds(loop, constantTrip);
  if (failed_)
    return b;
  E begin = bounds[0], end = bounds[1], trip = bounds[2];
  unsigned v = facts_.varOf.at(&loop);
  if (symbolic_ && it && it->usesVar(v) && !b.brk && !b.cont && it->isNonNegative() &&
      b.peak->equals(*it)) {
    // Every iteration pushes it(v) >= 0 and peaks at its end: the loop
    // peaks after its last iteration, at the sum of all of them (a
    // triangular nest: sum(j in [0, m): j), not m * max(j)).
    Summary r;
    r.fall = r.peak = SizeExpr::sumOverRange(v, begin, end, it);
    r.exact = b.exact;
    return r;
  }
  E br = b.brk, p = b.peak;
  bool exact = b.exact && !b.cont && !b.brk;
  // A body whose depth depends on the loop's own index: bound every
  // iteration by the largest one (sound; exact only for a constant body).
  auto hoist = [&](E &x) {
    if (x && x->usesVar(v)) {
      x = SizeExpr::maxOverRange(v, begin, end, x);
      exact = false;
    }
  };
  E itAt = it; // the net change of the iteration at index v
  bool itUsesVar = it && it->usesVar(v);
  bool othersUseVar = (br && br->usesVar(v)) || p->usesVar(v);
  hoist(it);
  hoist(br);
  hoist(p);
  if (trip->isConst() && trip->value() == 0)
    return Summary::identity();
  // `guard(x)`: x when the loop runs at least once, 0 otherwise.
  auto guard = [&](const E &x) {
    if (trip->isConst())
      return x;
    return SizeExpr::maxOverRange(v, begin, end, x);
  };
  Summary r;
  r.exact = exact;
  if (!it) { // every iteration leaves through a break: at most one runs
    r.peak = guard(p);
    r.fall = br ? guard(br) : cst(0);
    if (!trip->isConst())
      r.fall = SizeExpr::max(r.fall, cst(0));
    return r;
  }
  if (it->isNonPositive()) {
    r.peak = guard(p);
    if (itUsesVar) {
      // The net is the sum of the iterations' nets: exact, where
      // trip * max(net) would over-estimate it.
      r.fall = SizeExpr::sumOverRange(v, begin, end, itAt);
      r.exact = b.exact && !b.cont && !b.brk && !othersUseVar;
    } else {
      r.fall = SizeExpr::mul(trip, it);
    }
  } else {
    E itp = SizeExpr::max(it, cst(0));
    if (!it->isNonNegative())
      r.exact = false;
    auto tm1 = [&] { return SizeExpr::sub(trip, cst(1)); };
    r.fall = SizeExpr::mul(trip, itp);
    // One node for both when the body peaks at its end: the loop around
    // compares its body's peak with its net again, and equal trees built
    // apart cost a walk of the whole product (cubic in a nest of stacks).
    r.peak = p->equals(*itp) ? r.fall : guard(SizeExpr::add(SizeExpr::mul(tm1(), itp), p));
    if (br)
      br = SizeExpr::add(SizeExpr::mul(tm1(), itp), br);
  }
  if (br)
    r.fall = SizeExpr::max(r.fall, guard(br));
  return r;
}

} // namespace qd::sizing
