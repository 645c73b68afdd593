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

#include <algorithm>

namespace qd::reverse {
namespace {

/// The stores to one local in a `compute`, and which of them are needed.
struct LocalStores {
  std::vector<LocalStoreStmt *> inOrder; // by position
  size_t prefix = 0;                     // inOrder[0 .. prefix) are needed
  bool grouped = false;                  // byOuterLoop is filled
  /// By the outermost loop of the scope around them; a group is erased
  /// once its stores are needed.
  std::unordered_map<const Stmt *, std::vector<LocalStoreStmt *>> byOuterLoop;
};

} // namespace

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

// Needs what the reverse of `s` reads itself: conditions, loop bounds,
// indices and the operands of its partials.
void NeededValues::needDirectReads(Stmt &s) {
  switch (s.kind()) {
  case StmtKind::If:
    need(cast<IfStmt>(&s)->cond());
    break;
  case StmtKind::For: {
    auto *f = cast<ForStmt>(&s);
    need(f->beginValue());
    need(f->endValue());
    break;
  }
  case StmtKind::GlobalLoad:
  case StmtKind::GlobalStore:
  case StmtKind::AtomicAdd: {
    auto &g = cast<GlobalAccessStmt>(s);
    for (unsigned i = 0; i < g.numIndices(); ++i)
      need(g.index(i));
    break;
  }
  case StmtKind::Binary:
  case StmtKind::Unary:
  case StmtKind::Select:
    // What the partials read (DerivativeRules.h); nothing where the
    // factor is taped.
    if (activity_.isActive(&s) && !(tapedFactors_ && tapedFactors_->count(&s)))
      ad::primalReads(
          s, [&](const Value *v) { return activity_.isActive(v); },
          [&](const Value *v) { need(v); });
    break;
  default:
    break;
  }
}

void NeededValues::compute(const std::vector<Stmt *> &stmts, const StmtSet *scope, ValueSet &values,
                           ValueSet &locals, const std::vector<const Value *> &roots,
                           std::vector<const Value *> *outside) {
  target_ = &values;
  scope_ = scope;
  outside_ = outside;
  outsideSeen_.clear();
  for (const Value *r : roots)
    need(r);
  std::unordered_map<const Value *, LocalStores> storesTo;
  for (Stmt *s : stmts) {
    if (auto *st = dyn_cast<LocalStoreStmt>(s))
      storesTo[st->local()].inOrder.push_back(st);
    needDirectReads(*s);
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
  // The stores that reach a load are a prefix of the local's stores (those
  // before it) plus, in a loop of the scope, those with the same outermost
  // loop: the loops in the scope around a statement are nested in each
  // other, so some encloses both exactly when the outermost one around the
  // load also encloses the store. Each store's value is needed once, so
  // every local keeps how much of its prefix is done and which groups are:
  // linear in the stores (visiting every store per needed load was cubic
  // in deep nests, where every level loads and stores the same local).
  // `need` is called in store order, as visiting all of them did.
  auto needStoresReaching = [&](const LocalLoadStmt *ld) {
    LocalStores &stores = storesTo[ld->local()];
    size_t before = stores.inOrder.size();
    if (scope) {
      size_t at = position.at(ld);
      before =
          std::partition_point(stores.inOrder.begin(), stores.inOrder.end(),
                               [&](const LocalStoreStmt *st) { return position.at(st) < at; }) -
          stores.inOrder.begin();
    }
    for (; stores.prefix < before; ++stores.prefix)
      need(stores.inOrder[stores.prefix]->value());
    const Stmt *outer = scope ? outermostLoop(ld) : nullptr;
    if (!outer)
      return;
    if (!stores.grouped) {
      for (LocalStoreStmt *st : stores.inOrder)
        if (const Stmt *o = outermostLoop(st))
          stores.byOuterLoop[o].push_back(st);
      stores.grouped = true;
    }
    auto group = stores.byOuterLoop.find(outer);
    if (group == stores.byOuterLoop.end())
      return;
    for (LocalStoreStmt *st : group->second)
      need(st->value());
    stores.byOuterLoop.erase(group);
  };
  while (!work_.empty()) {
    const Value *v = work_.back();
    work_.pop_back();
    const auto *s = cast<Stmt>(v);
    for (unsigned i = 0; i < s->numOperands(); ++i)
      need(s->operand(i));
    if (auto *ld = dyn_cast<LocalLoadStmt>(s)) {
      locals.insert(ld->local());
      needStoresReaching(ld);
    }
  }
  scope_ = nullptr;
  outside_ = nullptr;
}

} // namespace qd::reverse
