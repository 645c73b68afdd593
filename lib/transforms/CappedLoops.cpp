//===- CappedLoops.cpp - `while` loops with an iteration cap become `for` -===//
//
// A front-end writes an iterative solve as
//
//   store %it, 0
//   while {
//     ...
//     if %converged | (%it >= 30) { break }
//     ...
//     store %it, %it + 1
//   }
//
// The loop ends after at most 31 checks, but nothing else in qd reads that
// from a `while`: its gradient's tapes are measured at every launch, which
// reads the device's counters back before the next launch. As
// `for %k = 0 to 31 { ... }` with the same body, the iteration whose check
// sees %it = 30 is the 31st, so the `for` never ends before the `while`
// would have broken: the two run the same statements, and the sizing
// analysis reads a constant upper bound.
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <limits>
#include <optional>

namespace qd {
namespace {

/// The statement of `block` that is `s` or holds it; null if none does.
Stmt *topIn(Block &block, Stmt *s) {
  while (s && s->parent() != &block)
    s = s->parentStmt();
  return s;
}

/// Whether `a` comes before `b`, both statements of one block.
bool before(Stmt *a, Stmt *b) {
  Block &block = *a->parent();
  for (auto it = ++Block::iteratorTo(a); it != block.end(); ++it)
    if (&*it == b)
      return true;
  return false;
}

/// Whether `s` or a statement nested in it stores to `local`.
bool writes(Stmt &s, const Value *local) {
  bool found = false;
  auto visit = [&](Stmt &t) {
    if (auto *st = dyn_cast<LocalStoreStmt>(&t); st && st->local() == local)
      found = true;
  };
  visit(s);
  for (unsigned i = 0; i < s.numBlocks() && !found; ++i)
    walk(s.block(i), visit);
  return found;
}

std::optional<int64_t> intConstant(const Value *v) {
  auto *c = dyn_cast<ConstStmt>(v);
  if (!c || !isInteger(c->scalarType()))
    return std::nullopt;
  return c->intValue();
}

/// The value `local` holds when `w` starts: a constant stored to it before
/// `w` in `w`'s block, with no other write in between.
std::optional<int64_t> entryValue(WhileStmt &w, const Value *local) {
  Block &block = *w.parent();
  for (auto it = Block::iteratorTo(&w); it != block.begin();) {
    Stmt &s = *--it;
    if (auto *st = dyn_cast<LocalStoreStmt>(&s); st && st->local() == local)
      return intConstant(st->value());
    if (&s == local || writes(s, local))
      return std::nullopt;
  }
  return std::nullopt;
}

/// The iterations `w` runs at most, if one of its breaks is taken whenever
/// a local counter reaches a constant: the counter is a constant when the
/// loop starts, and each iteration that goes on adds one to it (one store
/// at the top level of the body, of a load of it plus 1; no `continue`).
std::optional<int64_t> cappedTrips(WhileStmt &w) {
  Block &body = w.body();
  bool continues = false;
  walk(body, [&](Stmt &s) { continues |= s.kind() == StmtKind::Continue && jumpTarget(s) == &w; });
  if (continues)
    return std::nullopt;
  std::optional<int64_t> best;
  for (Stmt &top : body) {
    auto *i = dyn_cast<IfStmt>(&top);
    bool breaks = false;
    if (i)
      for (Stmt &t : i->thenBlock())
        breaks |= t.kind() == StmtKind::Break;
    if (!breaks)
      continue;
    // The or-tree of the condition: a leaf `load %c >= K` (or `> K - 1`)
    // alone breaks the loop.
    std::vector<Value *> pending = {i->cond()};
    while (!pending.empty()) {
      Value *v = pending.back();
      pending.pop_back();
      if (auto *b = dyn_cast<BinaryStmt>(v); b && b->op() == BinaryOp::Or) {
        pending.push_back(b->lhs());
        pending.push_back(b->rhs());
        continue;
      }
      auto *cmp = dyn_cast<CmpStmt>(v);
      if (!cmp || (cmp->predicate() != CmpPredicate::Ge && cmp->predicate() != CmpPredicate::Gt))
        continue;
      auto *load = dyn_cast<LocalLoadStmt>(cmp->lhs());
      std::optional<int64_t> limit = intConstant(cmp->rhs());
      if (!load || !limit || !isInteger(load->type().element()))
        continue;
      Value *local = load->local();
      // The one write of the counter in the loop: `store %c, load %c + 1`
      // at the top level, after the load the check reads.
      LocalStoreStmt *step = nullptr;
      bool other = false;
      walk(body, [&](Stmt &s) {
        if (auto *st = dyn_cast<LocalStoreStmt>(&s); st && st->local() == local) {
          other |= step != nullptr;
          step = st;
        }
      });
      if (!step || other || step->parent() != &body)
        continue;
      auto *add = dyn_cast<BinaryStmt>(step->value());
      if (!add || add->op() != BinaryOp::Add)
        continue;
      auto *from = dyn_cast<LocalLoadStmt>(add->lhs());
      std::optional<int64_t> one = intConstant(add->rhs());
      if (!from) {
        from = dyn_cast<LocalLoadStmt>(add->rhs());
        one = intConstant(add->lhs());
      }
      Stmt *loadTop = topIn(body, load), *fromTop = from ? topIn(body, from) : nullptr;
      if (!from || from->local() != local || one != 1 || !loadTop || !fromTop ||
          !before(loadTop, step) || !before(fromTop, step))
        continue;
      std::optional<int64_t> start = entryValue(w, local);
      if (!start)
        continue;
      // Check j (from 0) reads start + j; the first with start + j >= cap
      // breaks, so at most cap - start + 1 checks run.
      int64_t cap = cmp->predicate() == CmpPredicate::Ge ? *limit : *limit + 1;
      int64_t trips = std::max<int64_t>(cap - std::min(*start, cap), 0) + 1;
      if (*limit == std::numeric_limits<int64_t>::max() ||
          trips > std::numeric_limits<int32_t>::max())
        continue;
      best = best ? std::min(*best, trips) : trips;
    }
  }
  return best;
}

class BoundCappedLoopsPass : public KernelPass {
public:
  std::string_view name() const override { return "bound-capped-loops"; }
  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override { return boundCappedLoops(kernel); }
};

} // namespace

bool boundCappedLoops(Kernel &kernel) {
  std::vector<WhileStmt *> loops;
  walk(kernel, [&](Stmt &s) {
    if (auto *w = dyn_cast<WhileStmt>(&s))
      loops.push_back(w);
  });
  bool changed = false;
  for (WhileStmt *w : loops) {
    std::optional<int64_t> trips = cappedTrips(*w);
    if (!trips)
      continue;
    Block &parent = *w->parent();
    auto loop = std::make_unique<ForStmt>(Bound(int64_t(0)), Bound(*trips), false);
    loop->setLoc(w->loc());
    auto *f = static_cast<ForStmt *>(parent.insert(Block::iteratorTo(w), std::move(loop)));
    f->body().splice(f->body().end(), w->body());
    w->erase();
    changed = true;
  }
  return changed;
}

std::unique_ptr<Pass> createBoundCappedLoopsPass() {
  return std::make_unique<BoundCappedLoopsPass>();
}

} // namespace qd
