//===- SpirvEmitter.h - Kernels to SPIR-V compute shaders -------*- C++ -*-===//
//
// SpirvEmitter walks a kernel (one visitor case per statement kind) and
// emits its launches (KernelLayout::launches) as compute entry points of
// one module; qd/codegen/spirv/SpirvCodegen.h describes the interface with
// the runtime. Structured control flow maps onto SPIR-V's structured
// constructs: an `if` is a selection, `for`/`while` a loop whose merge
// block `break` branches to and whose continue target `continue` branches
// to, an error site a selection whose taken arm records the site and
// returns.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "SpirvBuilder.h"

#include "qd/abi/DeviceEntries.h"
#include "qd/analysis/CooperativeTask.h"
#include "qd/analysis/ElementOwnership.h"
#include "qd/analysis/StopChecks.h"
#include "qd/codegen/spirv/SpirvCodegen.h"
#include "qd/ir/Visitor.h"

#include <array>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace qd::spirv {

// Shared by the emitter's files (SpirvEmitter.cpp: kernel structure,
// values, error sites, control flow; SpirvEmitArith.cpp; SpirvEmitMemory.cpp:
// memory and adstacks).
inline constexpr uint32_t kScopeDevice = uint32_t(spv::Scope::Device);
inline constexpr uint32_t kVolatile = uint32_t(spv::MemoryAccessMask::Volatile);
/// Bindings of set 0.
inline constexpr uint32_t kControlBinding = 0, kHeapBinding = 1, kFirstSlotBinding = 2;

/// 32-bit words of a value of type `t` in memory.
inline unsigned wordsOf(ScalarType t) {
  return t == ScalarType::I64 || t == ScalarType::F64 ? 2 : 1;
}

inline std::string whereOf(const Stmt &s) {
  return s.loc().str();
}

/// How a global slot's elements are stored.
struct SlotInfo {
  ScalarType elem = ScalarType::F32;
  /// The storage element type (bool: uint; a float with a compare-exchange
  /// add: uint/ulong) and its variable (binding 2 + slot).
  Id storage = 0, var = 0, pointer = 0;
  /// Floats stored as integers (a compare-exchange loop adds to them).
  bool floatAsBits = false;
  /// NonWritable (SpirvOptions::readOnlyBuffers).
  bool readOnly = false;
};

/// An adstack's per-function state: its first word for this invocation,
/// the words between entries, its capacity, and locals for its depth and
/// its excess pushes (past the capacity, not popped yet).
struct StackState {
  Id base = 0, row = 0, capacity = 0, depth = 0, excess = 0;
  /// A local tape: the invocation's own array of u32 words (Function
  /// storage), entry d at d * row words; 0 for a stack in the heap.
  Id local = 0;
};

/// With SpirvOptions::checkLoopExits, a loop's exit flag: bit `bit` of the
/// invocation's word at `ptr` of the loop flags (Workgroup memory, which
/// neither SPIRV-Tools nor a driver turns into SSA values: a flag in a
/// register would fold to "set", as the program's semantics say every path
/// out of a loop sets it). Null without checks.
struct ExitFlag {
  Id ptr = 0, bit = 0;
  explicit operator bool() const { return ptr != 0; }
};

struct LoopFrame {
  Id continueTo, breakTo;
  const Stmt *stmt;
  ExitFlag exited;
};

class SpirvEmitter : public ExhaustiveStmtVisitor<SpirvEmitter> {
public:
  SpirvEmitter(const Kernel &kernel, const SpirvOptions &options, SpirvKernel &out);
  absl::Status run();

  void visitConstStmt(ConstStmt &s);
  void visitBinaryStmt(BinaryStmt &s);
  void visitUnaryStmt(UnaryStmt &s);
  void visitCmpStmt(CmpStmt &s);
  void visitSelectStmt(SelectStmt &s);
  void visitCastStmt(CastStmt &s);
  void visitAllocaStmt(AllocaStmt &s);
  void visitLocalLoadStmt(LocalLoadStmt &s);
  void visitLocalStoreStmt(LocalStoreStmt &s);
  void visitGlobalLoadStmt(GlobalLoadStmt &s) { globalAccess(s); }
  void visitGlobalStoreStmt(GlobalStoreStmt &s) {
    guarded(s, [&] { globalAccess(s); });
  }
  void visitAtomicAddStmt(AtomicAddStmt &s) {
    guarded(s, [&] { globalAccess(s); });
  }
  void visitAtomicMaxStmt(AtomicMaxStmt &s) {
    guarded(s, [&] { globalAccess(s); });
  }
  void visitShapeStmt(ShapeStmt &s);
  void visitTaskIndexStmt(TaskIndexStmt &s);
  void visitForStmt(ForStmt &s);
  void visitSerialStmt(SerialStmt &s) { emitBlock(s.body()); }
  void visitWhileStmt(WhileStmt &s);
  void visitBreakStmt(BreakStmt &s);
  void visitContinueStmt(ContinueStmt &s);
  void visitIfStmt(IfStmt &s);
  void visitAdStackAllocaStmt(AdStackAllocaStmt &s);
  void visitAdStackPushStmt(AdStackPushStmt &s) { adStackOp(s); }
  void visitAdStackPopStmt(AdStackPopStmt &s) { adStackOp(s); }
  void visitAdStackLoadTopStmt(AdStackLoadTopStmt &s) { adStackOp(s); }
  void visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &s) { adStackOp(s); }
  void visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &s) { adStackOp(s); }

private:
  /// The state of the entry function being emitted.
  struct Function {
    FunctionWords words;
    Id id = 0;
    std::unordered_map<const Value *, Id> values, locals;
    std::map<uint32_t, Id> controlWords;
    std::map<unsigned, StackState> stacks;
    std::vector<LoopFrame> loops;
    Id thread = 0; // u32
    /// Checked loops open around the code being emitted (their exit flags'
    /// nesting level).
    unsigned exitDepth = 0;
    Id localIndex = 0; // u32: the invocation in its workgroup
    Id never = 0;      // bool: exitFlagNever()
    Id iterations = 0; // u32 variable: loop iterations run (stop checks)
    Id stopReader = 0; // bool: this invocation reads the stop word at every poll
    std::array<Id, ForStmt::kMaxDims> bandIndex{};
    int parallelTask = -1;
    /// A parallel task's values that may differ between its iterations
    /// (qd/analysis/TaskVarying.h); with SpirvFeatures::subgroupArithmetic,
    /// an atomic add whose indices are none of them is summed over the
    /// subgroup first.
    std::unordered_set<const Value *> varying;
    /// A parallel task's elements its iterations own: an atomic add to an
    /// element only its own iteration touches is a plain update.
    std::optional<ElementOwnership> ownership;
    /// Invocations of a workgroup (LocalSize).
    unsigned groupSize = 1;
    /// A cooperative task's plan, and its invocation in the workgroup (u32)
    /// and whether it is the first (bool).
    const CooperativeTaskPlan *cooperative = nullptr;
    Id lane = 0, leader = 0;
  };

  // Kernel structure (NvptxTarget's entries, here as entry points).
  absl::Status prescan();
  void declareBindings();
  void beginFunction(Function &fn, const std::string &name, bool parallel);
  void endFunction(Function &fn, const std::string &name);
  /// beginFunction for parallel task `task` (its index `index`) and what
  /// every form of it knows: its owned elements.
  void beginTask(Function &fn, const std::string &name, const ForStmt &task, int index);
  void emitParallelTask(ForStmt &task);
  /// How far this code lets ndarray arguments share storage
  /// (SpirvOptions::distinctNdarrays).
  NdarrayAliasing aliasing() const { return ndarrayAliasing(opts_.distinctNdarrays); }
  // Cooperative tasks (SpirvCooperative.cpp).
  CooperativeTaskPlan planCooperative(const ForStmt &task) const;
  /// The task's entry running a workgroup per iteration: `qd_task_<n>`, or
  /// with `alternative` its second form `qd_task_<n>_coop`.
  void emitCooperativeTask(ForStmt &task, const CooperativeTaskPlan &plan, bool alternative);
  void emitSharedLoop(const CooperativeTaskPlan::SharedLoop &shared);
  /// The sum over the workgroup of each invocation's `partial` (the same
  /// on every invocation).
  Id groupSum(Id partial, ScalarType t);
  void groupBarrier();
  /// A u32 built-in input (component 0 of its uvec3), loaded in the prologue.
  Id builtIn(spv::BuiltIn which);
  /// `emit()` on the workgroup's first invocation only where the task is
  /// cooperative and `s` is a global store or atomic its plan guards.
  void guarded(const Stmt &s, const std::function<void()> &emit);
  void emitTopLevel(Stmt &s);
  void emitBlock(Block &block);

  // Values.
  Id get(const Value *v);
  void set(const Value *v, Id id) { fn_->values[v] = id; }
  Id boundValue(Bound b);
  /// A bound of loop `s`: boundValue, made opaque where a constant would
  /// hurt (see the definition).
  Id loopBound(const ForStmt &s, Bound b);
  /// A word of the launch data (loaded once, in the prologue).
  Id controlWord(uint32_t index);
  /// A pointer to word `index` (an id of a u32) of the launch data / heap.
  Id controlPtr(Id index);
  Id heapPtr(Id index);
  /// A value as two words (its 8-byte slot: integers sign-extended, floats
  /// as their bits) and back.
  std::pair<Id, Id> toWords(Id v, ScalarType t);
  Id fromWords(Id lo, Id hi, ScalarType t);
  /// Entry storage of adstacks: 1 or 2 words per value.
  std::vector<Id> valueWords(Id v, ScalarType t);
  Id wordsValue(const std::vector<Id> &w, ScalarType t);
  Id zeroOf(ScalarType t);
  /// An OpVariable of the function (Function storage) of `type`.
  Id localVariable(Id type);
  /// Runs `fn` with instructions going to the prologue.
  template <typename Fn> auto inPrologue(Fn &&f) {
    Words *saved = b_.out;
    b_.out = &fn_->words.prologue;
    auto r = f();
    b_.out = saved;
    return r;
  }

  // Error sites.
  unsigned site(const Stmt &s, std::string what);
  /// if (cond) { record site `id` with `data`; return; }
  void raiseIf(Id cond, unsigned id, const std::vector<std::pair<Id, Id>> &data = {});
  /// With SpirvOptions::checkLoopExits, before a loop: its exit flag,
  /// cleared (null without checks; one bit per nesting level). setExit sets
  /// it where the loop ends as the program says (where `cond` holds, if
  /// given); checkExit, after the loop's merge block, raises `stmt`'s error
  /// site where it is not set (the driver left the loop) and frees the
  /// level.
  ExitFlag beginExitCheck();
  void setExit(const ExitFlag &flag, Id cond = 0);
  /// False, in a way no compiler can know (T >= 2^31; T is below 2^26): a
  /// checked loop's back edge leaves on it, so that every checked loop has
  /// two exits. On lavapipe the check of a loop with one exit never fired,
  /// as if the flag's store on that exit had been moved after the loop.
  Id exitFlagNever();
  void checkExit(const ExitFlag &flag, const Stmt &stmt);
  /// With SpirvOptions::stopChecks, at the start of an iteration of `loop`
  /// (a `for` with a run-time trip count or a `while`): counts it and,
  /// every stopCheckInterval-th, raises the loop's stop site if the host
  /// set the stop word.
  void stopCheck(const Stmt &loop);

  // Parts.
  Id integerBinary(BinaryStmt &s, Id x, Id y);
  Id floatMinMax(Id x, Id y, ScalarType t, bool isMin);
  void globalAccess(GlobalAccessStmt &g);
  unsigned slotOf(const GlobalAccessStmt &g);
  /// Whether the device adds to `slot`'s elements atomically by itself (no
  /// compare-exchange loop).
  static bool nativeAdd(const SlotInfo &slot);
  /// Whether `s` is inside a loop of parallel task `task`'s iteration.
  static bool inLoopOfTask(const Stmt &s, const ForStmt &task);
  /// `add`'s add of `value` to *ptr (its loop's error site names `add`).
  void atomicAdd(const AtomicAddStmt &add, const SlotInfo &slot, Id ptr, Id value);
  /// atomicAdd of an element the iteration does not choose (index `flat`):
  /// where every active invocation of the subgroup updates that element,
  /// one of them adds their sum.
  void subgroupAtomicAdd(const AtomicAddStmt &add, const SlotInfo &slot, Id ptr, Id flat, Id value);
  const StackState &stack(unsigned id);
  void adStackOp(AdStackOpStmt &op);
  /// A loop: header (OpLoopMerge), `cond()` deciding whether to run the
  /// body (null: always), `body()`, a continue block running `step()`.
  void loop(const Stmt *stmt, const std::function<Id()> &cond, const std::function<void()> &body,
            const std::function<void()> &step);
  /// loop() over an i32 counter: from `first` while below `end`, adding
  /// `step` (i32 ids); `body` gets the counter's value.
  void countedLoop(const Stmt *stmt, Id first, Id end, Id step,
                   const std::function<void(Id)> &body);

  const Kernel &kernel_;
  const SpirvOptions &opts_;
  SpirvKernel &out_;
  KernelLayout &layout_;
  /// What the kernel writes, by alias class (SpirvOptions::readOnlyBuffers).
  std::optional<WrittenAliasClasses> written_;
  /// The code adds floats atomically with the device's own instruction
  /// (OpAtomicFAddEXT; not private atomics, not a compare-exchange loop).
  bool nativeFloatAdds_ = false;
  /// The loops that read the stop word (SpirvOptions::stopChecks).
  StopCheckPlan stopPlan_;
  SpirvModule m_;
  SpirvBuilder b_;
  Function *fn_ = nullptr;
  const Stmt *currentTask_ = nullptr;
  std::string error_;

  std::vector<SlotInfo> slots_;
  std::map<const Stmt *, unsigned> slotOfStmt_;
  std::unordered_map<const Value *, unsigned> stackIds_;
  Id controlVar_ = 0, heapVar_ = 0, uintPtr_ = 0, gidVar_ = 0, stopVar_ = 0;
  /// Built-in inputs besides GlobalInvocationId (an entry lists those it
  /// reads), and the cooperative sums' Workgroup arrays, by element type.
  std::map<spv::BuiltIn, Id> builtIns_;
  std::map<ScalarType, Id> groupScratch_;
  /// The loop exit flags: `uint[loopFlagWords_ * workgroupSize]` in
  /// Workgroup memory, declared at the end (when the deepest nesting is
  /// known); word `level / 32 * workgroupSize + local invocation` holds
  /// bit `level % 32` of an invocation's loops.
  Id loopFlagsVar_ = 0;
  unsigned loopFlagWords_ = 0;
  bool needsInt64_ = false, needsFloat64_ = false;

  DeviceEntryPlan plan_;
  unsigned current_ = 0;
};

} // namespace qd::spirv
