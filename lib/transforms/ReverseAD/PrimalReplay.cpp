//===- PrimalReplay.cpp - Forward code of the gradient kernel -------------===//
//
// Fwd(B) replays, in a frame, the source statements whose primal values the
// reverse needs; Record(L) runs a loop once, pushing its loop-carried locals
// on adstacks; Plain(B) is forward code inside a recorded loop. See
// Internal.h for the terms.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

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
  for (Frame *fr = &f; fr; fr = fr->parent) {
    if (auto it = fr->direct.find(v); it != fr->direct.end())
      return it->second;
    if (auto it = fr->backup.find(v); it != fr->backup.end())
      return b.load(it->second);
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

/// Clones a non-container statement with operands looked up in `f`.
Value *PrimalReplay::cloneLeaf(const Stmt &s, IRBuilder &b, Frame &f, bool inArm) {
  ValueMap map;
  for (unsigned i = 0; i < s.numOperands(); ++i)
    if (Value *op = s.operand(i); op && !map.count(op))
      map[op] = primal(op, f, b);
  Stmt *c = b.insert(cloneStmt(s, map));
  if (!c->type().isVoid()) {
    if (!inArm) {
      f.direct[&s] = c;
    } else {
      armScopes_.back()[&s] = c;
      if (s.kind() == StmtKind::LocalLoad) { // the only value that cannot be recomputed
        AllocaStmt *save = atTop(f).alloca(c->type().element());
        b.store(save, c);
        f.backup[&s] = save;
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
      else
        record(s, b, f);
      break;
    case StmtKind::Break:
    case StmtKind::Continue:
      break; // the iteration ends here anyway
    case StmtKind::Alloca:
      if (wanted(s)) // hoisted: a frame runs each statement at most once
        f.direct[&s] = atTop(f).alloca(cast<AllocaStmt>(s).elementType());
      break;
    default:
      if (wanted(s) && !(isa<TaskIndexStmt>(s) && f.direct.count(&s)))
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
        allocateStacks(l, f, /*taped=*/true);
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
    default:
      if (!wanted(s))
        break;
      ValueMap m;
      for (unsigned i = 0; i < s.numOperands(); ++i)
        if (Value *op = s.operand(i); op && !m.count(op))
          m[op] = lookup(op, f, b, map);
      map[&s] = b.insert(cloneStmt(s, m));
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
void PrimalReplay::allocateStacks(Stmt &loop, Frame &f, bool taped) {
  for (AllocaStmt *a : plan_.loops.at(&loop).perIteration) {
    AdStackAllocaStmt *stack = atTop(f).adstackAlloca(a->elementType());
    stack->setLoc(loop.loc());
    stacks_[{&loop, a}] = stack;
    if (taped)
      tapedStacks_[stack] = &loop;
  }
}

/// Record(L).
void PrimalReplay::record(Stmt &loop, IRBuilder &b, Frame &f) {
  const LoopPlan &plan = plan_.loops.at(&loop);
  saveAtEntry(loop, b, f);
  allocateStacks(loop, f, /*taped=*/false);
  AllocaStmt *counter = plan.counted ? counterOf(loop, f) : nullptr;
  if (counter)
    b.store(counter, b.i32(0));
  ValueMap map;
  std::optional<IRBuilder::LoopScope> forScope;
  std::optional<IRBuilder::BlockScope> whileScope;
  if (auto *l = dyn_cast<ForStmt>(&loop)) {
    forScope.emplace(b.forRange(bound(l->begin(), f, b), bound(l->end(), f, b)));
    map[l] = forScope->index();
  } else {
    whileScope.emplace(b.whileLoop());
  }
  if (counter)
    b.store(counter, b.add(b.load(counter), b.i32(1)));
  for (AllocaStmt *a : plan.perIteration)
    b.adstackPush(stacks_.at({&loop, a}), b.load(primal(a, f, b)));
  plain(loop.block(0), b, f, map, /*taping=*/true);
}

} // namespace qd::reverse
