//===- JumpLowering.cpp - break/continue become flags ---------------------===//
//
// The reverse sweep needs loop bodies without jumps: a body runs to its end
// every iteration, so the values it computes dominate its reverse. Each
// loop with a jump gets a state local (0 running, 1 continue, 2 break);
// what follows a statement that may jump is guarded by `state == 0`, and a
// loop that may break ends its body with `if state == 2 { break }`.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "qd/ir/Visitor.h"

namespace qd::reverse {
namespace {

class JumpLowering {
public:
  /// Lowers the jumps of every loop; returns the loops that may break.
  StmtSet run(Kernel &k) {
    std::vector<Stmt *> loops;
    walkPostOrder(k.body(), [&](Stmt &s) {
      if (s.kind() == StmtKind::For || s.kind() == StmtKind::While)
        loops.push_back(&s);
    });
    for (Stmt *loop : loops)
      lowerLoop(*loop);
    return breaking_;
  }

private:
  static bool hasJump(Block &b) {
    for (Stmt &s : b) {
      if (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue)
        return true;
      if (s.kind() == StmtKind::If &&
          (hasJump(cast<IfStmt>(s).thenBlock()) || hasJump(cast<IfStmt>(s).elseBlock())))
        return true;
    }
    return false;
  }

  void lowerLoop(Stmt &loop) {
    Block &body = loop.block(0);
    if (!hasJump(body))
      return;
    IRBuilder b(body);
    b.setInsertionPoint(body, body.begin());
    b.setLocation(loop.loc());
    state_ = b.alloca(ScalarType::I32); // fresh (0) every iteration
    bool mayBreak = false;
    lowerBlock(body, mayBreak);
    if (mayBreak) {
      IRBuilder e(body);
      e.setLocation(loop.loc());
      Value *st = e.load(state_);
      Value *isBreak = e.cmp(CmpPredicate::Eq, st, e.i32(2));
      auto scope = e.ifThen(isBreak);
      e.brk();
      breaking_.insert(&loop);
    }
  }

  /// Replaces jumps by flag stores and guards what follows a statement that
  /// may jump. Returns whether `b` may jump.
  bool lowerBlock(Block &b, bool &mayBreak) {
    bool jumps = false;
    for (auto it = b.begin(); it != b.end();) {
      Stmt &s = *it;
      ++it;
      bool here = false;
      if (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) {
        IRBuilder::before(s).store(state_,
                                   IRBuilder::before(s).i32(s.kind() == StmtKind::Break ? 2 : 1));
        mayBreak |= s.kind() == StmtKind::Break;
        s.erase();
        here = true; // the verifier guarantees nothing follows a jump
      } else if (auto *i = dyn_cast<IfStmt>(&s)) {
        bool t = lowerBlock(i->thenBlock(), mayBreak);
        bool e = lowerBlock(i->elseBlock(), mayBreak);
        here = t || e;
      }
      if (here && it != b.end()) {
        // Guard the rest of the block: `if state == 0 { ... }`.
        IRBuilder g = IRBuilder::before(*it);
        g.setLocation(it->loc());
        Value *st = g.load(state_);
        Value *running = g.cmp(CmpPredicate::Eq, st, g.i32(0));
        IfStmt *guard = g.insert(std::make_unique<IfStmt>(running));
        while (it != b.end()) {
          Stmt &moved = *it;
          ++it;
          guard->thenBlock().push_back(moved.remove());
        }
        lowerBlock(guard->thenBlock(), mayBreak);
      }
      jumps |= here;
    }
    return jumps;
  }

  AllocaStmt *state_ = nullptr;
  StmtSet breaking_;
};

} // namespace

StmtSet lowerJumps(Kernel &k) {
  return JumpLowering().run(k);
}

} // namespace qd::reverse
