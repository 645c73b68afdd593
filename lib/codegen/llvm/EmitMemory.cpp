//===- EmitMemory.cpp - Locals, fields, ndarrays and atomics --------------===//
//
// Locals are entry-block allocas (vectors in vector code when varying).
// Globals are addressed through ctx->globals[slot] (KernelLayout::slots)
// with a row-major flat index; with bounds checks every index is checked.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "qd/analysis/TaskVarying.h"

namespace qd::codegen {
namespace {

/// The operation of an atomic read-modify-write of `elem` values (in memory
/// form): for `atomic_add` float add, i1 xor, wrapping integer add; for
/// `atomic_max` (integers only) signed max.
llvm::AtomicRMWInst::BinOp atomicOp(const AtomicRmwStmt &s, ScalarType elem) {
  switch (s.op()) {
  case AtomicOp::Add:
    return isFloat(elem)            ? llvm::AtomicRMWInst::FAdd
           : elem == ScalarType::I1 ? llvm::AtomicRMWInst::Xor
                                    : llvm::AtomicRMWInst::Add;
  case AtomicOp::Max:
    return llvm::AtomicRMWInst::Max;
  }
  return llvm::AtomicRMWInst::BAD_BINOP;
}

} // namespace

// A local of EmitContext::blockLocals is the value it holds: its loads and
// stores come after it in its own block, which nothing else enters, so its
// value, carried from statement to statement, is what memory would hold.
void MemoryLowering::alloca(AllocaStmt &a) {
  llvm::Type *t = c_.typeOf(a.elementType());
  llvm::Type *slotType = lanes_.varying(&a) ? lanes_.vecOf(t) : t;
  if (EmitContext::isBlockLocal(a)) {
    c_.blockLocals.insert(&a);
    return c_.set(&a, llvm::Constant::getNullValue(slotType));
  }
  // A body emitted twice (a masked loop's two versions) shares its locals.
  auto known = c_.fn->values.find(&a);
  auto *slot =
      known == c_.fn->values.end() ? nullptr : llvm::dyn_cast<llvm::AllocaInst>(known->second);
  if (!slot || slot->getAllocatedType() != slotType)
    slot = c_.entryAlloca(slotType);
  lanes_.storeLocal(slot, llvm::Constant::getNullValue(t), &a);
  c_.set(&a, slot);
}

void MemoryLowering::localLoad(LocalLoadStmt &ld) {
  LV *slot = c_.get(ld.local());
  if (c_.blockLocals.contains(ld.local()))
    return c_.set(&ld, slot);
  c_.set(&ld, c_.b.CreateLoad(llvm::cast<llvm::AllocaInst>(slot)->getAllocatedType(), slot));
}

void MemoryLowering::localStore(LocalStoreStmt &st) {
  LV *slot = c_.get(st.local());
  if (c_.blockLocals.contains(st.local()))
    return c_.set(st.local(), lanes_.storedLocal(slot->getType(), c_.get(st.value()), &st,
                                                 [&] { return slot; }));
  lanes_.storeLocal(slot, c_.get(st.value()), &st);
}

void MemoryLowering::shape(ShapeStmt &sh) {
  LV *extent = ndShape(cast<Argument>(sh.ndarray()), sh.axis());
  c_.set(&sh, c_.b.CreateTrunc(extent, c_.typeOf(sh.type().element())));
}

unsigned MemoryLowering::slotOf(const GlobalAccessStmt &g) {
  const Field *f = g.isField() ? g.field() : nullptr;
  const Argument *a = g.isField() ? nullptr : cast<Argument>(g.ndarray());
  bool writes = !isa<GlobalLoadStmt>(g);
  auto &slots = c_.layout.slots;
  for (unsigned i = 0; i < slots.size(); ++i)
    if (slots[i].field == f && slots[i].ndarray == a && slots[i].component == g.component()) {
      slots[i].written |= writes;
      return i;
    }
  slots.push_back({f, a, g.component(), writes});
  return static_cast<unsigned>(slots.size() - 1);
}

LV *MemoryLowering::ndShape(const Argument *a, unsigned axis) {
  unsigned off = c_.layout.shapeOffset[a->index()] + axis;
  LV *&cached = c_.fn->shapes[off];
  if (!cached)
    cached = c_.launchWord({KernelLayout::LaunchWord::Shape, off});
  if (!cached) {
    LV *shapes = c_.ctxField(CtxField::ndShapes);
    llvm::IRBuilder<> eb = c_.entryBuilder();
    cached = eb.CreateLoad(c_.i64, eb.CreateGEP(c_.i64, shapes, eb.getInt64(off)));
  }
  return cached;
}

LV *MemoryLowering::slotBase(unsigned slot) {
  LV *&cached = c_.fn->slots[slot];
  if (!cached)
    cached = c_.launchPointer({KernelLayout::LaunchWord::Global, slot});
  if (!cached) {
    LV *globals = c_.ctxField(CtxField::globals);
    llvm::IRBuilder<> eb = c_.entryBuilder();
    cached = c_.target.devicePointer(
        eb, eb.CreateLoad(c_.ptrTy, eb.CreateGEP(c_.ptrTy, globals, eb.getInt64(slot))));
  }
  return cached;
}

std::vector<LV *> MemoryLowering::extentsOf(const GlobalAccessStmt &g) {
  std::vector<LV *> extents;
  if (g.isField())
    for (int64_t e : g.field()->shape())
      extents.push_back(c_.b.getInt64(e));
  else
    for (unsigned d = 0; d < g.numIndices(); ++d)
      extents.push_back(ndShape(cast<Argument>(g.ndarray()), d));
  return extents;
}

LV *MemoryLowering::narrowExtent(LV *extent) {
  // The low half of the launch word (both GPU targets are little-endian),
  // loaded as such in the entry block.
  auto *word = llvm::dyn_cast<llvm::LoadInst>(extent);
  if (!word)
    return c_.b.CreateTrunc(extent, c_.i32);
  LV *&narrow = c_.fn->narrowExtents[extent];
  if (!narrow) {
    llvm::IRBuilder<> eb(word->getNextNode());
    narrow = eb.CreateLoad(c_.i32, word->getPointerOperand());
  }
  return narrow;
}

unsigned MemoryLowering::indexSite(GlobalAccessStmt &g) {
  unsigned id = c_.site(g, "index out of range");
  c_.layout.sites.back().indexCheck = true;
  return id;
}

// Every active lane updates the same element: their values combine in
// registers (a tree of adds, or the largest), and one atomic update adds
// the result. Under a partial mask it runs only when some lane is active:
// the element's index need not be valid otherwise.
void MemoryLowering::atomicOfLanes(const AtomicRmwStmt &st, LV *ptr, LV *v, bool plain) {
  llvm::IRBuilder<> &b = c_.b;
  ScalarType elem = st.elementType();
  llvm::Type *mem = c_.memTypeOf(elem);
  llvm::AtomicRMWInst::BinOp op = atomicOp(st, elem);
  LV *identity = nullptr;
  if (op == llvm::AtomicRMWInst::FAdd)
    identity = llvm::ConstantFP::getNegativeZero(mem);
  else if (op == llvm::AtomicRMWInst::Max)
    identity =
        llvm::ConstantInt::get(mem, llvm::APInt::getSignedMinValue(mem->getIntegerBitWidth()));
  else
    identity = llvm::ConstantInt::get(mem, 0);
  LV *values = lanes_.splat(v);
  LV *active = lanes_.partialMask();
  if (active)
    values = b.CreateSelect(active, values, lanes_.splat(identity));
  LV *combined = nullptr;
  switch (op) {
  case llvm::AtomicRMWInst::FAdd: {
    auto *sum = b.CreateFAddReduce(identity, values);
    sum->setHasAllowReassoc(true); // a tree, not a chain of width adds
    combined = sum;
    break;
  }
  case llvm::AtomicRMWInst::Max:
    combined = b.CreateIntMaxReduce(values, /*IsSigned=*/true);
    break;
  case llvm::AtomicRMWInst::Xor:
    combined = b.CreateXorReduce(values);
    break;
  default:
    combined = b.CreateAddReduce(values);
    break;
  }
  llvm::Align align(storageBytes(elem));
  auto update = [&] {
    if (plain)
      b.CreateAlignedStore(combine(st, b.CreateAlignedLoad(mem, ptr, align), combined), ptr, align);
    else
      c_.target.atomicUpdate(c_, op, ptr, combined, align);
  };
  if (!active)
    return update();
  BasicBlock *on = c_.newBlock("lanes.update");
  BasicBlock *next = c_.newBlock("lanes.next");
  b.CreateCondBr(lanes_.anyLane(active), on, next);
  b.SetInsertPoint(on);
  update();
  b.CreateBr(next);
  b.SetInsertPoint(next);
}

LV *MemoryLowering::combine(const AtomicRmwStmt &st, LV *old, LV *v) {
  ScalarType elem = st.elementType();
  if (st.op() == AtomicOp::Max)
    return c_.b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, old, v);
  return addOf(old, v, elem);
}

LV *MemoryLowering::addOf(LV *x, LV *y, ScalarType elem) {
  return isFloat(elem)            ? c_.b.CreateFAdd(x, y)
         : elem == ScalarType::I1 ? c_.b.CreateXor(x, y)
                                  : c_.b.CreateAdd(x, y);
}

void MemoryLowering::globalAccess(GlobalAccessStmt &g) {
  // In vector code every lane stores and adds for itself; a load at a
  // uniform index serves all lanes.
  if (lanes_.vectorMode() && (g.kind() != StmtKind::GlobalLoad || lanes_.varying(&g)))
    return globalAccessLanes(g);
  llvm::IRBuilder<> &b = c_.b;
  ScalarType elem = g.elementType();
  llvm::Type *mem = c_.memTypeOf(elem);
  std::vector<LV *> extents = extentsOf(g);
  // CodegenOptions::narrowNdarrayOffsets: an ndarray's offset in 32 bits.
  const bool narrow = c_.opts.narrowNdarrayOffsets && !g.isField();
  LV *flat = narrow ? b.getInt32(0) : b.getInt64(0);
  LV *bad = b.getFalse();
  std::vector<LV *> indices;
  for (unsigned d = 0; d < g.numIndices(); ++d) {
    LV *idx32 = c_.get(g.index(d));
    LV *idx = b.CreateSExt(idx32, c_.i64);
    indices.push_back(idx);
    if (c_.opts.boundsChecked)
      bad = b.CreateOr(bad, b.CreateICmpUGE(idx, extents[d])); // negative is huge unsigned
    if (narrow) // no nsw, no trunc of the i64 extent: LLVM would widen either back
      flat = b.CreateAdd(b.CreateMul(flat, narrowExtent(extents[d])),
                         b.CreateSExtOrTrunc(idx32, c_.i32));
    else
      flat = b.CreateAdd(b.CreateMul(flat, extents[d]), idx);
  }
  if (narrow)
    flat = b.CreateSExt(flat, c_.i64);
  LV *base = slotBase(slotOf(g));
  if (c_.opts.boundsChecked && g.numIndices() > 0)
    c_.raiseIf(bad, indexSite(g), indices);
  LV *ptr = b.CreateGEP(mem, base, flat);
  if (g.kind() == StmtKind::GlobalLoad) {
    llvm::LoadInst *v = b.CreateLoad(mem, ptr);
    if (c_.written && g.isField() && !c_.written->written(g))
      v->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(c_.llvm, {}));
    c_.set(&g, c_.fromMem(v, elem));
  } else if (auto *st = dyn_cast<GlobalStoreStmt>(&g)) {
    b.CreateStore(c_.toMem(c_.get(st->value()), elem), ptr);
  } else {
    auto &rmw = cast<AtomicRmwStmt>(g);
    LV *v = c_.toMem(c_.get(rmw.value()), elem);
    const TaskVectorPlan *plan = c_.fn->taskPlan;
    auto *add = dyn_cast<AtomicAddStmt>(&g);
    // No other iteration touches it (but in a cooperative task's shared
    // loop the group's threads do).
    if (add && plan && plan->isPrivateAtomic(add) &&
        !(c_.fn->cooperative && c_.fn->cooperative->inSharedLoop(g)))
      b.CreateStore(addOf(b.CreateLoad(mem, ptr), v, elem), ptr);
    else if (plan && plan->isNearAtomic(&rmw)) // no iteration that runs meanwhile does
      b.CreateStore(combine(rmw, b.CreateLoad(mem, ptr), v), ptr);
    else if (c_.fn->taskVarying && !hasVaryingIndex(g, *c_.fn->taskVarying))
      c_.target.uniformAtomicUpdate(c_, atomicOp(rmw, elem), ptr, v,
                                    llvm::Align(storageBytes(elem)));
    else
      c_.target.atomicUpdate(c_, atomicOp(rmw, elem), ptr, v, llvm::Align(storageBytes(elem)));
  }
}

// A stencil's clamped neighbour (`max(min(j - 1, n - 1), 0)` in the last
// index) is lane-affine wherever the clamp does not bite: the lane group
// checks at run time that no lane's index is clamped and takes the
// contiguous code there (vector loads, stores and read-modify-writes
// instead of gathers and a loop over the lanes), the per-lane code at the
// edges. (Not with bounds checks: the access would get two error sites.)
bool MemoryLowering::clampedAccessLanes(GlobalAccessStmt &g) {
  unsigned n = g.numIndices();
  if (splittingClamped_ || n == 0 || c_.opts.boundsChecked)
    return false;
  LaneState &state = lanes_.state();
  const Value *last = g.index(n - 1);
  auto it = state.clampedAffine.find(last);
  if (it == state.clampedAffine.end() || state.affineBase.count(last))
    return false;
  for (unsigned d = 0; d + 1 < n; ++d)
    if (lanes_.varying(g.index(d)))
      return false;
  const LaneState::ClampedAffine clamp = it->second;
  llvm::IRBuilder<> &b = c_.b;
  LV *first = b.CreateSExt(clamp.base, c_.i64);
  LV *inside = b.getTrue();
  if (clamp.lo)
    inside = b.CreateAnd(inside, b.CreateICmpSGE(first, b.CreateSExt(clamp.lo, c_.i64)));
  if (clamp.hi)
    inside = b.CreateAnd(inside, b.CreateICmpSLE(b.CreateAdd(first, b.getInt64(lanes_.width() - 1)),
                                                 b.CreateSExt(clamp.hi, c_.i64)));
  BasicBlock *contiguous = c_.newBlock("clamp.inside");
  BasicBlock *edge = c_.newBlock("clamp.edge");
  BasicBlock *join = c_.newBlock("clamp.join");
  b.CreateCondBr(inside, contiguous, edge);
  splittingClamped_ = true;
  auto emit = [&](BasicBlock *from, bool affine) {
    b.SetInsertPoint(from);
    if (affine)
      state.affineBase[last] = clamp.base;
    globalAccessLanes(g);
    state.affineBase.erase(last);
    LV *v = g.kind() == StmtKind::GlobalLoad ? c_.get(&g) : nullptr;
    BasicBlock *end = b.GetInsertBlock();
    b.CreateBr(join);
    return std::pair(v, end);
  };
  auto [inner, innerEnd] = emit(contiguous, true);
  auto [outer, outerEnd] = emit(edge, false);
  splittingClamped_ = false;
  b.SetInsertPoint(join);
  if (inner) {
    llvm::PHINode *phi = b.CreatePHI(inner->getType(), 2);
    phi->addIncoming(inner, innerEnd);
    phi->addIncoming(outer, outerEnd);
    c_.set(&g, phi);
  }
  return true;
}

void MemoryLowering::globalAccessLanes(GlobalAccessStmt &g) {
  if (clampedAccessLanes(g))
    return;
  llvm::IRBuilder<> &b = c_.b;
  ScalarType elem = g.elementType();
  llvm::Type *mem = c_.memTypeOf(elem);
  llvm::Type *memVec = lanes_.vecOf(mem);
  llvm::Align align(storageBytes(elem));
  LV *mask = lanes_.partialMask();
  unsigned n = g.numIndices();
  std::vector<LV *> extents = extentsOf(g), indices;
  LV *bad = b.getFalse();
  for (unsigned d = 0; d < n; ++d) {
    LV *idx = c_.get(g.index(d));
    idx = b.CreateSExt(idx, EmitContext::shaped(c_.i64, idx));
    indices.push_back(idx);
    if (c_.opts.boundsChecked) {
      LV *out = b.CreateICmpUGE(idx, idx->getType()->isVectorTy() ? lanes_.splat(extents[d])
                                                                  : extents[d]);
      bad = out->getType()->isVectorTy() || bad->getType()->isVectorTy()
                ? b.CreateOr(lanes_.splat(bad), lanes_.splat(out))
                : b.CreateOr(bad, out);
    }
  }
  if (c_.opts.boundsChecked && n > 0) {
    unsigned id = indexSite(g);
    std::vector<LV *> data = indices;
    if (bad->getType()->isVectorTy()) { // the indices of the first failing lane
      LV *badLanes = mask ? b.CreateAnd(bad, mask) : bad;
      LV *bits = b.CreateBitCast(badLanes, b.getIntNTy(lanes_.width()));
      LV *first =
          b.CreateZExt(b.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, bits, b.getTrue()), c_.i64);
      for (LV *&d : data)
        if (d->getType()->isVectorTy())
          d = b.CreateExtractElement(d, first);
    }
    c_.raiseIf(lanes_.anyLane(bad), id, data);
  }
  LV *base = slotBase(slotOf(g));
  // Contiguous: uniform indices, then base + lane in the last dimension.
  auto &affine = lanes_.state().affineBase;
  auto last = n > 0 ? affine.find(g.index(n - 1)) : affine.end();
  bool contiguous = last != affine.end();
  for (unsigned d = 0; d + 1 < n && contiguous; ++d)
    contiguous = !indices[d]->getType()->isVectorTy();
  LV *ptr = nullptr;  // contiguous: lane 0's element; else uniform: the element
  LV *ptrs = nullptr; // per lane
  if (contiguous)
    indices[n - 1] = b.CreateSExt(last->second, c_.i64);
  LV *flat = b.getInt64(0);
  for (unsigned d = 0; d < n; ++d) {
    LV *ext = extents[d], *idx = indices[d];
    if (flat->getType()->isVectorTy()) // after a varying dimension
      flat = b.CreateAdd(b.CreateMul(flat, lanes_.splat(ext)), lanes_.splat(idx));
    else if (idx->getType()->isVectorTy()) // the first varying one: the uniform part, splat once
      flat = b.CreateAdd(lanes_.splat(b.CreateMul(flat, ext)), idx);
    else
      flat = b.CreateAdd(b.CreateMul(flat, ext), idx);
  }
  if (flat->getType()->isVectorTy())
    ptrs = b.CreateGEP(mem, base, flat);
  else
    ptr = b.CreateGEP(mem, base, flat);
  LV *zero = llvm::Constant::getNullValue(memVec);
  // In a partial group (no other mask), a gather or scatter has the lanes
  // past the end repeat lane 0's access (always active: the group's lanes
  // are a prefix) instead of a mask: the element is lane 0's own (the plan
  // lets no other iteration touch an element a lane stores to or adds to
  // privately) and so is the value, so nothing changes, and AVX2 code,
  // which scalarises gathers and scatters, needs no branch per lane.
  LV *group = lanes_.mask() ? nullptr : lanes_.state().groupMask;
  auto asLaneZero = [&](LV *v) {
    return b.CreateSelect(group, v, lanes_.splat(b.CreateExtractElement(v, b.getInt64(0))));
  };
  auto gatherMask = [&]() -> LV * {
    if (!group)
      return lanes_.activeMask();
    ptrs = asLaneZero(ptrs);
    return llvm::ConstantInt::getTrue(memVec->getWithNewType(b.getInt1Ty()));
  };
  if (auto *st = dyn_cast<AtomicAddStmt>(&g); st && lanes_.plan().isPrivateAtomic(st)) {
    // No other iteration touches the element: read, add, write.
    if (!contiguous && !ptrs)
      ptrs = lanes_.splat(ptr);
    LV *active = contiguous ? lanes_.activeMask() : gatherMask();
    LV *old = contiguous ? b.CreateMaskedLoad(memVec, ptr, align, active, zero)
                         : b.CreateMaskedGather(memVec, ptrs, align, active, zero);
    LV *sum = addOf(old, c_.toMem(lanes_.splat(c_.get(st->value())), elem), elem);
    if (contiguous)
      b.CreateMaskedStore(sum, ptr, align, active);
    else
      b.CreateMaskedScatter(group ? asLaneZero(sum) : sum, ptrs, align, active);
    return;
  }
  if (auto *st = dyn_cast<AtomicRmwStmt>(&g))
    return sharedAtomicLanes(*st, ptr, ptrs, contiguous);
  if (!contiguous && !ptrs) // a uniform element in every lane
    ptrs = lanes_.splat(ptr);
  if (g.kind() == StmtKind::GlobalLoad) {
    LV *v = nullptr;
    if (!contiguous)
      v = b.CreateMaskedGather(memVec, ptrs, align, gatherMask(), zero);
    else if (mask)
      v = b.CreateMaskedLoad(memVec, ptr, align, mask, zero);
    else
      v = b.CreateAlignedLoad(memVec, ptr, align);
    c_.set(&g, c_.fromMem(v, elem));
    return;
  }
  LV *v = c_.toMem(lanes_.splat(c_.get(cast<GlobalStoreStmt>(g).value())), elem);
  if (contiguous && !mask)
    b.CreateAlignedStore(v, ptr, align);
  else if (contiguous)
    b.CreateMaskedStore(v, ptr, align, mask);
  else if (LV *all = gatherMask())
    b.CreateMaskedScatter(group ? asLaneZero(v) : v, ptrs, align, all);
}

// An atomic update of elements other iterations may update too (lanes
// possibly of one element): lane 0's element `ptr` and the lanes' next
// ones when `contiguous`, else `ptr` for all lanes or `ptrs` per lane.
void MemoryLowering::sharedAtomicLanes(AtomicRmwStmt &st, LV *ptr, LV *ptrs, bool contiguous) {
  llvm::IRBuilder<> &b = c_.b;
  ScalarType elem = st.elementType();
  llvm::Type *mem = c_.memTypeOf(elem);
  llvm::Align align(storageBytes(elem));
  LV *v = c_.toMem(c_.get(st.value()), elem);
  if (!contiguous && !ptrs) // one element for all lanes
    return atomicOfLanes(st, ptr, v, lanes_.plan().isNearAtomic(&st));
  Lanes::LaneArray at = lanes_.spill(ptrs ? ptrs : ptr), values = lanes_.spill(v);
  if (!lanes_.plan().isNearAtomic(&st)) {
    lanes_.forEachActiveLane([&](LV *l) {
      LV *p = contiguous ? b.CreateGEP(mem, ptr, l) : lanes_.laneOf(at, l);
      c_.target.atomicUpdate(c_, atomicOp(st, elem), p, lanes_.laneOf(values, l), align);
    });
    return;
  }
  // No iteration that runs meanwhile touches the elements (a near atomic),
  // but lanes may share one (clamped indices): lane after lane, unless they
  // are consecutive elements.
  if (contiguous) {
    llvm::Type *memVec = lanes_.vecOf(mem);
    LV *active = lanes_.activeMask();
    LV *old = b.CreateMaskedLoad(memVec, ptr, align, active, llvm::Constant::getNullValue(memVec));
    b.CreateMaskedStore(combine(st, old, lanes_.splat(v)), ptr, align, active);
    return;
  }
  lanes_.forEachActiveLane([&](LV *l) {
    LV *p = lanes_.laneOf(at, l);
    LV *sum = combine(st, b.CreateAlignedLoad(mem, p, align), lanes_.laneOf(values, l));
    b.CreateAlignedStore(sum, p, align);
  });
}

} // namespace qd::codegen
