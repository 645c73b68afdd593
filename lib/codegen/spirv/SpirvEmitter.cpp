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

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace qd::spirv {
namespace {

constexpr uint32_t kScopeDevice = uint32_t(spv::Scope::Device);
constexpr uint32_t kVolatile = uint32_t(spv::MemoryAccessMask::Volatile);
/// Bindings of set 0.
constexpr uint32_t kControlBinding = 0, kHeapBinding = 1, kFirstSlotBinding = 2;

unsigned wordsOf(ScalarType t) {
  return t == ScalarType::I64 || t == ScalarType::F64 ? 2 : 1;
}

std::string whereOf(const Stmt &s) {
  return s.loc().str();
}

} // namespace

SpirvEmitter::SpirvEmitter(const Kernel &kernel, const SpirvOptions &options, SpirvKernel &out)
    : kernel_(kernel), opts_(options), out_(out), layout_(out.layout), b_(m_) {}

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
  slots_.push_back({g.elementType()});
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
    layout_.launches.push_back({KernelLayout::Launch::Serial, name, -1});
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
    endFunction(fn, name, false);
  }
  if (loopFlagsVar_) {
    Id u32 = b_.tU32();
    Id array = m_.typeArray(u32, b_.u32(loopFlagWords_ * opts_.workgroupSize));
    m_.globalVariable(m_.typePointer(spv::StorageClass::Workgroup, array),
                      spv::StorageClass::Workgroup, loopFlagsVar_);
    m_.name(loopFlagsVar_, "loop_exit_flags");
  }
  if (!error_.empty())
    return absl::InternalError(error_);
  out_.words = m_.finish();
  return absl::OkStatus();
}

void SpirvEmitter::beginFunction(Function &fn, const std::string &name, bool parallel) {
  fn_ = &fn;
  fn.id = m_.newId();
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
}

void SpirvEmitter::endFunction(Function &fn, const std::string &name, bool parallel) {
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
  m_.entryPoint(fn.id, name, {gidVar_});
  unsigned size = parallel ? opts_.workgroupSize : 1;
  m_.executionMode(fn.id, spv::ExecutionMode::LocalSize, {size, 1, 1});
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

void SpirvEmitter::emitParallelTask(ForStmt &task) {
  int index = int(layout_.tasks.size());
  std::string name = fmt::format("qd_task_{}", index);
  layout_.launches.push_back({KernelLayout::Launch::Parallel, name, index});
  bool band = task.numDims() > 1;
  layout_.tasks.push_back({&task, 1, "",
                           band ? KernelLayout::TaskBound() : taskBoundOf(task.begin()),
                           band ? KernelLayout::TaskBound() : taskBoundOf(task.end())});
  Function fn;
  beginFunction(fn, name, true);
  fn.parallelTask = index;
  Id u32 = b_.tU32();
  // Extents as u32 (end - begin when positive; the difference of two i32
  // fits), the band's point count saturating at 2^32 - 1.
  std::vector<Id> begins, extents;
  Id count = b_.u32(1);
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
    count = b_.select(u32, b_.cmp(spv::Op::OpINotEqual, hi, b_.u32(0)), b_.u32(0xFFFFFFFFu), lo);
  }
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
        emitBlock(task.body());
      },
      [&] {
        Id cur = b_.load(u32, k);
        Id next = b_.iadd(u32, cur, threads);
        // Past 2^32: done.
        b_.store(k, b_.select(u32, b_.cmp(spv::Op::OpULessThan, next, cur), count, next));
      });
  endFunction(fn, name, true);
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

//===--- Arithmetic -------------------------------------------------------===//

void SpirvEmitter::visitConstStmt(ConstStmt &s) {
  Id v = 0;
  switch (s.scalarType()) {
  case ScalarType::I1:
    v = m_.constBool(s.intValue() != 0);
    break;
  case ScalarType::I32:
    v = m_.constI32(int32_t(s.intValue()));
    break;
  case ScalarType::I64:
    v = m_.constI64(s.intValue());
    break;
  case ScalarType::F32:
    v = m_.constF32(float(s.floatValue()));
    break;
  case ScalarType::F64:
    v = m_.constF64(s.floatValue());
    break;
  }
  set(&s, v);
}

void SpirvEmitter::visitSelectStmt(SelectStmt &s) {
  set(&s, b_.select(b_.typeOf(s.type().element()), get(s.cond()), get(s.trueValue()),
                    get(s.falseValue())));
}

void SpirvEmitter::visitBinaryStmt(BinaryStmt &s) {
  ScalarType t = s.type().element();
  Id x = get(s.lhs()), y = get(s.rhs());
  if (!isFloat(t)) {
    set(&s, integerBinary(s, x, y));
    return;
  }
  Id ty = b_.typeOf(t);
  unsigned width = bitWidth(t);
  Id v = x;
  switch (s.op()) {
  case BinaryOp::Add:
    v = b_.fadd(ty, x, y);
    break;
  case BinaryOp::Sub:
    v = b_.fsub(ty, x, y);
    break;
  case BinaryOp::Mul:
    v = b_.fmul(ty, x, y);
    break;
  case BinaryOp::Div:
    v = b_.fdiv(ty, x, y);
    break;
  case BinaryOp::Rem:
    v = b_.op(spv::Op::OpFRem, ty, {x, y});
    break;
  case BinaryOp::Min:
  case BinaryOp::Max:
    v = floatMinMax(x, y, t, s.op() == BinaryOp::Min);
    break;
  case BinaryOp::Pow:
    v = emitMath(b_, SpirvMathFn::Pow, width, {x, y});
    break;
  case BinaryOp::Atan2:
    v = emitMath(b_, SpirvMathFn::Atan2, width, {x, y});
    break;
  default: // the verifier allows no other float operation
    break;
  }
  set(&s, v);
}

Id SpirvEmitter::integerBinary(BinaryStmt &s, Id x, Id y) {
  ScalarType t = s.type().element();
  using spv::Op;
  if (t == ScalarType::I1) {
    switch (s.op()) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Xor:
      return b_.op(Op::OpLogicalNotEqual, b_.tBool(), {x, y});
    case BinaryOp::Mul:
    case BinaryOp::And:
    case BinaryOp::Min:
      return b_.land(x, y);
    case BinaryOp::Or:
    case BinaryOp::Max:
      return b_.lor(x, y);
    case BinaryOp::Div:
    case BinaryOp::Rem:
      raiseIf(b_.lnot(y), site(s, "integer division by zero"));
      return s.op() == BinaryOp::Div ? x : m_.constBool(false);
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      raiseIf(y, site(s, "shift amount is outside [0, 1)"));
      return x;
    default:
      return x;
    }
  }
  Id ty = b_.typeOf(t);
  Id zero = zeroOf(t);
  bool wide = t == ScalarType::I64;
  auto konst = [&](int64_t v) { return wide ? m_.constI64(v) : m_.constI32(int32_t(v)); };
  switch (s.op()) {
  case BinaryOp::Add:
    return b_.iadd(ty, x, y);
  case BinaryOp::Sub:
    return b_.isub(ty, x, y);
  case BinaryOp::Mul:
    return b_.imul(ty, x, y);
  case BinaryOp::Div:
  case BinaryOp::Rem: {
    bool div = s.op() == BinaryOp::Div;
    raiseIf(b_.cmp(Op::OpIEqual, y, zero), site(s, "integer division by zero"));
    // INT_MIN / -1 wraps: x * -1 = -x, remainder 0.
    Id minusOne = b_.cmp(Op::OpIEqual, y, konst(-1));
    Id safe = b_.select(ty, minusOne, konst(1), y);
    Id q = b_.op(div ? Op::OpSDiv : Op::OpSRem, ty, {x, safe});
    return b_.select(ty, minusOne, div ? b_.op(Op::OpSNegate, ty, {x}) : zero, q);
  }
  case BinaryOp::Min:
    return b_.select(ty, b_.cmp(Op::OpSLessThan, x, y), x, y);
  case BinaryOp::Max:
    return b_.select(ty, b_.cmp(Op::OpSGreaterThan, x, y), x, y);
  case BinaryOp::And:
    return b_.op(Op::OpBitwiseAnd, ty, {x, y});
  case BinaryOp::Or:
    return b_.op(Op::OpBitwiseOr, ty, {x, y});
  case BinaryOp::Xor:
    return b_.op(Op::OpBitwiseXor, ty, {x, y});
  case BinaryOp::Shl:
  case BinaryOp::Shr: {
    unsigned width = bitWidth(t);
    raiseIf(b_.cmp(Op::OpUGreaterThanEqual, y, konst(width)),
            site(s, fmt::format("shift amount is outside [0, {})", width)));
    return b_.op(s.op() == BinaryOp::Shl ? Op::OpShiftLeftLogical : Op::OpShiftRightArithmetic, ty,
                 {x, y});
  }
  default:
    return x;
  }
}

Id SpirvEmitter::floatMinMax(Id x, Id y, ScalarType t, bool isMin) {
  using spv::Op;
  Id ty = b_.typeOf(t);
  Id xNan = b_.isNan(x), yNan = b_.isNan(y);
  Id xFirst = b_.cmp(isMin ? Op::OpFOrdLessThan : Op::OpFOrdGreaterThan, x, y);
  Id yFirst = b_.cmp(isMin ? Op::OpFOrdLessThan : Op::OpFOrdGreaterThan, y, x);
  // Equal (or both zero): combine the bits; min keeps a set sign, max a clear one.
  Id bits = t == ScalarType::F32 ? b_.tU32() : b_.tUvec2();
  Id same = b_.bitcast(ty, b_.op(isMin ? Op::OpBitwiseOr : Op::OpBitwiseAnd, bits,
                                 {b_.bitcast(bits, x), b_.bitcast(bits, y)}));
  Id r = b_.select(ty, yFirst, y, same);
  r = b_.select(ty, xFirst, x, r);
  r = b_.select(ty, yNan, x, r);
  return b_.select(ty, xNan, y, r);
}

void SpirvEmitter::visitUnaryStmt(UnaryStmt &s) {
  ScalarType t = s.type().element();
  Id x = get(s.input());
  Id ty = b_.typeOf(t);
  using spv::Op;
  if (isFloat(t)) {
    unsigned w = bitWidth(t);
    Id v = x;
    switch (s.op()) {
    case UnaryOp::Neg:
      v = b_.fneg(ty, x);
      break;
    case UnaryOp::Abs:
      v = b_.ext(GLSLstd450FAbs, ty, {x});
      break;
    case UnaryOp::Sin:
      v = emitMath(b_, SpirvMathFn::Sin, w, {x});
      break;
    case UnaryOp::Cos:
      v = emitMath(b_, SpirvMathFn::Cos, w, {x});
      break;
    case UnaryOp::Tan:
      v = emitMath(b_, SpirvMathFn::Tan, w, {x});
      break;
    case UnaryOp::Exp:
      v = emitMath(b_, SpirvMathFn::Exp, w, {x});
      break;
    case UnaryOp::Log:
      v = emitMath(b_, SpirvMathFn::Log, w, {x});
      break;
    case UnaryOp::Tanh:
      v = emitMath(b_, SpirvMathFn::Tanh, w, {x});
      break;
    case UnaryOp::Sqrt:
      v = b_.ext(GLSLstd450Sqrt, ty, {x});
      break;
    case UnaryOp::Floor:
      v = b_.ext(GLSLstd450Floor, ty, {x});
      break;
    case UnaryOp::Ceil:
      v = b_.ext(GLSLstd450Ceil, ty, {x});
      break;
    case UnaryOp::Not:
      break;
    }
    set(&s, v);
    return;
  }
  Id v = x;
  switch (s.op()) {
  case UnaryOp::Neg:
    v = t == ScalarType::I1 ? x : b_.op(Op::OpSNegate, ty, {x});
    break;
  case UnaryOp::Abs:
    if (t != ScalarType::I1)
      v = b_.select(ty, b_.cmp(Op::OpSLessThan, x, zeroOf(t)), b_.op(Op::OpSNegate, ty, {x}), x);
    break;
  case UnaryOp::Not:
    v = t == ScalarType::I1 ? b_.lnot(x) : b_.op(Op::OpNot, ty, {x});
    break;
  default:
    break;
  }
  set(&s, v);
}

void SpirvEmitter::visitCmpStmt(CmpStmt &s) {
  Id x = get(s.lhs()), y = get(s.rhs());
  ScalarType t = s.operandType();
  using spv::Op;
  int p = int(s.predicate()); // eq ne lt le gt ge
  Id v = 0;
  if (isFloat(t)) {
    static const Op ops[] = {Op::OpFOrdEqual,       Op::OpFUnordNotEqual,
                             Op::OpFOrdLessThan,    Op::OpFOrdLessThanEqual,
                             Op::OpFOrdGreaterThan, Op::OpFOrdGreaterThanEqual};
    v = b_.cmp(ops[p], x, y);
  } else if (t == ScalarType::I1) {
    switch (s.predicate()) { // unsigned: false < true
    case CmpPredicate::Eq:
      v = b_.op(Op::OpLogicalEqual, b_.tBool(), {x, y});
      break;
    case CmpPredicate::Ne:
      v = b_.op(Op::OpLogicalNotEqual, b_.tBool(), {x, y});
      break;
    case CmpPredicate::Lt:
      v = b_.land(b_.lnot(x), y);
      break;
    case CmpPredicate::Le:
      v = b_.lor(b_.lnot(x), y);
      break;
    case CmpPredicate::Gt:
      v = b_.land(x, b_.lnot(y));
      break;
    case CmpPredicate::Ge:
      v = b_.lor(x, b_.lnot(y));
      break;
    }
  } else {
    static const Op ops[] = {Op::OpIEqual,         Op::OpINotEqual,    Op::OpSLessThan,
                             Op::OpSLessThanEqual, Op::OpSGreaterThan, Op::OpSGreaterThanEqual};
    v = b_.cmp(ops[p], x, y);
  }
  set(&s, v);
}

void SpirvEmitter::visitCastStmt(CastStmt &s) {
  Id x = get(s.input());
  ScalarType from = s.from(), to = s.to();
  Id ty = b_.typeOf(to);
  using spv::Op;
  Id v = x;
  if (from == to) {
  } else if (to == ScalarType::I1) { // "not zero"
    v = isFloat(from) ? b_.cmp(Op::OpFUnordNotEqual, x, zeroOf(from))
                      : b_.cmp(Op::OpINotEqual, x, zeroOf(from));
  } else if (isFloat(from) && isFloat(to)) {
    v = b_.op(Op::OpFConvert, ty, {x});
  } else if (isFloat(from)) {
    // Truncate, saturate, NaN -> 0: convert only in range.
    unsigned w = bitWidth(from);
    double limit = to == ScalarType::I32 ? 2147483648.0 : 9223372036854775808.0;
    Id hi = m_.constFloat(w, limit), lo = m_.constFloat(w, -limit);
    Id tooHigh = b_.cmp(Op::OpFOrdGreaterThanEqual, x, hi);
    Id tooLow = b_.cmp(Op::OpFOrdLessThan, x, lo);
    Id bad = b_.lor(b_.lor(tooHigh, tooLow), b_.isNan(x));
    Id safe = b_.select(b_.typeOf(from), bad, zeroOf(from), x);
    v = b_.op(Op::OpConvertFToS, ty, {safe});
    bool wide = to == ScalarType::I64;
    Id maxV = wide ? m_.constI64(std::numeric_limits<int64_t>::max())
                   : m_.constI32(std::numeric_limits<int32_t>::max());
    Id minV = wide ? m_.constI64(std::numeric_limits<int64_t>::min())
                   : m_.constI32(std::numeric_limits<int32_t>::min());
    v = b_.select(ty, tooHigh, maxV, v);
    v = b_.select(ty, tooLow, minV, v);
  } else if (isFloat(to)) {
    v = from == ScalarType::I1 ? b_.select(ty, x, m_.constFloat(bitWidth(to), 1), zeroOf(to))
                               : b_.op(Op::OpConvertSToF, ty, {x});
  } else if (from == ScalarType::I1) {
    v = b_.select(ty, x, to == ScalarType::I64 ? m_.constI64(1) : m_.constI32(1), zeroOf(to));
  } else {
    v = b_.op(Op::OpSConvert, ty, {x});
  }
  set(&s, v);
}

//===--- Memory -----------------------------------------------------------===//

void SpirvEmitter::visitAllocaStmt(AllocaStmt &s) {
  ScalarType t = s.elementType();
  Id var = 0;
  if (auto it = fn_->locals.find(&s); it != fn_->locals.end())
    var = it->second;
  else
    var = fn_->locals[&s] = localVariable(b_.typeOf(t));
  b_.store(var, zeroOf(t));
}

void SpirvEmitter::visitLocalLoadStmt(LocalLoadStmt &s) {
  set(&s, b_.load(b_.typeOf(s.type().element()), fn_->locals.at(s.local())));
}

void SpirvEmitter::visitLocalStoreStmt(LocalStoreStmt &s) {
  b_.store(fn_->locals.at(s.local()), get(s.value()));
}

void SpirvEmitter::visitShapeStmt(ShapeStmt &s) {
  unsigned off = layout_.shapeOffset[cast<Argument>(s.ndarray())->index()] + s.axis();
  uint32_t at = out_.data.shapes + 2 * off;
  set(&s, fromWords(controlWord(at), controlWord(at + 1), s.type().element()));
}

void SpirvEmitter::globalAccess(GlobalAccessStmt &g) {
  using spv::Op;
  const SlotInfo &slot = slots_[slotOfStmt_.at(&g)];
  ScalarType elem = g.elementType();
  Id u32 = b_.tU32();
  Id flat = b_.u32(0);
  Id bad = m_.constBool(false);
  std::vector<std::pair<Id, Id>> data;
  for (unsigned d = 0; d < g.numIndices(); ++d) {
    Id extLo, extHi;
    if (g.isField()) {
      int64_t e = g.field()->shape()[d];
      extLo = b_.u32(uint32_t(e));
      extHi = b_.u32(0);
    } else {
      unsigned off = layout_.shapeOffset[cast<Argument>(g.ndarray())->index()] + d;
      extLo = controlWord(out_.data.shapes + 2 * off);
      extHi = controlWord(out_.data.shapes + 2 * off + 1);
    }
    Value *index = g.index(d);
    ScalarType it = index->type().element();
    Id idx = get(index);
    Id u = 0;
    if (it == ScalarType::I64) {
      Id ext64 = fromWords(extLo, extHi, ScalarType::I64);
      if (opts_.boundsChecked)
        bad = b_.lor(bad, b_.cmp(Op::OpUGreaterThanEqual, idx, ext64));
      u = b_.bitcast(u32, b_.op(Op::OpSConvert, b_.tI32(), {idx}));
    } else {
      u = b_.bitcast(u32, idx);
      if (opts_.boundsChecked) // a negative index is huge unsigned
        bad = b_.lor(bad, b_.cmp(Op::OpUGreaterThanEqual, u, extLo));
    }
    if (opts_.boundsChecked)
      data.push_back(toWords(idx, it));
    flat = b_.iadd(u32, b_.imul(u32, flat, extLo), u);
  }
  if (opts_.boundsChecked && g.numIndices() > 0) {
    unsigned id = site(g, "index out of range");
    layout_.sites.back().indexCheck = true;
    raiseIf(bad, id, data);
  }
  Id ptr = b_.op(Op::OpAccessChain, slot.pointer, {slot.var, b_.u32(0), flat});
  auto toStorage = [&](Id v) {
    if (elem == ScalarType::I1)
      return b_.select(u32, v, b_.u32(1), b_.u32(0));
    return slot.floatAsBits ? b_.bitcast(slot.storage, v) : v;
  };
  if (g.kind() == StmtKind::GlobalLoad) {
    Id raw = b_.load(slot.storage, ptr);
    Id v = elem == ScalarType::I1 ? b_.cmp(Op::OpINotEqual, raw, b_.u32(0))
           : slot.floatAsBits     ? b_.bitcast(b_.typeOf(elem), raw)
                                  : raw;
    set(&g, v);
  } else if (auto *st = dyn_cast<GlobalStoreStmt>(&g)) {
    b_.store(ptr, toStorage(get(st->value())));
  } else if (g.kind() == StmtKind::AtomicMax) {
    b_.op(Op::OpAtomicSMax, slot.storage,
          {ptr, b_.u32(kScopeDevice), b_.u32(0), get(cast<AtomicMaxStmt>(g).value())});
  } else {
    atomicAdd(cast<AtomicAddStmt>(g), slot, ptr, get(cast<AtomicAddStmt>(g).value()));
  }
}

void SpirvEmitter::atomicAdd(const AtomicAddStmt &add, const SlotInfo &slot, Id ptr, Id value) {
  using spv::Op;
  Id scope = b_.u32(kScopeDevice), none = b_.u32(0);
  switch (slot.elem) {
  case ScalarType::I1: // wrapping 1-bit add
    b_.op(Op::OpAtomicXor, slot.storage,
          {ptr, scope, none, b_.select(b_.tU32(), value, b_.u32(1), b_.u32(0))});
    return;
  case ScalarType::I32:
  case ScalarType::I64:
    b_.op(Op::OpAtomicIAdd, slot.storage, {ptr, scope, none, value});
    return;
  case ScalarType::F32:
  case ScalarType::F64:
    break;
  }
  if (!slot.floatAsBits) {
    m_.extension("SPV_EXT_shader_atomic_float_add");
    m_.capability(slot.elem == ScalarType::F32 ? spv::Capability::AtomicFloat32AddEXT
                                               : spv::Capability::AtomicFloat64AddEXT);
    b_.op(Op::OpAtomicFAddEXT, slot.storage, {ptr, scope, none, value});
    return;
  }
  // A compare-exchange loop on the bits.
  Id ft = b_.typeOf(slot.elem);
  Id header = m_.newId(), body = m_.newId(), cont = m_.newId(), merge = m_.newId();
  ExitFlag exited = beginExitCheck();
  b_.branch(header);
  b_.label(header);
  b_.loopMerge(merge, cont);
  b_.branch(body);
  b_.label(body);
  Id old = b_.load(slot.storage, ptr);
  Id sum = b_.bitcast(slot.storage, b_.fadd(ft, b_.bitcast(ft, old), value));
  Id got = b_.op(Op::OpAtomicCompareExchange, slot.storage, {ptr, scope, none, none, sum, old});
  Id done = b_.cmp(Op::OpIEqual, got, old);
  setExit(exited, done);
  b_.branch(cont);
  b_.label(cont);
  b_.condBranch(done, merge, header);
  b_.label(merge);
  checkExit(exited, add);
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

void SpirvEmitter::visitForStmt(ForStmt &s) {
  Id i32 = b_.tI32();
  Id begin = boundValue(s.begin()), end = boundValue(s.end());
  Id counter = localVariable(i32);
  b_.store(counter, begin);
  Id i = 0;
  loop(
      &s,
      [&] {
        i = b_.load(i32, counter);
        return b_.cmp(spv::Op::OpSLessThan, i, end);
      },
      [&] {
        set(&s, i);
        emitBlock(s.body());
      },
      [&] { b_.store(counter, b_.iadd(i32, b_.load(i32, counter), m_.constI32(1))); });
}

void SpirvEmitter::visitWhileStmt(WhileStmt &s) {
  loop(
      &s, nullptr, [&] { emitBlock(s.body()); }, nullptr);
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

//===--- Adstacks ---------------------------------------------------------===//

const StackState &SpirvEmitter::stack(unsigned id) {
  StackState &st = fn_->stacks[id];
  if (!st.base) {
    Id u32 = b_.tU32();
    Id threads = controlWord(SpirvLaunchData::kThreads);
    Id offset = controlWord(out_.data.offsets + id);
    st.capacity = controlWord(out_.data.capacities + id);
    Id words = b_.u32(out_.entryWords[id]);
    KernelLayout::Stack &layout = layout_.stacks[id];
    auto local = opts_.localAdStackEntries.find(layout.stmt);
    if (local != opts_.localAdStackEntries.end() && local->second > 0) {
      layout.localEntries = local->second;
      st.local =
          localVariable(m_.typeArray(u32, b_.u32(uint32_t(local->second) * out_.entryWords[id])));
      st.base = b_.u32(0);
      st.row = words;
    } else {
      inPrologue([&] {
        st.base = b_.iadd(u32, b_.imul(u32, offset, threads), b_.imul(u32, fn_->thread, words));
        st.row = b_.imul(u32, threads, words);
        return 0;
      });
    }
    st.depth = localVariable(u32);
    st.excess = localVariable(u32);
  }
  return st;
}

void SpirvEmitter::visitAdStackAllocaStmt(AdStackAllocaStmt &s) {
  const StackState &st = stack(stackIds_.at(&s));
  b_.store(st.depth, b_.u32(0));
  b_.store(st.excess, b_.u32(0));
}

void SpirvEmitter::adStackOp(AdStackOpStmt &op) {
  using spv::Op;
  auto *alloca = cast<AdStackAllocaStmt>(op.stack());
  unsigned id = stackIds_.at(alloca);
  const StackState &st = stack(id);
  ScalarType elem = alloca->elementType();
  Id u32 = b_.tU32();
  uint32_t pw = wordsOf(elem);
  // Word `index` of the stack's storage: the heap, or its local array.
  auto wordPtr = [&](Id index) {
    if (!st.local)
      return heapPtr(index);
    return b_.op(spv::Op::OpAccessChain, m_.typePointer(spv::StorageClass::Function, u32),
                 {st.local, index});
  };
  auto readAt = [&](Id at) {
    std::vector<Id> w;
    for (uint32_t i = 0; i < pw; ++i)
      w.push_back(b_.load(u32, wordPtr(b_.iadd(u32, at, b_.u32(i)))));
    return wordsValue(w, elem);
  };
  auto writeAt = [&](Id at, Id v) {
    std::vector<Id> w = valueWords(v, elem);
    for (uint32_t i = 0; i < pw; ++i)
      b_.store(wordPtr(b_.iadd(u32, at, b_.u32(i))), w[i]);
  };
  if (auto *push = dyn_cast<AdStackPushStmt>(&op)) {
    Id write = m_.newId(), over = m_.newId(), done = m_.newId();
    Id depth = b_.load(u32, st.depth);
    Id fits = b_.cmp(Op::OpULessThan, depth, st.capacity);
    b_.selectionMerge(done);
    b_.condBranch(fits, write, over);
    b_.label(write);
    Id at = b_.iadd(u32, st.base, b_.imul(u32, depth, st.row));
    writeAt(at, get(push->value()));
    if (out_.entryWords[id] > pw) // the adjoint slot starts at 0
      writeAt(b_.iadd(u32, at, b_.u32(pw)), zeroOf(elem));
    b_.store(st.depth, b_.iadd(u32, depth, b_.u32(1)));
    b_.branch(done);
    // Nothing is written; remember how far past the capacity this push went.
    b_.label(over);
    Id excess = b_.iadd(u32, b_.load(u32, st.excess), b_.u32(1));
    b_.store(st.excess, excess);
    b_.op(Op::OpAtomicUMax, u32,
          {controlPtr(b_.u32(out_.data.needed + id)), b_.u32(kScopeDevice), b_.u32(0), excess});
    b_.branch(done);
    b_.label(done);
    return;
  }
  unsigned underflow = site(op, adStackUnderflowText(alloca));
  if (op.kind() == StmtKind::AdStackPop) {
    // An excess push goes first (nothing was stored for it).
    Id dropExcess = m_.newId(), dropRow = m_.newId(), done = m_.newId();
    Id excess = b_.load(u32, st.excess);
    Id hasExcess = b_.cmp(Op::OpINotEqual, excess, b_.u32(0));
    b_.selectionMerge(done);
    b_.condBranch(hasExcess, dropExcess, dropRow);
    b_.label(dropExcess);
    b_.store(st.excess, b_.isub(u32, excess, b_.u32(1)));
    b_.branch(done);
    b_.label(dropRow);
    Id depth = b_.load(u32, st.depth);
    raiseIf(b_.cmp(Op::OpIEqual, depth, b_.u32(0)), underflow);
    b_.store(st.depth, b_.isub(u32, depth, b_.u32(1)));
    b_.branch(done);
    b_.label(done);
    return;
  }
  // After an overflow the depth stays at the capacity: reads use the last
  // stored entry (the runtime refuses capacity 0, so it exists).
  Id depth = b_.load(u32, st.depth);
  raiseIf(b_.cmp(Op::OpIEqual, depth, b_.u32(0)), underflow);
  Id at = b_.iadd(u32, st.base, b_.imul(u32, b_.isub(u32, depth, b_.u32(1)), st.row));
  Id adj = b_.iadd(u32, at, b_.u32(pw));
  if (op.kind() == StmtKind::AdStackLoadTop) {
    set(&op, readAt(at));
  } else if (op.kind() == StmtKind::AdStackLoadTopAdj) {
    set(&op, readAt(adj));
  } else {
    Id ty = b_.typeOf(elem);
    writeAt(adj, b_.fadd(ty, readAt(adj), get(cast<AdStackAccAdjointStmt>(op).value())));
  }
}

} // namespace qd::spirv
