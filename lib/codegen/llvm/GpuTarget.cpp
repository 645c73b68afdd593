//===- GpuTarget.cpp - What GPU targets share in the LLVM emitter ---------===//
//
// Entries, grid-stride tasks, ctx->values slots and the interleaved adstack
// heap of the GPU targets (GpuTarget.h).
//
//===----------------------------------------------------------------------===//
#include "GpuTarget.h"

#include "qd/abi/DeviceEntries.h"
#include "qd/analysis/TaskVarying.h"
#include "qd/ir/Casting.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <bit>
#include <optional>

namespace qd::codegen {
void GpuTarget::planEntries(EmitContext &c) {
  DeviceEntryPlan plan = planDeviceEntries(const_cast<Kernel &>(c.kernel));
  for (DeviceEntryPlan::Entry &e : plan.entries)
    entries_.push_back({e.task, std::move(e.stmts)});
  slotOf_ = std::move(plan.slotOf);
  c.layout.numValues = plan.numValues;
  imports_ = std::move(plan.imports);
  recomputes_ = std::move(plan.recomputes);
  // Stacks get their ids as they are emitted; a compacted heap's table
  // is indexed by the kernel's count of them from the start.
  numStacks_ = 0;
  walk(const_cast<Kernel &>(c.kernel), [&](Stmt &s) { numStacks_ += isa<AdStackAllocaStmt>(s); });
}

void GpuTarget::emitEntries(KernelEmitter &e) {
  EmitContext &c = e.context();
  if (std::string bad = prepareModule(c); !bad.empty()) {
    c.error = bad;
    return;
  }
  planEntries(c);
  unsigned serials = 0;
  for (current_ = 0; current_ < entries_.size(); ++current_) {
    const Entry &entry = entries_[current_];
    if (entry.task) {
      e.emitTopLevel(*entry.task);
      continue;
    }
    std::string name = fmt::format("qd_serial_{}", serials++);
    c.layout.launches.push_back({KernelLayout::Launch::Serial, name, -1, "", 0});
    FunctionState state;
    beginEntry(e, state, name, c.b.getInt32(0));
    for (Stmt *s : entry.stmts) {
      e.emitTopLevel(*s);
      if (auto slot = slotOf_.find(s); slot != slotOf_.end())
        c.b.CreateStore(c.toSlot(c.get(s)), c.b.CreateGEP(c.i64, c.ctxField(CtxField::values),
                                                          c.b.getInt64(slot->second)));
    }
    c.b.CreateRetVoid();
    e.finishFunction();
    c.fn = nullptr;
  }
  if (c.layout.stacks.size() != numStacks_ && c.error.empty())
    c.error = fmt::format("codegen: kernel @{} has {} adstacks, but {} were emitted",
                          c.kernel.name(), numStacks_, c.layout.stacks.size());
  if (c.opts.fusedEntry && c.error.empty())
    emitFusedEntry(c);
}

// A kernel of small tasks spends most of its time between them: each
// launch waits for the one before it to finish and pays for starting its
// grid. The fused entry calls a copy of each entry in order, with a group
// barrier between (which also makes the earlier entries' global writes
// visible to the group); a serial entry runs on the group's first thread.
// Each copy runs as its entry would on a grid of one group: the threads
// stride over the task's iterations by ctx->threads, the group's size. A
// copy that finds an error recorded returns at once, as its entry would.
// Not for adstacks (the heap is laid out for the launch's grid) nor for a
// cooperative task, which wants a group per iteration: one group running
// its iterations in turn made mass_spring's gradient step 1.2x (small) to
// 6.6x (large) slower on an H200. A task with a cooperative form as well is
// called in its one-iteration-per-thread form, and the runtime fuses only
// a launch that chose none.
void GpuTarget::emitFusedEntry(EmitContext &c) {
  const KernelLayout &layout = c.layout;
  if (layout.launches.size() < 2 || !layout.stacks.empty())
    return;
  for (const KernelLayout::Launch &l : layout.launches)
    if (l.kind == KernelLayout::Launch::Parallel && layout.tasks.at(l.task).cooperative)
      return;
  std::vector<llvm::Function *> parts;
  for (const KernelLayout::Launch &l : layout.launches) {
    llvm::Function *entry = c.module->getFunction(l.function);
    if (!entry)
      return;
    llvm::ValueToValueMapTy copied;
    llvm::Function *part = llvm::CloneFunction(entry, copied);
    part->setName(l.function + ".part");
    part->setLinkage(llvm::GlobalValue::InternalLinkage);
    part->setCallingConv(llvm::CallingConv::C);
    part->addFnAttr(llvm::Attribute::Convergent);
    parts.push_back(part);
  }
  llvm::Function *fused = declareEntry(c, "qd_fused");
  llvm::IRBuilder<> &b = c.b;
  b.SetInsertPoint(llvm::BasicBlock::Create(c.llvm, "entry", fused));
  LV *first = b.CreateICmpEQ(groupIds(c, b).lane, b.getInt32(0));
  for (size_t i = 0; i < parts.size(); ++i) {
    if (layout.launches[i].kind == KernelLayout::Launch::Serial) {
      llvm::BasicBlock *run = llvm::BasicBlock::Create(c.llvm, "serial", fused);
      llvm::BasicBlock *ran = llvm::BasicBlock::Create(c.llvm, "serial.done", fused);
      b.CreateCondBr(first, run, ran);
      b.SetInsertPoint(run);
      b.CreateCall(parts[i], {fused->getArg(0)});
      b.CreateBr(ran);
      b.SetInsertPoint(ran);
    } else {
      b.CreateCall(parts[i], {fused->getArg(0)});
    }
    groupBarrier(c);
  }
  b.CreateRetVoid();
  c.layout.fusedFunction = fused->getName().str();
}

void GpuTarget::beginEntry(KernelEmitter &e, FunctionState &state, const std::string &name,
                           LV *thread) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  llvm::Function *fn = declareEntry(c, name);
  c.beginFunction(state, fn, nullptr, thread);
  llvm::IRBuilder<> eb = c.entryBuilder();
  state.ctxArg = contextArgument(eb, fn);
  if (!thread) {
    GroupIds ids = groupIds(c, eb);
    state.thread = eb.CreateAdd(eb.CreateMul(ids.group, ids.size), ids.lane, "thread");
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
  for (Stmt *v : recomputes_[current_])
    e.emitTopLevel(*v);
}

void GpuTarget::beginTask(KernelEmitter &e, ForStmt &task, FunctionState &state,
                          TaskVectorPlan &plan, const std::string *alternative) {
  EmitContext &c = e.context();
  int index = static_cast<int>(c.layout.tasks.size());
  std::string name = fmt::format("qd_task_{}", index);
  if (alternative) { // the task's second form: its launch exists already
    index = c.layout.launches.back().task;
    name = *alternative;
  } else {
    c.layout.launches.push_back({KernelLayout::Launch::Parallel, name, index, "", 0});
  }
  beginEntry(e, state, name, nullptr);
  plan = e.planTask(task);
  state.taskPlan = &plan;
  state.parallelTask = index;
}

void GpuTarget::emitParallelTask(KernelEmitter &e, ForStmt &task) {
  EmitContext &c = e.context();
  CooperativeTaskPlan coop = planCooperative(c, task);
  bool literal = task.begin().isConstant() && task.end().isConstant();
  if (coop.cooperative() && literal)
    return emitCooperativeTask(e, task, coop, false);
  llvm::IRBuilder<> &b = c.b;
  FunctionState state;
  TaskVectorPlan plan;
  beginTask(e, task, state, plan); // private atomics (no near ones: all threads run at once)
  // A compacted heap over a budget runs its threads in windows, a dispatch
  // each (docs/runtime.md, "Windows"): this dispatch's threads start at
  // the window's first.
  if (taskHasHeapAdStack(task, c.opts.localAdStackEntries)) {
    LV *offset = c.launchWord({KernelLayout::LaunchWord::ThreadOffset, 0});
    if (!offset)
      offset = c.ctxField(CtxField::threadOffset);
    llvm::IRBuilder<> eb = c.entryBuilder();
    // (Both below 2^31: no wrap, and the widened index stays a sum.)
    state.thread = eb.CreateAdd(state.thread, eb.CreateTrunc(offset, state.thread->getType()),
                                "thread.in.launch", /*HasNUW=*/true, /*HasNSW=*/true);
  }
  std::unordered_set<const Value *> varying = taskVaryingValues(task);
  state.taskVarying = &varying;
  bool band = task.numDims() > 1;
  c.layout.tasks.push_back(
      {&task, 1,
       c.opts.vectorWidth > 1
           ? fmt::format("the {} target runs one iteration per thread", targetName())
           : "",
       band ? KernelLayout::TaskBound() : KernelEmitter::taskBound(task.begin()),
       band ? KernelLayout::TaskBound() : KernelEmitter::taskBound(task.end())});
  c.layout.tasks.back().band = bandBoundsOf(task);
  c.layout.tasks.back().loopFree = loopFreeTask(task);
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
  // Threads of the last group past T (a grid the runtime shrank to fit the
  // heap into a budget) have no heap rows: they run no iteration.
  LV *thread = b.CreateZExt(state.thread, c.i64);
  LV *hasRows = b.CreateICmpULT(thread, threads(c));
  LV *mine = b.CreateAdd(begin, thread);
  LV *first = b.CreateSelect(hasRows, mine, end);
  e.control().countedLoop(
      first, end, c.i64, &task,
      [&](LV *i) {
        if (band) {
          e.setBandRow(task, *shape, b.CreateUDiv(i, inner));
          e.setBandInner(task, *shape, b.CreateURem(i, inner));
        } else {
          c.set(&task, b.CreateTrunc(i, c.i32));
        }
        e.emitTaskBody(task);
      },
      threads(c));
  b.CreateRetVoid();
  e.finishFunction();
  c.fn = nullptr;
  // A run-time trip count: the cooperative form too, which the runtime
  // runs when the launch has few iterations.
  if (coop.cooperative())
    emitCooperativeTask(e, task, coop, true);
}

LV *GpuTarget::devicePointer(llvm::IRBuilderBase &b, LV *p) {
  // Cast to the global address space and back, so that address-space
  // inference turns generic loads and stores through `p` into global ones.
  auto *global = llvm::PointerType::get(b.getContext(), 1);
  return b.CreateAddrSpaceCast(b.CreateAddrSpaceCast(p, global), p->getType());
}

LV *GpuTarget::threads(EmitContext &c) {
  if (LV *word = c.launchWord({KernelLayout::LaunchWord::Threads, 0}))
    return word;
  return c.ctxField(CtxField::threads);
}

AdStackFrame *GpuTarget::groupSlot(EmitContext &c, unsigned id) {
  FunctionState &fn = *c.fn;
  if (fn.parallelTask < 0)
    return nullptr;
  AdStackFrame &f = fn.stacks[id];
  if (f.groupStart)
    return &f;
  llvm::IRBuilder<> eb = c.entryBuilder();
  auto *global = llvm::PointerType::get(c.llvm, 1);
  // Word `at` of the table (u32, zero-extended); word 0 of the launch
  // context where there is none.
  auto word = [&](LV *at) {
    LV *index = eb.CreateSelect(fn.adStackGrouped, at, eb.getInt64(0));
    return eb.CreateZExt(eb.CreateLoad(c.i32, eb.CreateGEP(c.i32, fn.adStackTable, index)), c.i64);
  };
  if (!fn.adStackGrouped) {
    LV *table = c.launchWord({KernelLayout::LaunchWord::GroupTable, 0});
    if (!table)
      table = eb.CreatePtrToInt(c.ctxField(CtxField::groupTable), c.i64);
    fn.adStackGrouped = eb.CreateICmpNE(table, eb.getInt64(0), "adstack.grouped");
    fn.adStackTable = eb.CreateSelect(fn.adStackGrouped, eb.CreateIntToPtr(table, global),
                                      eb.CreateAddrSpaceCast(fn.ctxArg, global), "adstack.table");
    // The launch's threads per group, 1 << shift (1-32).
    LV *shift = c.launchWord({KernelLayout::LaunchWord::GroupShift, 0});
    if (!shift)
      shift = c.ctxField(CtxField::groupShift);
    fn.adStackGroupLanes = eb.CreateShl(eb.getInt64(1), shift, "adstack.group.lanes");
    // The group's first entry: after the header, (group * columns),
    // group-major.
    LV *group = eb.CreateLShr(eb.CreateZExt(threadIndex(c), c.i64), shift);
    LV *columns = word(eb.getInt64(0));
    fn.adStackGroupAt = eb.CreateAdd(eb.CreateMul(group, columns),
                                     eb.getInt64(1 + 3 * int64_t(numStacks_)), "adstack.group.at");
  }
  // The stack's column, prefix bytes and column entry bytes (the header),
  // its region's offset and the next one.
  LV *column = word(eb.getInt64(1 + 3 * int64_t(id)));
  LV *prefix = word(eb.getInt64(2 + 3 * int64_t(id)));
  LV *columnBytes = word(eb.getInt64(3 + 3 * int64_t(id)));
  LV *at = eb.CreateAdd(fn.adStackGroupAt, column);
  LV *unit = eb.getInt64(abi::kAdStackGroupTableUnit);
  LV *region = eb.CreateMul(word(at), unit);
  LV *next = eb.CreateMul(word(eb.CreateAdd(at, eb.getInt64(1))), unit);
  LV *lanes = fn.adStackGroupLanes;
  f.groupStart = eb.CreateAdd(region, eb.CreateMul(lanes, prefix));
  // Capacity: the region's bytes over G x E (E at least 1: without a
  // table the words are the context's).
  LV *perLevel = eb.CreateMul(lanes, columnBytes);
  f.groupCapacity =
      eb.CreateUDiv(eb.CreateSub(next, region),
                    eb.CreateBinaryIntrinsic(llvm::Intrinsic::umax, perLevel, eb.getInt64(1)));
  f.groupRow = perLevel;
  return &f;
}

LV *GpuTarget::adStackBase(EmitContext &c, unsigned id) {
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
  LV *thread = eb.CreateZExt(threadIndex(c), c.i64);
  LV *mine = eb.CreateMul(thread, eb.getInt64(entryBytes));
  LV *interleaved = eb.CreateGEP(eb.getInt8Ty(), region, mine);
  AdStackFrame *g = groupSlot(c, id);
  if (!g)
    return interleaved;
  // Compacted: heap + the stack's start in its group's region + lane *
  // entry bytes.
  LV *heap = eb.CreateAddrSpaceCast(c.ctxField(CtxField::heap), global);
  LV *lane = eb.CreateAnd(thread, eb.CreateSub(c.fn->adStackGroupLanes, eb.getInt64(1)));
  LV *start = eb.CreateAdd(g->groupStart, eb.CreateMul(lane, eb.getInt64(entryBytes)));
  LV *compacted = eb.CreateGEP(eb.getInt8Ty(), heap, start);
  return eb.CreateSelect(c.fn->adStackGrouped, compacted, interleaved,
                         fmt::format("adstack{}.base", id));
}

LV *GpuTarget::adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned) {
  LV *row = c.launchWord({KernelLayout::LaunchWord::RowBytes, stack.id});
  llvm::IRBuilder<> eb = c.entryBuilder();
  if (!row)
    row = eb.CreateMul(threads(c), c.b.getInt64(stack.entryBytes));
  AdStackFrame *g = groupSlot(c, stack.id);
  if (!g)
    return row;
  return eb.CreateSelect(c.fn->adStackGrouped, g->groupRow, row,
                         fmt::format("adstack{}.row", stack.id));
}

LV *GpuTarget::adStackCapacity(EmitContext &c, unsigned id, LV *capacity) {
  AdStackFrame *g = groupSlot(c, id);
  if (!g)
    return capacity;
  llvm::IRBuilder<> eb = c.entryBuilder();
  return eb.CreateSelect(c.fn->adStackGrouped, g->groupCapacity, capacity,
                         fmt::format("adstack{}.capacity", id));
}

LV *GpuTarget::adStackAdjoint(EmitContext &c, const StackRef &stack, LV *primal, unsigned) {
  return c.b.CreateGEP(c.b.getInt8Ty(), primal, c.b.getInt64(storageBytes(stack.elem)));
}

LV *GpuTarget::mathCall(EmitContext &c, MathFn fn, ScalarType type, llvm::ArrayRef<LV *> args) {
  llvm::Type *t = c.typeOf(type);
  std::vector<llvm::Type *> params(args.size(), t);
  llvm::FunctionCallee f = c.module->getOrInsertFunction(mathSymbol(fn, type),
                                                         llvm::FunctionType::get(t, params, false));
  return c.b.CreateCall(f, args);
}

void GpuTarget::atomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, LV *ptr, LV *value,
                             llvm::Align align) {
  c.b.CreateAtomicRMW(op, ptr, value, align, llvm::AtomicOrdering::Monotonic, atomicScope(c));
}

} // namespace qd::codegen
