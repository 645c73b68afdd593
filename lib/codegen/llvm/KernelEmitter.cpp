//===- KernelEmitter.cpp - The target-neutral LLVM emitter ----------------===//
#include "KernelEmitter.h"

#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

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
  if (!c_.error.empty())
    return absl::InternalError(c_.error);
  std::string text;
  llvm::raw_string_ostream os(text);
  if (llvm::verifyModule(*c_.module, &os))
    return absl::InternalError("codegen produced invalid LLVM IR: " + os.str());
  return std::move(c_.module);
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

std::vector<const Value *> KernelEmitter::capturesOf(ForStmt &task) {
  std::vector<const Value *> captures;
  std::unordered_set<const Value *> seen;
  walk(task.body(), [&](Stmt &s) {
    for (unsigned i = 0; i < s.numOperands(); ++i) {
      auto *def = dyn_cast<Stmt>(s.operand(i));
      if (def && !def->parentStmt() && !def->isTask() && c_.fn->values.count(def) &&
          seen.insert(def).second)
        captures.push_back(def);
    }
  });
  return captures;
}

KernelLayout::TaskBound KernelEmitter::taskBound(Bound b) {
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

} // namespace qd::codegen
