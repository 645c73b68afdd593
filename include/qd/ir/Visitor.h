//===- qd/ir/Visitor.h - Statement visitor and walkers ----------*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <utility>

namespace qd {

/// CRTP visitor: `visit(s)` dispatches to `visitForStmt(ForStmt&)` etc. Each
/// hook defaults to the hook of its base class, ending in `visitStmt`, so a
/// visitor implements only what it cares about (as llvm::InstVisitor). Use it
/// for code that handles a few kinds on purpose; code that must handle every
/// kind uses ExhaustiveStmtVisitor below.
template <typename Derived, typename RetT = void> class StmtVisitor {
public:
  RetT visit(Stmt &s) {
    auto *self = static_cast<Derived *>(this);
    switch (s.kind()) {
#define QD_STMT(KIND, CLASS, ...)                                                                  \
  case StmtKind::KIND:                                                                             \
    return self->visit##CLASS(static_cast<CLASS &>(s));
#include "qd/ir/StmtKinds.def"
    }
    return self->visitStmt(s);
  }

  RetT visitStmt(Stmt &) {
    return RetT();
  }
#define QD_FORWARD(CLASS, BASE)                                                                    \
  RetT visit##CLASS(CLASS &s) {                                                                    \
    return static_cast<Derived *>(this)->visit##BASE(s);                                           \
  }
#define QD_STMT(KIND, CLASS, BASE, ...) QD_FORWARD(CLASS, BASE)
#define QD_ABSTRACT_STMT(CLASS, BASE) QD_FORWARD(CLASS, BASE)
#include "qd/ir/StmtKinds.def"
#undef QD_FORWARD
};

/// CRTP visitor with no default hooks: `visit(s)` calls
/// `Derived::visit<Class>(Class&)` for the concrete class of `s`, and a
/// derived class that lacks the hook of some kind does not compile ("no
/// member named 'visitFooStmt'"). So adding a kind to StmtKinds.def is a
/// compile error in every exhaustive visitor until it handles the new kind:
/// clone, structural equivalence, printer, verifier and interpreter use it.
/// Hooks for the intermediate classes (GlobalAccessStmt, AdStackOpStmt) are
/// never called; share code between kinds with a helper called from each
/// hook. Private hooks need `friend class ExhaustiveStmtVisitor<...>;`.
///
/// A backend's code generator uses the same mechanism: derive its statement
/// lowering from `ExhaustiveStmtVisitor<MyEmitter, ResultT>` and write one
/// `visitXStmt` per kind (a target-neutral emitter base may implement most
/// of them and leave target hooks to its subclasses), so that a new kind
/// fails to build in every backend rather than reaching a run-time
/// "unsupported statement" path. A `switch (s.kind())` with no `default:`
/// is the lighter alternative where a visitor does not fit: -Wswitch (on
/// with -Wall, an error under the build's -Werror=switch) flags a missing
/// case.
template <typename Derived, typename RetT = void> class ExhaustiveStmtVisitor {
public:
  RetT visit(Stmt &s) {
    auto *self = static_cast<Derived *>(this);
    switch (s.kind()) {
#define QD_STMT(KIND, CLASS, ...)                                                                  \
  case StmtKind::KIND:                                                                             \
    return self->visit##CLASS(static_cast<CLASS &>(s));
#include "qd/ir/StmtKinds.def"
    }
    // Only reachable with a corrupt kind: every enumerator has a case.
    __builtin_unreachable();
  }
};

/// Pre-order walk: each statement before the statements nested inside it.
/// `fn` must not erase statements (use walkPostOrder for that).
template <typename Fn> void walk(Block &block, Fn &&fn) {
  for (auto it = block.begin(); it != block.end();) {
    Stmt &s = *it++;
    fn(s);
    for (unsigned i = 0; i < s.numBlocks(); ++i)
      walk(s.block(i), fn);
  }
}

/// Post-order walk: nested statements before the statement containing them.
/// `fn` may erase the statement it is given.
template <typename Fn> void walkPostOrder(Block &block, Fn &&fn) {
  for (auto it = block.begin(); it != block.end();) {
    Stmt &s = *it++;
    for (unsigned i = 0; i < s.numBlocks(); ++i)
      walkPostOrder(s.block(i), fn);
    fn(s);
  }
}

/// Pre-order walk for transformations: `fn(Stmt&)` returns true when it
/// erased (or replaced) the statement, in which case its nested blocks are
/// not visited. `fn` may insert statements before the current one (they are
/// not visited) and erase the current one, but not statements after it.
template <typename Fn> void walkMutable(Block &block, Fn &&fn) {
  for (auto it = block.begin(); it != block.end();) {
    Stmt &s = *it++;
    if (fn(s))
      continue;
    for (unsigned i = 0; i < s.numBlocks(); ++i)
      walkMutable(s.block(i), fn);
  }
}

/// Pre-order search: whether `pred` holds for some statement of `block` or
/// of the blocks nested in it; stops at the first that it holds for.
template <typename Pred> bool anyStmt(Block &block, Pred &&pred) {
  for (Stmt &s : block) {
    if (pred(s))
      return true;
    for (unsigned i = 0; i < s.numBlocks(); ++i)
      if (anyStmt(s.block(i), pred))
        return true;
  }
  return false;
}

template <typename Fn> void walk(Kernel &k, Fn &&fn) {
  walk(k.body(), std::forward<Fn>(fn));
}

} // namespace qd
