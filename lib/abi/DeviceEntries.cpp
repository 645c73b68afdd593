//===- DeviceEntries.cpp - How GPU targets split a kernel -----------------===//
#include "qd/abi/DeviceEntries.h"

#include "qd/ir/Visitor.h"

#include <algorithm>
#include <set>

namespace qd {

bool isRecomputedTopLevel(const Stmt &s, const std::set<const Stmt *> &recomputed) {
  auto input = [&](Value *v) {
    if (auto *a = dyn_cast<Argument>(v))
      return !a->isNdarray();
    auto *d = dyn_cast<Stmt>(v);
    return d && recomputed.count(d) != 0;
  };
  auto inputs = [&] {
    for (unsigned i = 0; i < s.numOperands(); ++i)
      if (!input(s.operand(i)))
        return false;
    return true;
  };
  if (isa<ConstStmt>(s))
    return true;
  if (auto *sh = dyn_cast<ShapeStmt>(&s))
    return isa<Argument>(sh->ndarray());
  if (auto *b = dyn_cast<BinaryStmt>(&s)) {
    switch (b->op()) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Min:
    case BinaryOp::Max:
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
      return inputs();
    default:
      return false;
    }
  }
  if (auto *u = dyn_cast<UnaryStmt>(&s))
    return (u->op() == UnaryOp::Neg || u->op() == UnaryOp::Abs || u->op() == UnaryOp::Not) &&
           inputs();
  if (auto *c = dyn_cast<CastStmt>(&s))
    return !isFloat(c->from()) && inputs();
  return (isa<CmpStmt>(s) || isa<SelectStmt>(s)) && inputs();
}

DeviceEntryPlan planDeviceEntries(Kernel &kernel) {
  DeviceEntryPlan plan;
  std::set<const Stmt *> recomputed;
  std::map<const Stmt *, unsigned> entryOf, order;
  for (Stmt &s : kernel.body()) {
    order[&s] = unsigned(order.size());
    if (isRecomputedTopLevel(s, recomputed)) {
      recomputed.insert(&s);
      continue;
    }
    auto *task = dyn_cast<ForStmt>(&s);
    if (task && task->isParallel())
      plan.entries.push_back({task, {&s}});
    else if (plan.entries.empty() || plan.entries.back().task)
      plan.entries.push_back({nullptr, {&s}});
    else
      plan.entries.back().stmts.push_back(&s);
    entryOf[&s] = unsigned(plan.entries.size() - 1);
  }
  // Which top-level values each entry uses from earlier entries, and which
  // recomputed ones (with the recomputed values they are made of).
  std::vector<std::set<const Stmt *>> uses(plan.entries.size()), remade(plan.entries.size());
  auto remake = [&](auto &self, unsigned entry, const Stmt &def) -> void {
    if (!remade[entry].insert(&def).second)
      return;
    for (unsigned i = 0; i < def.numOperands(); ++i)
      if (auto *d = dyn_cast<Stmt>(def.operand(i)); d && recomputed.count(d))
        self(self, entry, *d);
  };
  auto note = [&](unsigned entry, Stmt &user) {
    for (unsigned i = 0; i < user.numOperands(); ++i) {
      Value *v = user.operand(i);
      auto *def = v ? dyn_cast<Stmt>(v) : nullptr;
      if (!def || def->parentStmt() || def->isTask())
        continue;
      if (recomputed.count(def))
        remake(remake, entry, *def);
      else if (entryOf.at(def) < entry)
        uses[entry].insert(def);
    }
  };
  for (unsigned e = 0; e < plan.entries.size(); ++e)
    for (Stmt *s : plan.entries[e].stmts) {
      note(e, *s);
      for (unsigned b = 0; b < s->numBlocks(); ++b)
        walk(s->block(b), [&](Stmt &nested) { note(e, nested); });
    }
  std::set<const Stmt *> exported;
  for (const auto &u : uses)
    exported.insert(u.begin(), u.end());
  for (Stmt &s : kernel.body())
    if (exported.count(&s))
      plan.slotOf[&s] = plan.numValues++;
  plan.imports.resize(plan.entries.size());
  plan.recomputes.resize(plan.entries.size());
  for (unsigned e = 0; e < plan.entries.size(); ++e) {
    plan.imports[e].assign(uses[e].begin(), uses[e].end());
    std::sort(plan.imports[e].begin(), plan.imports[e].end(),
              [&](const Stmt *x, const Stmt *y) { return plan.slotOf.at(x) < plan.slotOf.at(y); });
    for (const Stmt *r : remade[e])
      plan.recomputes[e].push_back(const_cast<Stmt *>(r));
    std::sort(plan.recomputes[e].begin(), plan.recomputes[e].end(),
              [&](const Stmt *x, const Stmt *y) { return order.at(x) < order.at(y); });
  }
  return plan;
}

KernelLayout::TaskBound taskBoundOf(Bound b) {
  KernelLayout::TaskBound t;
  if (b.isConstant()) {
    t.kind = KernelLayout::TaskBound::Constant;
    t.constant = b.constant;
  } else if (auto *a = dyn_cast<Argument>(b.value)) {
    t.kind = KernelLayout::TaskBound::Argument;
    t.argument = a->index();
  } else if (auto *sh = dyn_cast<ShapeStmt>(b.value)) {
    t.kind = KernelLayout::TaskBound::NdarrayExtent;
    t.argument = cast<Argument>(sh->ndarray())->index();
    t.axis = sh->axis();
  } else if (auto *ld = dyn_cast<GlobalLoadStmt>(b.value); ld && ld->isField()) {
    int64_t flat = 0;
    const auto &shape = ld->field()->shape();
    for (unsigned d = 0; d < ld->numIndices(); ++d) {
      auto *c = dyn_cast<ConstStmt>(ld->index(d));
      if (!c || c->intValue() < 0 || c->intValue() >= shape[d])
        return t;
      flat = flat * shape[d] + c->intValue();
    }
    t.kind = KernelLayout::TaskBound::FieldElement;
    t.field = ld->field();
    t.component = ld->component();
    t.constant = flat;
  }
  return t;
}

std::vector<KernelLayout::TaskBound> boundsOf(const ForStmt &loop) {
  std::vector<KernelLayout::TaskBound> out;
  for (unsigned d = 0; d < loop.numDims(); ++d) {
    out.push_back(taskBoundOf(loop.begin(d)));
    out.push_back(taskBoundOf(loop.end(d)));
  }
  return out;
}

std::vector<KernelLayout::TaskBound> bandBoundsOf(const ForStmt &task) {
  return task.numDims() > 1 ? boundsOf(task) : std::vector<KernelLayout::TaskBound>();
}

bool loopFreeTask(const ForStmt &task) {
  return !anyStmt(const_cast<ForStmt &>(task).body(), [](const Stmt &s) {
    return s.kind() == StmtKind::For || s.kind() == StmtKind::While;
  });
}

bool taskHasHeapAdStack(const ForStmt &task,
                        const std::map<const AdStackAllocaStmt *, int64_t> &localEntries) {
  return anyStmt(const_cast<ForStmt &>(task).body(), [&](const Stmt &s) {
    if (s.kind() != StmtKind::AdStackAlloca)
      return false;
    auto local = localEntries.find(static_cast<const AdStackAllocaStmt *>(&s));
    return local == localEntries.end() || local->second <= 0;
  });
}

} // namespace qd
