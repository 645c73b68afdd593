//===- CpuTarget.cpp - The host CPU's hooks of the LLVM emitter -----------===//
//
// A parallel task becomes
//
//   void qd_task_<n>(QdLaunchContext *ctx, const int64_t *captures,
//                    int64_t begin, int64_t end, int32_t worker)
//
// which the entry function hands to the runtime's thread pool through
// `qd_rt_parallel_for`; each call runs one chunk [begin, end). With
// CodegenOptions::vectorWidth > 1 a task TaskVectorPlan accepts runs its
// chunk in groups of that many iterations as SIMD lanes, the last group
// with its lanes past the chunk's end inactive from the start (there is no
// scalar copy of the body). Each worker owns a slice of the adstack heap
// (thread-major). Math goes to LLVM intrinsics, libm and libmvec.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"
#include "qd/analysis/ConstantFolding.h"
#include "qd/codegen/llvm/MergeTasks.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <bit>
#include <unordered_set>

namespace qd::codegen {
namespace {

class CpuTarget final : public LlvmTarget {
public:
  void emitEntries(KernelEmitter &emitter) override;
  void emitParallelTask(KernelEmitter &emitter, ForStmt &task) override;
  LV *threadIndex(EmitContext &c) override { return c.fn->thread; }
  bool keepsNearIterationsApart() const override { return true; }
  /// x86-64 has 16 general registers; a task's first 8 stacks keep their
  /// state in them (the benchmark gradients have 1 to 2).
  unsigned registerStackStates() const override { return 8; }
  LV *adStackBase(EmitContext &c, unsigned id) override;
  LV *adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned width) override;
  LV *adStackAdjoint(EmitContext &c, const StackRef &stack, LV *primal, unsigned width) override;
  LV *mathCall(EmitContext &c, MathFn fn, ScalarType type, llvm::ArrayRef<LV *> args) override;
  void atomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, LV *ptr, LV *value,
                    llvm::Align align) override;
  void raiseError(EmitContext &c, unsigned site, llvm::ArrayRef<LV *> data) override;

private:
  /// The task's body over groups of lanes in [first, last): the last group
  /// may be partial (LaneState::groupMask).
  void emitLaneGroups(KernelEmitter &e, ForStmt &task, const TaskVectorPlan &plan, LV *first,
                      LV *last, const std::function<void(Lanes &, LV *)> &setIndex);
  void emitBandChunk(KernelEmitter &e, ForStmt &task, const TaskVectorPlan &plan, unsigned lanes,
                     LV *first, LV *last);
  /// How far apart (in the task's numbering) iterations that update one
  /// element of a near class may be, at least 1; 0 without near atomics
  /// (qd_rt_parallel_for's `reach`).
  LV *flatReach(KernelEmitter &e, ForStmt &task, const ElementOwnership &own);
  /// glibc's libmvec variants for a vector math call (CodegenOptions::
  /// vectorMath), or null.
  LV *vectorMath(EmitContext &c, MathFn fn, ScalarType t, llvm::ArrayRef<LV *> args);

  unsigned taskCount_ = 0;
  /// The lanes of the task being emitted (lanesForTask).
  unsigned taskWidth_ = 1;
};

void CpuTarget::emitEntries(KernelEmitter &e) {
  EmitContext &c = e.context();
  auto *mainTy = llvm::FunctionType::get(c.b.getVoidTy(), {c.ptrTy}, false);
  llvm::Function *mainFn =
      llvm::Function::Create(mainTy, llvm::Function::ExternalLinkage, "qd_kernel", c.module.get());
  FunctionState main;
  c.beginFunction(main, mainFn, mainFn->getArg(0), c.b.getInt32(0));
  for (Stmt &s : const_cast<Kernel &>(c.kernel).body())
    e.emitTopLevel(s);
  c.b.CreateRetVoid();
  e.finishFunction();
  c.fn = nullptr;
}

void CpuTarget::emitParallelTask(KernelEmitter &e, ForStmt &task) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  // The caller packs the top-level values the task uses into i64 slots.
  size_t statements = 0;
  std::vector<const Value *> captures = e.capturesOf(task, &statements);
  bool band = task.numDims() > 1;
  // A band runs its iterations numbered row-major: [0, count).
  LV *begin = band ? b.getInt64(0) : b.CreateSExt(c.boundValue(task.begin()), c.i64);
  LV *end = band ? e.bandShape(task).count : b.CreateSExt(c.boundValue(task.end()), c.i64);
  llvm::AllocaInst *buf =
      c.entryAlloca(llvm::ArrayType::get(c.i64, std::max<size_t>(captures.size(), 1)), "captures");
  for (size_t i = 0; i < captures.size(); ++i)
    b.CreateStore(c.toSlot(c.fn->values.at(captures[i])),
                  b.CreateConstGEP2_64(buf->getAllocatedType(), buf, 0, i));
  auto *taskTy =
      llvm::FunctionType::get(b.getVoidTy(), {c.ptrTy, c.ptrTy, c.i64, c.i64, c.i32}, false);
  llvm::Function *taskFn =
      llvm::Function::Create(taskTy, llvm::Function::ExternalLinkage,
                             fmt::format("qd_task_{}", taskCount_++), c.module.get());

  FunctionState *caller = c.fn;
  llvm::IRBuilderBase::InsertPoint callerIP = b.saveIP();
  FunctionState state;
  c.beginFunction(state, taskFn, taskFn->getArg(0), taskFn->getArg(4));
  // A value per statement: room for them all (a huge task's map would
  // otherwise be rehashed at every doubling).
  state.values.reserve(statements + captures.size());
  for (size_t i = 0; i < captures.size(); ++i) {
    LV *raw = b.CreateLoad(c.i64, b.CreateGEP(c.i64, taskFn->getArg(1), b.getInt64(i)));
    c.set(captures[i], c.fromSlot(raw, captures[i]->type().element()));
  }
  LV *first = taskFn->getArg(2), *last = taskFn->getArg(3);
  TaskVectorPlan plan = e.planTask(task);
  state.taskPlan = &plan;
  unsigned width = lanesForTask(c.opts, c.opts.fitLanesToRegisters ? loopCarriedValues(task) : 0);
  // No more lanes than a task with a constant trip count has iterations:
  // lanes past them compute nothing, and every vector instruction costs
  // code generation in proportion to its width (a straight-line task of 8
  // iterations at 64 lanes compiled 10x slower than at 8).
  if (std::optional<int64_t> trips = constantTripCount(task); trips && *trips < width)
    width = std::bit_ceil(static_cast<unsigned>(std::max<int64_t>(*trips, 1)));
  taskWidth_ = width;
  unsigned lanes = width > 1 && plan.ok() ? width : 1;
  state.parallelTask = static_cast<int>(c.layout.tasks.size());
  // A band's chunk sizes are not a task bound the runtime reads: it keeps
  // the lanes (Unknown bounds).
  c.layout.tasks.push_back(
      {&task, lanes, width > 1 && !plan.ok() ? plan.refused() : "",
       band ? KernelLayout::TaskBound() : KernelEmitter::taskBound(task.begin()),
       band ? KernelLayout::TaskBound() : KernelEmitter::taskBound(task.end())});
  if (band) {
    emitBandChunk(e, task, plan, lanes, first, last);
  } else if (lanes > 1) {
    emitLaneGroups(e, task, plan, first, last, [&](Lanes &l, LV *group) {
      LV *base = b.CreateTrunc(group, c.i32);
      c.set(&task, b.CreateAdd(l.splat(base), l.laneIds(c.i32)));
      state.lanes.affineBase[&task] = base;
    });
  } else {
    e.control().countedLoop(first, last, c.i64, &task, [&](LV *i) {
      c.set(&task, b.CreateTrunc(i, c.i32));
      e.emitTaskBody(task);
    });
  }
  b.CreateRetVoid();
  // A task equivalent to an earlier one is deleted by the merger: only the
  // functions that stay are verified.
  e.finishFunction(/*verify=*/!c.opts.taskMerger);

  c.fn = caller;
  b.restoreIP(callerIP);
  llvm::FunctionCallee parallelFor = c.module->getOrInsertFunction(
      "qd_rt_parallel_for",
      llvm::FunctionType::get(b.getVoidTy(),
                              {c.ptrTy, c.ptrTy, c.ptrTy, c.i64, c.i64, c.i64, c.i64}, false));
  // Chunks are whole groups of the task's lanes; with near atomics, chunks
  // that run together are farther apart than their reach.
  llvm::CallInst *call =
      b.CreateCall(parallelFor, {c.fn->ctxArg, taskFn, buf, begin, end, b.getInt64(lanes),
                                 flatReach(e, task, plan.ownership)});
  if (c.opts.taskMerger && c.opts.taskMerger->add(call))
    e.verifyFunction(*taskFn);
}

// Iterations (i_0, ..., i_n-1) of a band are numbered row-major, so two
// that differ by at most r_d in each dimension d are at most sum r_d *
// stride_d apart; a dimension whose reach is cyclic may also wrap, which
// moves the one outside it by one.
LV *CpuTarget::flatReach(KernelEmitter &e, ForStmt &task, const ElementOwnership &own) {
  llvm::IRBuilder<> &b = e.context().b;
  const std::vector<int64_t> &reach = own.nearReach();
  if (reach.empty())
    return b.getInt64(0);
  if (task.numDims() == 1)
    return b.getInt64(std::max<int64_t>(reach[0], 1));
  KernelEmitter::BandShape shape = e.bandShape(task);
  LV *stride = b.getInt64(1), *total = b.getInt64(0);
  for (unsigned d = task.numDims(); d-- > 0;) {
    total = b.CreateAdd(total, b.CreateMul(stride, b.getInt64(reach[d])));
    LV *outer = b.CreateMul(stride, shape.extent[d]);
    if (d > 0 && (own.nearCyclic() >> d & 1))
      total = b.CreateAdd(total, outer);
    stride = outer;
  }
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, total, b.getInt64(1));
}

// A chunk [first, last) of a band's row-major iterations, row by row: the
// outer indices once per row, lanes along the innermost index (groups
// within the row, the last one partial).
void CpuTarget::emitBandChunk(KernelEmitter &e, ForStmt &task, const TaskVectorPlan &plan,
                              unsigned lanes, LV *first, LV *last) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  KernelEmitter::BandShape shape = e.bandShape(task);
  LV *inner = b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, shape.extent.back(), b.getInt64(1));
  LV *rowFirst = b.CreateUDiv(first, inner);
  LV *rowLast = b.CreateSelect(
      b.CreateICmpSLT(first, last),
      b.CreateAdd(b.CreateUDiv(b.CreateSub(last, b.getInt64(1)), inner), b.getInt64(1)), rowFirst);
  // The rows' loop is the task's too (StopCheckPlan): a band of rows one
  // point wide stops.
  e.control().countedLoop(rowFirst, rowLast, c.i64, &task, [&](LV *row) {
    e.setBandRow(task, shape, row);
    LV *rowStart = b.CreateMul(row, inner);
    LV *jFirst =
        b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b.CreateSub(first, rowStart), b.getInt64(0));
    LV *jLast = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b.CreateSub(last, rowStart), inner);
    if (lanes > 1)
      return emitLaneGroups(e, task, plan, jFirst, jLast, [&](Lanes &, LV *j) {
        e.setBandInner(task, shape, j, /*vector=*/true);
      });
    e.control().countedLoop(jFirst, jLast, c.i64, &task, [&](LV *j) {
      e.setBandInner(task, shape, j);
      e.emitTaskBody(task);
    });
  });
}

// One copy of the body for every group, partial or not: the chunk's last
// group runs with its lanes past `last` inactive from the start (a prefix of
// the lanes is active, LaneState::groupMask), so they load, store, add,
// raise and move lane stacks for nothing. A second, scalar copy of the body
// for the rest of the chunk doubled the code to optimise and compile.
void CpuTarget::emitLaneGroups(KernelEmitter &e, ForStmt &task, const TaskVectorPlan &plan,
                               LV *first, LV *last,
                               const std::function<void(Lanes &, LV *)> &setIndex) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  FunctionState &state = *c.fn;
  unsigned width = taskWidth_;
  auto captured = state.values;
  state.lanes.width = width;
  state.lanes.plan = &plan;
  Lanes lanes(c);
  e.control().countedLoop(
      first, last, c.i64, &task,
      [&](LV *group) {
        LV *left = b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b.CreateSub(last, group),
                                           b.getInt64(width));
        state.lanes.groupMask =
            b.CreateICmpULT(lanes.laneIds(c.i32), lanes.splat(b.CreateTrunc(left, c.i32)));
        setIndex(lanes, group);
        if (plan.isMaskedLoop(&task)) { // some lanes may continue early
          LaneLoop laneLoop{lanes.maskAlloca("exited"), lanes.maskAlloca("skipped")};
          lanes.clearMask(laneLoop.skipped);
          state.lanes.loops[&task] = laneLoop;
        }
        e.emitTaskBody(task);
        state.lanes.loops.erase(&task);
      },
      width);
  state.lanes = LaneState();
  state.values = std::move(captured);
}

LV *CpuTarget::adStackBase(EmitContext &c, unsigned id) {
  LV *offsets = c.ctxField(CtxField::offsets), *stride = c.ctxField(CtxField::stride),
     *heap = c.ctxField(CtxField::heap);
  llvm::IRBuilder<> eb = c.entryBuilder();
  LV *offset = eb.CreateLoad(c.i64, eb.CreateGEP(c.i64, offsets, eb.getInt64(id)));
  LV *perWorker = eb.CreateMul(eb.CreateZExt(threadIndex(c), c.i64), stride);
  return eb.CreateGEP(eb.getInt8Ty(), heap, eb.CreateAdd(perWorker, offset));
}

LV *CpuTarget::adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned width) {
  return c.b.getInt64(int64_t(stack.entryBytes) * width);
}

LV *CpuTarget::adStackAdjoint(EmitContext &c, const StackRef &stack, LV *primal, unsigned width) {
  return c.b.CreateGEP(c.b.getInt8Ty(), primal,
                       c.b.getInt64(int64_t(storageBytes(stack.elem)) * width));
}

LV *CpuTarget::vectorMath(EmitContext &c, MathFn fn, ScalarType t, llvm::ArrayRef<LV *> args) {
  auto *vt = llvm::dyn_cast<llvm::FixedVectorType>(args[0]->getType());
  VectorMathIsa isa = c.opts.vectorMath;
  if (isa == VectorMathIsa::None || !vt)
    return nullptr;
  std::string_view base = libmName(fn);
  // The widest variant of the ISA that fits the vector: 128-bit ('b'),
  // 256-bit ('d') or 512-bit ('e') registers.
  unsigned width = vt->getNumElements(), elemBits = t == ScalarType::F32 ? 32 : 64;
  unsigned maxBits = isa == VectorMathIsa::Avx512 ? 512 : isa == VectorMathIsa::Avx2 ? 256 : 128;
  unsigned bits = std::min(maxBits, width * elemBits);
  if (bits < 128)
    return nullptr;
  unsigned lanes = bits / elemBits;
  char letter = bits == 512 ? 'e' : bits == 256 ? 'd' : 'b';
  llvm::IRBuilder<> &b = c.b;
  auto *partTy = llvm::FixedVectorType::get(c.typeOf(t), lanes);
  std::string name = fmt::format("_ZGV{}N{}{}_{}{}", letter, lanes, std::string(args.size(), 'v'),
                                 base, t == ScalarType::F32 ? "f" : "");
  std::vector<llvm::Type *> params(args.size(), partTy);
  llvm::FunctionCallee f =
      c.module->getOrInsertFunction(name, llvm::FunctionType::get(partTy, params, false));
  if (auto *decl = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    decl->setDoesNotAccessMemory();
    decl->setDoesNotThrow();
    decl->addFnAttr(llvm::Attribute::WillReturn);
  }
  // One call per `lanes` lanes: independent calls, which an out-of-order
  // core overlaps (a serial chain per lane is bound by the call's latency).
  std::vector<LV *> parts;
  for (unsigned first = 0; first < width; first += lanes) {
    llvm::SmallVector<int, 64> mask;
    for (unsigned l = 0; l < lanes; ++l)
      mask.push_back(static_cast<int>(first + l));
    std::vector<LV *> in;
    for (LV *a : args)
      in.push_back(lanes == width ? a : b.CreateShuffleVector(a, mask));
    parts.push_back(b.CreateCall(f, in));
  }
  // Concatenate pairwise back to the full width.
  while (parts.size() > 1) {
    std::vector<LV *> joined;
    for (size_t i = 0; i < parts.size(); i += 2) {
      unsigned n = llvm::cast<llvm::FixedVectorType>(parts[i]->getType())->getNumElements();
      llvm::SmallVector<int, 64> mask;
      for (unsigned l = 0; l < 2 * n; ++l)
        mask.push_back(static_cast<int>(l));
      joined.push_back(b.CreateShuffleVector(parts[i], parts[i + 1], mask));
    }
    parts = std::move(joined);
  }
  return parts[0];
}

LV *CpuTarget::mathCall(EmitContext &c, MathFn fn, ScalarType type, llvm::ArrayRef<LV *> args) {
  llvm::IRBuilder<> &b = c.b;
  llvm::Type *ty = args[0]->getType();
  if (LV *v = vectorMath(c, fn, type, args))
    return v;
  auto intrinsic = [&](llvm::Intrinsic::ID id) -> LV * {
    return b.CreateCall(c.intrinsic(id, {ty}), args);
  };
  // libm, once per lane in vector code.
  auto libm = [&]() -> LV * {
    std::string symbol(libmName(fn));
    if (type == ScalarType::F32)
      symbol += 'f';
    llvm::Type *t = c.typeOf(type);
    std::vector<llvm::Type *> params(args.size(), t);
    llvm::FunctionCallee f =
        c.module->getOrInsertFunction(symbol, llvm::FunctionType::get(t, params, false));
    return ty->isVectorTy() ? Lanes(c).perLane(f, args) : b.CreateCall(f, args);
  };
  switch (fn) {
  case MathFn::Sin:
    return intrinsic(llvm::Intrinsic::sin);
  case MathFn::Cos:
    return intrinsic(llvm::Intrinsic::cos);
  case MathFn::Exp:
    return intrinsic(llvm::Intrinsic::exp);
  case MathFn::Log:
    return intrinsic(llvm::Intrinsic::log);
  case MathFn::Pow:
    return intrinsic(llvm::Intrinsic::pow);
  case MathFn::Tan:
  case MathFn::Tanh:
  case MathFn::Atan2:
    return libm();
  }
  return args[0];
}

void CpuTarget::atomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, LV *ptr, LV *value,
                             llvm::Align align) {
  c.b.CreateAtomicRMW(op, ptr, value, align, llvm::AtomicOrdering::Monotonic);
}

void CpuTarget::raiseError(EmitContext &c, unsigned site, llvm::ArrayRef<LV *> data) {
  c.recordError(site, data);
}

} // namespace

std::unique_ptr<LlvmTarget> createCpuTarget() {
  return std::make_unique<CpuTarget>();
}

} // namespace qd::codegen

namespace qd {

unsigned loopCarriedValues(const ForStmt &task) {
  std::unordered_set<const AllocaStmt *> carried;
  unsigned values = 0;
  walk(const_cast<ForStmt &>(task).body(), [&](Stmt &s) {
    auto *store = dyn_cast<LocalStoreStmt>(&s);
    auto *local = store ? dyn_cast<AllocaStmt>(store->local()) : nullptr;
    if (!local || carried.count(local))
      return;
    // The innermost loop of the task around the store.
    for (Stmt *p = s.parentStmt(); p && p != &task; p = p->parentStmt()) {
      if (!isa<ForStmt>(p) && !isa<WhileStmt>(p))
        continue;
      if (!local->parent()->isNestedIn(&p->block(0))) {
        carried.insert(local);
        values += bitWidth(local->elementType()) > 32 ? 2 : 1;
      }
      break;
    }
  });
  return values;
}

unsigned lanesForTask(const CodegenOptions &options, unsigned carried) {
  unsigned width = options.vectorWidth;
  if (!options.fitLanesToRegisters || carried == 0)
    return width;
  unsigned isaLanes = 0, registers = 0; // f32 lanes of a register, vector registers
  switch (options.vectorMath) {
  case VectorMathIsa::Avx512:
    isaLanes = 16, registers = 32;
    break;
  case VectorMathIsa::Avx2:
    isaLanes = 8, registers = 16;
    break;
  default:
    return width;
  }
  // At least 16 lanes: one AVX-512 call or two AVX2 calls in flight. With
  // 8 lanes AVX2 code waits on each call (the spring chain's forward took
  // 10.5 ms at 8 lanes and 5.9 at 16 on an AVX-512 Xeon calling the AVX2
  // variants), and a task whose values do not fit in 16 registers spills
  // at 8 lanes too.
  unsigned perValue = std::bit_floor(std::max(1u, registers / carried));
  return std::clamp(isaLanes * perValue, std::min(16u, width), width);
}

} // namespace qd
