//===- EmitContext.h - State shared by the LLVM emitter's parts -*- C++ -*-===//
//
// The LLVM emitter is split by concern (arithmetic, memory, control flow,
// adstacks, the target's hooks); they share an EmitContext: the module and
// builder, the kernel's layout, the kernel-wide maps, and the state of the
// function being emitted. Everything that belongs to one LLVM function
// (its entry block, the context fields it loaded, its value map, its loops,
// its lanes) lives in one FunctionState, so emitting an outlined task is
// switching `fn` to a fresh state and back.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "LlvmTarget.h"
#include "qd/analysis/CooperativeTask.h"
#include "qd/analysis/ElementOwnership.h"
#include "qd/analysis/StopChecks.h"
#include "qd/analysis/TaskVectorPlan.h"

#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/ir/Printer.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/DenseSet.h>
#include <llvm/IR/IRBuilder.h>

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace qd::codegen {

using LV = llvm::Value;
using llvm::BasicBlock;
using CtxField = abi::LaunchContextField;

/// An adstack of the kernel: its id (index in KernelLayout::stacks), element
/// and bytes per entry of one lane (the primal, then the adjoint if used).
struct StackRef {
  unsigned id;
  ScalarType elem;
  unsigned entryBytes;
};

/// The rows of a stack at one vector width (1 in scalar code): the bytes
/// between consecutive entries (LlvmTarget::adStackRowBytes), the end of
/// the stack (base + capacity rows), and two locals: `top`, the address of
/// the next free row (the depth as a pointer, so a push or pop moves it by
/// one row instead of multiplying the depth by the row size), and `peak`,
/// the highest `top` this call of the function reached. A push past the
/// capacity still moves `top` (past `end`: the depth stays exact), but it
/// writes over the last row instead of past the end; the launch fails with
/// an overflow error anyway, and the function's exit raises needed[s] from
/// `peak` (AdStackLowering::finishFunction). So a push or pop is straight-
/// line code: no branch, no new basic block. LLVM's SSA construction and
/// register allocation grow faster than linearly with the blocks of a
/// function, and a loop carrying hundreds of values has hundreds of stacks.
struct AdStackRows {
  LV *rowBytes = nullptr, *end = nullptr;
  llvm::AllocaInst *top = nullptr, *peak = nullptr;
  /// Set when the stack's state stays in memory (see AdStackLowering::
  /// rows): `end` and the base are read from these slots at each use.
  llvm::AllocaInst *endSlot = nullptr, *baseSlot = nullptr;
  /// The block after the last check that the stack is not empty, while
  /// `top` has not moved since (a read then a pop of the same entry check
  /// once; EmitContext::continuesFrom).
  BasicBlock *checkedIn = nullptr;
};

/// Per-function facts of a stack, computed once in the entry block: its
/// base (LlvmTarget::adStackBase) and capacity, and its depth. The depth
/// lives in entry-block allocas, not in the heap: each thread owns its
/// stacks, so the depth is private, SROA keeps it in registers, and no store
/// through a heap pointer can clobber it. A stack whose operations all run
/// with every lane active keeps its depth in AdStackRows (one per width:
/// vector and scalar code lay rows out differently); a lane stack keeps a depth per lane
/// (`laneCount`) and clamps reads to `lastIndex` (max(capacity - 1, 0)) after an overflow.
struct AdStackFrame {
  LV *base = nullptr, *capacity = nullptr, *lastIndex = nullptr;
  /// A stack of a target with indexed depths (LlvmTarget::
  /// adStackIndexedDepth): its depth, the capacity and the bytes between
  /// rows, all i32.
  llvm::AllocaInst *depth = nullptr;
  LV *capacity32 = nullptr, *rowBytes32 = nullptr;
  /// GPU, a compacted heap (docs/runtime.md, "Compacted heap"), from the
  /// table: the bytes from the heap's start to lane 0 of the stack's first
  /// row in this thread's group's region, its capacity and the bytes
  /// between its rows (i64); null outside a parallel task.
  LV *groupStart = nullptr, *groupCapacity = nullptr, *groupRow = nullptr;
  std::map<unsigned, AdStackRows> rows;  // by width, made on demand
  llvm::AllocaInst *laneCount = nullptr; // per lane (a lane stack), made on demand
  /// A lane stack's guess of the depth its active lanes share (i64): the
  /// rows are one contiguous vector when they do (see AdStackLowering::
  /// perLaneOp).
  llvm::AllocaInst *sharedDepth = nullptr;
};

/// Lane state of a loop that lanes leave at different times: the lanes that
/// broke out, and those that broke or continued in this iteration.
struct LaneLoop {
  llvm::AllocaInst *exited = nullptr, *skipped = nullptr;
};

/// The lanes of vector code (docs/runtime.md, "Vectorised tasks"). Outside
/// vector code `width` is 1 and the rest is empty.
struct LaneState {
  unsigned width = 1;
  const TaskVectorPlan *plan = nullptr;
  /// The active lanes (null: all the lanes of the group).
  LV *mask = nullptr;
  /// The lanes of the group (i1 per lane): the chunk's last group may have
  /// fewer iterations than lanes, and its lanes past the end stay inactive
  /// from the start. Null where every lane runs an iteration.
  LV *groupMask = nullptr;
  /// Lane-affine integers: lane l holds base + l.
  std::unordered_map<const Value *, LV *> affineBase;
  /// Clamped lane-affine integers (a stencil's clamped neighbour): lane l
  /// holds base + l clamped to [lo, hi] (a null bound: none on that side).
  struct ClampedAffine {
    LV *base = nullptr, *lo = nullptr, *hi = nullptr;
  };
  std::unordered_map<const Value *, ClampedAffine> clampedAffine;
  /// A parallel band's vector code: lane l's innermost index is
  /// bandInnerBase + l (task_index statements of that dimension are
  /// lane-affine).
  LV *bandInnerBase = nullptr;
  /// The masked loops being emitted.
  std::unordered_map<const Stmt *, LaneLoop> loops;
  /// The common counter (i32) of each descending loop being emitted.
  std::unordered_map<const Stmt *, LV *> descendingCounters;
  /// Lane stacks (ids) whose active lanes all stand at the stack's shared
  /// depth in the code being emitted (a masked loop's body checked at its
  /// header, ControlFlowLowering::maskedLoop): their operations read and
  /// write rows at that depth and leave the per-lane depths alone.
  std::unordered_set<unsigned> rowStacks;
  /// Those of rowStacks the body only pushes, checked at the header to have
  /// no inactive lane above the shared depth either: the depth only grows
  /// in the body, so the row a push writes is free in every lane and the
  /// push stores the whole row.
  std::unordered_set<unsigned> wholeRowPushes;
  /// Per-lane if arms being emitted: the block after the arm, and the depth
  /// of FunctionState::loops there.
  std::vector<std::pair<BasicBlock *, size_t>> ifExits;
};

/// A loop being emitted: where continue and break go, and its statement.
struct LoopFrame {
  BasicBlock *continueTo, *breakTo;
  const Stmt *stmt;
};

/// Everything that belongs to the LLVM function being emitted.
struct FunctionState {
  llvm::Function *fn = nullptr;
  BasicBlock *entry = nullptr;
  /// The QdLaunchContext pointer, and the thread value the target keeps
  /// (CPU: the worker argument).
  LV *ctxArg = nullptr, *thread = nullptr;
  llvm::DenseMap<const Value *, LV *> values; // open addressing: no node per value
  /// Loaded once in the entry block (the context does not change during a
  /// launch; global data could otherwise alias it).
  std::unordered_map<CtxField, LV *> ctxFields;
  std::unordered_map<unsigned, AdStackFrame> stacks;
  /// GPU: whether the launch has a compacted heap's table (i1), the table
  /// (u32 words, ptr addrspace(1); the launch context where there is
  /// none), this thread's group's first entry in it and the launch's
  /// threads per group (i64), computed at the first stack.
  LV *adStackGrouped = nullptr, *adStackTable = nullptr, *adStackGroupAt = nullptr,
     *adStackGroupLanes = nullptr;
  std::unordered_map<unsigned, LV *> shapes, slots;
  /// Each ndarray extent as an i32 of its own (MemoryLowering::narrowExtent).
  std::unordered_map<LV *, LV *> narrowExtents;
  /// Launch words loaded in the entry block, by word index.
  std::unordered_map<unsigned, LV *> words;
  std::vector<LoopFrame> loops;
  /// In a parallel task's function: its index in KernelLayout::tasks and its
  /// plan (which also serves the scalar code: its private atomics).
  int parallelTask = -1;
  const TaskVectorPlan *taskPlan = nullptr;
  /// GPU: the task runs cooperatively (a group per iteration); its global
  /// stores and atomics outside the shared loop run where `leader` (the
  /// group's first thread) holds.
  const CooperativeTaskPlan *cooperative = nullptr;
  LV *leader = nullptr;
  /// GPU, a task run one iteration per thread: the values that may differ
  /// between its iterations (taskVaryingValues); an atomic whose indices
  /// are none of them goes through LlvmTarget::uniformAtomicUpdate.
  const std::unordered_set<const Value *> *taskVarying = nullptr;
  LaneState lanes;
  /// A parallel band's indices of the iteration being emitted (dimension 0
  /// is also the task's own value); task_index statements read them.
  std::array<LV *, ForStmt::kMaxDims> bandIndex{};
  /// Back edges this thread has run (stop checks); created at the first.
  llvm::AllocaInst *backEdges = nullptr;
  /// On a GPU, whether this thread is a reader of the stop word (one in
  /// abi::kDeviceStopCheckSpread), computed in the entry block.
  LV *stopReader = nullptr;
  /// Adstack rows (AdStackRows) made in this function so far, by stack id.
  unsigned stackRows = 0;
  std::vector<std::pair<unsigned, AdStackRows *>> uniformRows;
  /// The blocks that continue after an error check (EmitContext::raiseIf),
  /// each with its chain (consecutive checks of straight-line code) and its
  /// place in the chain.
  std::unordered_map<const BasicBlock *, std::pair<unsigned, unsigned>> checkChains;
  unsigned checkChainCount = 0;
};

class EmitContext {
public:
  EmitContext(const Kernel &kernel, llvm::LLVMContext &context, const CodegenOptions &options,
              KernelLayout &layout, LlvmTarget &target);

  const Kernel &kernel;
  llvm::LLVMContext &llvm;
  const CodegenOptions &opts;
  KernelLayout &layout;
  LlvmTarget &target;
  std::unique_ptr<llvm::Module> module;
  llvm::IRBuilder<> b;
  llvm::PointerType *ptrTy;
  llvm::IntegerType *i64, *i32;
  llvm::StructType *ctxTy, *errorTy;

  /// The function being emitted.
  FunctionState *fn = nullptr;
  /// The top-level statement (task) being emitted.
  const Stmt *currentTask = nullptr;
  std::unordered_map<const Value *, StackRef> stacks;
  /// The module's launch-word array while it is being emitted (its type is
  /// a placeholder until finishLaunchWords), and each word's index.
  llvm::GlobalVariable *launchWords = nullptr;
  std::map<std::pair<int, unsigned>, unsigned> launchWordIndex;
  /// Set on an internal inconsistency; run() reports it.
  std::string error;
  /// The instructions of the functions finished so far
  /// (KernelEmitter::finishFunction).
  size_t instructions = 0;
  /// The loops that read the stop word (empty without
  /// CodegenOptions::stopChecks).
  StopCheckPlan stopPlan;
  /// Locals whose every load and store is a statement of the block that
  /// declares them (isBlockLocal: the adjoints of straight-line code, most
  /// of a gradient's statements), added as their allocas are emitted: each
  /// is emitted as the value it holds, never as memory, which LLVM would
  /// only promote back (MemoryLowering).
  llvm::DenseSet<const Value *> blockLocals;
  static bool isBlockLocal(const AllocaStmt &a);

  /// Makes `state` the current function: `f` with an entry block (for
  /// allocas and cached loads) that falls through to a body block, where
  /// the builder is left.
  void beginFunction(FunctionState &state, llvm::Function *f, LV *ctxArg, LV *thread);
  BasicBlock *newBlock(const llvm::Twine &name) { return BasicBlock::Create(llvm, name, fn->fn); }
  /// Whether the builder's block is `after` or comes after it through
  /// error checks only (raiseIf), so that whatever held in `after` holds
  /// here too: `after` dominates it and nothing but checks lies between.
  bool continuesFrom(const BasicBlock *after) const;
  /// A builder before the entry block's terminator.
  llvm::IRBuilder<> entryBuilder() { return llvm::IRBuilder<>(fn->entry->getTerminator()); }

  llvm::Type *typeOf(ScalarType t);
  /// In-memory type (i1 is a byte).
  llvm::Type *memTypeOf(ScalarType t) { return t == ScalarType::I1 ? b.getInt8Ty() : typeOf(t); }
  LV *toMem(LV *v, ScalarType t);
  LV *fromMem(LV *v, ScalarType t);
  /// `t`, or a vector of `t` of the length of `like` when it is a vector.
  static llvm::Type *shaped(llvm::Type *t, LV *like);

  /// An alloca in the entry block. Vector allocas start at zero: masked
  /// stores keep the inactive lanes' old value, which must not be undefined.
  llvm::AllocaInst *entryAlloca(llvm::Type *t, const char *name = "");
  /// A field of the launch context, loaded once in the entry block.
  LV *ctxField(CtxField f);
  /// Launch word `w` (KernelLayout::LaunchWord) as an i64, loaded once in
  /// the entry block from the module's constant array; null when the
  /// target has none or the array is full (read the value through ctx).
  LV *launchWord(KernelLayout::LaunchWord w);
  /// A pointer launch word as a pointer (LlvmTarget::devicePointer), or null.
  LV *launchPointer(KernelLayout::LaunchWord w);
  /// Gives the constant array its final size once every word is known.
  void finishLaunchWords();
  /// The LLVM value of `v` (scalar arguments are read from ctx->scalars).
  LV *get(const Value *v);
  void set(const Value *v, LV *value) { fn->values[v] = value; }
  LV *boundValue(Bound bound);
  /// Whether serial loop `loop` has a literal trip count of at least 64
  /// and pushes or pops an adstack (a long tape loop).
  static bool isLongTapeLoop(const ForStmt &loop);
  /// `end`, the bound of serial loop `loop`, as the code reads it: a long
  /// tape loop's is the constant plus a launch word that is always 0 (GPU
  /// targets; as is on the CPU, which has no launch words).
  LV *tapeLoopBound(const ForStmt &loop, LV *end);

  /// Adds an error site for `s`; returns its id (1-based).
  unsigned site(const Stmt &s, std::string what);
  /// if (cond) { raise(id, data); return; }. The launch fails with the
  /// first error raised, so the rest of this function's work (the serial
  /// kernel, or the task's current chunk) is skipped, as the interpreter
  /// stops at its first error; code after the check may rely on `!cond`.
  void raiseIf(LV *cond, unsigned id, llvm::ArrayRef<LV *> data = {});
  /// Records error site `site` in ctx->error with a compare-and-swap on its
  /// `site` (0: none yet); the winner writes `data` (LlvmTarget::raiseError).
  void recordError(unsigned site, llvm::ArrayRef<LV *> data);
  /// At a back edge of `loop`: every abi::kStopCheckInterval-th back edge
  /// of this thread reads ctx->stop and, when the host asked the launch to
  /// stop, raises the loop's stop site with the reason. Only the loops of
  /// `stopPlan` check: short nests with constant trip counts get none.
  void stopCheck(const Stmt *loop);
  llvm::MDNode *unlikelyFirst();
  llvm::MDNode *unlikelySecond();
  /// Loop metadata that turns off runtime unrolling (see EmitControl.cpp).
  llvm::MDNode *noRuntimeUnroll();
  /// Loop metadata that keeps LLVM from unrolling the loop at all (a long
  /// tape loop: isLongTapeLoop).
  llvm::MDNode *noUnroll();
  llvm::Function *intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Type *> types);

  /// A value as an 8-byte capture slot, and back.
  LV *toSlot(LV *v);
  LV *fromSlot(LV *raw, ScalarType t);

  /// What the kernel writes, by alias class, on a target that marks the
  /// loads of read-only fields (LlvmTarget::marksReadOnlyLoads); none
  /// elsewhere (the CPU walks no kernel for it).
  std::optional<WrittenAliasClasses> written;
};

/// Helpers of vector code: values with one element per lane, masks.
class Lanes {
public:
  explicit Lanes(EmitContext &c) : c_(c) {}

  LaneState &state() { return c_.fn->lanes; }
  unsigned width() const { return c_.fn->lanes.width; }
  bool vectorMode() const { return width() > 1; }
  const TaskVectorPlan &plan() const { return *c_.fn->lanes.plan; }
  /// Whether `v` has one value per lane (always false outside vector mode).
  bool varying(const Value *v) const { return vectorMode() && plan().isVarying(v); }
  llvm::Type *vecOf(llvm::Type *t) { return llvm::FixedVectorType::get(t, width()); }
  LV *splat(LV *v);
  /// The value of `v`, as a vector when `asVector`.
  LV *operand(const Value *v, bool asVector) { return asVector ? splat(c_.get(v)) : c_.get(v); }
  LV *mask() const { return c_.fn->lanes.mask; }
  /// The active lanes where some lane of the vector may be inactive (a
  /// partial mask, or a partial group), else null. Memory accesses, atomics
  /// and error checks use it: an inactive lane must not touch memory or
  /// raise. (A local's inactive lanes need no mask outside `mask()`: nothing
  /// of a lane past the group's end is ever observed.)
  LV *partialMask() const { return mask() ? mask() : c_.fn->lanes.groupMask; }
  /// The lanes of the group (LaneState::groupMask), as a vector.
  LV *allLanes();
  /// The active lanes, as a vector.
  LV *activeMask() { return mask() ? mask() : allLanes(); }
  /// <0, 1, ..., width - 1> of type `t`.
  LV *laneIds(llvm::Type *t);
  /// Whether some active lane has `cond` set (a scalar condition is the
  /// same in every lane, and some lane is always active).
  LV *anyLane(LV *cond);
  /// Lane `l` of `v` (`v` itself when uniform).
  LV *lane(LV *v, unsigned l);
  /// Calls the scalar `fn` once per lane.
  LV *perLane(llvm::FunctionCallee fn, llvm::ArrayRef<LV *> args);
  /// Values a loop over the lanes reads lane by lane: a vector is stored
  /// once, before the loop, to a slot of the entry block.
  struct LaneArray {
    LV *uniform = nullptr; // a scalar: the same in every lane
    llvm::AllocaInst *slot = nullptr;
    llvm::Type *elem = nullptr;
  };
  LaneArray spill(LV *v);
  /// Lane `l` (an i64 inside forEachActiveLane) of `a`.
  LV *laneOf(const LaneArray &a, LV *l);
  /// Runs `body(l)` for every active lane `l` (an i64) in a loop over the
  /// lanes, which is not unrolled: a copy of an atomic's compare-exchange
  /// loop per lane made vector code slow to compile. Read vectors with
  /// spill() before and laneOf() inside.
  void forEachActiveLane(const std::function<void(LV *)> &body);
  /// Stores `v` to local `slot`, only in the active lanes of a vector local
  /// unless statement `s` may write them all (TaskVectorPlan).
  void storeLocal(LV *slot, LV *v, const Stmt *s = nullptr);
  /// What a local of type `t` (a vector when varying) holds after `s`
  /// stores `v` to it, where `old` reads what it held: `v`, in the active
  /// lanes only (storeLocal's rule).
  LV *storedLocal(llvm::Type *t, LV *v, const Stmt *s, llvm::function_ref<LV *()> old);
  /// Records `s` as lane-affine when it adds a uniform value to, or
  /// converts, a lane-affine integer: accesses at such an index in the last
  /// dimension are contiguous. A min or max of a lane-affine integer and a
  /// uniform one is recorded as clamped lane-affine.
  void noteAffine(const Stmt &s);
  llvm::AllocaInst *maskAlloca(const char *name);
  LV *loadMask(llvm::AllocaInst *a);
  void clearMask(llvm::AllocaInst *a);

private:
  void noteClamp(const BinaryStmt &bin);

  EmitContext &c_;
};

} // namespace qd::codegen
