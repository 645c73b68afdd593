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
#include <span>
#include <unordered_set>
#include <vector>

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

/// The stores to `local` (through its uses: no walk of the kernel).
std::vector<LocalStoreStmt *> storesTo(const Value *local) {
  std::vector<LocalStoreStmt *> out;
  for (const Use &u : local->uses())
    if (auto *st = dyn_cast<LocalStoreStmt>(u.user()); st && st->local() == local)
      out.push_back(st);
  return out;
}

std::optional<int64_t> intConstant(const Value *v) {
  auto *c = dyn_cast<ConstStmt>(v);
  if (!c || !isInteger(c->scalarType()))
    return std::nullopt;
  return c->intValue();
}

/// The value `local` holds when `w` starts: a constant stored to it before
/// `w` in `w`'s block, with no other write in between (`stores`: all of
/// local's).
std::optional<int64_t> entryValue(WhileStmt &w, const Value *local,
                                  std::span<LocalStoreStmt *const> stores) {
  Block &block = *w.parent();
  std::unordered_set<const Stmt *> writers; // w's siblings that store to local
  for (LocalStoreStmt *st : stores)
    writers.insert(topIn(block, st));
  for (auto it = Block::iteratorTo(&w); it != block.begin();) {
    Stmt &s = *--it;
    if (auto *st = dyn_cast<LocalStoreStmt>(&s); st && st->local() == local)
      return intConstant(st->value());
    if (&s == local || writers.count(&s))
      return std::nullopt;
  }
  return std::nullopt;
}

/// A condition `load %c >= K` (ge) or `> K` (gt, K + 1) that breaks the
/// loop alone.
struct CapCheck {
  LocalLoadStmt *load;
  int64_t cap;
};

CmpPredicate swapped(CmpPredicate p) { // a < b is b > a
  switch (p) {
  case CmpPredicate::Lt:
    return CmpPredicate::Gt;
  case CmpPredicate::Le:
    return CmpPredicate::Ge;
  case CmpPredicate::Gt:
    return CmpPredicate::Lt;
  case CmpPredicate::Ge:
    return CmpPredicate::Le;
  default:
    return p;
  }
}

CmpPredicate inverted(CmpPredicate p) { // not (a < b) is a >= b (integers)
  switch (p) {
  case CmpPredicate::Lt:
    return CmpPredicate::Ge;
  case CmpPredicate::Le:
    return CmpPredicate::Gt;
  case CmpPredicate::Gt:
    return CmpPredicate::Le;
  case CmpPredicate::Ge:
    return CmpPredicate::Lt;
  case CmpPredicate::Eq:
    return CmpPredicate::Ne;
  default:
    return CmpPredicate::Eq;
  }
}

/// The integer comparisons of a local with a constant that alone make
/// `cond` (or, `negated`, its negation) true: through `or`s (`and`s when
/// negated) and `not`s, `c >= K`, `K <= c`, `not (c < K)` and the like.
void capChecks(Value *cond, bool negated, std::vector<CapCheck> &out) {
  if (auto *u = dyn_cast<UnaryStmt>(cond); u && u->op() == UnaryOp::Not) {
    capChecks(u->input(), !negated, out);
    return;
  }
  if (auto *b = dyn_cast<BinaryStmt>(cond);
      b && b->op() == (negated ? BinaryOp::And : BinaryOp::Or)) {
    capChecks(b->lhs(), negated, out);
    capChecks(b->rhs(), negated, out);
    return;
  }
  auto *cmp = dyn_cast<CmpStmt>(cond);
  if (!cmp || !isInteger(cmp->operandType()))
    return;
  CmpPredicate p = cmp->predicate();
  auto *load = dyn_cast<LocalLoadStmt>(cmp->lhs());
  std::optional<int64_t> limit = intConstant(cmp->rhs());
  if (!load) {
    load = dyn_cast<LocalLoadStmt>(cmp->rhs());
    limit = intConstant(cmp->lhs());
    p = swapped(p);
  }
  if (negated)
    p = inverted(p);
  if (!load || !limit || (p != CmpPredicate::Ge && p != CmpPredicate::Gt))
    return;
  // The counter must reach the cap before it wraps: `c > max` never holds.
  unsigned bits = bitWidth(cmp->operandType());
  int64_t most = bits >= 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (bits - 1)) - 1;
  if (bits < 8 || *limit > most || (p == CmpPredicate::Gt && *limit == most))
    return;
  out.push_back({load, p == CmpPredicate::Ge ? *limit : *limit + 1});
}

/// The checks `w` runs at most if `check` breaks it: its counter is a
/// constant when the loop starts, and each iteration that goes on adds one
/// to it (one store at the top level of the body, of a load of it plus 1,
/// after the load the check reads).
std::optional<int64_t> tripsUnder(WhileStmt &w, const CapCheck &check) {
  Block &body = w.body();
  Value *local = check.load->local();
  std::vector<LocalStoreStmt *> stores = storesTo(local);
  LocalStoreStmt *step = nullptr;
  for (LocalStoreStmt *st : stores)
    if (st->parent()->isNestedIn(&body)) {
      if (step)
        return std::nullopt; // a second store in the loop
      step = st;
    }
  if (!step || step->parent() != &body)
    return std::nullopt;
  auto *add = dyn_cast<BinaryStmt>(step->value());
  if (!add || add->op() != BinaryOp::Add)
    return std::nullopt;
  auto *from = dyn_cast<LocalLoadStmt>(add->lhs());
  std::optional<int64_t> one = intConstant(add->rhs());
  if (!from) {
    from = dyn_cast<LocalLoadStmt>(add->rhs());
    one = intConstant(add->lhs());
  }
  Stmt *loadTop = topIn(body, check.load), *fromTop = from ? topIn(body, from) : nullptr;
  if (!from || from->local() != local || one != 1 || !loadTop || !fromTop ||
      !before(loadTop, step) || !before(fromTop, step))
    return std::nullopt;
  std::optional<int64_t> start = entryValue(w, local, stores);
  if (!start)
    return std::nullopt;
  // Check j (from 0) reads start + j; the first with start + j >= cap
  // breaks, so at most cap - start + 1 checks run.
  int64_t trips = std::max<int64_t>(check.cap - std::min(*start, check.cap), 0) + 1;
  if (trips > std::numeric_limits<int32_t>::max())
    return std::nullopt;
  return trips;
}

/// The iterations `w` runs at most, if an `if` at the top level of its body
/// breaks it (from either arm) whenever a local counter reaches a constant
/// (tripsUnder); no `continue` may skip the counter's step.
std::optional<int64_t> cappedTrips(WhileStmt &w) {
  Block &body = w.body();
  bool continues = false;
  walk(body, [&](Stmt &s) { continues |= s.kind() == StmtKind::Continue && jumpTarget(s) == &w; });
  if (continues)
    return std::nullopt;
  auto breaks = [](Block &arm) {
    for (Stmt &t : arm)
      if (t.kind() == StmtKind::Break)
        return true;
    return false;
  };
  std::optional<int64_t> best;
  for (Stmt &top : body) {
    auto *i = dyn_cast<IfStmt>(&top);
    if (!i)
      continue;
    std::vector<CapCheck> checks;
    if (breaks(i->thenBlock()))
      capChecks(i->cond(), false, checks);
    if (breaks(i->elseBlock()))
      capChecks(i->cond(), true, checks);
    for (const CapCheck &check : checks)
      if (std::optional<int64_t> trips = tripsUnder(w, check))
        best = best ? std::min(*best, *trips) : *trips;
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
