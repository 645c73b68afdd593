//===- DeviceEntries.cpp - How GPU targets split a kernel -----------------===//
#include "qd/abi/DeviceEntries.h"

#include "qd/ir/Visitor.h"

#include <algorithm>
#include <set>

namespace qd {

DeviceEntryPlan planDeviceEntries(Kernel &kernel) {
  DeviceEntryPlan plan;
  std::map<const Stmt *, unsigned> entryOf;
  for (Stmt &s : kernel.body()) {
    auto *task = dyn_cast<ForStmt>(&s);
    if (task && task->isParallel())
      plan.entries.push_back({task, {&s}});
    else if (plan.entries.empty() || plan.entries.back().task)
      plan.entries.push_back({nullptr, {&s}});
    else
      plan.entries.back().stmts.push_back(&s);
    entryOf[&s] = unsigned(plan.entries.size() - 1);
  }
  // Which top-level values each entry uses from earlier entries.
  std::vector<std::set<const Stmt *>> uses(plan.entries.size());
  auto note = [&](unsigned entry, Stmt &user) {
    for (unsigned i = 0; i < user.numOperands(); ++i) {
      Value *v = user.operand(i);
      auto *def = v ? dyn_cast<Stmt>(v) : nullptr;
      if (def && !def->parentStmt() && !def->isTask() && entryOf.at(def) < entry)
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
  for (unsigned e = 0; e < plan.entries.size(); ++e) {
    plan.imports[e].assign(uses[e].begin(), uses[e].end());
    std::sort(plan.imports[e].begin(), plan.imports[e].end(),
              [&](const Stmt *x, const Stmt *y) { return plan.slotOf.at(x) < plan.slotOf.at(y); });
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

} // namespace qd
