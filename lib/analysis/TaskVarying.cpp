//===- TaskVarying.cpp - What differs between iterations ------------------===//
#include "qd/analysis/TaskVarying.h"

#include "qd/ir/Casting.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

namespace qd {

std::unordered_set<const Value *> taskVaryingValues(const ForStmt &task) {
  std::unordered_set<const Value *> varying{&task};
  for (bool changed = true; changed;) {
    changed = false;
    walk(task.body(), [&](Stmt &s) {
      // A store (to a local or an adstack) makes its target vary.
      bool store = s.kind() == StmtKind::LocalStore || s.kind() == StmtKind::AdStackPush ||
                   s.kind() == StmtKind::AdStackAccAdjoint;
      const Value *target = store ? s.operand(0) : &s;
      if (varying.count(target))
        return;
      bool v = s.kind() == StmtKind::TaskIndex;
      for (unsigned i = store ? 1 : 0; i < s.numOperands() && !v; ++i)
        v = varying.count(s.operand(i)) > 0;
      if (v && (store || s.type().isScalar() || isa<ForStmt>(s)))
        changed |= varying.insert(target).second;
    });
  }
  return varying;
}

bool hasVaryingIndex(const GlobalAccessStmt &access,
                     const std::unordered_set<const Value *> &varying) {
  for (unsigned i = 0; i < access.numIndices(); ++i)
    if (varying.count(access.index(i)))
      return true;
  return false;
}

} // namespace qd
