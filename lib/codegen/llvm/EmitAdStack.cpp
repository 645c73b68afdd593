//===- EmitAdStack.cpp - Adstack operations -------------------------------===//
//
// Adstacks live in a heap the runtime owns; the target places each thread's
// entries (LlvmTarget::adStackBase/adStackRowBytes). The depth lives in
// function-local variables. For a stack whose lanes share one depth it is
// the address of the next free row, so a push or pop adds or subtracts one
// row size (no multiply of the depth per operation, which costs several
// instructions in 64 bits on a GPU). A push past the capacity still counts
// (the top moves past the end) but writes over the last row; reads clamp
// to the last row, so they stay inside the stack. The function's exit
// raises needed[s] to the stack's highest excess (an atomic max), so the
// runtime reports the capacity the launch needed and fails it; a read of
// an empty stack is an error site. On GPUs (indexed depths) an
// overflowing push writes nothing and raises needed[s] at once.
//
// In vector code an entry holds one value per lane: row e holds the lanes'
// primals, then their adjoints. A stack whose operations all run with every
// lane active keeps one depth for all lanes, and an entry is one vector (the
// scalar code is the case of one lane); a *lane stack* (operations under a
// partial mask) keeps a depth per lane, and reads and writes one row when
// the active lanes stand at one depth (see perLaneOp), else gathers and
// scatters.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "qd/abi/LaunchErrors.h"

#include <llvm/IR/InlineAsm.h>

#include <fmt/format.h>

namespace qd::codegen {

namespace {

/// Loops deeper than this around a stack's operations keep its state in
/// memory (AdStackLowering::rows): in registers, each of its locals is a
/// phi at every loop header around the operations, and LLVM's InstCombine
/// walks the whole web of those phis from each of them (PHIsEqualValue):
/// quadratic in the nest's depth (the gradient of a 254-deep nest: 54 ms of
/// InstCombine, against 18 ms at depth 127). The light tier starts at the
/// same depth (TierLimits::fullLoopDepth).
constexpr unsigned kRegisterStateLoops = 16;

/// The most loops between `a`'s block and an operation on its stack. Each
/// walk is bounded by the IR's nesting limit.
unsigned loopsAroundOps(const AdStackAllocaStmt &a) {
  unsigned most = 0;
  for (const Use &u : a.uses()) {
    unsigned loops = 0;
    for (const Stmt *p = u.user()->parentStmt(); p && p != a.parentStmt(); p = p->parentStmt())
      loops += p->kind() == StmtKind::For || p->kind() == StmtKind::While;
    most = std::max(most, loops);
  }
  return most;
}

} // namespace

const AdStackFrame &AdStackLowering::frame(unsigned id) {
  AdStackFrame &frame = c_.fn->stacks[id];
  if (!frame.base) {
    KernelLayout::Stack &layout = c_.layout.stacks.at(id);
    auto local = c_.opts.localAdStackEntries.find(layout.stmt);
    bool inLocal = c_.target.adStackIndexedDepth() && local != c_.opts.localAdStackEntries.end() &&
                   local->second > 0;
    if (inLocal) {
      // The thread's own array: entry d at d * entryBytes (the GPU
      // interleaves local memory across a warp's threads by itself).
      layout.localEntries = local->second;
      llvm::IRBuilder<> eb(c_.fn->entry, c_.fn->entry->begin());
      llvm::AllocaInst *array = eb.CreateAlloca(
          llvm::ArrayType::get(eb.getInt8Ty(), uint64_t(local->second) * layout.entryBytes),
          nullptr, fmt::format("adstack{}.local", id));
      array->setAlignment(llvm::Align(8));
      frame.base = array;
    } else {
      frame.base = c_.target.adStackBase(c_, id);
    }
    frame.capacity = c_.launchWord({KernelLayout::LaunchWord::Capacity, id});
    if (!frame.capacity) {
      LV *caps = c_.ctxField(CtxField::capacities);
      llvm::IRBuilder<> eb = c_.entryBuilder();
      frame.capacity = eb.CreateLoad(c_.i64, eb.CreateGEP(c_.i64, caps, eb.getInt64(id)));
    }
    if (!inLocal)
      frame.capacity = c_.target.adStackCapacity(c_, id, frame.capacity);
    if (c_.target.adStackIndexedDepth()) {
      const StackRef &st = c_.stacks.at(layout.stmt);
      LV *rowBytes = inLocal ? c_.b.getInt64(st.entryBytes) : c_.target.adStackRowBytes(c_, st, 1);
      llvm::IRBuilder<> eb = c_.entryBuilder();
      frame.capacity32 = eb.CreateTrunc(frame.capacity, c_.i32);
      frame.rowBytes32 = eb.CreateTrunc(rowBytes, c_.i32);
      frame.depth = eb.CreateAlloca(c_.i32, nullptr, fmt::format("adstack{}.depth", id));
      eb.CreateStore(eb.getInt32(0), frame.depth);
    }
  }
  return frame;
}

AdStackRows &AdStackLowering::rows(const StackRef &st, unsigned width) {
  frame(st.id);
  AdStackFrame &f = c_.fn->stacks[st.id];
  AdStackRows &r = f.rows[width];
  if (!r.top) {
    r.rowBytes = c_.target.adStackRowBytes(c_, st, width);
    llvm::IRBuilder<> eb = c_.entryBuilder();
    r.end = eb.CreateGEP(eb.getInt8Ty(), f.base, eb.CreateMul(f.capacity, r.rowBytes));
    std::string suffix = width > 1 ? fmt::format(".x{}", width) : "";
    r.top =
        eb.CreateAlloca(f.base->getType(), nullptr, fmt::format("adstack{}.top{}", st.id, suffix));
    eb.CreateStore(f.base, r.top);
    r.peak =
        eb.CreateAlloca(f.base->getType(), nullptr, fmt::format("adstack{}.peak{}", st.id, suffix));
    eb.CreateStore(f.base, r.peak);
    c_.fn->uniformRows.push_back({st.id, &r});
    if (c_.fn->stackRows++ >= c_.target.registerStackStates() ||
        (c_.target.registerStackStates() != ~0u &&
         loopsAroundOps(*c_.layout.stacks.at(st.id).stmt) > kRegisterStateLoops)) {
      // Hundreds of stacks (a loop carrying hundreds of values) would keep
      // four live values each across the loop: far more than there are
      // registers, and the register allocator's time grows faster than
      // linearly with them (N = 200 stacks: 3.4x the compile time of
      // N = 100). Their state stays in memory instead, where spilled
      // registers would have put it anyway: the slots escape (an empty
      // asm takes their addresses), so SROA and mem2reg leave them alone.
      r.endSlot = eb.CreateAlloca(f.base->getType(), nullptr, "adstack.end");
      eb.CreateStore(r.end, r.endSlot);
      r.baseSlot = eb.CreateAlloca(f.base->getType(), nullptr, "adstack.base");
      eb.CreateStore(f.base, r.baseSlot);
      auto *pin = llvm::InlineAsm::get(
          llvm::FunctionType::get(eb.getVoidTy(), {c_.ptrTy, c_.ptrTy, c_.ptrTy, c_.ptrTy}, false),
          "", "r,r,r,r", /*hasSideEffects=*/true);
      eb.CreateCall(pin, {r.top, r.peak, r.endSlot, r.baseSlot});
    }
  }
  return r;
}

void AdStackLowering::finishFunction() {
  FunctionState &fn = *c_.fn;
  if (fn.uniformRows.empty())
    return;
  llvm::IRBuilder<> &b = c_.b;
  // Every return (the end, and each error site's) goes through one exit
  // that raises needed[s] for the stacks that went past their end.
  BasicBlock *exit = c_.newBlock("exit");
  std::vector<llvm::ReturnInst *> returns;
  for (BasicBlock &bb : *fn.fn)
    if (auto *ret = llvm::dyn_cast_or_null<llvm::ReturnInst>(bb.getTerminator()))
      returns.push_back(ret);
  for (llvm::ReturnInst *ret : returns) {
    llvm::BranchInst::Create(exit, ret);
    ret->eraseFromParent();
  }
  b.SetInsertPoint(exit);
  std::vector<std::pair<unsigned, LV *>> excess;
  LV *any = b.getFalse();
  for (auto [id, r] : fn.uniformRows) {
    LV *peak = b.CreateLoad(c_.ptrTy, r->peak), *end = endOf(*r);
    LV *over = b.CreateICmpUGT(peak, end);
    any = b.CreateOr(any, over);
    LV *rows = b.CreateUDiv(b.CreatePtrDiff(b.getInt8Ty(), peak, end), r->rowBytes);
    excess.push_back({id, b.CreateSelect(over, rows, b.getInt64(0))});
  }
  BasicBlock *raise = c_.newBlock("adstack.overflowed");
  BasicBlock *done = c_.newBlock("return");
  b.CreateCondBr(any, raise, done, c_.unlikelyFirst());
  b.SetInsertPoint(raise);
  for (auto [id, rows] : excess)
    raiseNeeded(id, rows);
  b.CreateBr(done);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
}

LV *AdStackLowering::endOf(const AdStackRows &r) {
  return r.endSlot ? c_.b.CreateLoad(r.endSlot->getAllocatedType(), r.endSlot) : r.end;
}

LV *AdStackLowering::baseOf(const AdStackFrame &f, const AdStackRows &r) {
  return r.baseSlot ? c_.b.CreateLoad(r.baseSlot->getAllocatedType(), r.baseSlot) : f.base;
}

llvm::AllocaInst *AdStackLowering::laneCount(unsigned id) {
  frame(id); // the base and capacity the lane code also reads
  AdStackFrame &f = c_.fn->stacks[id];
  if (!f.laneCount) {
    f.laneCount = c_.entryAlloca(lanes_.vecOf(c_.i64), "adstack.lanecount");
    f.sharedDepth = c_.entryAlloca(c_.i64, "adstack.shareddepth");
    llvm::IRBuilder<> eb = c_.entryBuilder();
    eb.CreateStore(eb.getInt64(0), f.sharedDepth);
    // The per-lane depths stay in memory (their slot escapes into an empty
    // asm, so SROA leaves it alone): the rows version of a loop body does
    // not touch them, and as SSA values (a vector of i64 per lane) they
    // would hold registers across its libmvec calls, which clobber every
    // vector register: spilled and reloaded in every inner iteration.
    eb.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(eb.getVoidTy(), {c_.ptrTy}, false),
                                       "", "r", /*hasSideEffects=*/true),
                  {f.laneCount});
    LV *last = eb.CreateSub(f.capacity, eb.getInt64(1));
    f.lastIndex = eb.CreateSelect(eb.CreateICmpSLT(last, eb.getInt64(0)), eb.getInt64(0), last);
  }
  return f.laneCount;
}

void AdStackLowering::alloca(AdStackAllocaStmt &a) {
  // A vectorised task emits its body twice (vector, then the scalar
  // remainder): both share the stack's id and heap slice, whose entries
  // have room for every lane.
  auto known = c_.stacks.find(&a);
  if (known == c_.stacks.end()) {
    unsigned id = static_cast<unsigned>(c_.layout.stacks.size());
    unsigned entryBytes = adStackEntryBytes(a);
    c_.layout.stacks.push_back({&a, c_.currentTask, entryBytes, c_.fn->parallelTask});
    known = c_.stacks.emplace(&a, StackRef{id, a.elementType(), entryBytes}).first;
  }
  const StackRef &st = known->second;
  if (c_.target.adStackIndexedDepth()) {
    frame(st.id);
    c_.b.CreateStore(c_.b.getInt32(0), c_.fn->stacks[st.id].depth);
  } else if (lanes_.vectorMode() && lanes_.plan().isLaneStack(&a)) {
    lanes_.storeLocal(laneCount(st.id), c_.b.getInt64(0));
    c_.b.CreateStore(c_.b.getInt64(0), c_.fn->stacks[st.id].sharedDepth);
  } else {
    AdStackRows &r = rows(st, lanes_.width());
    c_.b.CreateStore(baseOf(frame(st.id), r), r.top);
    r.checkedIn = nullptr;
  }
}

unsigned AdStackLowering::underflowSite(AdStackOpStmt &op) {
  return c_.site(op, adStackUnderflowText(cast<AdStackAllocaStmt>(op.stack())));
}

void AdStackLowering::raiseNeeded(unsigned id, LV *excess) {
  LV *slot = c_.b.CreateGEP(c_.i64, c_.ctxField(CtxField::needed), c_.b.getInt64(id));
  c_.target.atomicUpdate(c_, llvm::AtomicRMWInst::Max, slot, excess, llvm::Align(8));
}

void AdStackLowering::overflow(BasicBlock *over, BasicBlock *done, const StackRef &st,
                               const std::function<LV *()> &asked) {
  c_.b.SetInsertPoint(over);
  // Nothing is written; remember how far past the capacity this push went.
  raiseNeeded(st.id, asked());
  c_.b.CreateBr(done);
  c_.b.SetInsertPoint(done);
}

void AdStackLowering::checkedPush(LV *fits, const StackRef &st, const std::function<void()> &write,
                                  const std::function<LV *()> &asked) {
  BasicBlock *writeBB = c_.newBlock("push.write");
  BasicBlock *over = c_.newBlock("push.overflow");
  BasicBlock *done = c_.newBlock("push.done");
  c_.b.CreateCondBr(fits, writeBB, over, c_.unlikelySecond());
  c_.b.SetInsertPoint(writeBB);
  write();
  c_.b.CreateBr(done);
  overflow(over, done, st, asked);
}

void AdStackLowering::op(AdStackOpStmt &op) {
  const StackRef &st = c_.stacks.at(op.stack());
  if (c_.target.adStackIndexedDepth())
    return indexedOp(op, st);
  if (lanes_.vectorMode() && lanes_.plan().isLaneStack(op.stack()))
    return perLaneOp(op, st);
  uniformOp(op, st, lanes_.width());
}

void AdStackLowering::uniformOp(AdStackOpStmt &op, const StackRef &st, unsigned width) {
  llvm::IRBuilder<> &b = c_.b;
  const AdStackFrame &f = frame(st.id);
  AdStackRows &r = rows(st, width);
  LV *top = b.CreateLoad(f.base->getType(), r.top);
  llvm::Type *mem = c_.memTypeOf(st.elem);
  if (width > 1)
    mem = lanes_.vecOf(mem);
  llvm::Align align(storageBytes(st.elem));
  // In vector code every lane pushes and reads the value of its own.
  auto value = [&](const Value *v) { return width > 1 ? lanes_.splat(c_.get(v)) : c_.get(v); };
  // Scalar entries keep the type's default alignment (what the CPU backend
  // has always emitted); lane rows are aligned to one element.
  auto load = [&](LV *ptr) {
    return width > 1 ? b.CreateAlignedLoad(mem, ptr, align) : b.CreateLoad(mem, ptr);
  };
  auto store = [&](LV *v, LV *ptr) {
    if (width > 1)
      b.CreateAlignedStore(v, ptr, align);
    else
      b.CreateStore(v, ptr);
  };
  LV *minusRow = b.CreateNeg(r.rowBytes);
  // The last row, where a push past the end writes and reads clamp to (the
  // runtime refuses capacity 0, so it exists).
  // (C++ leaves the order of arguments open: each value is made in a
  // statement of its own, so the IR is the same with every compiler.)
  auto lastRow = [&](LV *end) { return b.CreateGEP(b.getInt8Ty(), end, minusRow); };
  auto moveTop = [&](LV *to) {
    b.CreateStore(to, r.top);
    r.checkedIn = nullptr;
  };
  if (auto *push = dyn_cast<AdStackPushStmt>(&op)) {
    LV *end = endOf(r);
    LV *last = lastRow(end);
    LV *row = b.CreateSelect(b.CreateICmpULT(top, end), top, last);
    store(c_.toMem(value(push->value()), st.elem), row);
    if (st.entryBytes > storageBytes(st.elem)) // the adjoint slot starts at 0
      store(llvm::Constant::getNullValue(mem), c_.target.adStackAdjoint(c_, st, row, width));
    LV *next = b.CreateGEP(b.getInt8Ty(), top, r.rowBytes);
    moveTop(next);
    LV *peak = b.CreateLoad(c_.ptrTy, r.peak);
    b.CreateStore(b.CreateSelect(b.CreateICmpUGT(next, peak), next, peak), r.peak);
    return;
  }
  // pop, load_top, load_top_adj and acc_adjoint need a non-empty stack;
  // a read right after a read of the same entry was checked already.
  if (!r.checkedIn || !c_.continuesFrom(r.checkedIn)) {
    c_.raiseIf(b.CreateICmpULE(top, baseOf(f, r)), underflowSite(op));
    r.checkedIn = b.GetInsertBlock();
  }
  if (op.kind() == StmtKind::AdStackPop) {
    moveTop(b.CreateGEP(b.getInt8Ty(), top, minusRow));
    return;
  }
  // After an overflow (reported at the end of the launch) the top is past
  // the end: reads use the last row.
  LV *end = endOf(r);
  LV *last = lastRow(end);
  LV *below = b.CreateGEP(b.getInt8Ty(), top, minusRow);
  LV *entry = b.CreateSelect(b.CreateICmpULE(top, end), below, last);
  LV *adjoint = c_.target.adStackAdjoint(c_, st, entry, width);
  if (op.kind() == StmtKind::AdStackLoadTop) {
    c_.set(&op, c_.fromMem(load(entry), st.elem));
  } else if (op.kind() == StmtKind::AdStackLoadTopAdj) {
    c_.set(&op, load(adjoint));
  } else {
    LV *cur = load(adjoint);
    store(b.CreateFAdd(cur, value(cast<AdStackAccAdjointStmt>(op).value())), adjoint);
  }
}

void AdStackLowering::indexedOp(AdStackOpStmt &op, const StackRef &st) {
  llvm::IRBuilder<> &b = c_.b;
  const AdStackFrame &f = frame(st.id);
  LV *depth = b.CreateLoad(c_.i32, f.depth);
  llvm::Type *mem = c_.memTypeOf(st.elem);
  // Both factors below 2^31: one wide multiply.
  auto entryAt = [&](LV *index) {
    LV *offset = b.CreateMul(b.CreateZExt(index, c_.i64), b.CreateZExt(f.rowBytes32, c_.i64), "",
                             /*HasNUW=*/true, /*HasNSW=*/true);
    return b.CreateGEP(b.getInt8Ty(), f.base, offset);
  };
  if (auto *push = dyn_cast<AdStackPushStmt>(&op)) {
    checkedPush(
        b.CreateICmpULT(depth, f.capacity32), st,
        [&] {
          LV *entry = entryAt(depth);
          b.CreateStore(c_.toMem(c_.get(push->value()), st.elem), entry);
          if (st.entryBytes > storageBytes(st.elem)) // the adjoint slot starts at 0
            b.CreateStore(llvm::Constant::getNullValue(mem),
                          c_.target.adStackAdjoint(c_, st, entry, 1));
          // Below the capacity, so below 2^31: no wrap.
          b.CreateStore(b.CreateAdd(depth, b.getInt32(1), "", /*HasNUW=*/true), f.depth);
        },
        // Nothing is written. The count goes on (it stops at 2^32 - 1
        // rather than wrap), so pops and reads still find the last stored
        // entry.
        [&] {
          LV *more =
              b.CreateAdd(depth, b.CreateZExt(b.CreateICmpNE(depth, b.getInt32(-1)), c_.i32));
          b.CreateStore(more, f.depth);
          return b.CreateZExt(b.CreateSub(more, f.capacity32), c_.i64);
        });
    return;
  }
  c_.raiseIf(b.CreateICmpEQ(depth, b.getInt32(0)), underflowSite(op));
  if (op.kind() == StmtKind::AdStackPop) {
    b.CreateStore(b.CreateSub(depth, b.getInt32(1)), f.depth);
    return;
  }
  // After an overflow (reported at the end of the launch) the last stored
  // entry stands for the top; the runtime refuses capacity 0.
  LV *top = b.CreateSub(b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, depth, f.capacity32),
                        b.getInt32(1));
  LV *entry = entryAt(top);
  LV *adjoint = c_.target.adStackAdjoint(c_, st, entry, 1);
  if (op.kind() == StmtKind::AdStackLoadTop) {
    c_.set(&op, c_.fromMem(b.CreateLoad(mem, entry), st.elem));
  } else if (op.kind() == StmtKind::AdStackLoadTopAdj) {
    c_.set(&op, b.CreateLoad(mem, adjoint));
  } else {
    LV *cur = b.CreateLoad(mem, adjoint);
    b.CreateStore(b.CreateFAdd(cur, c_.get(cast<AdStackAccAdjointStmt>(op).value())), adjoint);
  }
}

// Entry e of lane l holds its primal at row e, slot l (row e is lanes x
// entryBytes bytes: the lanes' primals, then their adjoints), and each lane
// keeps its own depth. Lanes in lockstep (a masked loop counting up pushes,
// the descending loop that reverses it pops, TaskVectorPlan) reach every
// operation at one depth: then their entries are one row (a masked load,
// or a load, blend and store) instead of a gather or scatter, with scalar
// checks. A masked loop whose body has no divergence of its own checks that
// once per iteration (ControlFlowLowering::maskedLoop) and emits its stack
// operations as rows only (LaneState::rowStacks); elsewhere each operation
// checks it.
// `sharedDepth` holds the depth the last operation left the lanes at; when
// some active lane is elsewhere, the operation gathers and scatters, so the
// guess changes the speed only, never the result.
void AdStackLowering::perLaneOp(AdStackOpStmt &op, const StackRef &st) {
  llvm::IRBuilder<> &b = c_.b;
  const AdStackFrame &f = frame(st.id);
  LaneStackOp lop;
  lop.st = &st;
  lop.kind = op.kind();
  lop.underflow = lop.kind == StmtKind::AdStackPush ? 0 : underflowSite(op);
  if (auto *push = dyn_cast<AdStackPushStmt>(&op))
    lop.value = c_.toMem(lanes_.splat(c_.get(push->value())), st.elem);
  if (auto *acc = dyn_cast<AdStackAccAdjointStmt>(&op))
    lop.value = lanes_.splat(c_.get(acc->value()));
  lop.mask = lanes_.activeMask();

  llvm::AllocaInst *countSlot = laneCount(st.id);
  LV *depth = b.CreateLoad(c_.i64, f.sharedDepth);
  // The rows at the shared depth, and that depth moved by a push or pop.
  auto rowOp = [&] {
    LV *v = sharedRowOp(lop, depth);
    LV *next = lop.kind == StmtKind::AdStackPush  ? b.CreateAdd(depth, b.getInt64(1))
               : lop.kind == StmtKind::AdStackPop ? b.CreateSub(depth, b.getInt64(1))
                                                  : depth;
    b.CreateStore(next, f.sharedDepth);
    return v;
  };
  auto result = [&](LV *v) {
    if (v)
      c_.set(&op, lop.kind == StmtKind::AdStackLoadTop ? c_.fromMem(v, st.elem) : v);
  };
  if (lanes_.state().rowStacks.count(st.id)) {
    lop.wholeRow = lanes_.state().wholeRowPushes.count(st.id) > 0;
    result(rowOp()); // the loop's header checked the lanes' depths
    return;
  }

  lop.count = b.CreateLoad(countSlot->getAllocatedType(), countSlot);
  lop.activeOnes = b.CreateZExt(lop.mask, lop.count->getType());
  LV *newCount = lop.kind == StmtKind::AdStackPush  ? b.CreateAdd(lop.count, lop.activeOnes)
                 : lop.kind == StmtKind::AdStackPop ? b.CreateSub(lop.count, lop.activeOnes)
                                                    : lop.count;
  LV *apart =
      b.CreateOrReduce(b.CreateAnd(lop.mask, b.CreateICmpNE(lop.count, lanes_.splat(depth))));
  BasicBlock *rowBB = c_.newBlock("lanes.row");
  BasicBlock *apartBB = c_.newBlock("lanes.apart");
  BasicBlock *join = c_.newBlock("lanes.joined");
  b.CreateCondBr(apart, apartBB, rowBB);

  b.SetInsertPoint(rowBB);
  LV *rowValue = rowOp();
  BasicBlock *rowEnd = b.GetInsertBlock();
  b.CreateBr(join);

  b.SetInsertPoint(apartBB);
  LV *apartValue = gatherOp(lop);
  // The next operation most likely finds the deepest active lanes.
  LV *deepest = b.CreateIntMaxReduce(
      b.CreateSelect(lop.mask, newCount, llvm::Constant::getNullValue(newCount->getType())),
      /*IsSigned=*/true);
  b.CreateStore(deepest, f.sharedDepth);
  BasicBlock *apartEnd = b.GetInsertBlock();
  b.CreateBr(join);

  b.SetInsertPoint(join);
  if (rowValue) {
    llvm::PHINode *phi = b.CreatePHI(rowValue->getType(), 2);
    phi->addIncoming(rowValue, rowEnd);
    phi->addIncoming(apartValue, apartEnd);
    result(phi);
  }
  b.CreateStore(newCount, countSlot);
}

std::pair<LV *, LV *> AdStackLowering::depthsOf(unsigned id) {
  llvm::IRBuilder<> &b = c_.b;
  llvm::AllocaInst *countSlot = laneCount(id);
  return {b.CreateLoad(countSlot->getAllocatedType(), countSlot),
          lanes_.splat(b.CreateLoad(c_.i64, c_.fn->stacks[id].sharedDepth))};
}

LV *AdStackLowering::atSharedDepth(const std::vector<unsigned> &ids, LV *mask,
                                   const std::vector<unsigned> &wholeRows) {
  llvm::IRBuilder<> &b = c_.b;
  LV *apart = b.getFalse();
  for (unsigned id : ids) {
    auto [count, shared] = depthsOf(id);
    LV *off = b.CreateAnd(mask, b.CreateICmpNE(count, shared));
    if (std::find(wholeRows.begin(), wholeRows.end(), id) != wholeRows.end())
      off = b.CreateOr(off, b.CreateAnd(b.CreateNot(mask), b.CreateICmpSGT(count, shared)));
    apart = b.CreateOr(apart, b.CreateOrReduce(off));
  }
  return b.CreateNot(apart);
}

void AdStackLowering::syncLaneCounts(const std::vector<unsigned> &ids, LV *mask) {
  for (unsigned id : ids) {
    auto [count, shared] = depthsOf(id);
    c_.b.CreateStore(c_.b.CreateSelect(mask, shared, count), laneCount(id));
  }
}

AdStackLowering::LaneRows AdStackLowering::laneRows(const StackRef &st) {
  LaneRows r;
  r.base = frame(st.id).base;
  r.primalBytes = storageBytes(st.elem);
  r.memVec = lanes_.vecOf(c_.memTypeOf(st.elem));
  r.align = llvm::Align(r.primalBytes);
  r.rowBytes = c_.b.getInt64(int64_t(st.entryBytes) * lanes_.width());
  r.adjointOffset = c_.b.getInt64(int64_t(r.primalBytes) * lanes_.width());
  return r;
}

LV *AdStackLowering::sharedRowOp(const LaneStackOp &lop, LV *depth) {
  llvm::IRBuilder<> &b = c_.b;
  const StackRef &st = *lop.st;
  const AdStackFrame &f = frame(st.id);
  const LaneRows r = laneRows(st);
  llvm::Type *memVec = r.memVec;
  llvm::Align align = r.align;
  auto row = [&](LV *index) {
    return b.CreateGEP(b.getInt8Ty(), r.base, b.CreateMul(index, r.rowBytes));
  };
  auto adjointOf = [&](LV *ptr) { return b.CreateGEP(b.getInt8Ty(), ptr, r.adjointOffset); };
  // Writes the active lanes' slots of a row. The inactive lanes' slots keep
  // their values: a load, a blend and a plain store (a masked store is
  // microcoded on AMD's Zen: several times slower); a whole-row push stores
  // the row, whose slots hold no lane's entry.
  auto storeRow = [&](LV *v, LV *ptr) {
    if (lop.wholeRow) {
      b.CreateAlignedStore(v, ptr, align);
      return;
    }
    LV *old = b.CreateAlignedLoad(memVec, ptr, align);
    b.CreateAlignedStore(b.CreateSelect(lop.mask, v, old), ptr, align);
  };
  if (lop.kind == StmtKind::AdStackPush) {
    checkedPush(
        b.CreateICmpSLT(depth, f.capacity), st,
        [&] {
          LV *ptr = row(depth);
          storeRow(lop.value, ptr);
          if (st.entryBytes > r.primalBytes)
            storeRow(llvm::Constant::getNullValue(memVec), adjointOf(ptr));
        },
        [&] { return b.CreateSub(b.CreateAdd(depth, b.getInt64(1)), f.capacity); });
    return nullptr;
  }
  c_.raiseIf(b.CreateICmpSLE(depth, b.getInt64(0)), lop.underflow);
  if (lop.kind == StmtKind::AdStackPop)
    return nullptr;
  // After an overflow the top stays at the last stored entry.
  LV *ptr = row(b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b.CreateSub(depth, b.getInt64(1)),
                                        f.lastIndex));
  LV *zero = llvm::Constant::getNullValue(memVec);
  if (lop.kind == StmtKind::AdStackLoadTop)
    return b.CreateMaskedLoad(memVec, ptr, align, lop.mask, zero);
  LV *cur = b.CreateMaskedLoad(memVec, adjointOf(ptr), align, lop.mask, zero);
  if (lop.kind == StmtKind::AdStackLoadTopAdj)
    return cur;
  storeRow(b.CreateFAdd(cur, lop.value), adjointOf(ptr));
  return nullptr;
}

LV *AdStackLowering::gatherOp(const LaneStackOp &lop) {
  llvm::IRBuilder<> &b = c_.b;
  const StackRef &st = *lop.st;
  const AdStackFrame &f = frame(st.id);
  const LaneRows r = laneRows(st);
  unsigned pb = r.primalBytes;
  llvm::Type *memVec = r.memVec;
  llvm::Align align = r.align;
  LV *rowBytes = r.rowBytes, *adjOffset = r.adjointOffset;
  LV *count = lop.count, *m = lop.mask;
  LV *slotOffsets = b.CreateMul(lanes_.laneIds(c_.i64), lanes_.splat(b.getInt64(pb)));
  auto primals = [&](LV *index) {
    return b.CreateGEP(b.getInt8Ty(), f.base,
                       b.CreateAdd(b.CreateMul(index, lanes_.splat(rowBytes)), slotOffsets));
  };
  auto adjoints = [&](LV *ptrs) { return b.CreateGEP(b.getInt8Ty(), ptrs, adjOffset); };
  if (lop.kind == StmtKind::AdStackPush) {
    LV *fits = b.CreateICmpSLT(count, lanes_.splat(f.capacity));
    LV *writes = b.CreateAnd(m, fits);
    LV *ptrs = primals(count);
    b.CreateMaskedScatter(lop.value, ptrs, align, writes);
    if (st.entryBytes > pb)
      b.CreateMaskedScatter(llvm::Constant::getNullValue(memVec), adjoints(ptrs), align, writes);
    LV *over = b.CreateAnd(m, b.CreateNot(fits));
    BasicBlock *overBB = c_.newBlock("push.overflow");
    BasicBlock *done = c_.newBlock("push.done");
    b.CreateCondBr(b.CreateOrReduce(over), overBB, done, c_.unlikelyFirst());
    overflow(overBB, done, st, [&] {
      // Each overflowing lane's pushes beyond the capacity, this one included.
      LV *excess = b.CreateSub(b.CreateAdd(count, lop.activeOnes), lanes_.splat(f.capacity));
      LV *asked = b.CreateSelect(over, excess, llvm::Constant::getNullValue(count->getType()));
      return b.CreateIntMaxReduce(asked, /*IsSigned=*/true);
    });
    return nullptr;
  }
  LV *empty = b.CreateAnd(m, b.CreateICmpSLE(count, lanes_.splat(b.getInt64(0))));
  c_.raiseIf(b.CreateOrReduce(empty), lop.underflow);
  if (lop.kind == StmtKind::AdStackPop)
    return nullptr;
  // Inactive lanes may be empty: their top (-1, huge unsigned) clamps too.
  LV *top = b.CreateBinaryIntrinsic(llvm::Intrinsic::umin,
                                    b.CreateSub(count, lanes_.splat(b.getInt64(1))),
                                    lanes_.splat(f.lastIndex));
  LV *ptrs = primals(top);
  LV *zero = llvm::Constant::getNullValue(memVec);
  if (lop.kind == StmtKind::AdStackLoadTop)
    return b.CreateMaskedGather(memVec, ptrs, align, m, zero);
  LV *cur = b.CreateMaskedGather(memVec, adjoints(ptrs), align, m, zero);
  if (lop.kind == StmtKind::AdStackLoadTopAdj)
    return cur;
  b.CreateMaskedScatter(b.CreateFAdd(cur, lop.value), adjoints(ptrs), align, m);
  return nullptr;
}

} // namespace qd::codegen
