//===- PrimalReplay.cpp - Forward code of the gradient kernel -------------===//
//
// Fwd(B) replays, in a frame, the source statements whose primal values the
// reverse needs; Record(L) runs a loop once, pushing its loop-carried locals
// on adstacks; Plain(B) is forward code inside a recorded loop. See
// Internal.h for the terms.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "../DerivativeRules.h"

#include "qd/analysis/ConstantFolding.h"

#include "qd/ir/Clone.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <optional>

namespace qd::reverse {

void PrimalReplay::markOwner(Block &b, Frame *f) {
  for (Stmt &s : b) {
    owner_[&s] = f;
    if (s.kind() == StmtKind::If)
      for (unsigned i = 0; i < 2; ++i)
        markOwner(s.block(i), f);
  }
}

//===--- value lookup -----------------------------------------------------===//

/// The forward value of source value `v` at the builder's position.
Value *PrimalReplay::primal(const Value *v, Frame &f, IRBuilder &b) {
  if (!v)
    return nullptr;
  for (auto it = armScopes_.rbegin(); it != armScopes_.rend(); ++it)
    if (auto found = it->find(v); found != it->end())
      return found->second;
  // The nearest of `f` and its parents that holds `v` (Frame): mostly `f`.
  auto own = [&](const Frame::Held &h) { return h.value ? h.value : b.load(h.backup); };
  if (auto it = f.held.find(v); it != f.held.end()) {
    if (work_)
      ++work_->frameProbes;
    return own(it->second);
  }
  if (auto it = frames_.find(v); it != frames_.end())
    for (Frame *fr = it->second; fr;) {
      if (work_)
        ++work_->frameProbes;
      const Frame::Held &h = fr->held.at(v);
      if (fr->depth > f.depth) { // a frame inside `f`
        fr = h.outer;
        continue;
      }
      return own(h);
    }
  // A value computed inside an if arm and not visible here is recomputed:
  // nothing the gradient kernel runs writes primal memory, and only loads
  // of locals (which do change) are saved in backups.
  if (auto *s = dyn_cast<Stmt>(v); s && isRecomputable(*s)) {
    ValueMap map;
    for (unsigned i = 0; i < s->numOperands(); ++i)
      if (Value *op = s->operand(i); op && !map.count(op))
        map[op] = primal(op, f, b);
    return b.insert(cloneStmt(*s, map));
  }
  internalError_ = fmt::format("no forward value for {}", printStmt(*cast<Stmt>(v)));
  return b.constInt(ScalarType::I32, 0);
}

Bound PrimalReplay::bound(Bound src, Frame &f, IRBuilder &b) {
  return src.isConstant() ? src : Bound(primal(src.value, f, b));
}

IRBuilder PrimalReplay::atTop(Frame &f) {
  IRBuilder b(*f.block);
  b.setInsertionPoint(*f.block, f.block->begin());
  return b;
}

//===--- forward code ----------------------------------------------------===//

bool PrimalReplay::wanted(const Stmt &s) const {
  if (plan_.needed.count(&s))
    return true;
  if (auto *a = dyn_cast<AllocaStmt>(&s))
    return plan_.neededLocals.count(a) > 0;
  if (auto *st = dyn_cast<LocalStoreStmt>(&s))
    return plan_.neededLocals.count(st->local()) > 0;
  return false;
}

bool PrimalReplay::wantedIn(const Stmt &s, const Frame &f) const {
  if (!f.replay)
    return wanted(s);
  if (auto *a = dyn_cast<AllocaStmt>(&s))
    return f.replay->replayLocals.count(a) > 0;
  if (auto *st = dyn_cast<LocalStoreStmt>(&s)) {
    // A store whose value the reverse does not read inside the loop is not
    // read back in the iteration either (its next value is restored).
    if (!f.replay->replayLocals.count(st->local()))
      return false;
    const auto *v = dyn_cast<Stmt>(st->value());
    bool inLoop = false;
    for (const Stmt *p = v; p && !inLoop; p = p->parentStmt())
      inLoop = p == f.replayLoop;
    return !inLoop || f.replay->replayValues.count(v) > 0;
  }
  return f.replay->replayValues.count(&s) > 0;
}

void PrimalReplay::pushFactor(const Stmt &s, Value *clone, IRBuilder &b, ValueMap &map, Frame &f) {
  auto it = factorStacks_.find(&s);
  if (it == factorStacks_.end())
    return;
  Value *factor = ad::derivativeFactor(
      s, b, [&](const Value *v) { return v == &s ? clone : lookup(v, f, b, map); });
  b.adstackPush(it->second, factor);
}

/// Clones a non-container statement with operands looked up in `f`.
Value *PrimalReplay::cloneLeaf(const Stmt &s, IRBuilder &b, Frame &f, bool inArm) {
  ValueMap map;
  for (unsigned i = 0; i < s.numOperands(); ++i)
    if (Value *op = s.operand(i); op && !map.count(op))
      map[op] = primal(op, f, b);
  Stmt *c = b.insert(cloneStmt(s, map));
  if (!c->type().isVoid()) {
    if (!inArm) {
      f.setDirect(&s, c);
    } else {
      armScopes_.back()[&s] = c;
      if (s.kind() == StmtKind::LocalLoad) { // the only value that cannot be recomputed
        AllocaStmt *save = atTop(f).alloca(c->type().element());
        b.store(save, c);
        f.setBackup(&s, save);
      }
    }
  }
  return c;
}

/// Fwd(B): the forward code of a frame's block (and of its if arms).
void PrimalReplay::forward(Block &block, IRBuilder &b, Frame &f, bool inArm) {
  for (Stmt &s : block) {
    b.setLocation(s.loc());
    switch (s.kind()) {
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      auto scope = b.ifThen(primal(i.cond(), f, b));
      armScopes_.emplace_back();
      forward(i.thenBlock(), b, f, true);
      armScopes_.back().clear();
      scope.otherwise();
      forward(i.elseBlock(), b, f, true);
      armScopes_.pop_back();
      break;
    }
    case StmtKind::For:
    case StmtKind::While:
      if (plan_.loops.at(&s).taped)
        saveAtEntry(s, b, f); // its iterations were pushed by Plain(parent)
      else if (plan_.loops.at(&s).checkpointed)
        recordCheckpointed(cast<ForStmt>(s), b, f);
      else
        record(s, b, f);
      break;
    case StmtKind::Break:
    case StmtKind::Continue:
      break; // the iteration ends here anyway
    case StmtKind::Alloca:
      if (wantedIn(s, f)) // hoisted: a frame runs each statement at most once
        f.setDirect(&s, atTop(f).alloca(cast<AllocaStmt>(s).elementType()));
      break;
    default:
      if (wantedIn(s, f) && !(isa<TaskIndexStmt>(s) && f.holdsDirect(&s)))
        cloneLeaf(s, b, f, inArm);
    }
  }
}

/// Plain(B): forward code inside a recorded loop (loop exits are real).
/// Nothing is kept for the reverse except, while `taping` (B belongs to
/// the recorded loop or to loops taped inside it), the iterations of
/// taped loops, whose stacks live in the recording frame `f`.
void PrimalReplay::plain(Block &block, IRBuilder &b, Frame &f, ValueMap &map, bool taping) {
  for (Stmt &s : block) {
    b.setLocation(s.loc());
    switch (s.kind()) {
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      auto scope = b.ifThen(lookup(i.cond(), f, b, map));
      if (&s == pushGuard_) {
        pushGuard_ = nullptr;
        atPushGuard_();
      }
      plain(i.thenBlock(), b, f, map, taping);
      scope.otherwise();
      plain(i.elseBlock(), b, f, map, taping);
      break;
    }
    case StmtKind::For: {
      auto &l = cast<ForStmt>(s);
      Bound lo = l.begin().isConstant() ? l.begin() : Bound(lookup(l.beginValue(), f, b, map));
      Bound hi = l.end().isConstant() ? l.end() : Bound(lookup(l.endValue(), f, b, map));
      bool tape = taping && plan_.loops.at(&l).taped;
      if (tape)
        allocateStacks(l, f);
      auto scope = b.forRange(lo, hi);
      map[&l] = scope.index();
      if (tape)
        for (AllocaStmt *a : plan_.loops.at(&l).perIteration)
          b.adstackPush(stacks_.at({&l, a}), b.load(lookup(a, f, b, map)));
      plain(l.body(), b, f, map, tape);
      break;
    }
    case StmtKind::While: {
      auto scope = b.whileLoop();
      plain(s.block(0), b, f, map, /*taping=*/false);
      break;
    }
    case StmtKind::Break:
      b.brk();
      break;
    case StmtKind::Continue:
      b.cont();
      break;
    default: {
      // A taped factor is pushed whether or not the reverse reads `s`.
      bool factor = taping && factorStacks_.count(&s);
      if (!wanted(s) && !factor)
        break;
      ValueMap m;
      for (unsigned i = 0; i < s.numOperands(); ++i)
        if (Value *op = s.operand(i); op && !m.count(op))
          m[op] = lookup(op, f, b, map);
      Value *clone = b.insert(cloneStmt(s, m));
      map[&s] = clone;
      if (factor)
        pushFactor(s, clone, b, map, f);
    }
    }
  }
}

Value *PrimalReplay::lookup(const Value *v, Frame &f, IRBuilder &b, ValueMap &map) {
  if (auto it = map.find(v); it != map.end())
    return it->second;
  return primal(v, f, b);
}

AllocaStmt *PrimalReplay::counterOf(const Stmt &loop, Frame &f) {
  auto &c = counters_[&loop];
  if (!c)
    c = atTop(f).alloca(ScalarType::I32);
  return c;
}

/// Saves the locals that `loop` reads and does not write, which Rev(L)
/// restores before running the iterations backwards.
void PrimalReplay::saveAtEntry(Stmt &loop, IRBuilder &b, Frame &f) {
  for (AllocaStmt *a : plan_.loops.at(&loop).atEntry) {
    AllocaStmt *&save = entrySaves_[{&loop, a}];
    save = atTop(f).alloca(a->elementType());
    b.store(save, b.load(primal(a, f, b)));
  }
}

/// The stacks of `loop`'s per-iteration locals, at the top of frame `f`.
void PrimalReplay::allocateStacks(Stmt &loop, Frame &f) {
  const LoopPlan &plan = plan_.loops.at(&loop);
  for (AllocaStmt *a : plan.perIteration) {
    AdStackAllocaStmt *stack = atTop(f).adstackAlloca(a->elementType());
    stack->setLoc(loop.loc());
    stacks_[{&loop, a}] = stack;
  }
  for (const Stmt *t : plan.tapedFactors) {
    AdStackAllocaStmt *stack = atTop(f).adstackAlloca(t->type().element());
    stack->setLoc(t->loc());
    factorStacks_[t] = stack;
  }
}

/// Record(L).
void PrimalReplay::record(Stmt &loop, IRBuilder &b, Frame &f, Range range) {
  const LoopPlan &plan = plan_.loops.at(&loop);
  saveAtEntry(loop, b, f);
  allocateStacks(loop, f);
  AllocaStmt *counter = plan.counted ? counterOf(loop, f) : nullptr;
  if (counter)
    b.store(counter, b.i32(0));
  ValueMap map;
  std::optional<IRBuilder::LoopScope> forScope;
  std::optional<IRBuilder::BlockScope> whileScope;
  if (auto *l = dyn_cast<ForStmt>(&loop)) {
    forScope.emplace(range ? b.forRange(range->first, range->second)
                           : b.forRange(bound(l->begin(), f, b), bound(l->end(), f, b)));
    map[l] = forScope->index();
  } else {
    whileScope.emplace(b.whileLoop());
  }
  auto startIteration = [&] {
    if (counter)
      b.store(counter, b.add(b.load(counter), b.i32(1)));
    for (AllocaStmt *a : plan.perIteration)
      b.adstackPush(stacks_.at({&loop, a}), b.load(primal(a, f, b)));
  };
  // A while loop that may leave before it changes anything records only
  // its completed iterations (their number is the trip count): the last
  // iteration, which only decides to leave, has nothing to reverse.
  if (const IfStmt *guard = isa<WhileStmt>(loop) ? exitGuard(loop) : nullptr) {
    pushGuard_ = guard;
    atPushGuard_ = startIteration;
  } else {
    startIteration();
  }
  plain(loop.block(0), b, f, map, /*taping=*/true);
  if (pushGuard_)
    internalError_ = "the exit guard of a while loop was not replayed";
  pushGuard_ = nullptr;
}

/// For a lowered while loop (JumpLowering.cpp) whose body is
///   [pure statements] if %c { store %state, 2 } if %state == 0 { rest }
///   [pure statements] if %state == 2 { break }
/// the guard `if %state == 0`; null for any other shape. Pure: no store
/// (but to fresh locals), no global write, adstack operation or loop, so
/// an iteration that leaves at the first if changes nothing whose reverse
/// would matter, and the locals it starts with are the guard's.
const IfStmt *PrimalReplay::exitGuard(const Stmt &loop) {
  auto pure = [](const Stmt &s) {
    switch (s.kind()) {
    case StmtKind::Const:
    case StmtKind::Binary:
    case StmtKind::Unary:
    case StmtKind::Cmp:
    case StmtKind::Select:
    case StmtKind::Cast:
    case StmtKind::Alloca:
    case StmtKind::LocalLoad:
    case StmtKind::GlobalLoad:
    case StmtKind::Shape:
    case StmtKind::TaskIndex:
      return true;
    default:
      return false;
    }
  };
  // `%l = load %state; %c = cmp eq %l, k` with k a constant.
  auto stateTest = [](const Value *cond, const Value *&state, int64_t k) {
    auto *c = dyn_cast<CmpStmt>(cond);
    if (!c || c->predicate() != CmpPredicate::Eq)
      return false;
    auto *ld = dyn_cast<LocalLoadStmt>(c->lhs());
    auto rhs = evaluateConstantInt(c->rhs());
    if (!ld || !rhs || *rhs != k || (state && ld->local() != state))
      return false;
    state = ld->local();
    return true;
  };
  const Value *state = nullptr;
  const IfStmt *guard = nullptr;
  bool exitSeen = false;
  for (Stmt &s : loop.block(0)) {
    if (pure(s))
      continue;
    auto *i = dyn_cast<IfStmt>(&s);
    if (!i || !i->elseBlock().empty())
      return nullptr;
    Stmt *last = i->thenBlock().empty() ? nullptr : &i->thenBlock().back();
    if (!exitSeen) { // if %c { store %state, 2 }
      auto *st = last ? dyn_cast<LocalStoreStmt>(last) : nullptr;
      auto k = st ? evaluateConstantInt(st->value()) : std::nullopt;
      if (!st || !k || *k != 2)
        return nullptr;
      for (Stmt &t : i->thenBlock())
        if (&t != last && !pure(t))
          return nullptr;
      state = st->local();
      exitSeen = true;
    } else if (!guard) { // if %state == 0 { rest }
      if (!stateTest(i->cond(), state, 0))
        return nullptr;
      guard = i;
    } else if (!(stateTest(i->cond(), state, 2) && last && last->kind() == StmtKind::Break &&
                 &i->thenBlock().front() == last)) {
      return nullptr;
    }
  }
  return guard;
}

} // namespace qd::reverse
