//===- EmitControl.cpp - Loops, ifs, break and continue -------------------===//
//
// Structured control flow maps onto branches. In vector code, control flow
// all lanes take together stays branches; an if on a varying condition runs
// each arm under the mask of its lanes, and a loop lanes leave at different
// times (a masked loop, TaskVectorPlan) runs while some lane is active.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include <algorithm>

namespace qd::codegen {
namespace {

bool hasJumpOf(IfStmt &i, const Stmt *loop) {
  bool found = false;
  for (Block *b : {&i.thenBlock(), &i.elseBlock()})
    walk(*b, [&](Stmt &s) {
      if ((s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) && jumpTarget(s) == loop)
        found = true;
    });
  return found;
}

} // namespace

ControlFlowLowering::LoopBlocks ControlFlowLowering::loopBlocks(const char *prefix) {
  std::string p = prefix;
  LoopBlocks blocks;
  blocks.header = c_.newBlock(p + ".header");
  blocks.body = c_.newBlock(p + ".body");
  blocks.latch = c_.newBlock(p + ".latch");
  blocks.exit = c_.newBlock(p + ".exit");
  return blocks;
}

void ControlFlowLowering::inLoop(const LoopFrame &frame, const std::function<void()> &body) {
  c_.fn->loops.push_back(frame);
  body();
  c_.fn->loops.pop_back();
}

void ControlFlowLowering::finishLoop(const LoopBlocks &blocks, const Stmt *loop,
                                     const std::function<void()> &step) {
  if (!c_.b.GetInsertBlock()->getTerminator())
    c_.b.CreateBr(blocks.latch);
  c_.b.SetInsertPoint(blocks.latch);
  step();
  c_.stopCheck(loop);
  // A long tape loop keeps LLVM from unrolling it on the CPU; on the GPU
  // its count is hidden (EmitContext::tapeLoopBound) and, like a count
  // read at launch, only LLVM's runtime unrolling is off: `nounroll` would
  // keep the device's compiler from unrolling it too (the sin gradient over
  // ndarrays took 1.08-1.11x the fields gradient on an H200).
  const ForStmt *f = loop ? dyn_cast<ForStmt>(loop) : nullptr;
  bool noUnroll = f && !c_.target.launchWordsAddressSpace() && EmitContext::isLongTapeLoop(*f);
  c_.b.CreateBr(blocks.header)
      ->setMetadata(llvm::LLVMContext::MD_loop, noUnroll ? c_.noUnroll() : c_.noRuntimeUnroll());
  c_.b.SetInsertPoint(blocks.exit);
}

void ControlFlowLowering::countedLoop(LV *begin, LV *end, llvm::Type *ty, const Stmt *loop,
                                      const std::function<void(LV *)> &body, uint64_t step) {
  countedLoop(begin, end, ty, loop, body, llvm::ConstantInt::get(ty, step));
}

void ControlFlowLowering::countedLoop(LV *begin, LV *end, llvm::Type *ty, const Stmt *loop,
                                      const std::function<void(LV *)> &body, LV *step) {
  llvm::IRBuilder<> &b = c_.b;
  llvm::AllocaInst *counter = c_.entryAlloca(ty, "i");
  b.CreateStore(begin, counter);
  LoopBlocks blocks = loopBlocks("for");
  b.CreateBr(blocks.header);
  b.SetInsertPoint(blocks.header);
  LV *i = b.CreateLoad(ty, counter);
  b.CreateCondBr(b.CreateICmpSLT(i, end), blocks.body, blocks.exit);
  b.SetInsertPoint(blocks.body);
  inLoop({blocks.latch, blocks.exit, loop}, [&] { body(i); });
  finishLoop(blocks, loop, [&] {
    LV *next = b.CreateAdd(b.CreateLoad(ty, counter), step);
    b.CreateStore(next, counter);
  });
}

void ControlFlowLowering::forLoop(ForStmt &loop) {
  if (lanes_.vectorMode() && lanes_.plan().isMaskedLoop(&loop))
    return maskedLoop(loop);
  countedLoop(c_.boundValue(loop.begin()), c_.tapeLoopBound(loop, c_.boundValue(loop.end())),
              c_.i32, &loop, [&](LV *i) {
                c_.set(&loop, i);
                e_.emitBlock(loop.body());
              });
}

void ControlFlowLowering::whileLoop(WhileStmt &w) {
  if (lanes_.vectorMode() && lanes_.plan().isMaskedLoop(&w))
    return maskedLoop(w);
  BasicBlock *header = c_.newBlock("while.body");
  BasicBlock *latch = c_.newBlock("while.latch"); // continue goes here too
  BasicBlock *exit = c_.newBlock("while.exit");
  c_.b.CreateBr(header);
  c_.b.SetInsertPoint(header);
  inLoop({latch, exit, &w}, [&] { e_.emitBlock(w.body()); });
  if (!c_.b.GetInsertBlock()->getTerminator())
    c_.b.CreateBr(latch);
  c_.b.SetInsertPoint(latch);
  c_.stopCheck(&w);
  c_.b.CreateBr(header);
  c_.b.SetInsertPoint(exit);
}

// Per-lane bounds, or a break/continue only some lanes take: the loop runs
// while some lane is active, under the mask of the active lanes. A for loop
// whose lanes start together counts with one scalar counter (lane l takes
// part while it is below end_l); a descending loop (TaskVectorPlan) counts
// that counter down from the largest end, and lane l's index is
// begin + end_l - 1 - J, so each lane still runs its indices in order.
void ControlFlowLowering::maskedLoop(Stmt &loop) {
  llvm::IRBuilder<> &b = c_.b;
  LaneState &state = lanes_.state();
  LV *entryMask = state.mask;
  auto *forLoop = dyn_cast<ForStmt>(&loop);
  bool descending = forLoop && lanes_.plan().isDescendingLoop(forLoop);
  LaneLoop laneLoop{lanes_.maskAlloca("exited"), lanes_.maskAlloca("skipped")};
  lanes_.clearMask(laneLoop.exited);
  llvm::AllocaInst *counter = nullptr;
  LV *begin = nullptr, *end = nullptr;
  if (forLoop) {
    begin = c_.boundValue(forLoop->begin());
    end = c_.boundValue(forLoop->end());
    LV *start = begin;
    if (descending) {
      // The largest end of the entering lanes (begin when none is above it).
      end = b.CreateFreeze(end);
      LV *ends =
          b.CreateSelect(entryMask ? entryMask : lanes_.allLanes(), end, lanes_.splat(begin));
      start = b.CreateIntMaxReduce(ends, /*IsSigned=*/true);
    }
    counter = c_.entryAlloca(start->getType(), "i"); // a vector when lanes start apart
    b.CreateStore(start, counter);
  }
  LoopBlocks blocks = loopBlocks("lanes");
  b.CreateBr(blocks.header);
  b.SetInsertPoint(blocks.header);
  LV *active = b.CreateAnd(entryMask ? entryMask : lanes_.allLanes(),
                           b.CreateNot(lanes_.loadMask(laneLoop.exited)));
  LV *i = nullptr;
  if (descending) {
    // The counter holds J + 1: J = begin is the last iteration.
    LV *above = b.CreateLoad(counter->getAllocatedType(), counter);
    LV *j = b.CreateSub(above, b.getInt32(1));
    LV *inRange = b.CreateICmpSLT(lanes_.splat(j), end);
    active = b.CreateAnd(active, b.CreateAnd(inRange, lanes_.splat(b.CreateICmpSGT(above, begin))));
    state.descendingCounters[&loop] = j;
    i = b.CreateSub(b.CreateAdd(lanes_.splat(begin), b.CreateSub(end, lanes_.splat(b.getInt32(1)))),
                    lanes_.splat(j));
  } else if (forLoop) {
    i = b.CreateLoad(counter->getAllocatedType(), counter);
    LV *inRange = i->getType()->isVectorTy() || end->getType()->isVectorTy()
                      ? b.CreateICmpSLT(lanes_.splat(i), lanes_.splat(end))
                      : b.CreateICmpSLT(i, end);
    active = b.CreateAnd(active, lanes_.splat(b.CreateFreeze(inRange)));
    if (lanes_.varying(forLoop))
      i = lanes_.splat(i);
  }
  b.CreateCondBr(b.CreateOrReduce(active), blocks.body, blocks.exit);
  b.SetInsertPoint(blocks.body);
  lanes_.clearMask(laneLoop.skipped);
  state.mask = active;
  if (forLoop)
    c_.set(&loop, i);
  state.loops[&loop] = laneLoop;
  // When the active lanes stand at the shared depth of the lane stacks the
  // body uses, one version of the body runs their operations as rows (no
  // per-lane depths to update or compare per operation); the lanes' depths
  // catch up in the latch. Otherwise the other version runs.
  std::vector<unsigned> pushOnly;
  std::vector<unsigned> rows = rowStacksOf(loop, pushOnly);
  llvm::AllocaInst *rowsRan = nullptr;
  inLoop({blocks.latch, blocks.exit, &loop}, [&] {
    if (rows.empty())
      return e_.emitBlock(loop.block(0));
    rowsRan = c_.entryAlloca(b.getInt1Ty(), "rows");
    LV *together = e_.adstacks().atSharedDepth(rows, active, pushOnly);
    b.CreateStore(together, rowsRan);
    BasicBlock *asRows = c_.newBlock("lanes.rows");
    BasicBlock *perLane = c_.newBlock("lanes.perlane");
    b.CreateCondBr(together, asRows, perLane);
    b.SetInsertPoint(asRows);
    state.rowStacks.insert(rows.begin(), rows.end());
    state.wholeRowPushes.insert(pushOnly.begin(), pushOnly.end());
    e_.emitBlock(loop.block(0));
    for (unsigned id : rows)
      state.rowStacks.erase(id);
    for (unsigned id : pushOnly)
      state.wholeRowPushes.erase(id);
    if (!b.GetInsertBlock()->getTerminator())
      b.CreateBr(blocks.latch);
    b.SetInsertPoint(perLane);
    e_.emitBlock(loop.block(0));
  });
  state.loops.erase(&loop);
  state.descendingCounters.erase(&loop);
  finishLoop(blocks, &loop, [&] {
    if (rowsRan) {
      LV *ran = b.CreateLoad(b.getInt1Ty(), rowsRan);
      e_.adstacks().syncLaneCounts(rows, b.CreateAnd(active, lanes_.splat(ran)));
    }
    if (!forLoop)
      return;
    LV *cur = b.CreateLoad(counter->getAllocatedType(), counter);
    LV *one = llvm::ConstantInt::get(cur->getType(), 1);
    b.CreateStore(descending ? b.CreateSub(cur, one) : b.CreateAdd(cur, one), counter);
  });
  state.mask = entryMask;
}

std::vector<unsigned> ControlFlowLowering::rowStacksOf(Stmt &loop,
                                                       std::vector<unsigned> &pushOnly) {
  const TaskVectorPlan &plan = lanes_.plan();
  bool own = loop.kind() == StmtKind::For;
  std::vector<unsigned> ids;
  std::unordered_set<unsigned> notPushes;
  walk(loop.block(0), [&](Stmt &s) {
    bool jumpsOut = (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) &&
                    !jumpTarget(s)->parent()->isNestedIn(&loop.block(0));
    auto *i = dyn_cast<IfStmt>(&s);
    if (jumpsOut || plan.isMaskedLoop(&s) || (i && plan.isVarying(i->cond())))
      own = false;
    auto *op = dyn_cast<AdStackOpStmt>(&s);
    if (!op || !plan.isLaneStack(op->stack()))
      return;
    auto known = c_.stacks.find(op->stack());
    if (known == c_.stacks.end())
      return;
    if (std::find(ids.begin(), ids.end(), known->second.id) == ids.end())
      ids.push_back(known->second.id);
    if (op->kind() != StmtKind::AdStackPush)
      notPushes.insert(known->second.id);
  });
  pushOnly.clear();
  if (!own)
    return {};
  for (unsigned id : ids)
    if (!notPushes.count(id))
      pushOnly.push_back(id);
  return ids;
}

// A branch, or in a masked loop, the active lanes leave (break) or skip the
// rest of the iteration (both).
void ControlFlowLowering::jump(Stmt &s) {
  LaneState &state = lanes_.state();
  auto laneLoop = state.loops.find(jumpTarget(s));
  if (laneLoop == state.loops.end()) {
    const LoopFrame &frame = c_.fn->loops.back();
    c_.b.CreateBr(s.kind() == StmtKind::Break ? frame.breakTo : frame.continueTo);
    return;
  }
  LV *m = lanes_.activeMask();
  auto add = [&](llvm::AllocaInst *a) {
    c_.b.CreateStore(c_.b.CreateOr(lanes_.loadMask(a), m), a);
  };
  add(laneLoop->second.skipped);
  if (s.kind() == StmtKind::Break)
    add(laneLoop->second.exited);
}

void ControlFlowLowering::vectorIf(IfStmt &i, LV *cond, LV *entryMask) {
  // Each arm runs under its lanes, and only if it has some.
  llvm::IRBuilder<> &b = c_.b;
  LaneState &state = lanes_.state();
  cond = b.CreateFreeze(cond);
  LV *outer = entryMask ? entryMask : state.groupMask;
  LV *thenMask = outer ? b.CreateAnd(outer, cond) : cond;
  LV *elseMask = b.CreateAnd(entryMask ? entryMask : lanes_.allLanes(), b.CreateNot(cond));
  for (int arm = 0; arm < 2; ++arm) {
    LV *m = arm == 0 ? thenMask : elseMask;
    BasicBlock *on = c_.newBlock(arm == 0 ? "if.then" : "if.else");
    BasicBlock *next = c_.newBlock("if.next");
    b.CreateCondBr(b.CreateOrReduce(m), on, next);
    b.SetInsertPoint(on);
    state.mask = m;
    state.ifExits.emplace_back(next, c_.fn->loops.size());
    e_.emitBlock(arm == 0 ? i.thenBlock() : i.elseBlock());
    state.ifExits.pop_back();
    if (!b.GetInsertBlock()->getTerminator())
      b.CreateBr(next);
    b.SetInsertPoint(next);
  }
  state.mask = entryMask;
}

void ControlFlowLowering::ifStmt(IfStmt &i) {
  llvm::IRBuilder<> &b = c_.b;
  LaneState &state = lanes_.state();
  LV *cond = c_.get(i.cond());
  LV *entryMask = state.mask;
  const Stmt *loop = c_.fn->loops.empty() ? nullptr : c_.fn->loops.back().stmt;
  auto laneLoop = loop ? state.loops.find(loop) : state.loops.end();
  bool jumps = laneLoop != state.loops.end() && hasJumpOf(i, loop);
  if (cond->getType()->isVectorTy()) {
    vectorIf(i, cond, entryMask);
  } else {
    BasicBlock *thenBB = c_.newBlock("if.then");
    BasicBlock *elseBB = c_.newBlock("if.else");
    BasicBlock *join = c_.newBlock("if.join");
    b.CreateCondBr(cond, thenBB, elseBB);
    for (int arm = 0; arm < 2; ++arm) {
      b.SetInsertPoint(arm == 0 ? thenBB : elseBB);
      state.mask = entryMask; // an arm may narrow it (a nested if with a jump)
      e_.emitBlock(arm == 0 ? i.thenBlock() : i.elseBlock());
      if (!b.GetInsertBlock()->getTerminator())
        b.CreateBr(join);
    }
    b.SetInsertPoint(join);
    state.mask = entryMask;
  }
  if (!jumps)
    return;
  // Lanes that broke or continued in an arm sit out the rest of the
  // iteration; with none left, skip to the end of the enclosing arm of a
  // per-lane if (the other lanes go on after it), or else to the next
  // iteration.
  state.mask = b.CreateAnd(entryMask ? entryMask : lanes_.allLanes(),
                           b.CreateNot(lanes_.loadMask(laneLoop->second.skipped)));
  BasicBlock *rest = c_.newBlock("lanes.rest");
  BasicBlock *none = !state.ifExits.empty() && state.ifExits.back().second == c_.fn->loops.size()
                         ? state.ifExits.back().first
                         : c_.fn->loops.back().continueTo;
  b.CreateCondBr(b.CreateOrReduce(state.mask), rest, none);
  b.SetInsertPoint(rest);
}

} // namespace qd::codegen
