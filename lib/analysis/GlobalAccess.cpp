//===- GlobalAccess.cpp - Write-after-read checks -------------------------===//
#include "qd/analysis/GlobalAccess.h"

#include "qd/ir/Module.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

#include <map>
#include <unordered_map>

namespace qd {
namespace {

struct Access {
  GlobalAccessStmt *stmt;
  uint32_t order; // pre-order position
  Stmt *task;     // the top-level statement holding it
  bool write;
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

/// True if every access uses the same index values, one of them being the
/// parallel task's index: each iteration then has elements of its own.
bool privatePerIteration(const std::vector<const Access *> &accesses, const Stmt *task) {
  auto *loop = dyn_cast<ForStmt>(task);
  if (!loop || !loop->isParallel() || accesses.empty())
    return false;
  std::vector<Value *> first = accesses.front()->stmt->indices();
  bool hasTaskIndex = false;
  for (Value *v : first)
    hasTaskIndex |= v == loop;
  if (!hasTaskIndex)
    return false;
  for (const Access *a : accesses)
    if (a->stmt->indices() != first)
      return false;
  return true;
}

} // namespace

std::vector<GlobalAccessConflict> findGlobalAccessConflicts(const Kernel &kernel) {
  std::map<std::string, std::vector<Access>> byGlobal; // ordered by name for stable output
  std::vector<std::string> firstSeen;
  uint32_t order = 0;
  Block &body = const_cast<Kernel &>(kernel).body();
  for (Stmt &top : body) {
    auto visit = [&](Stmt &s) {
      ++order;
      auto *g = dyn_cast<GlobalAccessStmt>(&s);
      if (!g || g->component() != Component::Primal)
        return;
      std::string name = g->isField() ? "@" + g->field()->name() : "%" + g->ndarray()->name();
      auto &list = byGlobal[name];
      if (list.empty())
        firstSeen.push_back(name);
      list.push_back({g, order, &top, s.kind() != StmtKind::GlobalLoad});
    };
    visit(top);
    for (unsigned i = 0; i < top.numBlocks(); ++i)
      walk(top.block(i), visit);
  }

  std::vector<GlobalAccessConflict> out;
  for (const std::string &name : firstSeen) {
    const auto &accesses = byGlobal[name];
    std::unordered_map<const Stmt *, std::vector<const Access *>> perTask;
    for (const Access &a : accesses)
      perTask[a.task].push_back(&a);
    bool found = false;
    for (const Access &r : accesses) {
      if (r.write || found)
        continue;
      for (const Access &w : accesses) {
        if (!w.write)
          continue;
        bool conflict;
        if (r.task != w.task) {
          conflict = w.order > r.order; // tasks run in order
        } else if (privatePerIteration(perTask[r.task], r.task)) {
          conflict = w.order > r.order || shareALoop(r.stmt, w.stmt);
        } else if (auto *loop = dyn_cast<ForStmt>(r.task); loop && loop->isParallel()) {
          conflict = true; // another iteration may write what this one read
        } else {
          conflict = w.order > r.order || shareALoop(r.stmt, w.stmt);
        }
        if (conflict) {
          out.push_back({name, r.stmt, w.stmt});
          found = true;
          break;
        }
      }
    }
  }
  return out;
}

} // namespace qd
