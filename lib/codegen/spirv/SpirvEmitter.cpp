//===- SpirvEmitter.cpp - Kernels to SPIR-V compute shaders ---------------===//
//
// Semantics follow docs/ir.md (the interpreter is the reference), as the
// LLVM emitter's do: wrapping integers, INT_MIN / -1 wraps, saturating
// float-to-int casts, NaN-losing float min/max with -0 < +0, unsigned i1;
// integer division by zero, bad shift amounts, out-of-range indices (with
// bounds checks) and adstack underflow are error sites.
//
//===----------------------------------------------------------------------===//
#include "SpirvEmitter.h"

#include "qd/abi/DeviceEntries.h"
#include "qd/abi/LaunchErrors.h"
#include "qd/analysis/TaskVarying.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace qd::spirv {

SpirvEmitter::SpirvEmitter(const Kernel &kernel, const SpirvOptions &options, SpirvKernel &out)
    : kernel_(kernel), opts_(options), out_(out), layout_(out.layout), b_(m_) {
  if (opts_.readOnlyBuffers)
    written_.emplace(kernel, ndarrayAliasing(opts_.distinctNdarrays));
  if (opts_.stopChecks)
    stopPlan_ = StopCheckPlan(kernel, opts_.stopCheckMinWork);
}

//===--- Kernel structure -------------------------------------------------===//

absl::Status SpirvEmitter::prescan() {
  Kernel &k = const_cast<Kernel &>(kernel_);
  const SpirvFeatures &f = opts_.features;
  const Stmt *int64At = nullptr, *float64At = nullptr, *atomic64At = nullptr;
  auto noteType = [&](ScalarType t, const Stmt *s) {
    if (t == ScalarType::I64 && !int64At)
      int64At = s;
    if (t == ScalarType::F64 && !float64At)
      float64At = s;
  };
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    ScalarType t = k.argument(i)->type().element();
    needsInt64_ |= t == ScalarType::I64;
    needsFloat64_ |= t == ScalarType::F64;
  }
  int parallelTasks = 0;
  for (Stmt &top : k.body()) {
    auto *task = dyn_cast<ForStmt>(&top);
    int taskIndex = task && task->isParallel() ? parallelTasks++ : -1;
    auto visit = [&](Stmt &s) {
      if (s.type().isScalar() || s.type().isAdStack() || s.type().isLocal())
        noteType(s.type().element(), &s);
      for (unsigned i = 0; i < s.numOperands(); ++i)
        if (Value *v = s.operand(i); v && v->type().isScalar())
          noteType(v->type().element(), &s);
      if (auto *g = dyn_cast<GlobalAccessStmt>(&s)) {
        ScalarType elem = g->elementType();
        noteType(elem, &s);
        unsigned slot = slotOf(*g);
        slotOfStmt_[&s] = slot;
        if (isa<AtomicRmwStmt>(s)) {
          bool cas = s.kind() == StmtKind::AtomicAdd &&
                     ((elem == ScalarType::F32 && !f.atomicFloat32Add) ||
                      (elem == ScalarType::F64 && !f.atomicFloat64Add));
          if (cas)
            slots_[slot].floatAsBits = true;
          if ((elem == ScalarType::I64 || elem == ScalarType::F64) && !atomic64At)
            atomic64At = &s;
          if (cas && elem == ScalarType::F64 && !int64At)
            int64At = &s;
        }
      }
      if (auto *a = dyn_cast<AdStackAllocaStmt>(&s)) {
        unsigned id = unsigned(layout_.stacks.size());
        ScalarType elem = a->elementType();
        unsigned words = wordsOf(elem) * (adStackEntryBytes(*a) > storageBytes(elem) ? 2 : 1);
        layout_.stacks.push_back({a, &top, words * 4, taskIndex});
        out_.entryWords.push_back(words);
        stackIds_[a] = id;
      }
    };
    visit(top);
    for (unsigned i = 0; i < top.numBlocks(); ++i)
      walk(top.block(i), visit);
  }
  needsInt64_ |= int64At != nullptr;
  needsFloat64_ |= float64At != nullptr;
  auto missing = [&](const char *what, const char *feature, const Stmt *at) {
    std::string where = at ? fmt::format(" (first at {})", whereOf(*at)) : "";
    return absl::FailedPreconditionError(fmt::format(
        "kernel @{} uses {}{}, and the Vulkan device does not support them (feature '{}'); "
        "run it on a device that has the feature, or on another backend",
        kernel_.name(), what, where, feature));
  };
  if (needsInt64_ && !f.int64)
    return missing("64-bit integers", "shaderInt64", int64At);
  if (needsFloat64_ && !f.float64)
    return missing("64-bit floats", "shaderFloat64", float64At);
  if (atomic64At && !f.int64Atomics)
    return missing("64-bit atomics", "shaderBufferInt64Atomics", atomic64At);
  for (const KernelLayout::GlobalSlot &s : layout_.slots)
    if (s.field) {
      int64_t n = 1;
      for (int64_t e : s.field->shape()) {
        if (e > std::numeric_limits<int32_t>::max())
          return absl::InvalidArgumentError(
              fmt::format("field @{}: extent {} does not fit the 32-bit indices of SPIR-V code",
                          s.field->name(), e));
        n *= e;
      }
      if (n > std::numeric_limits<int32_t>::max())
        return absl::InvalidArgumentError(fmt::format(
            "field @{}: {} elements do not fit the 32-bit indices of SPIR-V code (at most 2^31 - "
            "1 elements)",
            s.field->name(), n));
    }
  if (atomic64At)
    m_.capability(spv::Capability::Int64Atomics);
  return absl::OkStatus();
}

unsigned SpirvEmitter::slotOf(const GlobalAccessStmt &g) {
  if (auto it = slotOfStmt_.find(&g); it != slotOfStmt_.end())
    return it->second;
  const Field *f = g.isField() ? g.field() : nullptr;
  const Argument *a = g.isField() ? nullptr : cast<Argument>(g.ndarray());
  bool writes = !isa<GlobalLoadStmt>(g);
  auto &slots = layout_.slots;
  for (unsigned i = 0; i < slots.size(); ++i)
    if (slots[i].field == f && slots[i].ndarray == a && slots[i].component == g.component()) {
      slots[i].written |= writes;
      return i;
    }
  slots.push_back({f, a, g.component(), writes});
  SlotInfo info;
  info.elem = g.elementType();
  // No access of the kernel writes the slot's alias class (with
  // MayAlias ndarrays, nor any ndarray that may share its buffer).
  info.readOnly = written_ && !written_->written(g);
  slots_.push_back(info);
  return unsigned(slots.size() - 1);
}

void SpirvEmitter::declareBindings() {
  m_.capability(spv::Capability::Shader);
  if (needsInt64_)
    m_.capability(spv::Capability::Int64);
  if (needsFloat64_)
    m_.capability(spv::Capability::Float64);
  auto buffer = [&](Id elem, unsigned stride, uint32_t binding, const std::string &name) {
    Id block = m_.typeBufferBlock(elem, stride);
    Id var = m_.globalVariable(m_.typePointer(spv::StorageClass::StorageBuffer, block),
                               spv::StorageClass::StorageBuffer);
    m_.decorate(var, spv::Decoration::DescriptorSet, {0});
    m_.decorate(var, spv::Decoration::Binding, {binding});
    m_.name(var, name);
    return var;
  };
  controlVar_ = buffer(b_.tU32(), 4, kControlBinding, "launch_data");
  heapVar_ = buffer(b_.tU32(), 4, kHeapBinding, "adstack_heap");
  uintPtr_ = m_.typePointer(spv::StorageClass::StorageBuffer, b_.tU32());
  for (unsigned i = 0; i < slots_.size(); ++i) {
    SlotInfo &s = slots_[i];
    switch (s.elem) {
    case ScalarType::I1:
      s.storage = b_.tU32();
      break;
    case ScalarType::I32:
      s.storage = b_.tI32();
      break;
    case ScalarType::I64:
      s.storage = b_.tI64();
      break;
    case ScalarType::F32:
      s.storage = s.floatAsBits ? b_.tU32() : b_.tFloat(32);
      break;
    case ScalarType::F64:
      s.storage = s.floatAsBits ? b_.tU64() : b_.tFloat(64);
      break;
    }
    const KernelLayout::GlobalSlot &g = layout_.slots[i];
    std::string name =
        g.field ? "@" + std::string(g.field->name()) : "%" + std::string(g.ndarray->name());
    if (g.component != Component::Primal)
      name += "." + std::string(toString(g.component));
    s.var = buffer(s.storage, wordsOf(s.elem) * 4, kFirstSlotBinding + i, name);
    s.pointer = m_.typePointer(spv::StorageClass::StorageBuffer, s.storage);
  }
  if (opts_.stopChecks) {
    out_.stopBinding = kFirstSlotBinding + uint32_t(slots_.size());
    stopVar_ = buffer(b_.tU32(), 4, out_.stopBinding, "stop_word");
  }
  Id uvec3 = m_.typeVector(b_.tU32(), 3);
  gidVar_ =
      m_.globalVariable(m_.typePointer(spv::StorageClass::Input, uvec3), spv::StorageClass::Input);
  m_.decorate(gidVar_, spv::Decoration::BuiltIn, {uint32_t(spv::BuiltIn::GlobalInvocationId)});
}

absl::Status SpirvEmitter::run() {
  layout_ = KernelLayout();
  layout_.shapeOffset.assign(kernel_.numArguments(), 0);
  for (unsigned i = 0; i < kernel_.numArguments(); ++i)
    if (kernel_.argument(i)->isNdarray()) {
      layout_.shapeOffset[i] = layout_.numShapes;
      layout_.numShapes += kernel_.argument(i)->type().ndim();
    }
  if (absl::Status s = prescan(); !s.ok())
    return s;
  plan_ = planDeviceEntries(const_cast<Kernel &>(kernel_));
  layout_.numValues = plan_.numValues;
  out_.data = SpirvLaunchData::of(layout_, kernel_.numArguments());
  declareBindings();
  unsigned serials = 0;
  for (current_ = 0; current_ < plan_.entries.size(); ++current_) {
    const DeviceEntryPlan::Entry &entry = plan_.entries[current_];
    if (entry.task) {
      emitTopLevel(*entry.task);
      continue;
    }
    std::string name = fmt::format("qd_serial_{}", serials++);
    layout_.launches.push_back({KernelLayout::Launch::Serial, name, -1, "", 0});
    Function fn;
    beginFunction(fn, name, false);
    for (Stmt *s : entry.stmts) {
      emitTopLevel(*s);
      if (auto slot = plan_.slotOf.find(s); slot != plan_.slotOf.end() && b_.open) {
        auto [lo, hi] = toWords(get(s), s->type().element());
        uint32_t at = out_.data.values + 2 * slot->second;
        b_.store(controlPtr(b_.u32(at)), lo);
        b_.store(controlPtr(b_.u32(at + 1)), hi);
      }
    }
    endFunction(fn, name);
  }
  if (loopFlagsVar_) {
    Id u32 = b_.tU32();
    Id array = m_.typeArray(u32, b_.u32(loopFlagWords_ * opts_.workgroupSize));
    m_.globalVariable(m_.typePointer(spv::StorageClass::Workgroup, array),
                      spv::StorageClass::Workgroup, loopFlagsVar_);
    m_.name(loopFlagsVar_, "loop_exit_flags");
  }
  // Read-only buffers, once the code is known: not beside native float
  // atomic adds, with which NVIDIA's driver gave wrong gradients
  // (docs/runtime.md, "SPIR-V code generation").
  if (!nativeFloatAdds_)
    for (const SlotInfo &slot : slots_)
      if (slot.readOnly)
        m_.decorate(slot.var, spv::Decoration::NonWritable, {});
  if (!error_.empty())
    return absl::InternalError(error_);
  out_.words = m_.finish();
  return absl::OkStatus();
}

void SpirvEmitter::beginFunction(Function &fn, const std::string &name, bool parallel) {
  fn_ = &fn;
  fn.id = m_.newId();
  fn.groupSize = parallel ? opts_.workgroupSize : 1;
  b_.out = &fn.words.body;
  b_.open = true;
  if (parallel) {
    fn.thread = inPrologue([&] {
      Id gid = b_.load(m_.typeVector(b_.tU32(), 3), gidVar_);
      return b_.op(spv::Op::OpCompositeExtract, b_.tU32(), {gid, 0});
    });
  } else {
    fn.thread = b_.u32(0);
  }
  // An entry after an error does nothing.
  Id site = controlWord(SpirvLaunchData::kErrorSite);
  b_.ifThen(b_.cmp(spv::Op::OpINotEqual, site, b_.u32(0)), [&] { b_.ret(); });
  for (const Stmt *v : plan_.imports[current_]) {
    uint32_t at = out_.data.values + 2 * plan_.slotOf.at(v);
    set(v, fromWords(controlWord(at), controlWord(at + 1), v->type().element()));
  }
  for (Stmt *v : plan_.recomputes[current_])
    visit(*v);
}

void SpirvEmitter::endFunction(Function &fn, const std::string &name) {
  if (b_.open)
    b_.ret();
  Words words;
  Id voidT = m_.typeVoid();
  emitInst(words, spv::Op::OpFunction,
           {voidT, fn.id, uint32_t(spv::FunctionControlMask::MaskNone), m_.typeFunction(voidT)});
  emitInst(words, spv::Op::OpLabel, {m_.newId()});
  for (const Words *w : {&fn.words.vars, &fn.words.prologue, &fn.words.body})
    words.insert(words.end(), w->begin(), w->end());
  emitInst(words, spv::Op::OpFunctionEnd, {});
  m_.addFunction(words);
  std::vector<Id> inputs{gidVar_};
  for (auto [which, var] : builtIns_)
    inputs.push_back(var);
  m_.entryPoint(fn.id, name, inputs);
  m_.executionMode(fn.id, spv::ExecutionMode::LocalSize, {fn.groupSize, 1, 1});
  m_.name(fn.id, name);
  fn_ = nullptr;
}

void SpirvEmitter::emitTopLevel(Stmt &s) {
  if (!s.isTask()) {
    visit(s);
    return;
  }
  currentTask_ = &s;
  if (auto *loop = dyn_cast<ForStmt>(&s))
    emitParallelTask(*loop);
  else
    emitBlock(s.block(0));
  currentTask_ = nullptr;
}

void SpirvEmitter::emitBlock(Block &block) {
  for (Stmt &s : block) {
    if (!b_.open)
      return; // after break/continue (always the last statement)
    visit(s);
  }
}

void SpirvEmitter::beginTask(Function &fn, const std::string &name, const ForStmt &task,
                             int index) {
  beginFunction(fn, name, true);
  fn.parallelTask = index;
  TaskAssumptions assume;
  assume.aliasing = aliasing();
  fn.ownership = ElementOwnership::compute(task, assume);
}

void SpirvEmitter::emitParallelTask(ForStmt &task) {
  CooperativeTaskPlan coop = planCooperative(task);
  if (coop.cooperative() && task.begin().isConstant() && task.end().isConstant())
    return emitCooperativeTask(task, coop, false);
  int index = int(layout_.tasks.size());
  std::string name = fmt::format("qd_task_{}", index);
  layout_.launches.push_back({KernelLayout::Launch::Parallel, name, index, "", 0});
  bool band = task.numDims() > 1;
  layout_.tasks.push_back({&task, 1, "",
                           band ? KernelLayout::TaskBound() : taskBoundOf(task.begin()),
                           band ? KernelLayout::TaskBound() : taskBoundOf(task.end())});
  layout_.tasks.back().band = bandBoundsOf(task);
  layout_.tasks.back().loopFree = loopFreeTask(task);
  Function fn;
  beginTask(fn, name, task, index);
  // A compacted heap over a budget runs its invocations in windows, a
  // dispatch each (docs/runtime.md, "Windows"): this dispatch's
  // invocations start at the window's first.
  if (taskHasHeapAdStack(task, opts_.localAdStackEntries)) {
    Id offset = controlWord(SpirvLaunchData::kThreadOffset);
    fn.thread = inPrologue([&] { return b_.iadd(b_.tU32(), fn.thread, offset); });
  }
  if (opts_.features.subgroupArithmetic)
    fn.varying = taskVaryingValues(task);
  Id u32 = b_.tU32();
  // Extents as u32 (end - begin when positive; the difference of two i32
  // fits); a band of more points than u32 counts is an error.
  std::vector<Id> begins, extents;
  Id count = b_.u32(1);
  Id tooMany = 0;
  for (unsigned d = 0; d < task.numDims(); ++d) {
    Id bg = boundValue(task.begin(d)), en = boundValue(task.end(d));
    Id diff = b_.isub(u32, b_.bitcast(u32, en), b_.bitcast(u32, bg));
    Id ext = b_.select(u32, b_.cmp(spv::Op::OpSGreaterThan, en, bg), diff, b_.u32(0));
    begins.push_back(bg);
    extents.push_back(ext);
    Id st = m_.typeStruct({u32, u32});
    Id wide = b_.op(spv::Op::OpUMulExtended, st, {count, ext});
    Id lo = b_.op(spv::Op::OpCompositeExtract, u32, {wide, 0});
    Id hi = b_.op(spv::Op::OpCompositeExtract, u32, {wide, 1});
    Id over = b_.cmp(spv::Op::OpINotEqual, hi, b_.u32(0));
    tooMany = tooMany ? b_.lor(tooMany, over) : over;
    count = b_.select(u32, tooMany, b_.u32(0xFFFFFFFFu), lo);
  }
  if (task.numDims() > 1)
    raiseIf(tooMany, site(task, "the band has more than 2^32 - 1 points, the most a Vulkan launch "
                                "counts; split it into several tasks or launches"));
  // The runtime may dispatch more invocations than the T of the launch
  // data (a grid cut to fit the heap in one storage buffer): those past T
  // have no iterations.
  Id threads = controlWord(SpirvLaunchData::kThreads);
  Id k = localVariable(u32);
  b_.store(k, b_.select(u32, b_.cmp(spv::Op::OpULessThan, fn.thread, threads), fn.thread, count));
  Id current = 0;
  loop(
      &task,
      [&] {
        current = b_.load(u32, k);
        return b_.cmp(spv::Op::OpULessThan, current, count);
      },
      [&] {
        Id rest = current;
        for (unsigned d = task.numDims(); d-- > 0;) {
          Id idx = rest;
          if (d > 0) {
            Id ext = b_.ext(GLSLstd450UMax, u32, {extents[d], b_.u32(1)});
            idx = b_.op(spv::Op::OpUMod, u32, {rest, ext});
            rest = b_.op(spv::Op::OpUDiv, u32, {rest, ext});
          }
          fn.bandIndex[d] = b_.bitcast(b_.tI32(), b_.iadd(u32, b_.bitcast(u32, begins[d]), idx));
        }
        set(&task, fn.bandIndex[0]);
        stopCheck(task);
        forEachInEmissionOrder(task, aliasing(), !opts_.boundsChecked, [&](Stmt &s) {
          visit(s);
          return b_.open; // closed after break/continue: the end
        });
      },
      [&] {
        Id cur = b_.load(u32, k);
        Id next = b_.iadd(u32, cur, threads);
        // Past 2^32: done.
        b_.store(k, b_.select(u32, b_.cmp(spv::Op::OpULessThan, next, cur), count, next));
      });
  endFunction(fn, name);
  // A run-time trip count: the cooperative form too, which the runtime
  // runs when the launch has few iterations.
  if (coop.cooperative())
    emitCooperativeTask(task, coop, true);
}

//===--- Values -----------------------------------------------------------===//

Id SpirvEmitter::localVariable(Id type) {
  Id id = m_.newId();
  emitInst(fn_->words.vars, spv::Op::OpVariable,
           {m_.typePointer(spv::StorageClass::Function, type), id,
            uint32_t(spv::StorageClass::Function)});
  return id;
}

Id SpirvEmitter::controlPtr(Id index) {
  return b_.op(spv::Op::OpAccessChain, uintPtr_, {controlVar_, b_.u32(0), index});
}

Id SpirvEmitter::heapPtr(Id index) {
  return b_.op(spv::Op::OpAccessChain, uintPtr_, {heapVar_, b_.u32(0), index});
}

Id SpirvEmitter::controlWord(uint32_t index) {
  Id &cached = fn_->controlWords[index];
  if (!cached)
    cached = inPrologue([&] { return b_.load(b_.tU32(), controlPtr(b_.u32(index))); });
  return cached;
}

Id SpirvEmitter::get(const Value *v) {
  if (auto it = fn_->values.find(v); it != fn_->values.end())
    return it->second;
  if (auto *a = dyn_cast<Argument>(v)) {
    uint32_t at = out_.data.scalars + 2 * a->index();
    Id lo = controlWord(at), hi = controlWord(at + 1);
    Id value = inPrologue([&] { return fromWords(lo, hi, a->type().element()); });
    set(v, value);
    return value;
  }
  error_ = fmt::format("spirv codegen: kernel @{}: no value for an operand", kernel_.name());
  return b_.u32(0);
}

Id SpirvEmitter::boundValue(Bound bd) {
  return bd.isConstant() ? m_.constI32(int32_t(bd.constant)) : get(bd.value);
}

Id SpirvEmitter::loopBound(const ForStmt &s, Bound bd) {
  Id v = boundValue(bd);
  if (!bd.isConstant() && !isa<ConstStmt>(bd.value))
    return v;
  // A loop that pushes or pops an adstack with a trip count known to the
  // driver's compiler ran 1.74x slower on NVIDIA's Vulkan driver than the
  // same loop with the count read at launch (the sin gradient, H200,
  // docs/performance.md "Kernel shapes on the GPU"): such a bound is read
  // as the constant plus a launch word that is always 0.
  bool tape = std::any_of(s.body().begin(), s.body().end(),
                          [](const Stmt &b) { return isa<AdStackOpStmt>(&b); });
  if (!tape)
    return v;
  Id i32 = b_.tI32();
  return b_.iadd(i32, v, b_.bitcast(i32, controlWord(SpirvLaunchData::kZero)));
}

std::pair<Id, Id> SpirvEmitter::toWords(Id v, ScalarType t) {
  Id u32 = b_.tU32();
  switch (t) {
  case ScalarType::I1:
    return {b_.select(u32, v, b_.u32(1), b_.u32(0)), b_.u32(0)};
  case ScalarType::I32: {
    Id sign = b_.op(spv::Op::OpShiftRightArithmetic, b_.tI32(), {v, m_.constI32(31)});
    return {b_.bitcast(u32, v), b_.bitcast(u32, sign)};
  }
  case ScalarType::F32:
    return {b_.bitcast(u32, v), b_.u32(0)};
  case ScalarType::I64:
  case ScalarType::F64: {
    Id pair = b_.bitcast(b_.tUvec2(), v);
    return {b_.op(spv::Op::OpCompositeExtract, u32, {pair, 0}),
            b_.op(spv::Op::OpCompositeExtract, u32, {pair, 1})};
  }
  }
  return {v, v};
}

Id SpirvEmitter::fromWords(Id lo, Id hi, ScalarType t) {
  switch (t) {
  case ScalarType::I1:
    return b_.cmp(spv::Op::OpINotEqual, lo, b_.u32(0));
  case ScalarType::I32:
    return b_.bitcast(b_.tI32(), lo);
  case ScalarType::F32:
    return b_.bitcast(b_.tFloat(32), lo);
  case ScalarType::I64:
  case ScalarType::F64:
    return b_.bitcast(b_.typeOf(t), b_.op(spv::Op::OpCompositeConstruct, b_.tUvec2(), {lo, hi}));
  }
  return lo;
}

std::vector<Id> SpirvEmitter::valueWords(Id v, ScalarType t) {
  auto [lo, hi] = toWords(v, t);
  if (wordsOf(t) == 2)
    return {lo, hi};
  return {lo};
}

Id SpirvEmitter::wordsValue(const std::vector<Id> &w, ScalarType t) {
  return fromWords(w[0], w.size() > 1 ? w[1] : w[0], t);
}

Id SpirvEmitter::zeroOf(ScalarType t) {
  switch (t) {
  case ScalarType::I1:
    return m_.constBool(false);
  case ScalarType::I32:
    return m_.constI32(0);
  case ScalarType::I64:
    return m_.constI64(0);
  case ScalarType::F32:
    return m_.constF32(0);
  case ScalarType::F64:
    return m_.constF64(0);
  }
  return m_.constI32(0);
}

//===--- Error sites ------------------------------------------------------===//

unsigned SpirvEmitter::site(const Stmt &s, std::string what) {
  layout_.sites.push_back({&s, std::move(what)});
  return unsigned(layout_.sites.size());
}

void SpirvEmitter::raiseIf(Id cond, unsigned id, const std::vector<std::pair<Id, Id>> &data) {
  b_.ifThen(cond, [&] {
    Id u32 = b_.tU32();
    Id old = b_.op(spv::Op::OpAtomicCompareExchange, u32,
                   {controlPtr(b_.u32(SpirvLaunchData::kErrorSite)), b_.u32(kScopeDevice),
                    b_.u32(0), b_.u32(0), b_.u32(id), b_.u32(0)});
    if (!data.empty())
      b_.ifThen(b_.cmp(spv::Op::OpIEqual, old, b_.u32(0)), [&] {
        for (size_t i = 0; i < data.size() && i < abi::kMaxErrorData; ++i) {
          uint32_t at = SpirvLaunchData::kErrorData + 2 * uint32_t(i);
          b_.store(controlPtr(b_.u32(at)), data[i].first);
          b_.store(controlPtr(b_.u32(at + 1)), data[i].second);
        }
      });
    b_.ret();
  });
}

ExitFlag SpirvEmitter::beginExitCheck() {
  if (!opts_.checkLoopExits)
    return {};
  if (!loopFlagsVar_)
    loopFlagsVar_ = m_.newId();
  unsigned level = fn_->exitDepth++;
  loopFlagWords_ = std::max(loopFlagWords_, level / 32 + 1);
  Id u32 = b_.tU32();
  if (!fn_->localIndex)
    fn_->localIndex = fn_->parallelTask < 0 ? b_.u32(0) : inPrologue([&] {
      return b_.op(spv::Op::OpUMod, u32, {fn_->thread, b_.u32(opts_.workgroupSize)});
    });
  Id index = b_.iadd(u32, fn_->localIndex, b_.u32(level / 32 * opts_.workgroupSize));
  ExitFlag flag{b_.op(spv::Op::OpAccessChain, m_.typePointer(spv::StorageClass::Workgroup, u32),
                      {loopFlagsVar_, index}),
                b_.u32(1u << (level % 32))};
  // Volatile: the bit is read after a path the program's semantics do not
  // have (the driver's exit), so no compiler may forward what it knows.
  Id word = b_.op(spv::Op::OpLoad, u32, {flag.ptr, kVolatile});
  b_.inst(spv::Op::OpStore,
          {flag.ptr,
           b_.op(spv::Op::OpBitwiseAnd, u32, {word, b_.op(spv::Op::OpNot, u32, {flag.bit})}),
           kVolatile});
  return flag;
}

Id SpirvEmitter::exitFlagNever() {
  if (!fn_->never)
    fn_->never = inPrologue([&] {
      return b_.cmp(spv::Op::OpUGreaterThanEqual, controlWord(SpirvLaunchData::kThreads),
                    b_.u32(0x80000000u));
    });
  return fn_->never;
}

void SpirvEmitter::setExit(const ExitFlag &flag, Id cond) {
  if (!flag)
    return;
  Id u32 = b_.tU32();
  Id bit = cond ? b_.select(u32, cond, flag.bit, b_.u32(0)) : flag.bit;
  Id word = b_.op(spv::Op::OpLoad, u32, {flag.ptr, kVolatile});
  b_.inst(spv::Op::OpStore, {flag.ptr, b_.op(spv::Op::OpBitwiseOr, u32, {word, bit}), kVolatile});
}

void SpirvEmitter::checkExit(const ExitFlag &flag, const Stmt &stmt) {
  if (!flag)
    return;
  --fn_->exitDepth;
  unsigned id = site(stmt, "");
  layout_.sites.back().loopExitCheck = true;
  Id u32 = b_.tU32();
  Id word = b_.op(spv::Op::OpLoad, u32, {flag.ptr, kVolatile});
  Id bit = b_.op(spv::Op::OpBitwiseAnd, u32, {word, flag.bit});
  raiseIf(b_.cmp(spv::Op::OpIEqual, bit, b_.u32(0)), id);
}

void SpirvEmitter::stopCheck(const Stmt &loop) {
  if (!opts_.stopChecks || !stopPlan_.checks(loop))
    return;
  Id u32 = b_.tU32();
  const uint32_t interval = opts_.stopCheckInterval;
  const uint32_t poll = std::min<uint32_t>(interval, abi::kDeviceStopPollInterval);
  if (!fn_->iterations) {
    // The readers, one invocation in stopCheckSpread, read the word at
    // their first iteration, so that launches of many short loops (one
    // invocation per task iteration) stop too: the first that sees the word
    // records the loop's site, and every invocation that starts after that
    // returns at once (beginFunction).
    fn_->iterations = localVariable(u32);
    fn_->stopReader = inPrologue([&] {
      Id low = b_.op(spv::Op::OpBitwiseAnd, u32, {fn_->thread, b_.u32(opts_.stopCheckSpread - 1)});
      Id reader = b_.cmp(spv::Op::OpIEqual, low, b_.u32(0));
      b_.store(fn_->iterations, b_.select(u32, reader, b_.u32(poll - 1), b_.u32(0)));
      return reader;
    });
  }
  Id n = b_.iadd(u32, b_.load(u32, fn_->iterations), b_.u32(1));
  b_.store(fn_->iterations, n);
  auto every = [&](uint32_t k) {
    return b_.cmp(spv::Op::OpIEqual, b_.op(spv::Op::OpBitwiseAnd, u32, {n, b_.u32(k - 1)}),
                  b_.u32(0));
  };
  unsigned id = site(loop, "");
  layout_.sites.back().stopCheck = true;
  b_.ifThen(every(poll), [&] {
    // An error another invocation recorded (a stop included) ends this one:
    // a running invocation that reads no word still ends soon after a
    // reader saw it (abi::kDeviceStopPollInterval).
    Id recorded =
        b_.op(spv::Op::OpAtomicLoad, u32,
              {controlPtr(b_.u32(SpirvLaunchData::kErrorSite)), b_.u32(kScopeDevice), b_.u32(0)});
    b_.ifThen(b_.cmp(spv::Op::OpINotEqual, recorded, b_.u32(0)), [&] { b_.ret(); });
    b_.ifThen(b_.lor(fn_->stopReader, every(interval)), [&] {
      // Written by the host while the launch runs: an atomic load, which
      // no compiler hoists out of the loop.
      Id word = b_.op(spv::Op::OpAtomicLoad, u32,
                      {b_.op(spv::Op::OpAccessChain, uintPtr_, {stopVar_, b_.u32(0), b_.u32(0)}),
                       b_.u32(kScopeDevice), b_.u32(0)});
      raiseIf(b_.cmp(spv::Op::OpINotEqual, word, b_.u32(0)), id, {{word, b_.u32(0)}});
    });
  });
}

//===--- Control flow -----------------------------------------------------===//

void SpirvEmitter::loop(const Stmt *stmt, const std::function<Id()> &cond,
                        const std::function<void()> &body, const std::function<void()> &step) {
  Id header = m_.newId(), bodyBB = m_.newId(), cont = m_.newId(), merge = m_.newId();
  ExitFlag exited = beginExitCheck();
  b_.branch(header);
  b_.label(header);
  Id c = cond ? cond() : 0;
  b_.loopMerge(merge, cont);
  if (c && exited) { // the condition fails: a block in the loop marks the exit
    Id done = m_.newId();
    b_.condBranch(c, bodyBB, done);
    b_.label(done);
    setExit(exited);
    b_.branch(merge);
  } else if (c) {
    b_.condBranch(c, bodyBB, merge);
  } else {
    b_.branch(bodyBB);
  }
  b_.label(bodyBB);
  fn_->loops.push_back({cont, merge, stmt, exited});
  body();
  fn_->loops.pop_back();
  if (b_.open)
    b_.branch(cont);
  b_.label(cont);
  if (step)
    step();
  if (exited) // a second way out, never taken (exitFlagNever)
    b_.condBranch(exitFlagNever(), merge, header);
  else
    b_.branch(header);
  b_.label(merge);
  checkExit(exited, *stmt);
}

void SpirvEmitter::countedLoop(const Stmt *stmt, Id first, Id end, Id step,
                               const std::function<void(Id)> &body) {
  Id i32 = b_.tI32();
  Id counter = localVariable(i32);
  b_.store(counter, first);
  Id i = 0;
  loop(
      stmt,
      [&] {
        i = b_.load(i32, counter);
        return b_.cmp(spv::Op::OpSLessThan, i, end);
      },
      [&] { body(i); }, [&] { b_.store(counter, b_.iadd(i32, b_.load(i32, counter), step)); });
}

void SpirvEmitter::visitForStmt(ForStmt &s) {
  countedLoop(&s, loopBound(s, s.begin()), loopBound(s, s.end()), m_.constI32(1), [&](Id i) {
    set(&s, i);
    stopCheck(s);
    emitBlock(s.body());
  });
}

void SpirvEmitter::visitWhileStmt(WhileStmt &s) {
  loop(
      &s, nullptr,
      [&] {
        stopCheck(s);
        emitBlock(s.body());
      },
      nullptr);
}

void SpirvEmitter::visitBreakStmt(BreakStmt &) {
  setExit(fn_->loops.back().exited);
  b_.branch(fn_->loops.back().breakTo);
}

void SpirvEmitter::visitContinueStmt(ContinueStmt &) {
  b_.branch(fn_->loops.back().continueTo);
}

void SpirvEmitter::visitIfStmt(IfStmt &s) {
  Id thenBB = m_.newId(), elseBB = m_.newId(), merge = m_.newId();
  Id cond = get(s.cond());
  b_.selectionMerge(merge);
  b_.condBranch(cond, thenBB, elseBB);
  for (int arm = 0; arm < 2; ++arm) {
    b_.label(arm == 0 ? thenBB : elseBB);
    emitBlock(arm == 0 ? s.thenBlock() : s.elseBlock());
    if (b_.open)
      b_.branch(merge);
  }
  b_.label(merge);
}

void SpirvEmitter::visitTaskIndexStmt(TaskIndexStmt &s) {
  auto *task = cast<ForStmt>(currentTask_);
  set(&s, task->numDims() == 1 ? get(task) : fn_->bandIndex[s.dim()]);
}

} // namespace qd::spirv
