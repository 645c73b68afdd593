//===- EmitContext.cpp - State shared by the LLVM emitter's parts ---------===//
#include "EmitContext.h"

#include "AbiTypes.h"

#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>

namespace qd::codegen {

EmitContext::EmitContext(const Kernel &k, llvm::LLVMContext &c, const CodegenOptions &o,
                         KernelLayout &l, LlvmTarget &t)
    : kernel(k), llvm(c), opts(o), layout(l), target(t),
      module(std::make_unique<llvm::Module>("qd." + k.name(), c)), b(c) {
  if (t.marksReadOnlyLoads())
    written.emplace(k, ndarrayAliasing(o.distinctNdarrays));
  ptrTy = llvm::PointerType::getUnqual(c);
  i64 = b.getInt64Ty();
  i32 = b.getInt32Ty();
  ctxTy = launchContextType(c);
  errorTy = errorRecordType(c);
  if (o.stopChecks)
    stopPlan = StopCheckPlan(k, abi::kStopCheckMinWork);
}

bool EmitContext::isBlockLocal(const AllocaStmt &a) {
  for (const Use &u : a.uses()) {
    const Stmt *user = u.user();
    bool access = user->kind() == StmtKind::LocalLoad ||
                  (user->kind() == StmtKind::LocalStore && u.index() == 0);
    if (!access || user->parent() != a.parent())
      return false;
  }
  return true;
}

void EmitContext::beginFunction(FunctionState &state, llvm::Function *f, LV *ctxArg, LV *thread) {
  fn = &state;
  state.fn = f;
  state.entry = BasicBlock::Create(llvm, "entry", f);
  BasicBlock *body = BasicBlock::Create(llvm, "body", f);
  b.SetInsertPoint(state.entry);
  b.CreateBr(body);
  b.SetInsertPoint(body);
  state.ctxArg = ctxArg;
  state.thread = thread;
}

llvm::Type *EmitContext::typeOf(ScalarType t) {
  switch (t) {
  case ScalarType::I1:
    return b.getInt1Ty();
  case ScalarType::I32:
    return i32;
  case ScalarType::I64:
    return i64;
  case ScalarType::F32:
    return b.getFloatTy();
  case ScalarType::F64:
    return b.getDoubleTy();
  }
  return i32;
}

LV *EmitContext::toMem(LV *v, ScalarType t) {
  return t == ScalarType::I1 ? b.CreateZExt(v, shaped(b.getInt8Ty(), v)) : v;
}

LV *EmitContext::fromMem(LV *v, ScalarType t) {
  return t == ScalarType::I1 ? b.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType())) : v;
}

llvm::Type *EmitContext::shaped(llvm::Type *t, LV *like) {
  if (auto *v = llvm::dyn_cast<llvm::VectorType>(like->getType()))
    return llvm::VectorType::get(t, v->getElementCount());
  return t;
}

llvm::AllocaInst *EmitContext::entryAlloca(llvm::Type *t, const char *name) {
  llvm::IRBuilder<> eb(fn->entry, fn->entry->begin());
  llvm::AllocaInst *a = eb.CreateAlloca(t, nullptr, name);
  if (t->isVectorTy()) {
    eb.SetInsertPoint(fn->entry->getTerminator());
    eb.CreateStore(llvm::Constant::getNullValue(t), a);
  }
  return a;
}

LV *EmitContext::ctxField(CtxField f) {
  LV *&cached = fn->ctxFields[f];
  if (!cached) {
    llvm::IRBuilder<> eb = entryBuilder();
    llvm::Type *type = launchContextFieldType(llvm, f);
    cached = eb.CreateLoad(type, eb.CreateStructGEP(ctxTy, fn->ctxArg, static_cast<unsigned>(f)));
    if (type->isPointerTy())
      cached = target.devicePointer(eb, cached);
  }
  return cached;
}

LV *EmitContext::launchWord(KernelLayout::LaunchWord w) {
  std::optional<unsigned> space = target.launchWordsAddressSpace();
  if (!space)
    return nullptr;
  auto [it, fresh] =
      launchWordIndex.try_emplace({int(w.kind), w.index}, unsigned(layout.launchWords.size()));
  if (fresh) {
    if (layout.launchWords.size() >= kMaxLaunchWords) {
      launchWordIndex.erase(it);
      return nullptr;
    }
    layout.launchWords.push_back(w);
  }
  LV *&cached = fn->words[it->second];
  if (!cached) {
    if (!launchWords)
      // Its type becomes [n x i64] in finishLaunchWords; every access is an
      // i64 GEP, which does not depend on it.
      launchWords = new llvm::GlobalVariable(
          *module, i64, /*isConstant=*/false, llvm::GlobalValue::ExternalLinkage,
          llvm::ConstantInt::get(i64, 0), "qd.launch.words", nullptr,
          llvm::GlobalValue::NotThreadLocal, *space, /*isExternallyInitialized=*/true);
    llvm::IRBuilder<> eb = entryBuilder();
    cached = eb.CreateLoad(i64, eb.CreateConstGEP1_64(i64, launchWords, it->second));
  }
  return cached;
}

LV *EmitContext::launchPointer(KernelLayout::LaunchWord w) {
  LV *word = launchWord(w);
  if (!word)
    return nullptr;
  llvm::IRBuilder<> eb = entryBuilder();
  return target.devicePointer(eb, eb.CreateIntToPtr(word, ptrTy));
}

void EmitContext::finishLaunchWords() {
  if (!launchWords)
    return;
  // The runtime writes the array before each launch: external (so it is
  // kept under its name and never folded to its zero initialiser) and
  // externally initialised.
  auto *type = llvm::ArrayType::get(i64, layout.launchWords.size());
  auto *words = new llvm::GlobalVariable(
      *module, type, /*isConstant=*/false, llvm::GlobalValue::ExternalLinkage,
      llvm::ConstantAggregateZero::get(type), kLaunchWordsSymbol, nullptr,
      llvm::GlobalValue::NotThreadLocal, launchWords->getAddressSpace(),
      /*isExternallyInitialized=*/true);
  words->setAlignment(llvm::Align(8));
  launchWords->replaceAllUsesWith(words);
  launchWords->eraseFromParent();
  launchWords = words;
}

LV *EmitContext::get(const Value *v) {
  auto it = fn->values.find(v);
  if (it != fn->values.end())
    return it->second;
  if (auto *a = dyn_cast<Argument>(v)) {
    LV *raw = launchWord({KernelLayout::LaunchWord::Scalar, a->index()});
    if (!raw)
      raw =
          b.CreateLoad(i64, b.CreateGEP(i64, ctxField(CtxField::scalars), b.getInt64(a->index())));
    ScalarType t = a->type().element();
    if (isFloat(t)) {
      if (t == ScalarType::F32)
        return b.CreateBitCast(b.CreateTrunc(raw, i32), b.getFloatTy());
      return b.CreateBitCast(raw, b.getDoubleTy());
    }
    return t == ScalarType::I64 ? raw : b.CreateTrunc(raw, typeOf(t));
  }
  error = "codegen: no value for an operand";
  return llvm::UndefValue::get(i32);
}

LV *EmitContext::boundValue(Bound bound) {
  return bound.isConstant() ? b.getInt32(static_cast<int32_t>(bound.constant)) : get(bound.value);
}

bool EmitContext::isLongTapeLoop(const ForStmt &loop) {
  // A tape loop with a trip count the compilers can see took NVIDIA's
  // Vulkan driver 1.74x, CUDA 1.05x and the CPU 1.06x the time of the
  // same loop with the count read at launch (the sin and spring
  // gradients: docs/runtime.md "Tape loop bounds"); short loops keep their
  // constant, which lets LLVM unroll them.
  constexpr int64_t kLongTapeLoopTrips = 64;
  auto literal = [](Bound b) -> std::optional<int64_t> {
    if (b.isConstant())
      return b.constant;
    if (auto *c = dyn_cast<ConstStmt>(b.value))
      return c->intValue();
    return std::nullopt;
  };
  std::optional<int64_t> begin = literal(loop.begin()), end = literal(loop.end());
  if (!begin || !end || *end - *begin < kLongTapeLoopTrips)
    return false;
  return std::any_of(loop.body().begin(), loop.body().end(),
                     [](const Stmt &s) { return isa<AdStackOpStmt>(&s); });
}

LV *EmitContext::tapeLoopBound(const ForStmt &loop, LV *end) {
  if (!isLongTapeLoop(loop))
    return end;
  LV *zero = launchWord({KernelLayout::LaunchWord::Zero, 0});
  return zero ? b.CreateAdd(end, b.CreateTrunc(zero, end->getType())) : end;
}

unsigned EmitContext::site(const Stmt &s, std::string what) {
  layout.sites.push_back({&s, std::move(what)});
  return static_cast<unsigned>(layout.sites.size());
}

void EmitContext::raiseIf(LV *cond, unsigned id, llvm::ArrayRef<LV *> data) {
  BasicBlock *bad = newBlock("error");
  BasicBlock *ok = newBlock("ok");
  // `ok` is entered only from here (`bad` returns): it continues the chain
  // of checks of the current block, or starts one.
  auto from = fn->checkChains.find(b.GetInsertBlock());
  fn->checkChains[ok] = from != fn->checkChains.end()
                            ? std::make_pair(from->second.first, from->second.second + 1)
                            : std::make_pair(fn->checkChainCount++, 0u);
  b.CreateCondBr(cond, bad, ok, unlikelyFirst());
  b.SetInsertPoint(bad);
  target.raiseError(*this, id, data);
  b.CreateRetVoid();
  b.SetInsertPoint(ok);
}

bool EmitContext::continuesFrom(const BasicBlock *after) const {
  const BasicBlock *here = b.GetInsertBlock();
  if (here == after)
    return true;
  auto h = fn->checkChains.find(here), a = fn->checkChains.find(after);
  return h != fn->checkChains.end() && a != fn->checkChains.end() &&
         h->second.first == a->second.first && h->second.second > a->second.second;
}

void EmitContext::recordError(unsigned siteId, llvm::ArrayRef<LV *> data) {
  LV *record = ctxField(CtxField::error);
  LV *siteSlot = b.CreateStructGEP(errorTy, record, unsigned(abi::ErrorRecordField::site));
  LV *cx = b.CreateAtomicCmpXchg(siteSlot, b.getInt32(0), b.getInt32(siteId), llvm::MaybeAlign(4),
                                 llvm::AtomicOrdering::Monotonic, llvm::AtomicOrdering::Monotonic);
  if (data.empty())
    return;
  BasicBlock *won = newBlock("error.data");
  BasicBlock *done = newBlock("error.done");
  b.CreateCondBr(b.CreateExtractValue(cx, 1), won, done);
  b.SetInsertPoint(won);
  LV *out = b.CreateStructGEP(errorTy, record, unsigned(abi::ErrorRecordField::data));
  for (size_t i = 0; i < data.size() && i < abi::kMaxErrorData; ++i)
    b.CreateStore(data[i], b.CreateGEP(i64, out, b.getInt64(i)));
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

void EmitContext::stopCheck(const Stmt *loop) {
  if (!opts.stopChecks || !loop || !stopPlan.checks(*loop))
    return;
  const bool gpu = target.staggersStopChecks();
  unsigned interval = target.stopCheckInterval();
  // A GPU thread polls every kDeviceStopPollInterval back edges (below).
  unsigned poll = gpu ? abi::kDeviceStopPollInterval : interval;
  if (!fn->backEdges) {
    fn->backEdges = entryAlloca(i32, "back.edges");
    llvm::IRBuilder<> eb = entryBuilder();
    // On a GPU the readers, one thread in kDeviceStopCheckSpread, read the
    // word at their first back edge: launches of many short loops stop too.
    // On the CPU each chunk of a task does (a load per chunk): the count
    // starts anew with every chunk, which may have fewer back edges than
    // the interval.
    LV *start = eb.getInt32(0);
    if (gpu) {
      LV *low =
          eb.CreateAnd(target.threadIndex(*this), eb.getInt32(abi::kDeviceStopCheckSpread - 1));
      fn->stopReader = eb.CreateICmpEQ(low, eb.getInt32(0), "stop.reader");
      start = eb.CreateSelect(fn->stopReader, eb.getInt32(poll - 1), start);
    } else if (fn->parallelTask >= 0) {
      start = eb.getInt32(interval - 1);
    }
    eb.CreateStore(start, fn->backEdges);
  }
  LV *n = b.CreateAdd(b.CreateLoad(i32, fn->backEdges), b.getInt32(1));
  b.CreateStore(n, fn->backEdges);
  BasicBlock *check = newBlock("stop.check");
  BasicBlock *next = newBlock("stop.next");
  b.CreateCondBr(b.CreateICmpEQ(b.CreateAnd(n, poll - 1), b.getInt32(0)), check, next,
                 unlikelyFirst());
  b.SetInsertPoint(check);
  if (gpu) {
    // Every thread leaves once another recorded an error (a stop
    // included), reading the error record in device memory: a running
    // thread that never reads the host's word still ends soon after a
    // reader saw it, whatever its loops cost per iteration. The readers
    // read the word at every poll, the others at every interval-th back
    // edge (where no reader runs any more).
    LV *slot = b.CreateStructGEP(errorTy, ctxField(CtxField::error),
                                 unsigned(abi::ErrorRecordField::site));
    llvm::LoadInst *recorded = b.CreateAlignedLoad(i32, slot, llvm::Align(4), /*isVolatile=*/true);
    recorded->setAtomic(llvm::AtomicOrdering::Monotonic);
    BasicBlock *leave = newBlock("stop.leave");
    BasicBlock *stay = newBlock("stop.stay");
    b.CreateCondBr(b.CreateICmpNE(recorded, b.getInt32(0)), leave, stay, unlikelyFirst());
    b.SetInsertPoint(leave);
    b.CreateRetVoid();
    b.SetInsertPoint(stay);
    BasicBlock *read = newBlock("stop.read");
    b.CreateCondBr(
        b.CreateOr(fn->stopReader, b.CreateICmpEQ(b.CreateAnd(n, interval - 1), b.getInt32(0))),
        read, next);
    b.SetInsertPoint(read);
  }
  // Written by the host during the launch: an atomic load, never hoisted.
  llvm::LoadInst *reason = b.CreateAlignedLoad(
      i32, target.devicePointer(b, ctxField(CtxField::stop)), llvm::Align(4), /*isVolatile=*/true);
  reason->setAtomic(llvm::AtomicOrdering::Monotonic);
  unsigned id = site(*loop, "");
  layout.sites.back().stopCheck = true;
  raiseIf(b.CreateICmpNE(reason, b.getInt32(0)), id, {b.CreateSExt(reason, i64)});
  b.CreateBr(next);
  b.SetInsertPoint(next);
}

llvm::MDNode *EmitContext::unlikelyFirst() {
  return llvm::MDBuilder(llvm).createBranchWeights(1, 1 << 20);
}

llvm::MDNode *EmitContext::unlikelySecond() {
  return llvm::MDBuilder(llvm).createBranchWeights(1 << 20, 1);
}

// Gradient kernels are full of short loops with data-dependent trip counts
// (the reversed inner loops of a nest run 0 to 15 times in benchmark (b)):
// unrolled by 2, each gets a remainder check that mispredicts, and every
// mispredict throws away the independent cosf calls in flight. Off, (b)'s
// gradient went from 1.47x the hand-written loop to about 1.1x
// (docs/performance.md). Constant trip counts still unroll.
llvm::MDNode *EmitContext::noRuntimeUnroll() {
  llvm::MDNode *off =
      llvm::MDNode::get(llvm, {llvm::MDString::get(llvm, "llvm.loop.unroll.runtime.disable")});
  llvm::MDNode *loop = llvm::MDNode::getDistinct(llvm, {nullptr, off});
  loop->replaceOperandWith(0, loop); // a loop ID refers to itself
  return loop;
}

llvm::MDNode *EmitContext::noUnroll() {
  llvm::MDNode *off =
      llvm::MDNode::get(llvm, {llvm::MDString::get(llvm, "llvm.loop.unroll.disable")});
  llvm::MDNode *loop = llvm::MDNode::getDistinct(llvm, {nullptr, off});
  loop->replaceOperandWith(0, loop);
  return loop;
}

llvm::Function *EmitContext::intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Type *> types) {
  return llvm::Intrinsic::getDeclaration(module.get(), id, types);
}

LV *EmitContext::toSlot(LV *v) {
  llvm::Type *t = v->getType();
  if (t->isFloatTy())
    return b.CreateZExt(b.CreateBitCast(v, i32), i64);
  if (t->isDoubleTy())
    return b.CreateBitCast(v, i64);
  if (t->isIntegerTy(1))
    return b.CreateZExt(v, i64);
  return b.CreateSExtOrTrunc(v, i64);
}

LV *EmitContext::fromSlot(LV *raw, ScalarType t) {
  switch (t) {
  case ScalarType::F32:
    return b.CreateBitCast(b.CreateTrunc(raw, i32), b.getFloatTy());
  case ScalarType::F64:
    return b.CreateBitCast(raw, b.getDoubleTy());
  default:
    return b.CreateTrunc(raw, typeOf(t));
  }
}

//===--- Lanes -------------------------------------------------------------===//

LV *Lanes::splat(LV *v) {
  if (v->getType()->isVectorTy())
    return v;
  // A constant's splat directly: the builder's insert-and-shuffle would be
  // folded through two constant expressions of every lane.
  if (auto *k = llvm::dyn_cast<llvm::Constant>(v))
    return llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(width()), k);
  return c_.b.CreateVectorSplat(width(), v);
}

Lanes::LaneArray Lanes::spill(LV *v) {
  if (!v->getType()->isVectorTy())
    return {v, nullptr, nullptr};
  llvm::Type *elem = llvm::cast<llvm::VectorType>(v->getType())->getElementType();
  if (elem->isIntegerTy(1)) { // bit-packed in memory: a byte per lane
    elem = c_.b.getInt8Ty();
    v = c_.b.CreateZExt(v, vecOf(elem));
  }
  llvm::AllocaInst *slot = c_.entryAlloca(v->getType(), "lanes");
  c_.b.CreateStore(v, slot);
  return {nullptr, slot, elem};
}

LV *Lanes::laneOf(const LaneArray &a, LV *l) {
  if (a.uniform)
    return a.uniform;
  return c_.b.CreateLoad(a.elem, c_.b.CreateGEP(a.elem, a.slot, l));
}

void Lanes::forEachActiveLane(const std::function<void(LV *)> &body) {
  llvm::IRBuilder<> &b = c_.b;
  LV *partial = partialMask();
  LaneArray active = partial ? spill(partial) : LaneArray{};
  BasicBlock *entry = b.GetInsertBlock();
  BasicBlock *head = c_.newBlock("lane.loop"), *on = c_.newBlock("lane.on"),
             *latch = c_.newBlock("lane.next"), *exit = c_.newBlock("lane.exit");
  b.CreateBr(head);
  b.SetInsertPoint(head);
  llvm::PHINode *l = b.CreatePHI(c_.i64, 2);
  l->addIncoming(b.getInt64(0), entry);
  if (partial)
    b.CreateCondBr(b.CreateICmpNE(laneOf(active, l), b.getInt8(0)), on, latch);
  else
    b.CreateBr(on);
  b.SetInsertPoint(on);
  body(l);
  b.CreateBr(latch);
  b.SetInsertPoint(latch);
  LV *next = b.CreateAdd(l, b.getInt64(1));
  l->addIncoming(next, latch);
  llvm::LLVMContext &ctx = b.getContext();
  llvm::MDNode *off =
      llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")});
  llvm::MDNode *loop = llvm::MDNode::getDistinct(ctx, {nullptr, off});
  loop->replaceOperandWith(0, loop);
  b.CreateCondBr(b.CreateICmpULT(next, b.getInt64(width())), head, exit)
      ->setMetadata(llvm::LLVMContext::MD_loop, loop);
  b.SetInsertPoint(exit);
}

LV *Lanes::allLanes() {
  if (LV *group = state().groupMask)
    return group;
  return llvm::ConstantInt::getTrue(vecOf(c_.b.getInt1Ty()));
}

LV *Lanes::laneIds(llvm::Type *t) {
  std::vector<llvm::Constant *> ids;
  for (unsigned l = 0; l < width(); ++l)
    ids.push_back(llvm::ConstantInt::get(t, l));
  return llvm::ConstantVector::get(ids);
}

LV *Lanes::anyLane(LV *cond) {
  if (!cond->getType()->isVectorTy())
    return cond;
  // Inactive lanes may hold poison (a shift by too much): freeze first.
  cond = c_.b.CreateFreeze(cond);
  if (LV *active = partialMask())
    cond = c_.b.CreateAnd(cond, active);
  return c_.b.CreateOrReduce(cond);
}

LV *Lanes::lane(LV *v, unsigned l) {
  return v->getType()->isVectorTy() ? c_.b.CreateExtractElement(v, c_.b.getInt64(l)) : v;
}

LV *Lanes::perLane(llvm::FunctionCallee fn, llvm::ArrayRef<LV *> args) {
  LV *r = llvm::PoisonValue::get(vecOf(fn.getFunctionType()->getReturnType()));
  for (unsigned l = 0; l < width(); ++l) {
    std::vector<LV *> a;
    for (LV *x : args)
      a.push_back(lane(x, l));
    r = c_.b.CreateInsertElement(r, c_.b.CreateCall(fn, a), c_.b.getInt64(l));
  }
  return r;
}

LV *Lanes::storedLocal(llvm::Type *t, LV *v, const Stmt *s, llvm::function_ref<LV *()> old) {
  if (!t->isVectorTy())
    return v;
  v = splat(v);
  if (mask() && !(s && plan().storesAllLanes(s)))
    v = c_.b.CreateSelect(mask(), v, old());
  return v;
}

void Lanes::storeLocal(LV *slot, LV *v, const Stmt *s) {
  llvm::Type *t = llvm::cast<llvm::AllocaInst>(slot)->getAllocatedType();
  c_.b.CreateStore(storedLocal(t, v, s, [&] { return c_.b.CreateLoad(t, slot); }), slot);
}

void Lanes::noteAffine(const Stmt &s) {
  if (!vectorMode())
    return;
  auto &affine = state().affineBase;
  auto baseOf = [&](const Value *v) -> LV * {
    auto it = affine.find(v);
    return it == affine.end() ? nullptr : it->second;
  };
  llvm::IRBuilder<> &b = c_.b;
  if (auto *bin = dyn_cast<BinaryStmt>(&s)) {
    if (isFloat(bin->type().element()))
      return;
    if (bin->op() == BinaryOp::Add || bin->op() == BinaryOp::Sub)
      if (LV *base = baseOf(bin->lhs()); base && !varying(bin->rhs()))
        affine[&s] = bin->op() == BinaryOp::Add ? b.CreateAdd(base, c_.get(bin->rhs()))
                                                : b.CreateSub(base, c_.get(bin->rhs()));
    if (bin->op() == BinaryOp::Add)
      if (LV *base = baseOf(bin->rhs()); base && !varying(bin->lhs()))
        affine[&s] = b.CreateAdd(c_.get(bin->lhs()), base);
    if (bin->op() == BinaryOp::Min || bin->op() == BinaryOp::Max)
      noteClamp(*bin);
  } else if (auto *cast = dyn_cast<CastStmt>(&s)) {
    if (LV *base = baseOf(cast->input()); base && !isFloat(cast->to()) &&
                                          cast->to() != ScalarType::I1 &&
                                          cast->from() != ScalarType::I1)
      affine[&s] = b.CreateSExtOrTrunc(base, c_.typeOf(cast->to()));
  }
}

// min(x, u) and max(x, u), x (clamped) lane-affine and u uniform: one
// more bound on x's lanes (at most one on each side is kept).
void Lanes::noteClamp(const BinaryStmt &bin) {
  auto &clamped = state().clampedAffine;
  const auto &affine = state().affineBase;
  for (auto [x, u] : {std::pair(bin.lhs(), bin.rhs()), std::pair(bin.rhs(), bin.lhs())}) {
    if (varying(u))
      continue;
    LaneState::ClampedAffine c;
    if (auto a = affine.find(x); a != affine.end())
      c.base = a->second;
    else if (auto k = clamped.find(x); k != clamped.end())
      c = k->second;
    else
      continue;
    LV *&bound = bin.op() == BinaryOp::Min ? c.hi : c.lo;
    if (bound)
      continue;
    bound = c_.get(u);
    clamped[&bin] = c;
    return;
  }
}

llvm::AllocaInst *Lanes::maskAlloca(const char *name) {
  return c_.entryAlloca(vecOf(c_.b.getInt1Ty()), name);
}

LV *Lanes::loadMask(llvm::AllocaInst *a) {
  return c_.b.CreateLoad(a->getAllocatedType(), a);
}

void Lanes::clearMask(llvm::AllocaInst *a) {
  c_.b.CreateStore(llvm::Constant::getNullValue(a->getAllocatedType()), a);
}

} // namespace qd::codegen
