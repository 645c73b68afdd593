//===- qd/ir/Visitor.h - Statement visitor and walkers ----------*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <utility>

namespace qd {

/// CRTP visitor: `visit(s)` dispatches to `visitForStmt(ForStmt&)` etc. Each
/// hook defaults to the hook of its base class, ending in `visitStmt`, so a
/// visitor implements only what it cares about (as llvm::InstVisitor).
template <typename Derived, typename RetT = void> class StmtVisitor {
public:
  RetT visit(Stmt &s) {
    auto *self = static_cast<Derived *>(this);
    switch (s.kind()) {
#define QD_DISPATCH(KIND, CLASS)                                                                   \
  case StmtKind::KIND:                                                                             \
    return self->visit##CLASS(static_cast<CLASS &>(s));
      QD_DISPATCH(Const, ConstStmt)
      QD_DISPATCH(Binary, BinaryStmt)
      QD_DISPATCH(Unary, UnaryStmt)
      QD_DISPATCH(Cmp, CmpStmt)
      QD_DISPATCH(Select, SelectStmt)
      QD_DISPATCH(Cast, CastStmt)
      QD_DISPATCH(Alloca, AllocaStmt)
      QD_DISPATCH(LocalLoad, LocalLoadStmt)
      QD_DISPATCH(LocalStore, LocalStoreStmt)
      QD_DISPATCH(GlobalLoad, GlobalLoadStmt)
      QD_DISPATCH(GlobalStore, GlobalStoreStmt)
      QD_DISPATCH(AtomicAdd, AtomicAddStmt)
      QD_DISPATCH(Shape, ShapeStmt)
      QD_DISPATCH(For, ForStmt)
      QD_DISPATCH(Serial, SerialStmt)
      QD_DISPATCH(While, WhileStmt)
      QD_DISPATCH(Break, BreakStmt)
      QD_DISPATCH(Continue, ContinueStmt)
      QD_DISPATCH(If, IfStmt)
      QD_DISPATCH(AdStackAlloca, AdStackAllocaStmt)
      QD_DISPATCH(AdStackPush, AdStackPushStmt)
      QD_DISPATCH(AdStackPop, AdStackPopStmt)
      QD_DISPATCH(AdStackLoadTop, AdStackLoadTopStmt)
      QD_DISPATCH(AdStackLoadTopAdj, AdStackLoadTopAdjStmt)
      QD_DISPATCH(AdStackAccAdjoint, AdStackAccAdjointStmt)
#undef QD_DISPATCH
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
  QD_FORWARD(ConstStmt, Stmt)
  QD_FORWARD(BinaryStmt, Stmt)
  QD_FORWARD(UnaryStmt, Stmt)
  QD_FORWARD(CmpStmt, Stmt)
  QD_FORWARD(SelectStmt, Stmt)
  QD_FORWARD(CastStmt, Stmt)
  QD_FORWARD(AllocaStmt, Stmt)
  QD_FORWARD(LocalLoadStmt, Stmt)
  QD_FORWARD(LocalStoreStmt, Stmt)
  QD_FORWARD(GlobalAccessStmt, Stmt)
  QD_FORWARD(GlobalLoadStmt, GlobalAccessStmt)
  QD_FORWARD(GlobalStoreStmt, GlobalAccessStmt)
  QD_FORWARD(AtomicAddStmt, GlobalAccessStmt)
  QD_FORWARD(ShapeStmt, Stmt)
  QD_FORWARD(ForStmt, Stmt)
  QD_FORWARD(SerialStmt, Stmt)
  QD_FORWARD(WhileStmt, Stmt)
  QD_FORWARD(BreakStmt, Stmt)
  QD_FORWARD(ContinueStmt, Stmt)
  QD_FORWARD(IfStmt, Stmt)
  QD_FORWARD(AdStackAllocaStmt, Stmt)
  QD_FORWARD(AdStackOpStmt, Stmt)
  QD_FORWARD(AdStackPushStmt, AdStackOpStmt)
  QD_FORWARD(AdStackPopStmt, AdStackOpStmt)
  QD_FORWARD(AdStackLoadTopStmt, AdStackOpStmt)
  QD_FORWARD(AdStackLoadTopAdjStmt, AdStackOpStmt)
  QD_FORWARD(AdStackAccAdjointStmt, AdStackOpStmt)
#undef QD_FORWARD
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

template <typename Fn> void walk(Kernel &k, Fn &&fn) {
  walk(k.body(), std::forward<Fn>(fn));
}

} // namespace qd
