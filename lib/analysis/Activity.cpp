//===- Activity.cpp - Which values carry derivatives ----------------------===//
#include "qd/analysis/Activity.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <vector>

namespace qd {
namespace {

bool isFloatValue(const Value *v) {
  return v && v->type().isFloatScalar();
}

} // namespace

bool hasDerivativeCompanion(const GlobalAccessStmt &access, ActivityMode mode) {
  Component c = mode == ActivityMode::Reverse ? Component::Grad : Component::Dual;
  if (access.isField())
    return access.field()->hasComponent(c);
  auto *a = dyn_cast<Argument>(access.ndarray());
  return a && a->hasComponent(c);
}

namespace {

/// An arithmetic statement derivatives flow through, and its first operand
/// that carries one (a select's condition does not).
bool isDifferentiable(const Stmt &s, unsigned &first) {
  switch (s.kind()) {
  case StmtKind::Binary:
  case StmtKind::Unary:
  case StmtKind::Select:
  case StmtKind::Cast:
    break;
  default:
    return false;
  }
  if (!isFloatValue(&s))
    return false;
  if (auto *c = dyn_cast<CastStmt>(&s); c && !isFloat(c->from()))
    return false; // int -> float: a constant as far as derivatives go
  first = s.kind() == StmtKind::Select ? 1 : 0;
  return true;
}

} // namespace

// Two closures over def-use edges, each with a worklist, so that every
// value and use is visited once (linear in the kernel; iterating sweeps in
// statement order until nothing changes is quadratic, as usefulness moves
// backwards one statement per sweep):
//   varied: loads of globals with a companion, then forwards through
//           arithmetic, stores to locals and loads of varied locals;
//   useful: values stored to globals with a companion, then backwards
//           through arithmetic, loads of locals and the stores to useful
//           locals.
Activity::Activity(const Kernel &kernel, ActivityMode mode) : mode_(mode) {
  absl::flat_hash_set<const Stmt *> inKernel;
  std::vector<const Value *> variedWork, usefulWork;
  auto mark = [](absl::flat_hash_set<const Value *> &set, std::vector<const Value *> &work,
                 const Value *v) {
    if (v && set.insert(v).second)
      work.push_back(v);
  };
  walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) {
    inKernel.insert(&s);
    if (s.kind() == StmtKind::GlobalLoad && isFloatValue(&s) &&
        hasDerivativeCompanion(cast<GlobalAccessStmt>(s), mode))
      mark(varied_, variedWork, &s);
    if (s.kind() == StmtKind::GlobalStore || s.kind() == StmtKind::AtomicAdd) {
      auto &g = cast<GlobalAccessStmt>(s);
      Value *v = s.operand(s.numOperands() - 1);
      bool output = mode == ActivityMode::Reverse || g.component() == Component::Primal;
      if (output && hasDerivativeCompanion(g, mode) && isFloatValue(v))
        mark(useful_, usefulWork, v);
    }
  });

  while (!variedWork.empty()) {
    const Value *v = variedWork.back();
    variedWork.pop_back();
    for (const Use &u : v->uses()) {
      Stmt *s = u.user();
      if (!s || !inKernel.count(s))
        continue;
      unsigned first = 0;
      if (auto *st = dyn_cast<LocalStoreStmt>(s); st && st->value() == v)
        mark(varied_, variedWork, st->local());
      else if (auto *ld = dyn_cast<LocalLoadStmt>(s); ld && ld->local() == v)
        mark(varied_, variedWork, s);
      else if (isDifferentiable(*s, first) && u.index() >= first)
        mark(varied_, variedWork, s);
    }
  }

  while (!usefulWork.empty()) {
    const Value *v = usefulWork.back();
    usefulWork.pop_back();
    const auto *s = dyn_cast<Stmt>(v);
    if (!s)
      continue;
    unsigned first = 0;
    if (auto *ld = dyn_cast<LocalLoadStmt>(s)) {
      mark(useful_, usefulWork, ld->local());
    } else if (isDifferentiable(*s, first)) {
      for (unsigned i = first; i < s->numOperands(); ++i)
        if (isFloatValue(s->operand(i)))
          mark(useful_, usefulWork, s->operand(i));
    } else {
      // A useful local: what is stored to it is useful.
      for (const Use &u : v->uses())
        if (auto *st = dyn_cast<LocalStoreStmt>(u.user());
            st && inKernel.count(st) && st->local() == v)
          mark(useful_, usefulWork, st->value());
    }
  }
}

void Activity::print(const Kernel &kernel, std::ostream &os) const {
  ValueNamer names(kernel);
  walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) {
    bool v = isVaried(&s), u = isUseful(&s);
    if (v || u)
      os << names[&s] << ": " << (v && u ? "active" : v ? "varied" : "useful") << '\n';
  });
}

} // namespace qd
