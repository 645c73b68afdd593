//===- ElementOwnership.cpp - Elements an iteration owns ------------------===//
#include "qd/analysis/ElementOwnership.h"

#include "IndexForms.h"
#include "TaskPrinting.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace qd {

AliasClass aliasClassOf(const GlobalAccessStmt &access, NdarrayAliasing aliasing) {
  AliasClass c;
  if (access.isField()) {
    c.field = access.field();
    c.component = access.component();
  } else {
    // May alias: any component, as a buffer may be one argument's primal
    // and another's companion.
    c.element = access.elementType();
    c.rank = access.ndarray()->type().ndim();
    if (aliasing == NdarrayAliasing::Distinct) {
      c.ndarray = access.ndarray();
      c.component = access.component();
    }
  }
  return c;
}

WrittenAliasClasses::WrittenAliasClasses(const Kernel &kernel, NdarrayAliasing aliasing)
    : aliasing_(aliasing) {
  walk(const_cast<Kernel &>(kernel), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g || isa<GlobalLoadStmt>(g))
      return;
    AliasClass cls = aliasClassOf(*g, aliasing);
    if (!written(cls))
      classes_.push_back(cls);
  });
}

bool WrittenAliasClasses::written(const AliasClass &cls) const {
  return std::find(classes_.begin(), classes_.end(), cls) != classes_.end();
}

bool WrittenAliasClasses::written(const GlobalAccessStmt &access) const {
  return written(aliasClassOf(access, aliasing_));
}

std::string describe(const AliasClass &cls) {
  if (!cls.field && !cls.ndarray)
    return fmt::format("ndarrays of {}, rank {}", toString(cls.element), cls.rank);
  std::string name = cls.field ? "@" + cls.field->name() : "%" + cls.ndarray->name();
  if (cls.component == Component::Grad)
    name += ".grad";
  else if (cls.component == Component::Dual)
    name += ".dual";
  return name;
}

namespace {

/// What one top-level statement of a task body does that a store sunk past
/// it must respect: the global accesses in it, and whether it may leave
/// the iteration.
struct TopLevelEffects {
  std::vector<const GlobalAccessStmt *> accesses;
  bool leaves = false;
};

TopLevelEffects effectsOf(Stmt &top) {
  TopLevelEffects e;
  auto note = [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s))
      e.accesses.push_back(g);
    if (s.kind() != StmtKind::Break && s.kind() != StmtKind::Continue)
      return;
    // One inside a loop nested in the iteration leaves only that loop.
    bool nested = false;
    for (Stmt *p = &s; p != &top && !nested;) {
      p = p->parentStmt();
      nested = p->kind() == StmtKind::For || p->kind() == StmtKind::While;
    }
    e.leaves |= !nested;
  };
  note(top);
  for (unsigned b = 0; b < top.numBlocks(); ++b)
    walk(top.block(b), note);
  return e;
}

/// How many later statements and accesses one store is compared with
/// before it stops sinking: the analysis stays linear in the body for any
/// number of stores.
constexpr size_t kSinkComparisons = 4096;

} // namespace

std::vector<SunkStore> sunkStores(ForStmt &task, NdarrayAliasing aliasing) {
  auto constantStore = [](const Stmt &s) {
    auto *st = dyn_cast<GlobalStoreStmt>(&s);
    return st && isa<ConstStmt>(st->value());
  };
  // Most bodies have no such store: nothing to walk.
  std::vector<Stmt *> top;
  bool any = false;
  for (Stmt &s : task.body()) {
    top.push_back(&s);
    any |= constantStore(s);
  }
  if (!any)
    return {};
  std::vector<TopLevelEffects> effects;
  effects.reserve(top.size());
  for (Stmt *s : top)
    effects.push_back(effectsOf(*s));
  // A store sunk to another store that could sink too stays right before
  // it, which then stays where it is: the first is only known not to touch
  // what lies before the second.
  std::unordered_set<const Stmt *> pinned;
  std::vector<SunkStore> out;
  for (size_t i = 0; i < top.size(); ++i) {
    if (!constantStore(*top[i]) || pinned.count(top[i]))
      continue;
    auto *st = cast<GlobalStoreStmt>(top[i]);
    size_t j = i + 1, compared = 0;
    for (; j < top.size(); ++j) {
      const TopLevelEffects &e = effects[j];
      // Each statement counts, so that one store walks a bounded stretch.
      bool touches = e.leaves || compared + e.accesses.size() + 1 > kSinkComparisons;
      for (const GlobalAccessStmt *g : e.accesses) {
        if (touches)
          break;
        touches = mayAlias(*st, *g, aliasing) && !analysis_detail::provablyDisjoint(*st, *g, task);
      }
      compared += e.accesses.size() + 1;
      if (touches)
        break;
    }
    if (j == i + 1)
      continue;
    if (j < top.size())
      pinned.insert(top[j]);
    out.push_back({st, j < top.size() ? top[j] : nullptr});
  }
  return out;
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

ElementOwnership ElementOwnership::compute(const ForStmt &task, TaskAssumptions assume) {
  NdarrayAliasing aliasing = assume.aliasing;
  ElementOwnership out;
  out.task_ = &task;
  out.aliasing_ = aliasing;
  walk(task.body(), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g)
      return;
    out.order_.emplace(g, out.order_.size());
    AliasClass cls = aliasClassOf(*g, aliasing);
    unsigned i = 0;
    while (i < out.classes_.size() && !(out.classes_[i].cls == cls))
      ++i;
    if (i == out.classes_.size())
      out.classes_.push_back({cls, {}, 0, false, false, false, {}, 0});
    ClassUse &u = out.classes_[i];
    u.accesses.push_back(g);
    u.stored |= s.kind() == StmtKind::GlobalStore;
    u.atomicallyUpdated |= isa<AtomicRmwStmt>(s);
    u.loaded |= s.kind() == StmtKind::GlobalLoad;
  });
  out.splitSlices();
  for (ClassUse &u : out.classes_) {
    u.ownedPositions = ownedIndexPositions(task, u.accesses);
    if (u.owned()) {
      for (const GlobalAccessStmt *g : u.accesses)
        if (g->kind() == StmtKind::AtomicAdd)
          out.privateAtomics_.insert(g);
      continue;
    }
    if (assume.nearIterationsApart)
      out.findNearReach(u);
    if (u.near()) {
      out.nearAtomics_.insert(u.accesses.begin(), u.accesses.end());
      out.nearReach_.resize(u.nearReach.size(), 0);
      for (size_t d = 0; d < u.nearReach.size(); ++d)
        out.nearReach_[d] = std::max(out.nearReach_[d], u.nearReach[d]);
      out.nearCyclic_ |= u.nearCyclic;
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

void ElementOwnership::splitSlices() {
  using analysis_detail::SharedOffset;
  using analysis_detail::sharedOffsetOf;
  std::vector<ClassUse> split;
  for (ClassUse &whole : classes_) {
    if (ownedIndexPositions(*task_, whole.accesses) != 0) { // nothing to gain
      split.push_back(std::move(whole));
      continue;
    }
    std::vector<std::vector<const GlobalAccessStmt *>> groups{std::move(whole.accesses)};
    unsigned positions = UINT_MAX;
    for (const GlobalAccessStmt *g : groups[0])
      positions = std::min(positions, g->numIndices());
    for (unsigned p = 0; p < positions; ++p) {
      std::vector<std::vector<const GlobalAccessStmt *>> next;
      for (auto &group : groups) {
        // Split where every access holds one shared base plus an offset.
        std::vector<std::pair<int64_t, const GlobalAccessStmt *>> keyed;
        const Value *base = nullptr;
        for (const GlobalAccessStmt *g : group) {
          std::optional<SharedOffset> at = sharedOffsetOf(g->index(p), *task_);
          if (!at || (!keyed.empty() && at->base != base))
            break;
          base = at->base;
          keyed.push_back({at->offset, g});
        }
        if (keyed.size() != group.size()) {
          next.push_back(std::move(group));
          continue;
        }
        std::vector<int64_t> offsets; // in order of first access
        size_t first = next.size();
        for (auto [offset, g] : keyed) {
          size_t k = std::find(offsets.begin(), offsets.end(), offset) - offsets.begin();
          if (k == offsets.size()) {
            offsets.push_back(offset);
            next.emplace_back();
          }
          next[first + k].push_back(g);
        }
      }
      groups = std::move(next);
    }
    auto firstOf = [&](const std::vector<const GlobalAccessStmt *> &group) {
      size_t first = SIZE_MAX;
      for (const GlobalAccessStmt *g : group)
        first = std::min(first, order_.at(g));
      return first;
    };
    std::sort(groups.begin(), groups.end(),
              [&](const auto &a, const auto &b) { return firstOf(a) < firstOf(b); });
    for (auto &group : groups) {
      ClassUse &u = split.emplace_back();
      u.cls = whole.cls;
      for (const GlobalAccessStmt *g : group) {
        u.stored |= g->kind() == StmtKind::GlobalStore;
        u.atomicallyUpdated |= isa<AtomicRmwStmt>(g);
        u.loaded |= g->kind() == StmtKind::GlobalLoad;
      }
      u.accesses = std::move(group);
      // Program order within the use.
      std::sort(u.accesses.begin(), u.accesses.end(),
                [&](const GlobalAccessStmt *a, const GlobalAccessStmt *b) {
                  return order_.at(a) < order_.at(b);
                });
    }
  }
  classes_ = std::move(split);
  classOf_.clear();
  for (unsigned i = 0; i < classes_.size(); ++i)
    for (const GlobalAccessStmt *g : classes_[i].accesses)
      classOf_.emplace(g, i);
}

void ElementOwnership::findNearReach(ClassUse &u) const {
  using analysis_detail::nearIndexOf;
  if (u.stored || u.loaded || u.accesses.empty())
    return;
  unsigned positions = UINT_MAX;
  for (const GlobalAccessStmt *g : u.accesses)
    positions = std::min(positions, g->numIndices());
  std::vector<int64_t> reach(task_->numDims(), 0);
  uint64_t cyclic = 0;
  for (unsigned d = 0; d < task_->numDims(); ++d) {
    std::optional<int64_t> best;
    bool bestCyclic = false;
    for (unsigned p = 0; p < positions; ++p) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      bool mod = false, all = true;
      for (const GlobalAccessStmt *g : u.accesses) {
        auto n = nearIndexOf(g->index(p), *task_);
        if (!n || n->dim != int(d)) {
          all = false;
          break;
        }
        lo = std::min(lo, n->lo);
        hi = std::max(hi, n->hi);
        mod |= n->modular;
      }
      if (all && (!best || hi - lo < *best)) {
        best = hi - lo;
        bestCyclic = mod;
      }
    }
    bool single = task_->begin(d).isConstant() && task_->end(d).isConstant() &&
                  task_->end(d).constant - task_->begin(d).constant == 1;
    if (!best && !single)
      return;
    reach[d] = best.value_or(0);
    if (bestCyclic && d < 64)
      cyclic |= uint64_t(1) << d;
  }
  u.nearReach = std::move(reach);
  u.nearCyclic = cyclic;
}

std::string ElementOwnership::lanesRefused() const {
  if (!refusedAt_)
    return {};
  // The access without its operands (`store @x[...]`): printing them would
  // name them through a namer of the whole kernel, a walk of every
  // statement for each task the CPU backend emits.
  const GlobalAccessStmt &g = *refusedAt_;
  std::string target = g.isField()                   ? "@" + g.field()->name()
                       : g.ndarray()->name().empty() ? std::string("%<ndarray>")
                                                     : "%" + g.ndarray()->name();
  if (g.component() != Component::Primal)
    target += fmt::format(".{}", toString(g.component()));
  return lanesRefused(fmt::format("{} {}[...]", mnemonic(g.kind()), target));
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
  AliasClass cls = aliasClassOf(access, aliasing_);
  for (const ClassUse &u : classes_)
    if (u.cls == cls)
      return u.written();
  return false;
}

void printElementOwnership(const Kernel &kernel, std::ostream &os) {
  using namespace analysis_detail;
  ValueNamer names(kernel);
  forEachPrintedTask(kernel, names, os, "element ownership", [&](ForStmt &task) {
    // What the CPU makes of the task: near atomics are plain updates there
    // only (TaskAssumptions::nearIterationsApart).
    TaskAssumptions cpu;
    cpu.nearIterationsApart = true;
    ElementOwnership own = ElementOwnership::compute(task, cpu);
    walk(task.body(), [&](Stmt &s) {
      if (auto *g = dyn_cast<GlobalAccessStmt>(&s))
        os << fmt::format("  {} {}  [{}{}]\n", lineCol(*g), headline(*g, names),
                          own.owns(*g) ? "owned" : "not owned",
                          own.isPrivateAtomic(g) ? ", private atomic"
                          : own.isNearAtomic(g)  ? ", near atomic"
                                                 : "");
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
      std::string near;
      for (size_t d = 0; d < u.nearReach.size(); ++d)
        near += fmt::format("{}{}{}", d ? ", " : ", near: reach ", u.nearReach[d],
                            d < 64 && (u.nearCyclic >> d & 1) ? " cyclic" : "");
      // Slices of one class are numbered in order of their first access.
      std::string name = describe(u.cls);
      unsigned slice = 0, slices = 0;
      for (const ElementOwnership::ClassUse &other : own.classes())
        if (other.cls == u.cls) {
          ++slices;
          slice += &other <= &u;
        }
      if (slices > 1)
        name += fmt::format(", slice {} of {}", slice, slices);
      os << fmt::format("  class {}: {}{} ({})\n", name,
                        u.owned() ? "owned at index " + positions : "not owned", near, uses);
    }
    if (own.lanesAllowed())
      os << "  lanes: allowed\n";
    else
      os << "  lanes: refused: " << own.lanesRefused(names) << "\n";
  });
}

} // namespace qd
