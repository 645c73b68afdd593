//===- DCE.cpp - Dead-code elimination ------------------------------------===//
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <vector>

namespace qd {
namespace {

bool allBlocksEmpty(const Stmt &s) {
  for (unsigned i = 0; i < s.numBlocks(); ++i)
    if (!s.block(i).empty())
      return false;
  return true;
}

/// A statement whose removal cannot change what the kernel computes.
bool isTriviallyDead(const Stmt &s) {
  if (s.hasUses())
    return false;
  switch (s.kind()) {
  case StmtKind::For: // range-fors always terminate; an empty one does nothing
  case StmtKind::Serial:
  case StmtKind::If:
    return allBlocksEmpty(s);
  case StmtKind::While: // may not terminate: keep
    return false;
  default:
    return !s.hasSideEffects();
  }
}

/// A local that is stored to but never loaded.
bool isWriteOnlyLocal(const Stmt &s) {
  if (!isa<AllocaStmt>(&s))
    return false;
  for (const Use &u : s.uses())
    if (!isa<LocalStoreStmt>(u.user()) || u.index() != 0)
      return false;
  return true;
}

class DcePass : public KernelPass {
public:
  std::string_view name() const override { return "dce"; }

  absl::StatusOr<bool> runOnKernel(Kernel &kernel) override {
    bool changed = false, again = true;
    while (again) {
      again = false;
      std::vector<Stmt *> writeOnly;
      walkPostOrder(kernel.body(), [&](Stmt &s) {
        if (isTriviallyDead(s)) {
          s.erase();
          again = true;
        } else if (isWriteOnlyLocal(s)) {
          writeOnly.push_back(&s);
        }
      });
      for (Stmt *local : writeOnly) {
        while (local->hasUses())
          local->uses().begin()->user()->erase();
        local->erase();
        again = true;
      }
      changed |= again;
    }
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createDcePass() {
  return std::make_unique<DcePass>();
}

} // namespace qd
