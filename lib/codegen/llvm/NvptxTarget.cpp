//===- NvptxTarget.cpp - The NVPTX hooks of the LLVM emitter --------------===//
//
// A kernel becomes device entries `void <name>(QdLaunchContext *ctx)` (PTX
// kernels; `ctx` in device memory), launched in KernelLayout::launches
// order:
//
//   qd_serial_<k>  a maximal run of top-level statements and serial tasks,
//                  run by one thread;
//   qd_task_<n>    parallel task n, a grid-stride loop
//                    for (i = begin + global id; i < end; i += ctx->threads)
//                  over a grid of ctx->threads threads.
//
// A top-level value a later entry uses is stored by its entry into
// ctx->values[slot] (8 bytes, as toSlot encodes it) and loaded by every
// later entry that uses it. An entry that finds an error recorded does
// nothing, so the launches after an error are skipped as the CPU's entry
// function stops at it.
//
// Adstacks are interleaved across the T = ctx->threads threads: entry d of
// stack s of thread t is at heap + offsets[s] * T + (d * T + t) * entry
// bytes, its adjoint slot after its primal. Math calls libdevice (linked by
// emitPtx, qd/codegen/llvm/Ptx.h).
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "qd/codegen/llvm/Ptx.h"

#include <fmt/format.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace qd::codegen {
namespace {

/// One device entry: a parallel task, or a run of other top-level
/// statements.
struct Entry {
  ForStmt *task = nullptr;
  std::vector<Stmt *> stmts;
};

class NvptxTarget final : public LlvmTarget {
public:
  void emitEntries(KernelEmitter &emitter) override;
  void emitParallelTask(KernelEmitter &emitter, ForStmt &task) override;
  LV *threadIndex(EmitContext &c) override { return c.fn->thread; }
  std::optional<unsigned> launchWordsAddressSpace() const override { return 4; }
  bool adStackIndexedDepth() const override { return true; }
  LV *devicePointer(llvm::IRBuilderBase &b, LV *p) override {
    // Every pointer the context holds is device (global) memory.
    auto *global = llvm::PointerType::get(b.getContext(), 1);
    return b.CreateAddrSpaceCast(b.CreateAddrSpaceCast(p, global), p->getType());
  }
  unsigned stopCheckInterval() const override { return abi::kDeviceStopCheckInterval; }
  LV *adStackBase(EmitContext &c, unsigned id) override;
  LV *adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned width) override;
  LV *adStackAdjoint(EmitContext &c, const StackRef &stack, LV *primal, unsigned width) override;
  LV *mathCall(EmitContext &c, MathFn fn, ScalarType type, llvm::ArrayRef<LV *> args) override;
  void atomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, LV *ptr, LV *value,
                    llvm::Align align) override {
    c.b.CreateAtomicRMW(op, ptr, value, align, llvm::AtomicOrdering::Monotonic);
  }
  void raiseError(EmitContext &c, unsigned site, llvm::ArrayRef<LV *> data) override {
    c.recordError(site, data);
  }

private:
  /// ctx->threads (T), from the launch words.
  LV *threads(EmitContext &c);
  /// Splits the kernel into entries and gives a ctx->values slot to every
  /// top-level value a later entry uses.
  void planEntries(EmitContext &c);
  /// Starts entry function `name` (the current entry's): the error check,
  /// then the values it loads from ctx->values. `thread`: its thread index
  /// (null: the global thread id).
  void beginEntry(EmitContext &c, FunctionState &state, const std::string &name, LV *thread);

  std::vector<Entry> entries_;
  std::map<const Stmt *, unsigned> entryOf_;
  std::map<const Value *, unsigned> slotOf_;
  /// Per entry: the values it loads, in slot order.
  std::vector<std::vector<const Stmt *>> imports_;
  unsigned current_ = 0;
};

void NvptxTarget::planEntries(EmitContext &c) {
  for (Stmt &s : const_cast<Kernel &>(c.kernel).body()) {
    auto *task = dyn_cast<ForStmt>(&s);
    if (task && task->isParallel())
      entries_.push_back({task, {&s}});
    else if (entries_.empty() || entries_.back().task)
      entries_.push_back({nullptr, {&s}});
    else
      entries_.back().stmts.push_back(&s);
    entryOf_[&s] = static_cast<unsigned>(entries_.size() - 1);
  }
  // Which top-level values each entry uses from earlier entries.
  std::vector<std::set<const Stmt *>> uses(entries_.size());
  auto note = [&](unsigned entry, Stmt &user) {
    for (unsigned i = 0; i < user.numOperands(); ++i) {
      Value *v = user.operand(i);
      auto *def = v ? dyn_cast<Stmt>(v) : nullptr;
      if (def && !def->parentStmt() && !def->isTask() && entryOf_.at(def) < entry)
        uses[entry].insert(def);
    }
  };
  for (unsigned e = 0; e < entries_.size(); ++e)
    for (Stmt *s : entries_[e].stmts) {
      note(e, *s);
      for (unsigned b = 0; b < s->numBlocks(); ++b)
        walk(s->block(b), [&](Stmt &nested) { note(e, nested); });
    }
  std::set<const Stmt *> exported;
  for (const auto &u : uses)
    exported.insert(u.begin(), u.end());
  for (Stmt &s : const_cast<Kernel &>(c.kernel).body())
    if (exported.count(&s))
      slotOf_[&s] = c.layout.numValues++;
  imports_.resize(entries_.size());
  for (unsigned e = 0; e < entries_.size(); ++e) {
    imports_[e].assign(uses[e].begin(), uses[e].end());
    std::sort(imports_[e].begin(), imports_[e].end(),
              [&](const Stmt *x, const Stmt *y) { return slotOf_.at(x) < slotOf_.at(y); });
  }
}

void NvptxTarget::emitEntries(KernelEmitter &e) {
  EmitContext &c = e.context();
  auto machine = nvptxTargetMachine("sm_80"); // the data layout does not depend on it
  if (!machine.ok()) {
    c.error = std::string(machine.status().message());
    return;
  }
  c.module->setTargetTriple(kNvptxTriple);
  c.module->setDataLayout((*machine)->createDataLayout());
  planEntries(c);
  unsigned serials = 0;
  for (current_ = 0; current_ < entries_.size(); ++current_) {
    const Entry &entry = entries_[current_];
    if (entry.task) {
      e.emitTopLevel(*entry.task);
      continue;
    }
    std::string name = fmt::format("qd_serial_{}", serials++);
    c.layout.launches.push_back({KernelLayout::Launch::Serial, name, -1});
    FunctionState state;
    beginEntry(c, state, name, c.b.getInt32(0));
    for (Stmt *s : entry.stmts) {
      e.emitTopLevel(*s);
      if (auto slot = slotOf_.find(s); slot != slotOf_.end())
        c.b.CreateStore(c.toSlot(c.get(s)), c.b.CreateGEP(c.i64, c.ctxField(CtxField::values),
                                                          c.b.getInt64(slot->second)));
    }
    c.b.CreateRetVoid();
    c.fn = nullptr;
  }
}

void NvptxTarget::beginEntry(EmitContext &c, FunctionState &state, const std::string &name,
                             LV *thread) {
  llvm::IRBuilder<> &b = c.b;
  auto *type = llvm::FunctionType::get(b.getVoidTy(), {c.ptrTy}, false);
  llvm::Function *fn =
      llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, c.module.get());
  fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
  fn->addParamAttr(0, llvm::Attribute::NoAlias);
  llvm::Metadata *kernelMd[] = {llvm::ValueAsMetadata::get(fn),
                                llvm::MDString::get(c.llvm, "kernel"),
                                llvm::ValueAsMetadata::get(b.getInt32(1))};
  c.module->getOrInsertNamedMetadata("nvvm.annotations")
      ->addOperand(llvm::MDNode::get(c.llvm, kernelMd));
  c.beginFunction(state, fn, fn->getArg(0), thread);
  if (!thread) {
    llvm::IRBuilder<> eb = c.entryBuilder();
    auto sreg = [&](llvm::Intrinsic::ID id) { return eb.CreateCall(c.intrinsic(id, {}), {}); };
    LV *block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    LV *size = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    LV *lane = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    state.thread = eb.CreateAdd(eb.CreateMul(block, size), lane, "thread");
  }
  // A launch after an error does nothing.
  LV *record = c.ctxField(CtxField::error);
  LV *site = b.CreateLoad(
      c.i32, b.CreateStructGEP(c.errorTy, record, unsigned(abi::ErrorRecordField::site)));
  BasicBlock *skip = c.newBlock("after.error");
  BasicBlock *run = c.newBlock("run");
  b.CreateCondBr(b.CreateICmpNE(site, b.getInt32(0)), skip, run, c.unlikelyFirst());
  b.SetInsertPoint(skip);
  b.CreateRetVoid();
  b.SetInsertPoint(run);
  for (const Stmt *v : imports_[current_]) {
    LV *raw = b.CreateLoad(
        c.i64, b.CreateGEP(c.i64, c.ctxField(CtxField::values), b.getInt64(slotOf_.at(v))));
    c.set(v, c.fromSlot(raw, v->type().element()));
  }
}

void NvptxTarget::emitParallelTask(KernelEmitter &e, ForStmt &task) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  int index = static_cast<int>(c.layout.tasks.size());
  std::string name = fmt::format("qd_task_{}", index);
  c.layout.launches.push_back({KernelLayout::Launch::Parallel, name, index});
  FunctionState state;
  beginEntry(c, state, name, nullptr);
  TaskVectorPlan plan = planTaskVectorization(task);
  state.taskPlan = &plan; // its private atomics
  state.parallelTask = index;
  bool band = task.numDims() > 1;
  c.layout.tasks.push_back(
      {&task, 1, c.opts.vectorWidth > 1 ? "the nvptx target runs one iteration per thread" : "",
       band ? KernelLayout::TaskBound() : KernelEmitter::taskBound(task.begin()),
       band ? KernelLayout::TaskBound() : KernelEmitter::taskBound(task.end())});
  // A band's iterations are numbered row-major: consecutive threads take
  // consecutive innermost indices.
  std::optional<KernelEmitter::BandShape> shape;
  LV *inner = nullptr; // a band's row length (at least 1: a divisor)
  if (band) {
    shape = e.bandShape(task);
    inner = b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, shape->extent.back(), b.getInt64(1));
  }
  LV *begin = band ? b.getInt64(0) : b.CreateSExt(c.boundValue(task.begin()), c.i64);
  LV *end = band ? shape->count : b.CreateSExt(c.boundValue(task.end()), c.i64);
  LV *first = b.CreateAdd(begin, b.CreateZExt(state.thread, c.i64));
  e.control().countedLoop(
      first, end, c.i64, &task,
      [&](LV *i) {
        if (band) {
          e.setBandRow(task, *shape, b.CreateUDiv(i, inner));
          e.setBandInner(task, *shape, b.CreateURem(i, inner));
        } else {
          c.set(&task, b.CreateTrunc(i, c.i32));
        }
        e.emitBlock(task.body());
      },
      threads(c));
  b.CreateRetVoid();
  c.fn = nullptr;
}

LV *NvptxTarget::threads(EmitContext &c) {
  if (LV *word = c.launchWord({KernelLayout::LaunchWord::Threads, 0}))
    return word;
  return c.ctxField(CtxField::threads);
}

LV *NvptxTarget::adStackBase(EmitContext &c, unsigned id) {
  int64_t entryBytes = c.layout.stacks.at(id).entryBytes;
  llvm::IRBuilder<> eb = c.entryBuilder();
  // A global-space pointer, so that every address derived from it (the
  // stack's top, end and last row) is one too, with no generic copy kept
  // alive for the overflow path's pointer difference.
  auto *global = llvm::PointerType::get(c.llvm, 1);
  LV *region; // heap + offsets[id] * T
  if (LV *word = c.launchWord({KernelLayout::LaunchWord::StackBase, id})) {
    region = eb.CreateIntToPtr(word, global);
  } else {
    LV *offsets = c.ctxField(CtxField::offsets), *heap = c.ctxField(CtxField::heap);
    LV *offset = eb.CreateLoad(c.i64, eb.CreateGEP(c.i64, offsets, eb.getInt64(id)));
    region = eb.CreateGEP(eb.getInt8Ty(), eb.CreateAddrSpaceCast(heap, global),
                          eb.CreateMul(offset, threads(c)));
  }
  LV *mine = eb.CreateMul(eb.CreateZExt(threadIndex(c), c.i64), eb.getInt64(entryBytes));
  return eb.CreateGEP(eb.getInt8Ty(), region, mine);
}

LV *NvptxTarget::adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned) {
  if (LV *word = c.launchWord({KernelLayout::LaunchWord::RowBytes, stack.id}))
    return word;
  LV *t = threads(c);
  return c.entryBuilder().CreateMul(t, c.b.getInt64(stack.entryBytes));
}

LV *NvptxTarget::adStackAdjoint(EmitContext &c, const StackRef &stack, LV *primal, unsigned) {
  return c.b.CreateGEP(c.b.getInt8Ty(), primal, c.b.getInt64(storageBytes(stack.elem)));
}

LV *NvptxTarget::mathCall(EmitContext &c, MathFn fn, ScalarType type, llvm::ArrayRef<LV *> args) {
  const char *base = mathFnName(fn);
  std::string symbol = fmt::format("__nv_{}{}", base, type == ScalarType::F32 ? "f" : "");
  llvm::Type *t = c.typeOf(type);
  std::vector<llvm::Type *> params(args.size(), t);
  llvm::FunctionCallee f =
      c.module->getOrInsertFunction(symbol, llvm::FunctionType::get(t, params, false));
  return c.b.CreateCall(f, args);
}

} // namespace

std::unique_ptr<LlvmTarget> createNvptxTarget() {
  return std::make_unique<NvptxTarget>();
}

} // namespace qd::codegen
