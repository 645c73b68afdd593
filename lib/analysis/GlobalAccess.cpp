//===- GlobalAccess.cpp - Write-after-read checks -------------------------===//
#include "qd/analysis/GlobalAccess.h"

#include "qd/analysis/ElementOwnership.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <unordered_map>

namespace qd {
namespace {

struct Access {
  GlobalAccessStmt *stmt;
  uint32_t order; // pre-order position
  Stmt *task;     // the top-level statement holding it
  bool write;
  std::string name; // `@x` or `%a`
};

/// Loops (not tasks) around `s`.
std::vector<const Stmt *> loopsAround(const Stmt *s) {
  std::vector<const Stmt *> out;
  for (const Stmt *p = s->parentStmt(); p && !p->isTask(); p = p->parentStmt())
    if (p->kind() == StmtKind::For || p->kind() == StmtKind::While)
      out.push_back(p);
  return out;
}

bool shareALoop(const Stmt *a, const Stmt *b) {
  for (const Stmt *la : loopsAround(a))
    for (const Stmt *lb : loopsAround(b))
      if (la == lb)
        return true;
  return false;
}

class Checker {
public:
  explicit Checker(const Kernel &kernel) {
    uint32_t order = 0;
    Block &body = const_cast<Kernel &>(kernel).body();
    for (Stmt &top : body) {
      auto visit = [&](Stmt &s) {
        ++order;
        auto *g = dyn_cast<GlobalAccessStmt>(&s);
        if (!g || g->component() != Component::Primal)
          return;
        std::string name = g->isField() ? "@" + g->field()->name() : "%" + g->ndarray()->name();
        auto &list = byGlobal_[name];
        if (list.empty())
          firstSeen_.push_back(name);
        list.push_back({g, order, &top, s.kind() != StmtKind::GlobalLoad, name});
      };
      visit(top);
      for (unsigned i = 0; i < top.numBlocks(); ++i)
        walk(top.block(i), visit);
    }
  }

  std::vector<GlobalAccessConflict> run() {
    std::vector<GlobalAccessConflict> out;
    for (const std::string &name : firstSeen_) {
      // The global's own writes first: a conflict through them is certain
      // to touch one buffer; then the writes through ndarrays that may
      // alias it.
      for (bool aliases : {false, true}) {
        const Access *w = nullptr;
        if (const Access *r = findConflict(name, aliases, w)) {
          out.push_back({w->name, name, r->stmt, w->stmt});
          break;
        }
      }
    }
    return out;
  }

private:
  /// The first read of `name` (program order) that a write conflicts with,
  /// through `name` itself or through another global that may alias it.
  const Access *findConflict(const std::string &name, bool aliases, const Access *&write) {
    for (const Access &r : byGlobal_[name]) {
      if (r.write)
        continue;
      for (const std::string &other : firstSeen_) {
        if ((other == name) == aliases)
          continue;
        for (const Access &w : byGlobal_[other])
          if (w.write && mayAlias(*r.stmt, *w.stmt) && conflict(r, w)) {
            write = &w;
            return &r;
          }
      }
    }
    return nullptr;
  }

  bool conflict(const Access &r, const Access &w) {
    if (r.task != w.task)
      return w.order > r.order; // tasks run in order
    auto *loop = dyn_cast<ForStmt>(r.task);
    if (loop && loop->isParallel() && !ownership(*loop).owns(*r.stmt))
      return true; // another iteration may write what this one read
    // Serial code, or elements of the iteration's own: one iteration only.
    return w.order > r.order || shareALoop(r.stmt, w.stmt);
  }

  const ElementOwnership &ownership(const ForStmt &task) {
    auto &slot = ownership_[&task];
    if (!slot)
      slot = std::make_unique<ElementOwnership>(ElementOwnership::compute(task));
    return *slot;
  }

  std::map<std::string, std::vector<Access>> byGlobal_;
  std::vector<std::string> firstSeen_;
  std::unordered_map<const ForStmt *, std::unique_ptr<ElementOwnership>> ownership_;
};

} // namespace

std::vector<GlobalAccessConflict> findGlobalAccessConflicts(const Kernel &kernel) {
  return Checker(kernel).run();
}

std::string describe(const GlobalAccessConflict &c, const Kernel &kernel) {
  if (!c.throughAliases())
    return fmt::format("{}: error: {} may be written here after it is read at {} in the same "
                       "launch (kernel @{}); reverse mode replays reads from memory, so the "
                       "gradient would be wrong. Write the result to another field or ndarray",
                       c.write->loc().str(), c.global, c.read->loc().str(), kernel.name());
  ValueNamer names(kernel);
  return fmt::format(
      "{}: error: {} may be written here ('{}') after {} is read at {} ('{}') in the same launch "
      "(kernel @{}): the ndarrays {} and {} may alias (the caller may pass one buffer for both); "
      "reverse mode replays reads from memory, so the gradient would then be wrong. Write the "
      "result to an ndarray of another element type or rank, or check the launches with the "
      "exact dynamic check (qd-run --check-global-accesses)",
      c.write->loc().str(), c.global, printStmt(*c.write, names), c.readGlobal, c.read->loc().str(),
      printStmt(*c.read, names), kernel.name(), c.readGlobal, c.global);
}

} // namespace qd
