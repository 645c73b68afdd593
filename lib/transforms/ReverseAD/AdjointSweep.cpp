//===- AdjointSweep.cpp - Reverse code of the gradient kernel -------------===//
//
// Adj(B) reverses a frame's block statement by statement: each statement
// accumulates its adjoint times its partials (DerivativeRules.h) into its
// active operands' adjoints; loops are reversed by Rev(L), each reversed
// iteration a new frame. See Internal.h for the terms.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "../DerivativeRules.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <optional>

namespace qd::reverse {
namespace {

/// The value an adjoint starts from (and is reset to): -0.0, not +0.0.
/// -0.0 + x is x for every x (+0.0 + -0.0 is +0.0), so the first
/// accumulation folds away without fast-math; the sum that reaches a grad
/// companion is the same, since +0.0 + -0.0 = +0.0 there.
Value *zeroAdjoint(IRBuilder &b, ScalarType t) {
  return b.constFloat(t, -0.0);
}

/// The stores at the top level of parallel task `task` whose adjoint
/// zeroing (the `store @y.grad[idx], 0` of the reverse of `store @y[idx],
/// v`) may wait for the end of the reversed iteration: no other statement
/// of the task accesses the field, so nothing else in the gradient task
/// reads or writes its adjoint. The end is always reached: `break` and
/// `continue` were lowered to flags before (JumpLowering.cpp). Where the
/// zeroing lands then changes no result; on a GPU, a store between an
/// iteration's forward and reverse loops made the H100 up to 35% slower
/// (docs/performance.md, "Design decisions").
StmtSet deferrableZeroings(ForStmt &task) {
  std::unordered_map<const Field *, int> uses;
  walk(task.body(), [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s); g && g->isField())
      ++uses[g->field()];
  });
  StmtSet deferred;
  for (Stmt &s : task.body())
    if (auto *st = dyn_cast<GlobalStoreStmt>(&s); st && st->isField() && uses[st->field()] == 1)
      deferred.insert(st);
  return deferred;
}

} // namespace

void GradientBuilder::run() {
  // Launch-time statements first, then the tasks in reverse order.
  Frame kernelFrame(nullptr, frames_);
  kernelFrame.block = &grad_.body();
  for (unsigned i = 0; i < src_.numArguments(); ++i)
    kernelFrame.setDirect(src_.argument(i), grad_.argument(i));
  std::vector<Stmt *> tasks;
  IRBuilder top(grad_);
  for (Stmt &s : src_.body()) {
    if (s.isTask()) {
      tasks.push_back(&s);
      continue;
    }
    top.setLocation(s.loc());
    cloneLeaf(s, top, kernelFrame, /*inArm=*/false);
  }
  for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {
    Stmt &task = **it;
    top.setLocation(task.loc());
    Frame f(&kernelFrame, frames_);
    if (auto *loop = dyn_cast<ForStmt>(&task)) {
      std::vector<Bound> begins, ends;
      for (unsigned d = 0; d < loop->numDims(); ++d) {
        begins.push_back(bound(loop->begin(d), kernelFrame, top));
        ends.push_back(bound(loop->end(d), kernelFrame, top));
      }
      auto scope = loop->numDims() == 1 ? top.parallelFor(begins[0], ends[0])
                                        : top.parallelBand(begins, ends);
      f.block = &scope.stmt()->body();
      f.setDirect(loop, scope.index());
      if (loop->numDims() > 1) {
        // A band keeps its index names, and the indices its header names
        // stand for the source's (not cloned again).
        scope.stmt()->setName(loop->name());
        for (Stmt &s : loop->body())
          if (auto *ti = dyn_cast<TaskIndexStmt>(&s); ti && !f.holdsDirect(ti)) {
            Value *index = scope.index(ti->dim());
            if (index->name().empty())
              index->setName(ti->name());
            f.setDirect(ti, index);
          }
      }
      markOwner(loop->body(), &f);
      deferZeroing_ = deferrableZeroings(*loop);
      frame(loop->body(), f);
      IRBuilder end(*f.block);
      for (const PendingZero &z : pendingZeroes_) {
        end.setLocation(z.loc);
        end.store(z.ref, z.indices, end.constFloat(z.type, 0));
      }
      deferZeroing_.clear();
      pendingZeroes_.clear();
    } else {
      auto scope = top.serial();
      f.block = &cast<SerialStmt>(scope.stmt())->body();
      markOwner(task.block(0), &f);
      frame(task.block(0), f);
    }
  }
}

//===--- reverse code ----------------------------------------------------===//

AllocaStmt *GradientBuilder::adjointOf(const Value *v) {
  auto found = owner_.find(cast<Stmt>(v));
  Frame *owner = found != owner_.end() ? found->second : nullptr;
  if (!owner) {
    internalError_ = "no frame owns " + printStmt(*cast<Stmt>(v));
    return nullptr;
  }
  if (auto it = owner->adj.find(v); it != owner->adj.end())
    return it->second;
  IRBuilder top = atTop(*owner); // a local's adjoint has the local's element type
  AllocaStmt *a = top.alloca(v->type().element());
  top.store(a, zeroAdjoint(top, v->type().element()));
  owner->adj.emplace(v, a);
  return a;
}

/// adj(v) += x, for active float values (and locals).
void GradientBuilder::accumulate(const Value *v, Value *x, IRBuilder &b) {
  if (!v || !activity_.isActive(v))
    return;
  AllocaStmt *a = adjointOf(v);
  if (!a)
    return;
  b.store(a, b.add(b.load(a), x));
}

/// The adjoint of `s` if anything accumulated into it, else null.
Value *GradientBuilder::adjointValue(const Stmt &s, IRBuilder &b) {
  Frame *owner = owner_.count(&s) ? owner_.at(&s) : nullptr;
  if (!owner)
    return nullptr;
  auto it = owner->adj.find(&s);
  return it == owner->adj.end() ? nullptr : b.load(it->second);
}

void GradientBuilder::reverse(Block &block, IRBuilder &b, Frame &f) {
  std::vector<Stmt *> stmts;
  for (Stmt &s : block)
    stmts.push_back(&s);
  for (auto it = stmts.rbegin(); it != stmts.rend(); ++it) {
    Stmt &s = **it;
    b.setLocation(s.loc());
    switch (s.kind()) {
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      auto scope = b.ifThen(primal(i.cond(), f, b));
      reverse(i.thenBlock(), b, f);
      scope.otherwise();
      reverse(i.elseBlock(), b, f);
      break;
    }
    case StmtKind::For:
    case StmtKind::While:
      if (plan_.loops.at(&s).checkpointed)
        reverseCheckpointed(cast<ForStmt>(s), b, f);
      else
        reverseLoop(s, b, f);
      break;
    default:
      adjoint(s, b, f);
    }
  }
}

/// Rev(L).
void GradientBuilder::reverseLoop(Stmt &loop, IRBuilder &b, Frame &f, Range range) {
  const LoopPlan &plan = plan_.loops.at(&loop);
  for (AllocaStmt *a : plan.atEntry)
    b.store(primal(a, f, b), b.load(entrySaves_.at({&loop, a})));
  auto *l = dyn_cast<ForStmt>(&loop);
  // Iteration k of the reverse loop runs index `last - k`; `last` is
  // computed once, before the loop.
  auto value = [&](Bound bd) {
    return bd.isConstant() ? b.i32(static_cast<int32_t>(bd.constant)) : bd.value;
  };
  Value *last = nullptr;
  std::optional<IRBuilder::LoopScope> scope;
  if (plan.counted) {
    Value *count = b.load(counters_.at(&loop));
    if (l)
      last = b.sub(b.add(value(bound(l->begin(), f, b)), count), b.i32(1));
    scope.emplace(b.forRange(b.i32(0), count));
  } else {
    Bound lo = range ? range->first : bound(l->begin(), f, b);
    Bound hi = range ? range->second : bound(l->end(), f, b);
    last = b.sub(b.add(value(lo), value(hi)), b.i32(1));
    scope.emplace(b.forRange(lo, hi));
  }
  Frame inner(&f, frames_);
  inner.block = &scope->stmt()->body();
  if (!plan.tapedFactors.empty()) {
    inner.replayLoop = &loop;
    inner.replay = &plan;
  }
  IRBuilder body(*inner.block);
  body.setLocation(loop.loc());
  if (l) {
    // Keep the restores below the frame's hoisted allocas: build the index
    // and restores first, then the frame appends after them.
    Value *k = scope->index();
    inner.setDirect(l, body.sub(last, k));
  }
  for (AllocaStmt *a : plan.perIteration)
    body.store(primal(a, f, body), body.adstackLoadTop(stacks_.at({&loop, a})));
  markOwner(loop.block(0), &inner);
  frame(loop.block(0), inner, &body);
  body.setInsertionPointToEnd(*inner.block);
  for (AllocaStmt *a : plan.perIteration)
    body.adstackPop(stacks_.at({&loop, a}));
  for (const Stmt *t : plan.tapedFactors)
    body.adstackPop(factorStacks_.at(t));
}

/// One frame: Fwd(B) then Adj(B), appended at the end of the frame block.
void GradientBuilder::frame(Block &src, Frame &f, IRBuilder *at) {
  IRBuilder b(*f.block);
  if (at)
    b = *at;
  forward(src, b, f, false);
  reverse(src, b, f);
}

void GradientBuilder::adjoint(Stmt &s, IRBuilder &b, Frame &f) {
  switch (s.kind()) {
  case StmtKind::LocalStore: {
    auto &st = cast<LocalStoreStmt>(s);
    if (!activity_.isActive(st.local()))
      return;
    // The local's adjoint may only be read here: in a loop, the loads
    // that feed it can come earlier in the body (later iterations of the
    // forward run reach this store's reverse through the back edge), so
    // it is created if it does not exist yet.
    AllocaStmt *adj = adjointOf(st.local());
    if (!adj)
      return;
    Value *g = b.load(adj);
    accumulate(st.value(), g, b);
    b.store(adj, zeroAdjoint(b, st.value()->type().element()));
    return;
  }
  case StmtKind::GlobalStore:
  case StmtKind::AtomicAdd: {
    auto &g = cast<GlobalAccessStmt>(s);
    Value *v = s.operand(s.numOperands() - 1);
    bool store = s.kind() == StmtKind::GlobalStore;
    // A store overwrites the element: the values stored before it (reversed
    // after it) get none of its adjoint, so the store also zeroes it.
    if (!hasDerivativeCompanion(g, ActivityMode::Reverse) || !v->type().isFloatScalar() ||
        (!store && !activity_.isActive(v)))
      return;
    std::vector<Value *> idx;
    for (unsigned i = 0; i < g.numIndices(); ++i)
      idx.push_back(primal(g.index(i), f, b));
    GlobalRef ref = g.ref();
    ref.component = Component::Grad;
    if (ref.ndarray)
      ref.ndarray = primal(ref.ndarray, f, b);
    if (activity_.isActive(v))
      accumulate(v, b.load(ref, idx), b);
    if (store && deferZeroing_.count(&s))
      pendingZeroes_.push_back({ref, idx, v->type().element(), b.location()});
    else if (store)
      b.store(ref, idx, b.constFloat(v->type().element(), 0));
    return;
  }
  default:
    break;
  }
  if (!activity_.isActive(&s))
    return;
  Value *g = adjointValue(s, b);
  if (!g)
    return;
  auto p = [&](const Value *v) { return primal(v, f, b); };
  switch (s.kind()) {
  case StmtKind::LocalLoad:
    accumulate(cast<LocalLoadStmt>(s).local(), g, b);
    return;
  case StmtKind::GlobalLoad: {
    auto &ld = cast<GlobalLoadStmt>(s);
    std::vector<Value *> idx;
    for (unsigned i = 0; i < ld.numIndices(); ++i)
      idx.push_back(p(ld.index(i)));
    GlobalRef ref = ld.ref();
    ref.component = Component::Grad;
    if (ref.ndarray)
      ref.ndarray = p(ref.ndarray);
    b.atomicAdd(ref, idx, g);
    return;
  }
  default:
    break;
  }
  if (!ad::hasDerivativeRule(s) || !ad::isDifferentiable(s))
    return; // a non-differentiable active statement was rejected before
  if (auto it = factorStacks_.find(&s); f.replay && it != factorStacks_.end()) {
    // The factor the forward sweep pushed: the rule's product, read back.
    if (activity_.isActive(s.operand(0)))
      accumulate(s.operand(0), b.mul(g, b.adstackLoadTop(it->second)), b);
    return;
  }
  for (const ad::Partial &part : ad::partials(s, b, p)) {
    const Value *x = s.operand(part.operand);
    if (activity_.isActive(x))
      accumulate(x, ad::applyPartial(part, b, g), b);
  }
}

} // namespace qd::reverse
