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

Activity::Activity(const Kernel &kernel, ActivityMode mode) : mode_(mode) {
  std::vector<Stmt *> stmts;
  walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) { stmts.push_back(&s); });
  // Varied facts flow forwards and useful facts backwards along the same
  // edges; a loop (or a store before a load in a loop) needs another sweep.
  bool changed = true;
  auto mark = [&](std::unordered_set<const Value *> &set, const Value *v) {
    if (v && set.insert(v).second)
      changed = true;
  };
  while (changed) {
    changed = false;
    for (Stmt *s : stmts) {
      switch (s->kind()) {
      case StmtKind::GlobalLoad:
        if (isFloatValue(s) && hasDerivativeCompanion(cast<GlobalAccessStmt>(*s), mode))
          mark(varied_, s);
        break;
      case StmtKind::GlobalStore:
      case StmtKind::AtomicAdd: {
        auto &g = cast<GlobalAccessStmt>(*s);
        Value *v = s->operand(s->numOperands() - 1);
        bool output = mode == ActivityMode::Reverse || g.component() == Component::Primal;
        if (output && hasDerivativeCompanion(g, mode) && isFloatValue(v))
          mark(useful_, v);
        break;
      }
      case StmtKind::LocalStore: {
        auto &st = cast<LocalStoreStmt>(*s);
        if (varied_.count(st.value()))
          mark(varied_, st.local());
        if (useful_.count(st.local()))
          mark(useful_, st.value());
        break;
      }
      case StmtKind::LocalLoad: {
        auto &ld = cast<LocalLoadStmt>(*s);
        if (varied_.count(ld.local()))
          mark(varied_, s);
        if (useful_.count(s))
          mark(useful_, ld.local());
        break;
      }
      case StmtKind::Binary:
      case StmtKind::Unary:
      case StmtKind::Select:
      case StmtKind::Cast: {
        if (!isFloatValue(s))
          break;
        if (auto *c = dyn_cast<CastStmt>(s); c && !isFloat(c->from()))
          break; // int -> float: a constant as far as derivatives go
        unsigned first = s->kind() == StmtKind::Select ? 1 : 0; // not the condition
        for (unsigned i = first; i < s->numOperands(); ++i) {
          if (varied_.count(s->operand(i)))
            mark(varied_, s);
          if (useful_.count(s) && isFloatValue(s->operand(i)))
            mark(useful_, s->operand(i));
        }
        break;
      }
      default:
        break;
      }
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
