//===- NeededValues.cpp - Primal values the reverse sweep reads -----------===//
//
// The reverse of a statement reads primal values: the operands its partial
// derivatives are written with (DerivativeRules.h), conditions, loop bounds
// and indices, and, transitively, what those are computed from. Only these
// are replayed by the forward code of the gradient kernel, and only the
// loop-carried locals they read are pushed on adstacks.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "../DerivativeRules.h"

namespace qd::reverse {

void NeededValues::need(const Value *v) {
  if (!v || !isa<Stmt>(v))
    return;
  if (scope_ && !scope_->count(cast<Stmt>(v))) {
    if (outside_ && outsideSeen_.insert(v).second)
      outside_->push_back(v);
    return;
  }
  if (target_->insert(v).second)
    work_.push_back(v);
}

void NeededValues::compute(const std::vector<Stmt *> &stmts,
                           const std::unordered_set<const Stmt *> *scope,
                           std::unordered_set<const Value *> &values,
                           std::unordered_set<const Value *> &locals,
                           const std::vector<const Value *> &roots,
                           std::vector<const Value *> *outside) {
  target_ = &values;
  scope_ = scope;
  outside_ = outside;
  outsideSeen_.clear();
  for (const Value *r : roots)
    need(r);
  std::unordered_map<const Value *, std::vector<LocalStoreStmt *>> storesTo;
  for (Stmt *s : stmts) {
    if (auto *st = dyn_cast<LocalStoreStmt>(s))
      storesTo[st->local()].push_back(st);
    switch (s->kind()) {
    case StmtKind::If:
      need(cast<IfStmt>(s)->cond());
      break;
    case StmtKind::For: {
      auto *f = cast<ForStmt>(s);
      need(f->beginValue());
      need(f->endValue());
      break;
    }
    case StmtKind::GlobalLoad:
    case StmtKind::GlobalStore:
    case StmtKind::AtomicAdd: {
      auto &g = cast<GlobalAccessStmt>(*s);
      for (unsigned i = 0; i < g.numIndices(); ++i)
        need(g.index(i));
      break;
    }
    case StmtKind::Binary:
    case StmtKind::Unary:
    case StmtKind::Select:
      // What the partials read (DerivativeRules.h).
      if (activity_.isActive(s))
        ad::primalReads(
            *s, [&](const Value *v) { return activity_.isActive(v); },
            [&](const Value *v) { need(v); });
      break;
    default:
      break;
    }
  }
  // Within one iteration of the loop `scope` covers, a store reaches a
  // load if it comes first, or if both sit in a loop nested in the scope
  // (through that loop's back edge). A store that comes later reaches the
  // load only through the scope loop's back edge, that is, through the
  // value at the start of the next iteration, which Rev(L) restores from
  // the loop's adstack: its value is not needed for this loop.
  std::unordered_map<const Stmt *, size_t> position;
  if (scope)
    for (size_t i = 0; i < stmts.size(); ++i)
      position[stmts[i]] = i;
  // The outermost `for` or `while` of the scope around `x` (null: none):
  // that of its parent, else the parent if it is such a loop, for a parent
  // in the scope. Memoised; the recursion is as deep as the nesting.
  std::unordered_map<const Stmt *, const Stmt *> outermost;
  auto outermostOf = [&](auto &self, const Stmt *x) -> const Stmt * {
    if (auto it = outermost.find(x); it != outermost.end())
      return it->second;
    const Stmt *p = x->parentStmt();
    const Stmt *o = nullptr;
    if (p && scope->count(p)) {
      o = self(self, p);
      if (!o && (p->kind() == StmtKind::For || p->kind() == StmtKind::While))
        o = p;
    }
    outermost.emplace(x, o);
    return o;
  };
  auto outermostLoop = [&](const Stmt *x) { return outermostOf(outermostOf, x); };
  auto reaches = [&](const LocalStoreStmt *st, const LocalLoadStmt *ld) {
    if (!scope || position.at(st) < position.at(ld))
      return true;
    // A loop in the scope around both. The loops in the scope around a
    // statement are nested in each other, so some encloses both exactly
    // when the outermost one around the load also encloses the store, that
    // is, when both have the same outermost one (O(1) a pair, memoised;
    // walking up from the store once per loop around the load was cubic
    // in deep nests).
    const Stmt *outer = outermostLoop(ld);
    return outer && outermostLoop(st) == outer;
  };
  while (!work_.empty()) {
    const Value *v = work_.back();
    work_.pop_back();
    const auto *s = cast<Stmt>(v);
    for (unsigned i = 0; i < s->numOperands(); ++i)
      need(s->operand(i));
    if (auto *ld = dyn_cast<LocalLoadStmt>(s)) {
      locals.insert(ld->local());
      for (LocalStoreStmt *st : storesTo[ld->local()])
        if (reaches(st, ld))
          need(st->value());
    }
  }
  scope_ = nullptr;
  outside_ = nullptr;
}

} // namespace qd::reverse
