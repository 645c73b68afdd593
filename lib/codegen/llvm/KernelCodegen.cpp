//===- KernelCodegen.cpp - LLVM IR for kernels ----------------------------===//
#include "qd/codegen/llvm/KernelCodegen.h"

#include "qd/analysis/TaskVectorPlan.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <map>
#include <unordered_map>
#include <unordered_set>

namespace qd {

unsigned adStackEntryBytes(const AdStackAllocaStmt &stack) {
  unsigned primal = storageBytes(stack.elementType());
  for (const Use &u : stack.uses())
    if (u.user()->kind() == StmtKind::AdStackLoadTopAdj ||
        u.user()->kind() == StmtKind::AdStackAccAdjoint)
      return 2 * primal;
  return primal;
}

int64_t adStackBytes(unsigned entryBytes, int64_t capacity) {
  return (capacity * entryBytes + 7) / 8 * 8;
}

int64_t adStackBytes(const AdStackAllocaStmt &stack, int64_t capacity) {
  return adStackBytes(adStackEntryBytes(stack), capacity);
}

namespace {

using llvm::BasicBlock;
using LV = llvm::Value;

enum CtxField : unsigned {
  kGlobals,
  kShapes,
  kScalars,
  kHeap,
  kStride,
  kOffsets,
  kCapacities,
  kNeeded,
  kError,
  kErrorData,
  kRuntime,
  kTaskLanes
};

class Emitter {
public:
  Emitter(const Kernel &k, llvm::LLVMContext &c, const CodegenOptions &o, KernelLayout &l)
      : kernel_(k), ctx_(c), opts_(o), layout_(l),
        module_(std::make_unique<llvm::Module>("qd." + k.name(), c)), b_(c) {
    ptrTy_ = llvm::PointerType::getUnqual(c);
    i64_ = b_.getInt64Ty();
    i32_ = b_.getInt32Ty();
    ctxTy_ = llvm::StructType::create(c,
                                      {ptrTy_, ptrTy_, ptrTy_, ptrTy_, i64_, ptrTy_, ptrTy_, ptrTy_,
                                       ptrTy_, ptrTy_, ptrTy_, ptrTy_},
                                      "QdLaunchContext");
  }

  absl::StatusOr<std::unique_ptr<llvm::Module>> run() {
    // Layout of arguments' shapes.
    layout_.shapeOffset.assign(kernel_.numArguments(), 0);
    for (unsigned i = 0; i < kernel_.numArguments(); ++i)
      if (kernel_.argument(i)->isNdarray()) {
        layout_.shapeOffset[i] = layout_.numShapes;
        layout_.numShapes += kernel_.argument(i)->type().ndim();
      }
    auto *mainTy = llvm::FunctionType::get(b_.getVoidTy(), {ptrTy_}, false);
    llvm::Function *mainFn =
        llvm::Function::Create(mainTy, llvm::Function::ExternalLinkage, "qd_kernel", module_.get());
    beginFunction(mainFn, mainFn->getArg(0), b_.getInt32(0));
    for (Stmt &s : const_cast<Kernel &>(kernel_).body()) {
      if (s.isTask()) {
        currentTask_ = &s;
        if (auto *loop = dyn_cast<ForStmt>(&s))
          emitParallelTask(*loop);
        else
          emitBlock(s.block(0));
        currentTask_ = nullptr;
      } else {
        emitStmt(s);
      }
    }
    b_.CreateRetVoid();
    if (!error_.empty())
      return absl::InternalError(error_);
    std::string text;
    llvm::raw_string_ostream os(text);
    if (llvm::verifyModule(*module_, &os))
      return absl::InternalError("codegen produced invalid LLVM IR: " + os.str());
    return std::move(module_);
  }

private:
  //===--- helpers ---------------------------------------------------------===//

  llvm::Type *typeOf(ScalarType t) {
    switch (t) {
    case ScalarType::I1:
      return b_.getInt1Ty();
    case ScalarType::I32:
      return i32_;
    case ScalarType::I64:
      return i64_;
    case ScalarType::F32:
      return b_.getFloatTy();
    case ScalarType::F64:
      return b_.getDoubleTy();
    }
    return i32_;
  }
  /// In-memory type (i1 is a byte).
  llvm::Type *memTypeOf(ScalarType t) { return t == ScalarType::I1 ? b_.getInt8Ty() : typeOf(t); }

  LV *toMem(LV *v, ScalarType t) {
    return t == ScalarType::I1 ? b_.CreateZExt(v, shaped(b_.getInt8Ty(), v)) : v;
  }
  LV *fromMem(LV *v, ScalarType t) {
    return t == ScalarType::I1 ? b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType())) : v;
  }

  //===--- lanes (vectorised tasks) -----------------------------------------===//

  bool vectorMode() const { return lanes_ > 1; }
  /// Whether `v` has one value per lane (always false outside vector mode).
  bool varying(const Value *v) const { return vectorMode() && plan_->isVarying(v); }
  llvm::Type *vecOf(llvm::Type *t) { return llvm::FixedVectorType::get(t, lanes_); }
  /// `t`, or a vector of `t` when `like` is a vector.
  llvm::Type *shaped(llvm::Type *t, LV *like) {
    if (auto *v = llvm::dyn_cast<llvm::VectorType>(like->getType()))
      return llvm::VectorType::get(t, v->getElementCount());
    return t;
  }
  LV *splat(LV *v) { return v->getType()->isVectorTy() ? v : b_.CreateVectorSplat(lanes_, v); }
  /// The value of `v`, as a vector when `asVector`.
  LV *operand(const Value *v, bool asVector) { return asVector ? splat(get(v)) : get(v); }
  LV *allLanes() { return llvm::ConstantInt::getTrue(vecOf(b_.getInt1Ty())); }
  LV *laneMask() { return mask_ ? mask_ : allLanes(); }
  /// <0, 1, ..., lanes - 1> of type `t`.
  LV *laneIds(llvm::Type *t) {
    std::vector<llvm::Constant *> ids;
    for (unsigned l = 0; l < lanes_; ++l)
      ids.push_back(llvm::ConstantInt::get(t, l));
    return llvm::ConstantVector::get(ids);
  }
  /// Whether some active lane has `cond` set (a scalar condition is the
  /// same in every lane, and some lane is always active).
  LV *anyLane(LV *cond) {
    if (!cond->getType()->isVectorTy())
      return cond;
    // Inactive lanes may hold poison (a shift by too much): freeze first.
    cond = b_.CreateFreeze(cond);
    if (mask_)
      cond = b_.CreateAnd(cond, mask_);
    return b_.CreateOrReduce(cond);
  }
  /// Lane `l` of `v` (`v` itself when uniform).
  LV *lane(LV *v, unsigned l) {
    return v->getType()->isVectorTy() ? b_.CreateExtractElement(v, b_.getInt64(l)) : v;
  }
  /// Calls the scalar `fn` once per lane.
  LV *perLane(llvm::FunctionCallee fn, llvm::ArrayRef<LV *> args) {
    LV *r = llvm::PoisonValue::get(vecOf(fn.getFunctionType()->getReturnType()));
    for (unsigned l = 0; l < lanes_; ++l) {
      std::vector<LV *> a;
      for (LV *x : args)
        a.push_back(lane(x, l));
      r = b_.CreateInsertElement(r, b_.CreateCall(fn, a), b_.getInt64(l));
    }
    return r;
  }
  /// Runs `body(l)` for every active lane `l` (a branch per lane under a
  /// partial mask).
  template <typename Body> void forEachActiveLane(Body &&body) {
    for (unsigned l = 0; l < lanes_; ++l) {
      if (!mask_) {
        body(l);
        continue;
      }
      BasicBlock *on = BasicBlock::Create(ctx_, "lane.on", fn_);
      BasicBlock *next = BasicBlock::Create(ctx_, "lane.next", fn_);
      b_.CreateCondBr(lane(mask_, l), on, next);
      b_.SetInsertPoint(on);
      body(l);
      b_.CreateBr(next);
      b_.SetInsertPoint(next);
    }
  }
  /// Stores `v` to local `slot`, only in the active lanes of a vector local
  /// unless statement `s` may write them all (TaskVectorPlan).
  void storeLocal(LV *slot, LV *v, const Stmt *s = nullptr) {
    llvm::Type *t = llvm::cast<llvm::AllocaInst>(slot)->getAllocatedType();
    if (t->isVectorTy()) {
      v = splat(v);
      if (mask_ && !(s && plan_->storesAllLanes(s)))
        v = b_.CreateSelect(mask_, v, b_.CreateLoad(t, slot));
    }
    b_.CreateStore(v, slot);
  }

  void beginFunction(llvm::Function *fn, LV *ctx, LV *worker) {
    fn_ = fn;
    entry_ = BasicBlock::Create(ctx_, "entry", fn);
    BasicBlock *body = BasicBlock::Create(ctx_, "body", fn);
    b_.SetInsertPoint(entry_);
    b_.CreateBr(body);
    b_.SetInsertPoint(body);
    ctxArg_ = ctx;
    worker_ = worker;
    ctxCache_.clear();
    stackCache_.clear();
    shapeCache_.clear();
    slotCache_.clear();
  }

  /// An alloca in the function's entry block. Vector allocas start at zero:
  /// masked stores keep the inactive lanes' old value, which must not be
  /// undefined.
  llvm::AllocaInst *entryAlloca(llvm::Type *t, const char *name = "") {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    llvm::AllocaInst *a = eb.CreateAlloca(t, nullptr, name);
    if (t->isVectorTy()) {
      eb.SetInsertPoint(entry_->getTerminator());
      eb.CreateStore(llvm::Constant::getNullValue(t), a);
    }
    return a;
  }

  /// A field of the launch context, loaded once in the entry block (the
  /// context does not change during a launch).
  LV *ctxField(CtxField f) {
    LV *&cached = ctxCache_[f];
    if (!cached) {
      llvm::IRBuilder<> eb(entry_->getTerminator());
      cached = eb.CreateLoad(f == kStride ? static_cast<llvm::Type *>(i64_) : ptrTy_,
                             eb.CreateStructGEP(ctxTy_, ctxArg_, f));
    }
    return cached;
  }

  LV *get(const Value *v) {
    auto it = values_.find(v);
    if (it != values_.end())
      return it->second;
    if (auto *a = dyn_cast<Argument>(v)) {
      // Scalar arguments are read from ctx->scalars.
      LV *slot = b_.CreateGEP(i64_, ctxField(kScalars), b_.getInt64(a->index()));
      LV *raw = b_.CreateLoad(i64_, slot);
      ScalarType t = a->type().element();
      if (isFloat(t)) {
        if (t == ScalarType::F32)
          return b_.CreateBitCast(b_.CreateTrunc(raw, i32_), b_.getFloatTy());
        return b_.CreateBitCast(raw, b_.getDoubleTy());
      }
      return t == ScalarType::I64 ? raw : b_.CreateTrunc(raw, typeOf(t));
    }
    error_ = "codegen: no value for an operand";
    return llvm::UndefValue::get(i32_);
  }

  unsigned site(const Stmt &s, std::string what) {
    layout_.sites.push_back({&s, std::move(what)});
    return static_cast<unsigned>(layout_.sites.size());
  }

  /// Records error site `id` (the first one wins); the winner also writes
  /// `data` (at most kMaxErrorData values, as i64) to the error data.
  void raise(unsigned id, llvm::ArrayRef<LV *> data = {}) {
    LV *cx = b_.CreateAtomicCmpXchg(ctxField(kError), b_.getInt32(0), b_.getInt32(id),
                                    llvm::MaybeAlign(4), llvm::AtomicOrdering::Monotonic,
                                    llvm::AtomicOrdering::Monotonic);
    if (data.empty())
      return;
    BasicBlock *won = BasicBlock::Create(ctx_, "error.data", fn_);
    BasicBlock *done = BasicBlock::Create(ctx_, "error.done", fn_);
    b_.CreateCondBr(b_.CreateExtractValue(cx, 1), won, done);
    b_.SetInsertPoint(won);
    LV *out = ctxField(kErrorData);
    for (size_t i = 0; i < data.size() && i < kMaxErrorData; ++i)
      b_.CreateStore(data[i], b_.CreateGEP(i64_, out, b_.getInt64(i)));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  /// if (cond) { raise(id, data); return; }. The launch fails with the
  /// first error raised, so the rest of this function's work (the serial
  /// kernel, or the task's current chunk) is skipped, as the interpreter
  /// stops at its first error; code after the check may rely on `!cond`.
  void raiseIf(LV *cond, unsigned id, llvm::ArrayRef<LV *> data = {}) {
    BasicBlock *bad = BasicBlock::Create(ctx_, "error", fn_);
    BasicBlock *ok = BasicBlock::Create(ctx_, "ok", fn_);
    b_.CreateCondBr(cond, bad, ok, unlikelyFirst());
    b_.SetInsertPoint(bad);
    raise(id, data);
    b_.CreateRetVoid();
    b_.SetInsertPoint(ok);
  }
  llvm::MDNode *unlikelyFirst() { return llvm::MDBuilder(ctx_).createBranchWeights(1, 1 << 20); }
  llvm::MDNode *unlikelySecond() { return llvm::MDBuilder(ctx_).createBranchWeights(1 << 20, 1); }

  llvm::Function *intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Type *> types) {
    return llvm::Intrinsic::getDeclaration(module_.get(), id, types);
  }
  llvm::FunctionCallee libm(const std::string &name, llvm::Type *t, unsigned arity) {
    std::vector<llvm::Type *> params(arity, t);
    return module_->getOrInsertFunction(name, llvm::FunctionType::get(t, params, false));
  }
  static std::string libmName(const char *base, ScalarType t) {
    return t == ScalarType::F32 ? std::string(base) + "f" : std::string(base);
  }

  /// glibc's libmvec variant of a vector sin/cos/exp/log (x86-64 AVX2:
  /// 8 floats, or 4 doubles twice), or null.
  LV *vectorMath(llvm::Intrinsic::ID id, ScalarType t, LV *x) {
    if (!opts_.libmvec || lanes_ != 8)
      return nullptr;
    const char *base = id == llvm::Intrinsic::sin   ? "sin"
                       : id == llvm::Intrinsic::cos ? "cos"
                       : id == llvm::Intrinsic::exp ? "exp"
                       : id == llvm::Intrinsic::log ? "log"
                                                    : nullptr;
    if (!base)
      return nullptr;
    auto callee = [&](const std::string &name, llvm::Type *vt) {
      llvm::FunctionCallee f =
          module_->getOrInsertFunction(name, llvm::FunctionType::get(vt, {vt}, false));
      if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
        fn->setDoesNotAccessMemory();
        fn->setDoesNotThrow();
        fn->addFnAttr(llvm::Attribute::WillReturn);
      }
      return f;
    };
    if (t == ScalarType::F32)
      return b_.CreateCall(callee(fmt::format("_ZGVdN8v_{}f", base), x->getType()), {x});
    llvm::FunctionCallee f =
        callee(fmt::format("_ZGVdN4v_{}", base), llvm::FixedVectorType::get(b_.getDoubleTy(), 4));
    LV *lo = b_.CreateCall(f, {b_.CreateShuffleVector(x, {0, 1, 2, 3})});
    LV *hi = b_.CreateCall(f, {b_.CreateShuffleVector(x, {4, 5, 6, 7})});
    return b_.CreateShuffleVector(lo, hi, {0, 1, 2, 3, 4, 5, 6, 7});
  }

  /// Records `s` as lane-affine (lane l holds base + l) when it adds a
  /// uniform value to, or converts, a lane-affine integer: accesses at such
  /// an index in the last dimension are contiguous.
  void noteLaneAffine(const Stmt &s) {
    if (!vectorMode())
      return;
    auto baseOf = [&](const Value *v) -> LV * {
      auto it = laneBase_.find(v);
      return it == laneBase_.end() ? nullptr : it->second;
    };
    if (auto *bin = dyn_cast<BinaryStmt>(&s)) {
      if (isFloat(bin->type().element()))
        return;
      if (bin->op() == BinaryOp::Add || bin->op() == BinaryOp::Sub)
        if (LV *b = baseOf(bin->lhs()); b && !varying(bin->rhs()))
          laneBase_[&s] = bin->op() == BinaryOp::Add ? b_.CreateAdd(b, get(bin->rhs()))
                                                     : b_.CreateSub(b, get(bin->rhs()));
      if (bin->op() == BinaryOp::Add)
        if (LV *b = baseOf(bin->rhs()); b && !varying(bin->lhs()))
          laneBase_[&s] = b_.CreateAdd(get(bin->lhs()), b);
    } else if (auto *c = dyn_cast<CastStmt>(&s)) {
      if (LV *b = baseOf(c->input());
          b && !isFloat(c->to()) && c->to() != ScalarType::I1 && c->from() != ScalarType::I1)
        laneBase_[&s] = b_.CreateSExtOrTrunc(b, typeOf(c->to()));
    }
  }

  //===--- blocks and statements ------------------------------------------===//

  void emitBlock(Block &block) {
    for (Stmt &s : block) {
      emitStmt(s);
      if (b_.GetInsertBlock()->getTerminator())
        return; // after break/continue (always the last statement)
    }
  }

  void emitStmt(Stmt &s) {
    switch (s.kind()) {
    case StmtKind::Const: {
      auto &c = cast<ConstStmt>(s);
      llvm::Type *t = typeOf(c.scalarType());
      values_[&s] = isFloat(c.scalarType()) ? llvm::ConstantFP::get(t, c.floatValue())
                                            : llvm::ConstantInt::get(t, c.intValue(), true);
      return;
    }
    case StmtKind::Binary:
      values_[&s] = binary(cast<BinaryStmt>(s));
      return;
    case StmtKind::Unary:
      values_[&s] = unary(cast<UnaryStmt>(s));
      return;
    case StmtKind::Cmp:
      values_[&s] = compare(cast<CmpStmt>(s));
      return;
    case StmtKind::Select: {
      auto &sel = cast<SelectStmt>(s);
      bool vec = varying(&s); // a uniform condition may pick between vectors
      values_[&s] = b_.CreateSelect(get(sel.cond()), operand(sel.trueValue(), vec),
                                    operand(sel.falseValue(), vec));
      return;
    }
    case StmtKind::Cast:
      values_[&s] = castValue(cast<CastStmt>(s));
      return;
    case StmtKind::Alloca: {
      auto &a = cast<AllocaStmt>(s);
      llvm::Type *t = typeOf(a.elementType());
      llvm::AllocaInst *slot = entryAlloca(varying(&s) ? vecOf(t) : t);
      storeLocal(slot, llvm::Constant::getNullValue(t), &s);
      values_[&s] = slot;
      return;
    }
    case StmtKind::LocalLoad: {
      auto &ld = cast<LocalLoadStmt>(s);
      LV *slot = get(ld.local());
      values_[&s] = b_.CreateLoad(llvm::cast<llvm::AllocaInst>(slot)->getAllocatedType(), slot);
      return;
    }
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(s);
      storeLocal(get(st.local()), get(st.value()), &s);
      return;
    }
    case StmtKind::GlobalLoad:
    case StmtKind::GlobalStore:
    case StmtKind::AtomicAdd:
      globalAccess(cast<GlobalAccessStmt>(s));
      return;
    case StmtKind::Shape: {
      auto &sh = cast<ShapeStmt>(s);
      LV *extent = ndShape(cast<Argument>(sh.ndarray()), sh.axis());
      values_[&s] = b_.CreateTrunc(extent, typeOf(sh.type().element()));
      return;
    }
    case StmtKind::For:
      forLoop(cast<ForStmt>(s));
      return;
    case StmtKind::While:
      whileLoop(cast<WhileStmt>(s));
      return;
    case StmtKind::If:
      ifStmt(cast<IfStmt>(s));
      return;
    case StmtKind::Break:
    case StmtKind::Continue:
      jump(s);
      return;
    case StmtKind::Serial:
      emitBlock(s.block(0));
      return;
    case StmtKind::AdStackAlloca:
    case StmtKind::AdStackPush:
    case StmtKind::AdStackPop:
    case StmtKind::AdStackLoadTop:
    case StmtKind::AdStackLoadTopAdj:
    case StmtKind::AdStackAccAdjoint:
      adstack(s);
      return;
    }
  }

  //===--- arithmetic --------------------------------------------------------===//

  LV *binary(BinaryStmt &s) {
    ScalarType t = s.type().element();
    bool vec = varying(&s);
    LV *x = operand(s.lhs(), vec), *y = operand(s.rhs(), vec);
    llvm::Type *ty = x->getType();
    noteLaneAffine(s);
    if (isFloat(t)) {
      switch (s.op()) {
      case BinaryOp::Add:
        return b_.CreateFAdd(x, y);
      case BinaryOp::Sub:
        return b_.CreateFSub(x, y);
      case BinaryOp::Mul:
        return b_.CreateFMul(x, y);
      case BinaryOp::Div:
        return b_.CreateFDiv(x, y);
      case BinaryOp::Rem:
        return b_.CreateFRem(x, y);
      case BinaryOp::Min:
      case BinaryOp::Max:
        return floatMinMax(x, y, t, s.op() == BinaryOp::Min);
      case BinaryOp::Pow:
        return b_.CreateCall(intrinsic(llvm::Intrinsic::pow, {ty}), {x, y});
      case BinaryOp::Atan2: {
        llvm::FunctionCallee f = libm(libmName("atan2", t), typeOf(t), 2);
        return vec ? perLane(f, {x, y}) : b_.CreateCall(f, {x, y});
      }
      default:
        break;
      }
      return x;
    }
    bool isBool = t == ScalarType::I1;
    switch (s.op()) {
    case BinaryOp::Add:
      return b_.CreateAdd(x, y);
    case BinaryOp::Sub:
      return b_.CreateSub(x, y);
    case BinaryOp::Mul:
      return b_.CreateMul(x, y);
    case BinaryOp::Div:
    case BinaryOp::Rem: {
      bool div = s.op() == BinaryOp::Div;
      LV *zero = llvm::ConstantInt::get(ty, 0);
      if (vec) // an inactive lane's poison must not reach the divisor
        y = b_.CreateFreeze(y);
      raiseIf(anyLane(b_.CreateICmpEQ(y, zero)), site(s, "integer division by zero"));
      // INT_MIN / -1 wraps: x * -1 = -x, remainder 0.
      if (isBool) {
        LV *one = llvm::ConstantInt::get(ty, 1);
        return div ? b_.CreateUDiv(x, one) : zero; // y is 1 in every checked lane
      }
      // Inactive lanes of a vectorised task skip the check above: divide
      // them by 1 instead of 0.
      LV *minusOne = b_.CreateICmpEQ(y, llvm::ConstantInt::get(ty, -1, true));
      LV *safe = b_.CreateSelect(b_.CreateOr(minusOne, b_.CreateICmpEQ(y, zero)),
                                 llvm::ConstantInt::get(ty, 1), y);
      LV *q = div ? b_.CreateSDiv(x, safe) : b_.CreateSRem(x, safe);
      return b_.CreateSelect(minusOne, div ? b_.CreateSub(zero, x) : zero, q);
    }
    case BinaryOp::Min:
      return b_.CreateBinaryIntrinsic(isBool ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, x, y);
    case BinaryOp::Max:
      return b_.CreateBinaryIntrinsic(isBool ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, x, y);
    case BinaryOp::And:
      return b_.CreateAnd(x, y);
    case BinaryOp::Or:
      return b_.CreateOr(x, y);
    case BinaryOp::Xor:
      return b_.CreateXor(x, y);
    case BinaryOp::Shl:
    case BinaryOp::Shr: {
      unsigned width = bitWidth(t);
      LV *bad = isBool ? b_.CreateICmpNE(y, llvm::ConstantInt::get(ty, 0))
                       : b_.CreateICmpUGE(y, llvm::ConstantInt::get(ty, width));
      raiseIf(anyLane(bad), site(s, fmt::format("shift amount is outside [0, {})", width)));
      return s.op() == BinaryOp::Shl ? b_.CreateShl(x, y)
                                     : (isBool ? b_.CreateLShr(x, y) : b_.CreateAShr(x, y));
    }
    default:
      return x;
    }
  }

  /// min/max where NaN loses to a number and -0 < +0.
  LV *floatMinMax(LV *x, LV *y, ScalarType t, bool isMin) {
    llvm::Type *ty = x->getType();
    llvm::Type *ity = shaped(t == ScalarType::F32 ? static_cast<llvm::Type *>(i32_) : i64_, x);
    LV *xNan = b_.CreateFCmpUNO(x, x);
    LV *yNan = b_.CreateFCmpUNO(y, y);
    LV *xFirst = isMin ? b_.CreateFCmpOLT(x, y) : b_.CreateFCmpOGT(x, y);
    LV *yFirst = isMin ? b_.CreateFCmpOLT(y, x) : b_.CreateFCmpOGT(y, x);
    // Equal (or both zero): combine sign bits; min keeps a set sign, max a clear one.
    LV *xi = b_.CreateBitCast(x, ity), *yi = b_.CreateBitCast(y, ity);
    LV *same = b_.CreateBitCast(isMin ? b_.CreateOr(xi, yi) : b_.CreateAnd(xi, yi), ty);
    LV *r = b_.CreateSelect(yFirst, y, same);
    r = b_.CreateSelect(xFirst, x, r);
    r = b_.CreateSelect(yNan, x, r);
    return b_.CreateSelect(xNan, y, r);
  }

  LV *unary(UnaryStmt &s) {
    ScalarType t = s.type().element();
    bool vec = varying(&s);
    LV *x = operand(s.input(), vec);
    llvm::Type *ty = x->getType();
    auto call1 = [&](llvm::Intrinsic::ID id) -> LV * {
      if (vec)
        if (LV *v = vectorMath(id, t, x))
          return v;
      return b_.CreateCall(intrinsic(id, {ty}), {x});
    };
    auto libm1 = [&](const char *name) -> LV * {
      llvm::FunctionCallee f = libm(libmName(name, t), typeOf(t), 1);
      return vec ? perLane(f, {x}) : b_.CreateCall(f, {x});
    };
    if (isFloat(t)) {
      switch (s.op()) {
      case UnaryOp::Neg:
        return b_.CreateFNeg(x);
      case UnaryOp::Abs:
        return call1(llvm::Intrinsic::fabs);
      case UnaryOp::Sin:
        return call1(llvm::Intrinsic::sin);
      case UnaryOp::Cos:
        return call1(llvm::Intrinsic::cos);
      case UnaryOp::Exp:
        return call1(llvm::Intrinsic::exp);
      case UnaryOp::Log:
        return call1(llvm::Intrinsic::log);
      case UnaryOp::Sqrt:
        return call1(llvm::Intrinsic::sqrt);
      case UnaryOp::Floor:
        return call1(llvm::Intrinsic::floor);
      case UnaryOp::Ceil:
        return call1(llvm::Intrinsic::ceil);
      case UnaryOp::Tan:
        return libm1("tan");
      case UnaryOp::Tanh:
        return libm1("tanh");
      case UnaryOp::Not:
        return x;
      }
    }
    switch (s.op()) {
    case UnaryOp::Neg:
      return b_.CreateSub(llvm::ConstantInt::get(ty, 0), x);
    case UnaryOp::Abs:
      if (t == ScalarType::I1)
        return x;
      return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
    case UnaryOp::Not:
      return b_.CreateNot(x);
    default:
      return x;
    }
  }

  LV *compare(CmpStmt &s) {
    bool vec = varying(&s);
    LV *x = operand(s.lhs(), vec), *y = operand(s.rhs(), vec);
    ScalarType t = s.operandType();
    using P = llvm::CmpInst::Predicate;
    P p;
    if (isFloat(t)) {
      static const P preds[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT,
                                P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
      p = preds[static_cast<int>(s.predicate())];
      return b_.CreateFCmp(p, x, y);
    }
    bool u = t == ScalarType::I1;
    static const P signedPreds[] = {P::ICMP_EQ,  P::ICMP_NE,  P::ICMP_SLT,
                                    P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
    static const P unsignedPreds[] = {P::ICMP_EQ,  P::ICMP_NE,  P::ICMP_ULT,
                                      P::ICMP_ULE, P::ICMP_UGT, P::ICMP_UGE};
    p = (u ? unsignedPreds : signedPreds)[static_cast<int>(s.predicate())];
    return b_.CreateICmp(p, x, y);
  }

  LV *castValue(CastStmt &s) {
    LV *x = get(s.input()); // varying exactly when the input is
    ScalarType from = s.from(), to = s.to();
    llvm::Type *ty = shaped(typeOf(to), x);
    noteLaneAffine(s);
    if (from == to)
      return x;
    if (to == ScalarType::I1) // "not zero"
      return isFloat(from) ? b_.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0))
                           : b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
    if (isFloat(from) && isFloat(to))
      return b_.CreateFPCast(x, ty);
    if (isFloat(from)) // truncate, saturate, NaN -> 0
      return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {ty, x->getType()}, {x});
    if (isFloat(to))
      return from == ScalarType::I1 ? b_.CreateUIToFP(x, ty) : b_.CreateSIToFP(x, ty);
    if (from == ScalarType::I1)
      return b_.CreateZExt(x, ty);
    return b_.CreateSExtOrTrunc(x, ty);
  }

  //===--- globals ---------------------------------------------------------===//

  unsigned slotOf(const GlobalAccessStmt &g) {
    const Field *f = g.isField() ? g.field() : nullptr;
    const Argument *a = g.isField() ? nullptr : cast<Argument>(g.ndarray());
    for (unsigned i = 0; i < layout_.slots.size(); ++i) {
      const auto &s = layout_.slots[i];
      if (s.field == f && s.ndarray == a && s.component == g.component())
        return i;
    }
    layout_.slots.push_back({f, a, g.component()});
    return static_cast<unsigned>(layout_.slots.size() - 1);
  }

  /// ndarray extents and global base pointers are loaded once per function
  /// in the entry block: stores to global data could otherwise alias them,
  /// and LLVM would reload them in every iteration.
  LV *ndShape(const Argument *a, unsigned axis) {
    unsigned off = layout_.shapeOffset[a->index()] + axis;
    LV *&cached = shapeCache_[off];
    if (!cached) {
      LV *shapes = ctxField(kShapes);
      llvm::IRBuilder<> eb(entry_->getTerminator());
      cached = eb.CreateLoad(i64_, eb.CreateGEP(i64_, shapes, eb.getInt64(off)));
    }
    return cached;
  }
  LV *slotBase(unsigned slot) {
    LV *&cached = slotCache_[slot];
    if (!cached) {
      LV *globals = ctxField(kGlobals);
      llvm::IRBuilder<> eb(entry_->getTerminator());
      cached = eb.CreateLoad(ptrTy_, eb.CreateGEP(ptrTy_, globals, eb.getInt64(slot)));
    }
    return cached;
  }

  /// The extents of the global `g` accesses (i64).
  std::vector<LV *> extentsOf(const GlobalAccessStmt &g) {
    std::vector<LV *> extents;
    if (g.isField())
      for (int64_t e : g.field()->shape())
        extents.push_back(b_.getInt64(e));
    else
      for (unsigned d = 0; d < g.numIndices(); ++d)
        extents.push_back(ndShape(cast<Argument>(g.ndarray()), d));
    return extents;
  }

  void globalAccess(GlobalAccessStmt &g) {
    // In a vectorised task every lane stores and adds for itself; a load at
    // a uniform index serves all lanes.
    if (vectorMode() && (g.kind() != StmtKind::GlobalLoad || varying(&g)))
      return globalAccessLanes(g);
    ScalarType elem = g.elementType();
    llvm::Type *mem = memTypeOf(elem);
    // Extents and the row-major flat index.
    std::vector<LV *> extents = extentsOf(g);
    LV *flat = b_.getInt64(0);
    LV *bad = b_.getFalse();
    std::vector<LV *> indices;
    for (unsigned d = 0; d < g.numIndices(); ++d) {
      LV *idx = b_.CreateSExt(get(g.index(d)), i64_);
      indices.push_back(idx);
      if (opts_.boundsChecked)
        bad = b_.CreateOr(bad, b_.CreateICmpUGE(idx, extents[d])); // negative is huge unsigned
      flat = b_.CreateAdd(b_.CreateMul(flat, extents[d]), idx);
    }
    LV *base = slotBase(slotOf(g));
    if (opts_.boundsChecked && g.numIndices() > 0) {
      unsigned id = site(g, "index out of range");
      layout_.sites.back().indexCheck = true;
      raiseIf(bad, id, indices);
    }
    LV *ptr = b_.CreateGEP(mem, base, flat);
    if (g.kind() == StmtKind::GlobalLoad) {
      values_[&g] = fromMem(b_.CreateLoad(mem, ptr), elem);
    } else if (auto *st = dyn_cast<GlobalStoreStmt>(&g)) {
      b_.CreateStore(toMem(get(st->value()), elem), ptr);
    } else {
      LV *v = toMem(get(cast<AtomicAddStmt>(g).value()), elem);
      if (taskPlan_ && taskPlan_->isPrivateAtomic(&g)) // no other iteration touches it
        b_.CreateStore(addOf(b_.CreateLoad(mem, ptr), v, elem), ptr);
      else
        b_.CreateAtomicRMW(atomicAddOp(elem), ptr, v, llvm::MaybeAlign(storageBytes(elem)),
                           llvm::AtomicOrdering::Monotonic);
    }
  }

  /// `atomic_add` of `elem` values (in memory form): float add, i1 xor,
  /// wrapping integer add.
  static llvm::AtomicRMWInst::BinOp atomicAddOp(ScalarType elem) {
    return isFloat(elem)            ? llvm::AtomicRMWInst::FAdd
           : elem == ScalarType::I1 ? llvm::AtomicRMWInst::Xor
                                    : llvm::AtomicRMWInst::Add;
  }
  LV *addOf(LV *x, LV *y, ScalarType elem) {
    return isFloat(elem)            ? b_.CreateFAdd(x, y)
           : elem == ScalarType::I1 ? b_.CreateXor(x, y)
                                    : b_.CreateAdd(x, y);
  }

  /// A global access with per-lane indices or values, in the active lanes.
  void globalAccessLanes(GlobalAccessStmt &g) {
    ScalarType elem = g.elementType();
    llvm::Type *mem = memTypeOf(elem);
    llvm::Type *memVec = vecOf(mem);
    llvm::Align align(storageBytes(elem));
    unsigned n = g.numIndices();
    std::vector<LV *> extents = extentsOf(g), indices;
    LV *bad = b_.getFalse();
    for (unsigned d = 0; d < n; ++d) {
      LV *idx = get(g.index(d));
      idx = b_.CreateSExt(idx, shaped(i64_, idx));
      indices.push_back(idx);
      if (opts_.boundsChecked) {
        LV *out =
            b_.CreateICmpUGE(idx, idx->getType()->isVectorTy() ? splat(extents[d]) : extents[d]);
        bad = out->getType()->isVectorTy() || bad->getType()->isVectorTy()
                  ? b_.CreateOr(splat(bad), splat(out))
                  : b_.CreateOr(bad, out);
      }
    }
    if (opts_.boundsChecked && n > 0) {
      unsigned id = site(g, "index out of range");
      layout_.sites.back().indexCheck = true;
      std::vector<LV *> data = indices;
      if (bad->getType()->isVectorTy()) { // the indices of the first failing lane
        LV *badLanes = mask_ ? b_.CreateAnd(bad, mask_) : bad;
        LV *bits = b_.CreateBitCast(badLanes, b_.getIntNTy(lanes_));
        LV *first = b_.CreateZExt(
            b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, bits, b_.getTrue()), i64_);
        for (LV *&d : data)
          if (d->getType()->isVectorTy())
            d = b_.CreateExtractElement(d, first);
      }
      raiseIf(anyLane(bad), id, data);
    }
    LV *base = slotBase(slotOf(g));
    // Contiguous: uniform indices, then base + lane in the last dimension.
    auto affine = n > 0 ? laneBase_.find(g.index(n - 1)) : laneBase_.end();
    bool contiguous = affine != laneBase_.end();
    for (unsigned d = 0; d + 1 < n && contiguous; ++d)
      contiguous = !indices[d]->getType()->isVectorTy();
    LV *ptr = nullptr;  // contiguous: lane 0's element; else uniform: the element
    LV *ptrs = nullptr; // per lane
    if (contiguous)
      indices[n - 1] = b_.CreateSExt(affine->second, i64_);
    LV *flat = b_.getInt64(0);
    for (unsigned d = 0; d < n; ++d) {
      LV *ext = extents[d], *idx = indices[d];
      if (idx->getType()->isVectorTy() || flat->getType()->isVectorTy()) {
        flat = b_.CreateAdd(b_.CreateMul(splat(flat), splat(ext)), splat(idx));
      } else {
        flat = b_.CreateAdd(b_.CreateMul(flat, ext), idx);
      }
    }
    if (flat->getType()->isVectorTy())
      ptrs = b_.CreateGEP(mem, base, flat);
    else
      ptr = b_.CreateGEP(mem, base, flat);
    if (auto *st = dyn_cast<AtomicAddStmt>(&g); st && plan_->isPrivateAtomic(st)) {
      // No other iteration touches the element: read, add, write.
      if (!contiguous && !ptrs)
        ptrs = splat(ptr);
      LV *zero = llvm::Constant::getNullValue(memVec);
      LV *mask = laneMask();
      LV *old = contiguous ? b_.CreateMaskedLoad(memVec, ptr, align, mask, zero)
                           : b_.CreateMaskedGather(memVec, ptrs, align, mask, zero);
      LV *sum = addOf(old, toMem(splat(get(st->value())), elem), elem);
      if (contiguous)
        b_.CreateMaskedStore(sum, ptr, align, mask);
      else
        b_.CreateMaskedScatter(sum, ptrs, align, mask);
      return;
    }
    if (auto *st = dyn_cast<AtomicAddStmt>(&g)) {
      LV *v = toMem(get(st->value()), elem);
      forEachActiveLane([&](unsigned l) {
        LV *p = ptrs ? lane(ptrs, l) : contiguous ? b_.CreateConstGEP1_64(mem, ptr, l) : ptr;
        b_.CreateAtomicRMW(atomicAddOp(elem), p, lane(v, l), align,
                           llvm::AtomicOrdering::Monotonic);
      });
      return;
    }
    if (!contiguous && !ptrs) // a uniform element in every lane
      ptrs = splat(ptr);
    if (g.kind() == StmtKind::GlobalLoad) {
      LV *zero = llvm::Constant::getNullValue(memVec);
      LV *v = nullptr;
      if (!contiguous)
        v = b_.CreateMaskedGather(memVec, ptrs, align, laneMask(), zero);
      else if (mask_)
        v = b_.CreateMaskedLoad(memVec, ptr, align, mask_, zero);
      else
        v = b_.CreateAlignedLoad(memVec, ptr, align);
      values_[&g] = fromMem(v, elem);
      return;
    }
    LV *v = toMem(splat(get(cast<GlobalStoreStmt>(g).value())), elem);
    if (contiguous && !mask_)
      b_.CreateAlignedStore(v, ptr, align);
    else if (contiguous)
      b_.CreateMaskedStore(v, ptr, align, mask_);
    else
      b_.CreateMaskedScatter(v, ptrs, align, laneMask());
  }

  //===--- control flow ----------------------------------------------------===//

  LV *boundValue(Bound bd) {
    return bd.isConstant() ? b_.getInt32(static_cast<int32_t>(bd.constant)) : get(bd.value);
  }

  /// for i in [begin, end) with `body(i)`, i += step; continue goes to the
  /// latch. `loop` is the statement that breaks and continues leave.
  template <typename Body>
  void countedLoop(LV *begin, LV *end, llvm::Type *ty, const Stmt *loop, Body &&body,
                   uint64_t step = 1) {
    llvm::AllocaInst *counter = entryAlloca(ty, "i");
    b_.CreateStore(begin, counter);
    BasicBlock *header = BasicBlock::Create(ctx_, "for.header", fn_);
    BasicBlock *bodyBB = BasicBlock::Create(ctx_, "for.body", fn_);
    BasicBlock *latch = BasicBlock::Create(ctx_, "for.latch", fn_);
    BasicBlock *exit = BasicBlock::Create(ctx_, "for.exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    LV *i = b_.CreateLoad(ty, counter);
    b_.CreateCondBr(b_.CreateICmpSLT(i, end), bodyBB, exit);
    b_.SetInsertPoint(bodyBB);
    loops_.emplace_back(latch, exit);
    loopStmts_.push_back(loop);
    body(i);
    loopStmts_.pop_back();
    loops_.pop_back();
    if (!b_.GetInsertBlock()->getTerminator())
      b_.CreateBr(latch);
    b_.SetInsertPoint(latch);
    LV *next = b_.CreateAdd(b_.CreateLoad(ty, counter), llvm::ConstantInt::get(ty, step));
    b_.CreateStore(next, counter);
    b_.CreateBr(header)->setMetadata(llvm::LLVMContext::MD_loop, noRuntimeUnroll());
    b_.SetInsertPoint(exit);
  }

  /// Loop metadata that turns off runtime unrolling (a loop whose trip
  /// count is known only at run time; constant trip counts still unroll).
  /// Gradient kernels are full of short loops with data-dependent trip
  /// counts (the reversed inner loops of a nest run 0 to 15 times in
  /// benchmark (b)): unrolled by 2, each gets a remainder check that
  /// mispredicts, and every mispredict throws away the independent cosf
  /// calls in flight. Off, (b)'s gradient went from 1.47x the hand-written
  /// loop to about 1.1x (docs/performance.md).
  llvm::MDNode *noRuntimeUnroll() {
    llvm::MDNode *off =
        llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.runtime.disable")});
    llvm::MDNode *loop = llvm::MDNode::getDistinct(ctx_, {nullptr, off});
    loop->replaceOperandWith(0, loop); // a loop ID refers to itself
    return loop;
  }

  void forLoop(ForStmt &loop) {
    if (vectorMode() && plan_->isMaskedLoop(&loop))
      return maskedLoop(loop);
    countedLoop(boundValue(loop.begin()), boundValue(loop.end()), i32_, &loop, [&](LV *i) {
      values_[&loop] = i;
      emitBlock(loop.body());
    });
  }

  void whileLoop(WhileStmt &w) {
    if (vectorMode() && plan_->isMaskedLoop(&w))
      return maskedLoop(w);
    BasicBlock *header = BasicBlock::Create(ctx_, "while.body", fn_);
    BasicBlock *exit = BasicBlock::Create(ctx_, "while.exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    loops_.emplace_back(header, exit);
    loopStmts_.push_back(&w);
    emitBlock(w.body());
    loopStmts_.pop_back();
    loops_.pop_back();
    if (!b_.GetInsertBlock()->getTerminator())
      b_.CreateBr(header);
    b_.SetInsertPoint(exit);
  }

  /// Lane state of a loop that lanes leave at different times: the lanes
  /// that broke out, and those that broke or continued in this iteration.
  struct LaneLoop {
    llvm::AllocaInst *exited = nullptr, *skipped = nullptr;
  };
  llvm::AllocaInst *maskAlloca(const char *name) {
    return entryAlloca(vecOf(b_.getInt1Ty()), name);
  }
  LV *loadMask(llvm::AllocaInst *a) { return b_.CreateLoad(a->getAllocatedType(), a); }
  void clearMask(llvm::AllocaInst *a) {
    b_.CreateStore(llvm::Constant::getNullValue(a->getAllocatedType()), a);
  }

  /// A for or while loop whose lanes leave at different times (per-lane
  /// bounds, or a break/continue only some lanes take): it runs while some
  /// lane is active, under the mask of the active lanes.
  void maskedLoop(Stmt &loop) {
    LV *entryMask = mask_;
    auto *forLoop = dyn_cast<ForStmt>(&loop);
    LaneLoop lanes{maskAlloca("exited"), maskAlloca("skipped")};
    clearMask(lanes.exited);
    llvm::AllocaInst *counter = nullptr;
    LV *end = nullptr;
    if (forLoop) {
      LV *begin = boundValue(forLoop->begin());
      end = boundValue(forLoop->end());
      counter = entryAlloca(begin->getType(), "i"); // a vector when lanes start apart
      b_.CreateStore(begin, counter);
    }
    BasicBlock *header = BasicBlock::Create(ctx_, "lanes.header", fn_);
    BasicBlock *bodyBB = BasicBlock::Create(ctx_, "lanes.body", fn_);
    BasicBlock *latch = BasicBlock::Create(ctx_, "lanes.latch", fn_);
    BasicBlock *exit = BasicBlock::Create(ctx_, "lanes.exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    LV *active =
        b_.CreateAnd(entryMask ? entryMask : allLanes(), b_.CreateNot(loadMask(lanes.exited)));
    LV *i = nullptr;
    if (forLoop) {
      i = b_.CreateLoad(counter->getAllocatedType(), counter);
      LV *inRange = i->getType()->isVectorTy() || end->getType()->isVectorTy()
                        ? b_.CreateICmpSLT(splat(i), splat(end))
                        : b_.CreateICmpSLT(i, end);
      active = b_.CreateAnd(active, splat(b_.CreateFreeze(inRange)));
    }
    b_.CreateCondBr(b_.CreateOrReduce(active), bodyBB, exit);
    b_.SetInsertPoint(bodyBB);
    clearMask(lanes.skipped);
    mask_ = active;
    if (forLoop)
      values_[&loop] = i;
    laneLoops_[&loop] = lanes;
    loops_.emplace_back(forLoop ? latch : header, exit);
    loopStmts_.push_back(&loop);
    emitBlock(loop.block(0));
    loopStmts_.pop_back();
    loops_.pop_back();
    laneLoops_.erase(&loop);
    if (!b_.GetInsertBlock()->getTerminator())
      b_.CreateBr(latch);
    b_.SetInsertPoint(latch);
    if (forLoop) {
      LV *cur = b_.CreateLoad(counter->getAllocatedType(), counter);
      b_.CreateStore(b_.CreateAdd(cur, llvm::ConstantInt::get(cur->getType(), 1)), counter);
    }
    b_.CreateBr(header)->setMetadata(llvm::LLVMContext::MD_loop, noRuntimeUnroll());
    b_.SetInsertPoint(exit);
    mask_ = entryMask;
  }

  /// break / continue: a branch, or in a masked loop, the active lanes
  /// leave (break) or skip the rest of the iteration (both).
  void jump(Stmt &s) {
    auto lanes = laneLoops_.find(jumpTarget(s));
    if (lanes == laneLoops_.end()) {
      b_.CreateBr(s.kind() == StmtKind::Break ? loops_.back().second : loops_.back().first);
      return;
    }
    LV *m = laneMask();
    auto add = [&](llvm::AllocaInst *a) { b_.CreateStore(b_.CreateOr(loadMask(a), m), a); };
    add(lanes->second.skipped);
    if (s.kind() == StmtKind::Break)
      add(lanes->second.exited);
  }

  static bool hasJumpOf(IfStmt &i, const Stmt *loop) {
    bool found = false;
    for (Block *b : {&i.thenBlock(), &i.elseBlock()})
      walk(*b, [&](Stmt &s) {
        if ((s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue) &&
            jumpTarget(s) == loop)
          found = true;
      });
    return found;
  }

  void ifStmt(IfStmt &i) {
    LV *cond = get(i.cond());
    LV *entryMask = mask_;
    const Stmt *loop = loopStmts_.empty() ? nullptr : loopStmts_.back();
    auto lanes = loop ? laneLoops_.find(loop) : laneLoops_.end();
    bool jumps = lanes != laneLoops_.end() && hasJumpOf(i, loop);
    if (cond->getType()->isVectorTy()) {
      // Each arm runs under its lanes, and only if it has some.
      cond = b_.CreateFreeze(cond);
      LV *thenMask = entryMask ? b_.CreateAnd(entryMask, cond) : cond;
      LV *elseMask = b_.CreateAnd(entryMask ? entryMask : allLanes(), b_.CreateNot(cond));
      for (int arm = 0; arm < 2; ++arm) {
        LV *m = arm == 0 ? thenMask : elseMask;
        BasicBlock *on = BasicBlock::Create(ctx_, arm == 0 ? "if.then" : "if.else", fn_);
        BasicBlock *next = BasicBlock::Create(ctx_, "if.next", fn_);
        b_.CreateCondBr(b_.CreateOrReduce(m), on, next);
        b_.SetInsertPoint(on);
        mask_ = m;
        laneExits_.emplace_back(next, loops_.size());
        emitBlock(arm == 0 ? i.thenBlock() : i.elseBlock());
        laneExits_.pop_back();
        if (!b_.GetInsertBlock()->getTerminator())
          b_.CreateBr(next);
        b_.SetInsertPoint(next);
      }
      mask_ = entryMask;
    } else {
      BasicBlock *thenBB = BasicBlock::Create(ctx_, "if.then", fn_);
      BasicBlock *elseBB = BasicBlock::Create(ctx_, "if.else", fn_);
      BasicBlock *join = BasicBlock::Create(ctx_, "if.join", fn_);
      b_.CreateCondBr(cond, thenBB, elseBB);
      for (int arm = 0; arm < 2; ++arm) {
        b_.SetInsertPoint(arm == 0 ? thenBB : elseBB);
        mask_ = entryMask; // an arm may narrow it (a nested if with a jump)
        emitBlock(arm == 0 ? i.thenBlock() : i.elseBlock());
        if (!b_.GetInsertBlock()->getTerminator())
          b_.CreateBr(join);
      }
      b_.SetInsertPoint(join);
      mask_ = entryMask;
    }
    if (jumps) {
      // Lanes that broke or continued in an arm sit out the rest of the
      // iteration; with none left, skip to the end of the enclosing arm of
      // a per-lane if (the other lanes go on after it), or else to the next
      // iteration.
      mask_ = b_.CreateAnd(entryMask ? entryMask : allLanes(),
                           b_.CreateNot(loadMask(lanes->second.skipped)));
      BasicBlock *rest = BasicBlock::Create(ctx_, "lanes.rest", fn_);
      BasicBlock *none = !laneExits_.empty() && laneExits_.back().second == loops_.size()
                             ? laneExits_.back().first
                             : loops_.back().first;
      b_.CreateCondBr(b_.CreateOrReduce(mask_), rest, none);
      b_.SetInsertPoint(rest);
    }
  }

  /// Outlines a parallel task and hands it to the runtime.
  void emitParallelTask(ForStmt &task) {
    // Top-level values the task uses.
    std::vector<const Value *> captures;
    std::unordered_set<const Value *> seen;
    walk(task.body(), [&](Stmt &s) {
      for (unsigned i = 0; i < s.numOperands(); ++i) {
        const Value *op = s.operand(i);
        auto *def = dyn_cast<Stmt>(op);
        if (def && !def->parentStmt() && !def->isTask() && values_.count(def) &&
            seen.insert(def).second)
          captures.push_back(def);
      }
    });
    LV *begin = b_.CreateSExt(boundValue(task.begin()), i64_);
    LV *end = b_.CreateSExt(boundValue(task.end()), i64_);
    llvm::AllocaInst *buf =
        entryAlloca(llvm::ArrayType::get(i64_, std::max<size_t>(captures.size(), 1)), "captures");
    for (size_t i = 0; i < captures.size(); ++i)
      b_.CreateStore(toSlot(values_.at(captures[i])),
                     b_.CreateConstGEP2_64(buf->getAllocatedType(), buf, 0, i));
    // The outlined function.
    auto *taskTy =
        llvm::FunctionType::get(b_.getVoidTy(), {ptrTy_, ptrTy_, i64_, i64_, i32_}, false);
    llvm::Function *taskFn =
        llvm::Function::Create(taskTy, llvm::Function::ExternalLinkage,
                               fmt::format("qd_task_{}", taskCount_++), module_.get());
    // Save the caller's state, emit the task, restore.
    auto savedValues = values_;
    llvm::Function *savedFn = fn_;
    BasicBlock *savedEntry = entry_;
    LV *savedCtx = ctxArg_, *savedWorker = worker_;
    auto savedCtxCache = ctxCache_;
    auto savedStackCache = stackCache_;
    auto savedShapeCache = shapeCache_;
    auto savedSlotCache = slotCache_;
    llvm::IRBuilderBase::InsertPoint savedIP = b_.saveIP();

    beginFunction(taskFn, taskFn->getArg(0), taskFn->getArg(4));
    for (size_t i = 0; i < captures.size(); ++i) {
      LV *raw = b_.CreateLoad(i64_, b_.CreateGEP(i64_, taskFn->getArg(1), b_.getInt64(i)));
      values_[captures[i]] = fromSlot(raw, captures[i]->type().element());
    }
    LV *first = taskFn->getArg(2), *last = taskFn->getArg(3);
    // The plan also serves the scalar code (its private atomics).
    TaskVectorPlan plan = planTaskVectorization(task);
    taskPlan_ = &plan;
    taskLanes_ = opts_.vectorWidth > 1 && plan.ok() ? opts_.vectorWidth : 1;
    currentParallelTask_ = static_cast<int>(layout_.tasks.size());
    layout_.tasks.push_back({&task, taskLanes_, opts_.vectorWidth > 1 ? plan.refused : "",
                             taskBound(task.begin()), taskBound(task.end())});
    if (taskLanes_ > 1) {
      // Whole groups of lanes first, then the rest one iteration at a time.
      // The runtime lays out lane entries only for tasks whose chunks hold a
      // group (ctx->taskLanes); the others run scalar code only.
      auto captured = values_;
      LV *allowed = b_.CreateLoad(
          i32_, b_.CreateGEP(i32_, ctxField(kTaskLanes), b_.getInt64(currentParallelTask_)));
      LV *n = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b_.CreateSub(last, first),
                                       b_.getInt64(0));
      n = b_.CreateSelect(b_.CreateICmpSGE(allowed, b_.getInt32(taskLanes_)), n, b_.getInt64(0));
      LV *groups = b_.CreateUDiv(n, b_.getInt64(taskLanes_));
      LV *vectorEnd = b_.CreateAdd(first, b_.CreateMul(groups, b_.getInt64(taskLanes_)));
      lanes_ = taskLanes_;
      plan_ = &plan;
      countedLoop(
          first, vectorEnd, i64_, &task,
          [&](LV *group) {
            LV *base = b_.CreateTrunc(group, i32_);
            values_[&task] = b_.CreateAdd(splat(base), laneIds(i32_));
            laneBase_[&task] = base;
            if (plan.isMaskedLoop(&task)) { // some lanes may continue early
              LaneLoop lanes{maskAlloca("exited"), maskAlloca("skipped")};
              clearMask(lanes.skipped);
              laneLoops_[&task] = lanes;
            }
            emitBlock(task.body());
            laneLoops_.erase(&task);
          },
          taskLanes_);
      lanes_ = 1;
      plan_ = nullptr;
      mask_ = nullptr;
      laneBase_.clear();
      values_ = std::move(captured);
      first = vectorEnd;
    }
    countedLoop(first, last, i64_, &task, [&](LV *i) {
      values_[&task] = b_.CreateTrunc(i, i32_);
      emitBlock(task.body());
    });
    taskLanes_ = 1;
    taskPlan_ = nullptr;
    currentParallelTask_ = -1;
    b_.CreateRetVoid();

    values_ = std::move(savedValues);
    fn_ = savedFn;
    entry_ = savedEntry;
    ctxArg_ = savedCtx;
    worker_ = savedWorker;
    ctxCache_ = std::move(savedCtxCache);
    stackCache_ = std::move(savedStackCache);
    shapeCache_ = std::move(savedShapeCache);
    slotCache_ = std::move(savedSlotCache);
    b_.restoreIP(savedIP);
    llvm::FunctionCallee pf = module_->getOrInsertFunction(
        "qd_rt_parallel_for",
        llvm::FunctionType::get(b_.getVoidTy(), {ptrTy_, ptrTy_, ptrTy_, i64_, i64_}, false));
    b_.CreateCall(pf, {ctxArg_, taskFn, buf, begin, end});
  }

  static KernelLayout::TaskBound taskBound(Bound b) {
    KernelLayout::TaskBound t;
    if (b.isConstant()) {
      t.kind = KernelLayout::TaskBound::Constant;
      t.constant = b.constant;
    } else if (auto *a = dyn_cast<Argument>(b.value)) {
      t.kind = KernelLayout::TaskBound::Argument;
      t.argument = a->index();
    } else if (auto *sh = dyn_cast<ShapeStmt>(b.value)) {
      t.kind = KernelLayout::TaskBound::NdarrayExtent;
      t.argument = cast<Argument>(sh->ndarray())->index();
      t.axis = sh->axis();
    } else if (auto *ld = dyn_cast<GlobalLoadStmt>(b.value); ld && ld->isField()) {
      int64_t flat = 0;
      const auto &shape = ld->field()->shape();
      for (unsigned d = 0; d < ld->numIndices(); ++d) {
        auto *c = dyn_cast<ConstStmt>(ld->index(d));
        if (!c || c->intValue() < 0 || c->intValue() >= shape[d])
          return t;
        flat = flat * shape[d] + c->intValue();
      }
      t.kind = KernelLayout::TaskBound::FieldElement;
      t.field = ld->field();
      t.component = ld->component();
      t.constant = flat;
    }
    return t;
  }

  LV *toSlot(LV *v) {
    llvm::Type *t = v->getType();
    if (t->isFloatTy())
      return b_.CreateZExt(b_.CreateBitCast(v, i32_), i64_);
    if (t->isDoubleTy())
      return b_.CreateBitCast(v, i64_);
    if (t->isIntegerTy(1))
      return b_.CreateZExt(v, i64_);
    return b_.CreateSExtOrTrunc(v, i64_);
  }
  LV *fromSlot(LV *raw, ScalarType t) {
    switch (t) {
    case ScalarType::F32:
      return b_.CreateBitCast(b_.CreateTrunc(raw, i32_), b_.getFloatTy());
    case ScalarType::F64:
      return b_.CreateBitCast(raw, b_.getDoubleTy());
    default:
      return b_.CreateTrunc(raw, typeOf(t));
    }
  }

  //===--- adstacks ----------------------------------------------------------===//

  struct StackRef {
    unsigned id;
    ScalarType elem;
    unsigned entryBytes; // the primal, then (if used) the adjoint
  };

  /// Per-function facts of stack `id`, computed once in the entry block:
  /// its base (heap + worker * stride + offsets[id]), its capacity, the last
  /// index a read may touch (max(capacity - 1, 0)), and its depth. The depth
  /// lives in an entry-block alloca, not in the heap: each worker owns its
  /// stacks, so the count is private, SROA keeps it in a register, and no
  /// store through a heap pointer can clobber it.
  struct StackInfo {
    LV *base = nullptr, *capacity = nullptr, *lastIndex = nullptr;
    llvm::AllocaInst *count = nullptr;
    llvm::AllocaInst *laneCount = nullptr; // per lane (a lane stack), made on demand
  };
  const StackInfo &stackInfo(unsigned id) {
    StackInfo &info = stackCache_[id];
    if (!info.base) {
      LV *offsets = ctxField(kOffsets), *stride = ctxField(kStride), *heap = ctxField(kHeap);
      LV *caps = ctxField(kCapacities);
      llvm::IRBuilder<> eb(entry_->getTerminator());
      LV *offset = eb.CreateLoad(i64_, eb.CreateGEP(i64_, offsets, eb.getInt64(id)));
      LV *perWorker = eb.CreateMul(eb.CreateZExt(worker_, i64_), stride);
      info.base = eb.CreateGEP(eb.getInt8Ty(), heap, eb.CreateAdd(perWorker, offset));
      info.capacity = eb.CreateLoad(i64_, eb.CreateGEP(i64_, caps, eb.getInt64(id)));
      LV *last = eb.CreateSub(info.capacity, eb.getInt64(1));
      info.lastIndex =
          eb.CreateSelect(eb.CreateICmpSLT(last, eb.getInt64(0)), eb.getInt64(0), last);
      info.count = eb.CreateAlloca(i64_, nullptr, fmt::format("adstack{}.count", id));
      eb.CreateStore(eb.getInt64(0), info.count);
    }
    return info;
  }
  /// Address of entry `index` (primal; the adjoint follows it).
  LV *entryAddr(LV *base, LV *index, const StackRef &st) {
    return b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateMul(index, b_.getInt64(st.entryBytes)));
  }

  void adstack(Stmt &s) {
    if (auto *a = dyn_cast<AdStackAllocaStmt>(&s)) {
      // A vectorised task emits its body twice (vector, then the scalar
      // remainder): both share the stack's id and heap slice, whose entries
      // have room for every lane.
      auto known = stacks_.find(a);
      if (known == stacks_.end()) {
        unsigned id = static_cast<unsigned>(layout_.stacks.size());
        unsigned entryBytes = adStackEntryBytes(*a);
        layout_.stacks.push_back({a, currentTask_, entryBytes, currentParallelTask_});
        known = stacks_.emplace(a, StackRef{id, a->elementType(), entryBytes}).first;
      }
      unsigned id = known->second.id;
      if (vectorMode() && plan_->isLaneStack(a))
        storeLocal(laneCount(id), b_.getInt64(0));
      else
        b_.CreateStore(b_.getInt64(0), stackInfo(id).count);
      return;
    }
    if (vectorMode())
      return adstackLanes(cast<AdStackOpStmt>(s));
    auto &op = cast<AdStackOpStmt>(s);
    StackRef st = stacks_.at(op.stack());
    const StackInfo &info = stackInfo(st.id);
    LV *count = b_.CreateLoad(i64_, info.count);
    llvm::Type *mem = memTypeOf(st.elem);
    if (s.kind() == StmtKind::AdStackPush) {
      LV *fits = b_.CreateICmpSLT(count, info.capacity);
      BasicBlock *write = BasicBlock::Create(ctx_, "push.write", fn_);
      BasicBlock *over = BasicBlock::Create(ctx_, "push.overflow", fn_);
      BasicBlock *done = BasicBlock::Create(ctx_, "push.done", fn_);
      b_.CreateCondBr(fits, write, over, unlikelySecond());
      b_.SetInsertPoint(write);
      LV *addr = entryAddr(info.base, count, st);
      b_.CreateStore(toMem(get(cast<AdStackPushStmt>(s).value()), st.elem), addr);
      if (st.entryBytes > storageBytes(st.elem)) // the adjoint slot starts at 0
        b_.CreateStore(llvm::Constant::getNullValue(mem),
                       b_.CreateGEP(b_.getInt8Ty(), addr, b_.getInt64(storageBytes(st.elem))));
      b_.CreateBr(done);
      b_.SetInsertPoint(over);
      // Nothing is written; remember the depth this push asked for.
      raiseNeeded(st.id, b_.CreateAdd(count, b_.getInt64(1)));
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      b_.CreateStore(b_.CreateAdd(count, b_.getInt64(1)), info.count);
      return;
    }
    // pop / load_top / load_top_adj / acc_adjoint need a non-empty stack.
    unsigned underflow =
        site(s, fmt::format("adstack underflow: the adstack declared at {} is empty",
                            cast<Stmt>(op.stack())->loc().str()));
    raiseIf(b_.CreateICmpSLE(count, b_.getInt64(0)), underflow);
    LV *top = b_.CreateSub(count, b_.getInt64(1));
    if (s.kind() == StmtKind::AdStackPop) {
      b_.CreateStore(top, info.count);
      return;
    }
    // After an overflow (reported at the end of the launch) the entries past
    // the capacity were not stored: read the last stored one. The runtime
    // refuses capacity 0, so that entry exists.
    top = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, top, info.lastIndex);
    LV *addr = entryAddr(info.base, top, st);
    LV *adjAddr = b_.CreateGEP(b_.getInt8Ty(), addr, b_.getInt64(storageBytes(st.elem)));
    switch (s.kind()) {
    case StmtKind::AdStackLoadTop:
      values_[&s] = fromMem(b_.CreateLoad(mem, addr), st.elem);
      return;
    case StmtKind::AdStackLoadTopAdj:
      values_[&s] = b_.CreateLoad(mem, adjAddr);
      return;
    case StmtKind::AdStackAccAdjoint: {
      LV *cur = b_.CreateLoad(mem, adjAddr);
      b_.CreateStore(b_.CreateFAdd(cur, get(cast<AdStackAccAdjointStmt>(s).value())), adjAddr);
      return;
    }
    default:
      return;
    }
  }

  llvm::AllocaInst *laneCount(unsigned id) {
    stackInfo(id); // the base and capacity the lane code also reads
    StackInfo &info = stackCache_[id];
    if (!info.laneCount)
      info.laneCount = entryAlloca(vecOf(i64_), "adstack.lanecount");
    return info.laneCount;
  }

  /// Adstack operations of a vectorised task. Entry e of lane l holds its
  /// primal at row e, slot l (row e is lanes x entryBytes bytes: the lanes'
  /// primals, then their adjoints), so with one depth for all lanes an entry
  /// is one vector. A lane stack (operations under a partial mask) keeps a
  /// depth per lane and gathers and scatters.
  void adstackLanes(AdStackOpStmt &op) {
    StackRef st = stacks_.at(op.stack());
    const StackInfo &info = stackInfo(st.id);
    unsigned pb = storageBytes(st.elem);
    llvm::Type *mem = memTypeOf(st.elem), *memVec = vecOf(mem);
    llvm::Align align(pb);
    LV *rowBytes = b_.getInt64(int64_t(st.entryBytes) * lanes_);
    LV *adjOffset = b_.getInt64(int64_t(pb) * lanes_);
    bool hasAdj = st.entryBytes > pb;
    bool perLane = plan_->isLaneStack(op.stack());
    StmtKind kind = op.kind();
    unsigned underflow = 0;
    if (kind != StmtKind::AdStackPush)
      underflow = site(op, fmt::format("adstack underflow: the adstack declared at {} is empty",
                                       cast<Stmt>(op.stack())->loc().str()));
    LV *value = nullptr;
    if (auto *push = dyn_cast<AdStackPushStmt>(&op))
      value = toMem(splat(get(push->value())), st.elem);
    if (auto *acc = dyn_cast<AdStackAccAdjointStmt>(&op))
      value = splat(get(acc->value()));

    if (!perLane) {
      LV *count = b_.CreateLoad(i64_, info.count);
      if (kind == StmtKind::AdStackPush) {
        BasicBlock *write = BasicBlock::Create(ctx_, "push.write", fn_);
        BasicBlock *over = BasicBlock::Create(ctx_, "push.overflow", fn_);
        BasicBlock *done = BasicBlock::Create(ctx_, "push.done", fn_);
        b_.CreateCondBr(b_.CreateICmpSLT(count, info.capacity), write, over, unlikelySecond());
        b_.SetInsertPoint(write);
        LV *row = b_.CreateGEP(b_.getInt8Ty(), info.base, b_.CreateMul(count, rowBytes));
        b_.CreateAlignedStore(value, row, align);
        if (hasAdj)
          b_.CreateAlignedStore(llvm::Constant::getNullValue(memVec),
                                b_.CreateGEP(b_.getInt8Ty(), row, adjOffset), align);
        b_.CreateBr(done);
        b_.SetInsertPoint(over);
        raiseNeeded(st.id, b_.CreateAdd(count, b_.getInt64(1)));
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
        b_.CreateStore(b_.CreateAdd(count, b_.getInt64(1)), info.count);
        return;
      }
      raiseIf(b_.CreateICmpSLE(count, b_.getInt64(0)), underflow);
      LV *top = b_.CreateSub(count, b_.getInt64(1));
      if (kind == StmtKind::AdStackPop) {
        b_.CreateStore(top, info.count);
        return;
      }
      top = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, top, info.lastIndex);
      LV *row = b_.CreateGEP(b_.getInt8Ty(), info.base, b_.CreateMul(top, rowBytes));
      LV *adj = b_.CreateGEP(b_.getInt8Ty(), row, adjOffset);
      if (kind == StmtKind::AdStackLoadTop)
        values_[&op] = fromMem(b_.CreateAlignedLoad(memVec, row, align), st.elem);
      else if (kind == StmtKind::AdStackLoadTopAdj)
        values_[&op] = b_.CreateAlignedLoad(memVec, adj, align);
      else
        b_.CreateAlignedStore(b_.CreateFAdd(b_.CreateAlignedLoad(memVec, adj, align), value), adj,
                              align);
      return;
    }

    llvm::AllocaInst *countSlot = laneCount(st.id);
    LV *count = b_.CreateLoad(countSlot->getAllocatedType(), countSlot);
    LV *m = laneMask();
    LV *activeOnes = b_.CreateZExt(m, count->getType());
    LV *slotOffsets = b_.CreateMul(laneIds(i64_), splat(b_.getInt64(pb)));
    auto primals = [&](LV *index) {
      return b_.CreateGEP(b_.getInt8Ty(), info.base,
                          b_.CreateAdd(b_.CreateMul(index, splat(rowBytes)), slotOffsets));
    };
    auto adjoints = [&](LV *ptrs) { return b_.CreateGEP(b_.getInt8Ty(), ptrs, adjOffset); };
    if (kind == StmtKind::AdStackPush) {
      LV *fits = b_.CreateICmpSLT(count, splat(info.capacity));
      LV *writes = b_.CreateAnd(m, fits);
      LV *ptrs = primals(count);
      b_.CreateMaskedScatter(value, ptrs, align, writes);
      if (hasAdj)
        b_.CreateMaskedScatter(llvm::Constant::getNullValue(memVec), adjoints(ptrs), align, writes);
      LV *over = b_.CreateAnd(m, b_.CreateNot(fits));
      BasicBlock *overBB = BasicBlock::Create(ctx_, "push.overflow", fn_);
      BasicBlock *done = BasicBlock::Create(ctx_, "push.done", fn_);
      b_.CreateCondBr(b_.CreateOrReduce(over), overBB, done, unlikelyFirst());
      b_.SetInsertPoint(overBB);
      LV *asked = b_.CreateSelect(over, b_.CreateAdd(count, activeOnes),
                                  llvm::Constant::getNullValue(count->getType()));
      raiseNeeded(st.id, b_.CreateIntMaxReduce(asked, /*IsSigned=*/true));
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      b_.CreateStore(b_.CreateAdd(count, activeOnes), countSlot);
      return;
    }
    LV *empty = b_.CreateAnd(m, b_.CreateICmpSLE(count, splat(b_.getInt64(0))));
    raiseIf(b_.CreateOrReduce(empty), underflow);
    if (kind == StmtKind::AdStackPop) {
      b_.CreateStore(b_.CreateSub(count, activeOnes), countSlot);
      return;
    }
    // Inactive lanes may be empty: their top (-1, huge unsigned) clamps too.
    LV *top = b_.CreateBinaryIntrinsic(
        llvm::Intrinsic::umin, b_.CreateSub(count, splat(b_.getInt64(1))), splat(info.lastIndex));
    LV *ptrs = primals(top);
    LV *zero = llvm::Constant::getNullValue(memVec);
    if (kind == StmtKind::AdStackLoadTop) {
      values_[&op] = fromMem(b_.CreateMaskedGather(memVec, ptrs, align, m, zero), st.elem);
    } else if (kind == StmtKind::AdStackLoadTopAdj) {
      values_[&op] = b_.CreateMaskedGather(memVec, adjoints(ptrs), align, m, zero);
    } else {
      LV *cur = b_.CreateMaskedGather(memVec, adjoints(ptrs), align, m, zero);
      b_.CreateMaskedScatter(b_.CreateFAdd(cur, value), adjoints(ptrs), align, m);
    }
  }

  /// needed[id] = max(needed[id], depth): the capacity a push asked for.
  void raiseNeeded(unsigned id, LV *depth) {
    b_.CreateAtomicRMW(llvm::AtomicRMWInst::Max,
                       b_.CreateGEP(i64_, ctxField(kNeeded), b_.getInt64(id)), depth,
                       llvm::MaybeAlign(8), llvm::AtomicOrdering::Monotonic);
  }

  const Kernel &kernel_;
  llvm::LLVMContext &ctx_;
  const CodegenOptions &opts_;
  KernelLayout &layout_;
  std::unique_ptr<llvm::Module> module_;
  llvm::IRBuilder<> b_;
  llvm::PointerType *ptrTy_;
  llvm::IntegerType *i64_, *i32_;
  llvm::StructType *ctxTy_;
  llvm::Function *fn_ = nullptr;
  BasicBlock *entry_ = nullptr;
  LV *ctxArg_ = nullptr, *worker_ = nullptr;
  const Stmt *currentTask_ = nullptr;
  unsigned taskCount_ = 0;
  // Vectorised tasks: the lanes of the code being emitted (1: scalar), of
  // the task's stacks, the task's plan, the active lanes (null: all), the
  // lane-affine integers (lane l holds base + l) and the masked loops.
  unsigned lanes_ = 1, taskLanes_ = 1;
  int currentParallelTask_ = -1;
  const TaskVectorPlan *plan_ = nullptr;     // while emitting vector code
  const TaskVectorPlan *taskPlan_ = nullptr; // while emitting a parallel task
  LV *mask_ = nullptr;
  std::unordered_map<const Value *, LV *> laneBase_;
  std::unordered_map<const Stmt *, LaneLoop> laneLoops_;
  std::vector<const Stmt *> loopStmts_; // the statements of loops_
  // Per-lane if arms being emitted: the block after the arm, and the depth
  // of loops_ there.
  std::vector<std::pair<BasicBlock *, size_t>> laneExits_;
  std::unordered_map<const Value *, LV *> values_;
  std::unordered_map<const Value *, StackRef> stacks_;
  std::unordered_map<unsigned, LV *> ctxCache_;
  std::unordered_map<unsigned, StackInfo> stackCache_;
  std::unordered_map<unsigned, LV *> shapeCache_, slotCache_;
  std::vector<std::pair<BasicBlock *, BasicBlock *>> loops_; // (continue, break)
  std::string error_;
};

} // namespace

absl::StatusOr<std::unique_ptr<llvm::Module>> emitKernel(const Kernel &kernel,
                                                         llvm::LLVMContext &context,
                                                         const CodegenOptions &options,
                                                         KernelLayout &layout) {
  layout = KernelLayout();
  return Emitter(kernel, context, options, layout).run();
}

} // namespace qd
