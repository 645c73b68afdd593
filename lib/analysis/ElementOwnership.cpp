//===- ElementOwnership.cpp - Elements an iteration owns ------------------===//
#include "qd/analysis/ElementOwnership.h"

#include "TaskPrinting.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

namespace qd {

AliasClass aliasClassOf(const GlobalAccessStmt &access) {
  AliasClass c;
  if (access.isField()) {
    c.field = access.field();
    c.component = access.component();
  } else {
    // Any component: a buffer may be one argument's primal and another's
    // companion.
    c.element = access.elementType();
    c.rank = access.ndarray()->type().ndim();
  }
  return c;
}

std::string describe(const AliasClass &cls) {
  if (!cls.field)
    return fmt::format("ndarrays of {}, rank {}", toString(cls.element), cls.rank);
  std::string name = "@" + cls.field->name();
  if (cls.component == Component::Grad)
    name += ".grad";
  else if (cls.component == Component::Dual)
    name += ".dual";
  return name;
}

uint64_t ownedIndexPositions(const ForStmt &task,
                             std::span<const GlobalAccessStmt *const> accesses) {
  if (accesses.empty())
    return 0;
  // Per task dimension, the positions that hold its index in every access.
  // Iteration (i, j) of a band owns an element only when both i and j pin
  // it down.
  std::vector<uint64_t> common(task.numDims(), ~uint64_t(0));
  for (const GlobalAccessStmt *g : accesses) {
    std::vector<uint64_t> own(task.numDims(), 0);
    for (unsigned p = 0; p < g->numIndices() && p < 64; ++p)
      if (int d = taskDimOf(g->index(p), task); d >= 0)
        own[d] |= uint64_t(1) << p;
    for (unsigned d = 0; d < task.numDims(); ++d)
      common[d] &= own[d];
  }
  // A dimension of extent 1 (literal bounds) does not tell iterations apart.
  uint64_t positions = 0;
  for (unsigned d = 0; d < task.numDims(); ++d) {
    bool single = task.begin(d).isConstant() && task.end(d).isConstant() &&
                  task.end(d).constant - task.begin(d).constant == 1;
    if (common[d] == 0 && !single)
      return 0;
    positions |= common[d];
  }
  return positions;
}

ElementOwnership ElementOwnership::compute(const ForStmt &task) {
  ElementOwnership out;
  out.task_ = &task;
  walk(task.body(), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g)
      return;
    AliasClass cls = aliasClassOf(*g);
    unsigned i = 0;
    while (i < out.classes_.size() && !(out.classes_[i].cls == cls))
      ++i;
    if (i == out.classes_.size())
      out.classes_.push_back({cls, {}, 0, false, false, false});
    ClassUse &u = out.classes_[i];
    u.accesses.push_back(g);
    u.stored |= s.kind() == StmtKind::GlobalStore;
    u.atomicallyUpdated |= isa<AtomicRmwStmt>(s);
    u.loaded |= s.kind() == StmtKind::GlobalLoad;
    out.classOf_.emplace(g, i);
  });
  for (ClassUse &u : out.classes_) {
    u.ownedPositions = ownedIndexPositions(task, u.accesses);
    if (u.owned()) {
      for (const GlobalAccessStmt *g : u.accesses)
        if (g->kind() == StmtKind::AtomicAdd)
          out.privateAtomics_.insert(g);
      continue;
    }
    if (out.refusedAt_)
      continue;
    // Name the first access of the kind that breaks the rule.
    if (!u.stored && !(u.atomicallyUpdated && u.loaded))
      continue;
    auto isCulprit = [&](const GlobalAccessStmt *g) {
      return u.stored ? isa<GlobalStoreStmt>(g) : isa<AtomicRmwStmt>(g);
    };
    out.refusedAt_ = u.accesses.front();
    for (const GlobalAccessStmt *g : u.accesses)
      if (isCulprit(g)) {
        out.refusedAt_ = g;
        break;
      }
    out.refusedStore_ = u.stored;
  }
  return out;
}

std::string ElementOwnership::lanesRefused() const {
  if (!refusedAt_)
    return {};
  if (!refusedAt_->kernel())
    return lanesRefused(printStmt(*refusedAt_));
  return lanesRefused(ValueNamer(*refusedAt_->kernel()));
}

std::string ElementOwnership::lanesRefused(const ValueNamer &names) const {
  return refusedAt_ ? lanesRefused(printStmt(*refusedAt_, names)) : std::string();
}

std::string ElementOwnership::lanesRefused(const std::string &culprit) const {
  return refusedStore_
             ? fmt::format("'{}' at {} is stored to at an element that is not the iteration's own",
                           culprit, refusedAt_->loc().str())
             : fmt::format("'{}' at {} is both atomically updated and loaded", culprit,
                           refusedAt_->loc().str());
}

const ElementOwnership::ClassUse *ElementOwnership::useOf(const GlobalAccessStmt &access) const {
  auto it = classOf_.find(&access);
  return it == classOf_.end() ? nullptr : &classes_[it->second];
}

bool ElementOwnership::owns(const GlobalAccessStmt &access) const {
  const ClassUse *u = useOf(access);
  return u && u->owned();
}

bool ElementOwnership::mayBeWritten(const GlobalAccessStmt &access) const {
  if (const ClassUse *u = useOf(access))
    return u->written();
  AliasClass cls = aliasClassOf(access);
  for (const ClassUse &u : classes_)
    if (u.cls == cls)
      return u.written();
  return false;
}

void printElementOwnership(const Kernel &kernel, std::ostream &os) {
  using namespace analysis_detail;
  ValueNamer names(kernel);
  for (Stmt &top : const_cast<Kernel &>(kernel).body()) {
    auto *task = dyn_cast<ForStmt>(&top);
    if (!task || !task->isParallel())
      continue;
    ElementOwnership own = ElementOwnership::compute(*task);
    os << fmt::format("element ownership of task {} in @{} at {}:\n", names[task], kernel.name(),
                      task->loc().str());
    walk(task->body(), [&](Stmt &s) {
      if (auto *g = dyn_cast<GlobalAccessStmt>(&s))
        os << fmt::format("  {} {}  [{}{}]\n", lineCol(*g), headline(*g, names),
                          own.owns(*g) ? "owned" : "not owned",
                          own.isPrivateAtomic(g) ? ", private atomic" : "");
    });
    for (const ElementOwnership::ClassUse &u : own.classes()) {
      std::string positions;
      for (unsigned d = 0; d < 64; ++d)
        if (u.ownedPositions >> d & 1)
          positions += (positions.empty() ? "" : ", ") + std::to_string(d);
      std::string uses;
      for (auto [flag, word] : {std::pair{u.loaded, "loaded"}, std::pair{u.stored, "stored"},
                                std::pair{u.atomicallyUpdated, "atomically updated"}})
        if (flag)
          uses += (uses.empty() ? "" : ", ") + std::string(word);
      os << fmt::format("  class {}: {} ({})\n", describe(u.cls),
                        u.owned() ? "owned at index " + positions : "not owned", uses);
    }
    if (own.lanesAllowed())
      os << "  lanes: allowed\n";
    else
      os << "  lanes: refused: " << own.lanesRefused(names) << "\n";
  }
}

} // namespace qd
