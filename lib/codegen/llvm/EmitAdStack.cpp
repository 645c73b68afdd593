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
// partial mask) keeps a depth per lane and gathers and scatters.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "qd/abi/LaunchErrors.h"

#include <llvm/IR/InlineAsm.h>

#include <fmt/format.h>

namespace qd::codegen {

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
    if (c_.fn->stackRows++ >= c_.target.registerStackStates()) {
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
    llvm::IRBuilder<> eb = c_.entryBuilder();
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
  } else if (lanes_.vectorMode() && lanes_.plan().isLaneStack(&a))
    lanes_.storeLocal(laneCount(st.id), c_.b.getInt64(0));
  else {
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
  auto lastRow = [&] { return b.CreateGEP(b.getInt8Ty(), endOf(r), minusRow); };
  auto moveTop = [&](LV *to) {
    b.CreateStore(to, r.top);
    r.checkedIn = nullptr;
  };
  if (auto *push = dyn_cast<AdStackPushStmt>(&op)) {
    LV *row = b.CreateSelect(b.CreateICmpULT(top, endOf(r)), top, lastRow());
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
  LV *entry = b.CreateSelect(b.CreateICmpULE(top, endOf(r)),
                             b.CreateGEP(b.getInt8Ty(), top, minusRow), lastRow());
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
    BasicBlock *write = c_.newBlock("push.write");
    BasicBlock *over = c_.newBlock("push.overflow");
    BasicBlock *done = c_.newBlock("push.done");
    b.CreateCondBr(b.CreateICmpULT(depth, f.capacity32), write, over, c_.unlikelySecond());
    b.SetInsertPoint(write);
    LV *entry = entryAt(depth);
    b.CreateStore(c_.toMem(c_.get(push->value()), st.elem), entry);
    if (st.entryBytes > storageBytes(st.elem)) // the adjoint slot starts at 0
      b.CreateStore(llvm::Constant::getNullValue(mem), c_.target.adStackAdjoint(c_, st, entry, 1));
    // Below the capacity, so below 2^31: no wrap.
    b.CreateStore(b.CreateAdd(depth, b.getInt32(1), "", /*HasNUW=*/true), f.depth);
    b.CreateBr(done);
    // Nothing is written. The count goes on (it stops at 2^32 - 1 rather
    // than wrap), so pops and reads still find the last stored entry.
    overflow(over, done, st, [&] {
      LV *more = b.CreateAdd(depth, b.CreateZExt(b.CreateICmpNE(depth, b.getInt32(-1)), c_.i32));
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
// entryBytes bytes: the lanes' primals, then their adjoints).
void AdStackLowering::perLaneOp(AdStackOpStmt &op, const StackRef &st) {
  llvm::IRBuilder<> &b = c_.b;
  const AdStackFrame &f = frame(st.id);
  unsigned pb = storageBytes(st.elem), width = lanes_.width();
  llvm::Type *memVec = lanes_.vecOf(c_.memTypeOf(st.elem));
  llvm::Align align(pb);
  LV *rowBytes = b.getInt64(int64_t(st.entryBytes) * width);
  LV *adjOffset = b.getInt64(int64_t(pb) * width);
  StmtKind kind = op.kind();
  unsigned underflow = kind == StmtKind::AdStackPush ? 0 : underflowSite(op);
  LV *value = nullptr;
  if (auto *push = dyn_cast<AdStackPushStmt>(&op))
    value = c_.toMem(lanes_.splat(c_.get(push->value())), st.elem);
  if (auto *acc = dyn_cast<AdStackAccAdjointStmt>(&op))
    value = lanes_.splat(c_.get(acc->value()));

  llvm::AllocaInst *countSlot = laneCount(st.id);
  LV *count = b.CreateLoad(countSlot->getAllocatedType(), countSlot);
  LV *m = lanes_.activeMask();
  LV *activeOnes = b.CreateZExt(m, count->getType());
  LV *slotOffsets = b.CreateMul(lanes_.laneIds(c_.i64), lanes_.splat(b.getInt64(pb)));
  auto primals = [&](LV *index) {
    return b.CreateGEP(b.getInt8Ty(), f.base,
                       b.CreateAdd(b.CreateMul(index, lanes_.splat(rowBytes)), slotOffsets));
  };
  auto adjoints = [&](LV *ptrs) { return b.CreateGEP(b.getInt8Ty(), ptrs, adjOffset); };
  if (kind == StmtKind::AdStackPush) {
    LV *fits = b.CreateICmpSLT(count, lanes_.splat(f.capacity));
    LV *writes = b.CreateAnd(m, fits);
    LV *ptrs = primals(count);
    b.CreateMaskedScatter(value, ptrs, align, writes);
    if (st.entryBytes > pb)
      b.CreateMaskedScatter(llvm::Constant::getNullValue(memVec), adjoints(ptrs), align, writes);
    LV *over = b.CreateAnd(m, b.CreateNot(fits));
    BasicBlock *overBB = c_.newBlock("push.overflow");
    BasicBlock *done = c_.newBlock("push.done");
    b.CreateCondBr(b.CreateOrReduce(over), overBB, done, c_.unlikelyFirst());
    overflow(overBB, done, st, [&] {
      // Each overflowing lane's pushes beyond the capacity, this one included.
      LV *excess = b.CreateSub(b.CreateAdd(count, activeOnes), lanes_.splat(f.capacity));
      LV *asked = b.CreateSelect(over, excess, llvm::Constant::getNullValue(count->getType()));
      return b.CreateIntMaxReduce(asked, /*IsSigned=*/true);
    });
    b.CreateStore(b.CreateAdd(count, activeOnes), countSlot);
    return;
  }
  LV *empty = b.CreateAnd(m, b.CreateICmpSLE(count, lanes_.splat(b.getInt64(0))));
  c_.raiseIf(b.CreateOrReduce(empty), underflow);
  if (kind == StmtKind::AdStackPop) {
    b.CreateStore(b.CreateSub(count, activeOnes), countSlot);
    return;
  }
  // Inactive lanes may be empty: their top (-1, huge unsigned) clamps too.
  LV *top = b.CreateBinaryIntrinsic(llvm::Intrinsic::umin,
                                    b.CreateSub(count, lanes_.splat(b.getInt64(1))),
                                    lanes_.splat(f.lastIndex));
  LV *ptrs = primals(top);
  LV *zero = llvm::Constant::getNullValue(memVec);
  if (kind == StmtKind::AdStackLoadTop) {
    c_.set(&op, c_.fromMem(b.CreateMaskedGather(memVec, ptrs, align, m, zero), st.elem));
  } else if (kind == StmtKind::AdStackLoadTopAdj) {
    c_.set(&op, b.CreateMaskedGather(memVec, adjoints(ptrs), align, m, zero));
  } else {
    LV *cur = b.CreateMaskedGather(memVec, adjoints(ptrs), align, m, zero);
    b.CreateMaskedScatter(b.CreateFAdd(cur, value), adjoints(ptrs), align, m);
  }
}

} // namespace qd::codegen
