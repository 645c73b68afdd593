//===- KernelEmitter.cpp - The target-neutral LLVM emitter ----------------===//
#include "KernelEmitter.h"

#include "qd/abi/DeviceEntries.h"
#include "qd/analysis/ElementOwnership.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <unordered_set>

namespace qd::codegen {

KernelEmitter::KernelEmitter(const Kernel &kernel, llvm::LLVMContext &context,
                             const CodegenOptions &options, KernelLayout &layout,
                             LlvmTarget &target)
    : c_(kernel, context, options, layout, target), arith_(c_), memory_(c_), control_(c_, *this),
      adstacks_(c_) {}

absl::StatusOr<std::unique_ptr<llvm::Module>> KernelEmitter::run() {
  const Kernel &kernel = c_.kernel;
  KernelLayout &layout = c_.layout;
  // Layout of the arguments' shapes.
  layout.shapeOffset.assign(kernel.numArguments(), 0);
  for (unsigned i = 0; i < kernel.numArguments(); ++i)
    if (kernel.argument(i)->isNdarray()) {
      layout.shapeOffset[i] = layout.numShapes;
      layout.numShapes += kernel.argument(i)->type().ndim();
    }
  c_.target.emitEntries(*this);
  c_.fn = nullptr;
  c_.finishLaunchWords();
  if (!c_.error.empty())
    return absl::InternalError(c_.error);
  // Every function was verified as it was finished (finishFunction); the
  // module as a whole (its globals, declarations and everything again) only
  // where that is cheap: a second walk of a large module that is no longer
  // in cache cost 6% of compiling a gradient of 375 000 statements.
  constexpr size_t kVerifiedModuleInstructions = 20000;
  if (c_.instructions <= kVerifiedModuleInstructions) {
    std::string text;
    llvm::raw_string_ostream os(text);
    if (llvm::verifyModule(*c_.module, &os))
      return absl::InternalError("codegen produced invalid LLVM IR: " + os.str());
  }
  return std::move(c_.module);
}

void KernelEmitter::finishFunction(bool verify) {
  adstacks_.finishFunction();
  llvm::Function &f = *c_.fn->fn;
  c_.instructions += f.getInstructionCount();
  if (verify)
    verifyFunction(f);
}

void KernelEmitter::verifyFunction(llvm::Function &f) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (c_.error.empty() && llvm::verifyFunction(f, &os))
    c_.error = fmt::format("codegen produced invalid LLVM IR in @{}: {}", f.getName().str(), text);
}

void KernelEmitter::emitTopLevel(Stmt &s) {
  if (!s.isTask()) {
    visit(s);
    return;
  }
  c_.currentTask = &s;
  if (auto *loop = dyn_cast<ForStmt>(&s))
    c_.target.emitParallelTask(*this, *loop);
  else
    emitBlock(s.block(0));
  c_.currentTask = nullptr;
}

void KernelEmitter::emitBlock(Block &block) {
  for (Stmt &s : block) {
    visit(s);
    if (c_.b.GetInsertBlock()->getTerminator())
      return; // after break/continue (always the last statement)
  }
}

void KernelEmitter::emitTaskBody(ForStmt &task) {
  // (A cooperative task emits its body itself, its stores between its
  // barriers: GpuCooperative.cpp.)
  NdarrayAliasing aliasing = ndarrayAliasing(c_.opts.distinctNdarrays);
  forEachInEmissionOrder(task, aliasing, !c_.opts.boundsChecked, [&](Stmt &s) {
    visit(s);
    return !c_.b.GetInsertBlock()->getTerminator(); // after break/continue: the end
  });
}

void KernelEmitter::guarded(Stmt &s, const std::function<void()> &emit) {
  FunctionState *f = c_.fn;
  if (!f || !f->cooperative || !f->cooperative->guarded.count(&s))
    return emit();
  BasicBlock *run = c_.newBlock("leader"), *after = c_.newBlock("leader.after");
  c_.b.CreateCondBr(f->leader, run, after);
  c_.b.SetInsertPoint(run);
  emit();
  if (!c_.b.GetInsertBlock()->getTerminator())
    c_.b.CreateBr(after);
  c_.b.SetInsertPoint(after);
}

TaskVectorPlan KernelEmitter::planTask(const ForStmt &task) const {
  TaskAssumptions assume;
  assume.aliasing = ndarrayAliasing(c_.opts.distinctNdarrays);
  assume.nearIterationsApart = c_.target.keepsNearIterationsApart();
  return planTaskVectorization(task, assume);
}

std::vector<const Value *> KernelEmitter::capturesOf(ForStmt &task, size_t *statements) {
  std::vector<const Value *> captures;
  std::unordered_set<const Value *> seen;
  size_t count = 0;
  auto note = [&](Stmt &s) {
    ++count;
    for (unsigned i = 0; i < s.numOperands(); ++i) {
      auto *def = dyn_cast<Stmt>(s.operand(i));
      if (def && !def->parentStmt() && !def->isTask() && c_.fn->values.count(def) &&
          seen.insert(def).second)
        captures.push_back(def);
    }
  };
  if (task.numDims() > 1) // its task function computes the band's shape
    note(task);
  walk(task.body(), note);
  if (statements)
    *statements = count;
  return captures;
}

KernelEmitter::BandShape KernelEmitter::bandShape(ForStmt &task) {
  llvm::IRBuilder<> &b = c_.b;
  BandShape shape;
  shape.count = b.getInt64(1);
  LV *overflowed = b.getFalse();
  for (unsigned d = 0; d < task.numDims(); ++d) {
    LV *begin = b.CreateSExt(c_.boundValue(task.begin(d)), c_.i64);
    LV *end = b.CreateSExt(c_.boundValue(task.end(d)), c_.i64);
    LV *extent =
        b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b.CreateSub(end, begin), b.getInt64(0));
    shape.begin.push_back(begin);
    shape.extent.push_back(extent);
    // Four extents below 2^32 may pass 2^63; such a band never finishes
    // anyway (a launch timeout stops it), so the count saturates.
    LV *product = b.CreateBinaryIntrinsic(llvm::Intrinsic::umul_with_overflow, shape.count, extent);
    overflowed = b.CreateOr(overflowed, b.CreateExtractValue(product, 1));
    shape.count = b.CreateExtractValue(product, 0);
  }
  shape.count = b.CreateSelect(b.CreateOr(overflowed, b.CreateICmpSLT(shape.count, b.getInt64(0))),
                               b.getInt64(INT64_MAX), shape.count);
  return shape;
}

void KernelEmitter::setBandRow(ForStmt &task, const BandShape &shape, LV *row) {
  llvm::IRBuilder<> &b = c_.b;
  unsigned n = task.numDims();
  for (unsigned d = n - 1; d-- > 0;) {
    LV *index = row;
    if (d > 0) {
      LV *extent = b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, shape.extent[d], b.getInt64(1));
      index = b.CreateURem(row, extent);
      row = b.CreateUDiv(row, extent);
    }
    c_.fn->bandIndex[d] = b.CreateTrunc(b.CreateAdd(shape.begin[d], index), c_.i32);
  }
  c_.set(&task, c_.fn->bandIndex[0]);
}

void KernelEmitter::setBandInner(ForStmt &task, const BandShape &shape, LV *j, bool vector) {
  llvm::IRBuilder<> &b = c_.b;
  unsigned inner = task.numDims() - 1;
  LV *index = b.CreateTrunc(b.CreateAdd(shape.begin[inner], j), c_.i32);
  if (vector) {
    Lanes lanes(c_);
    c_.fn->lanes.bandInnerBase = index;
    index = b.CreateAdd(lanes.splat(index), lanes.laneIds(c_.i32));
  }
  c_.fn->bandIndex[inner] = index;
}

void KernelEmitter::visitTaskIndexStmt(TaskIndexStmt &s) {
  FunctionState &fn = *c_.fn;
  auto *task = cast<ForStmt>(c_.currentTask);
  LV *value = task->numDims() == 1 ? c_.get(task) : fn.bandIndex[s.dim()];
  c_.set(&s, value);
  auto &affine = fn.lanes.affineBase;
  if (task->numDims() == 1) {
    if (auto it = affine.find(task); it != affine.end())
      affine[&s] = it->second;
  } else if (s.dim() + 1 == task->numDims() && fn.lanes.bandInnerBase) {
    affine[&s] = fn.lanes.bandInnerBase;
  }
}

KernelLayout::TaskBound KernelEmitter::taskBound(Bound b) {
  return taskBoundOf(b);
}

} // namespace qd::codegen
