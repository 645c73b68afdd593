//===- KernelEmitter.h - The target-neutral LLVM emitter --------*- C++ -*-===//
//
// KernelEmitter walks a kernel and dispatches each statement (one visitor
// case per statement kind) to the part of the emitter that lowers it:
//
//   ArithLowering        constants, arithmetic, comparisons, casts, selects
//                        (EmitArith.cpp)
//   MemoryLowering       locals, fields, ndarrays, atomics (EmitMemory.cpp)
//   ControlFlowLowering  loops, ifs, break/continue, masked loops of vector
//                        code (EmitControl.cpp)
//   AdStackLowering      adstack operations (EmitAdStack.cpp)
//
// Parallel tasks go to the target (LlvmTarget::emitParallelTask; CpuTarget
// in CpuTarget.cpp), which lowers their bodies through this emitter. Each
// part works in vector code (one value per SIMD lane) too; see Lanes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "EmitContext.h"

#include "qd/ir/Visitor.h"

#include <absl/status/statusor.h>

#include <functional>

namespace qd::codegen {

class ArithLowering {
public:
  explicit ArithLowering(EmitContext &c) : c_(c), lanes_(c) {}
  LV *constant(ConstStmt &s);
  LV *binary(BinaryStmt &s);
  LV *unary(UnaryStmt &s);
  LV *compare(CmpStmt &s);
  LV *select(SelectStmt &s);
  LV *cast(CastStmt &s);

private:
  LV *integerBinary(BinaryStmt &s, LV *x, LV *y, bool vec);
  /// min/max where NaN loses to a number and -0 < +0.
  LV *floatMinMax(LV *x, LV *y, ScalarType t, bool isMin);

  EmitContext &c_;
  Lanes lanes_;
};

class MemoryLowering {
public:
  explicit MemoryLowering(EmitContext &c) : c_(c), lanes_(c) {}
  void alloca(AllocaStmt &s);
  void localLoad(LocalLoadStmt &s);
  void localStore(LocalStoreStmt &s);
  void shape(ShapeStmt &s);
  /// load, store, atomic_add and atomic_max of fields and ndarrays.
  void globalAccess(GlobalAccessStmt &g);

private:
  unsigned slotOf(const GlobalAccessStmt &g);
  /// ndarray extents and global base pointers are loaded once per function
  /// in the entry block: stores to global data could otherwise alias them,
  /// and LLVM would reload them in every iteration.
  LV *ndShape(const Argument *a, unsigned axis);
  /// An ndarray extent (ndShape) as an i32 of its own (not a trunc of it,
  /// which LLVM turns back into 64-bit arithmetic), for
  /// CodegenOptions::narrowNdarrayOffsets.
  LV *narrowExtent(LV *extent);
  LV *slotBase(unsigned slot);
  /// The extents of the global `g` accesses (i64).
  std::vector<LV *> extentsOf(const GlobalAccessStmt &g);
  /// A global access with per-lane indices or values, in the active lanes.
  void globalAccessLanes(GlobalAccessStmt &g);
  /// globalAccessLanes of an access whose last index is clamped
  /// lane-affine: contiguous where no lane is clamped (false: not such an
  /// access).
  bool clampedAccessLanes(GlobalAccessStmt &g);
  /// The index error site of `g` (its data: the indices).
  unsigned indexSite(GlobalAccessStmt &g);
  LV *addOf(LV *x, LV *y, ScalarType elem);
  /// An atomic update of one element `ptr` by the value `v` of every
  /// active lane (a plain read-modify-write with `plain`).
  void atomicOfLanes(const AtomicRmwStmt &st, LV *ptr, LV *v, bool plain = false);
  /// An atomic update in vector code that is not private
  /// (EmitMemory.cpp).
  void sharedAtomicLanes(AtomicRmwStmt &st, LV *ptr, LV *ptrs, bool contiguous);
  /// What `st` writes over `old` (both in memory form).
  LV *combine(const AtomicRmwStmt &st, LV *old, LV *v);

  EmitContext &c_;
  Lanes lanes_;
  bool splittingClamped_ = false;
};

class KernelEmitter;

class ControlFlowLowering {
public:
  ControlFlowLowering(EmitContext &c, KernelEmitter &e) : c_(c), lanes_(c), e_(e) {}
  /// for i in [begin, end) with `body(i)`, i += step; continue goes to the
  /// latch. `loop` is the statement that breaks and continues leave.
  void countedLoop(LV *begin, LV *end, llvm::Type *ty, const Stmt *loop,
                   const std::function<void(LV *)> &body, uint64_t step = 1);
  /// The same with a step computed at run time (a grid-stride loop).
  void countedLoop(LV *begin, LV *end, llvm::Type *ty, const Stmt *loop,
                   const std::function<void(LV *)> &body, LV *step);
  void forLoop(ForStmt &loop);
  void whileLoop(WhileStmt &w);
  void ifStmt(IfStmt &i);
  /// break / continue.
  void jump(Stmt &s);

private:
  /// The blocks of a loop whose header decides whether to run the body and
  /// whose latch steps it (a counted loop, or a masked loop of vector code).
  struct LoopBlocks {
    BasicBlock *header, *body, *latch, *exit;
  };
  LoopBlocks loopBlocks(const char *prefix);
  /// Emits `body` with `frame` as the innermost loop.
  void inLoop(const LoopFrame &frame, const std::function<void()> &body);
  /// Falls through to the latch, emits `step` there and the back edge, and
  /// continues at the exit.
  void finishLoop(const LoopBlocks &blocks, const Stmt *loop, const std::function<void()> &step);
  /// A for or while loop whose lanes leave at different times.
  void maskedLoop(Stmt &loop);
  /// The lane stacks (ids) whose operations in `loop`'s body all run under
  /// the loop's own mask, when the body has no divergence of its own (no
  /// per-lane if, masked loop or jump out): its iterations may run them as
  /// rows at the shared depth. Empty otherwise.
  /// `pushOnly`: those of them the body only pushes.
  std::vector<unsigned> rowStacksOf(Stmt &loop, std::vector<unsigned> &pushOnly);
  void vectorIf(IfStmt &i, LV *cond, LV *entryMask);

  EmitContext &c_;
  Lanes lanes_;
  KernelEmitter &e_;
};

class AdStackLowering {
public:
  explicit AdStackLowering(EmitContext &c) : c_(c), lanes_(c) {}
  void alloca(AdStackAllocaStmt &a);
  /// push, pop, load_top, load_top_adj, acc_adjoint.
  void op(AdStackOpStmt &op);
  /// At the end of a function: its returns go through one exit that raises
  /// needed[s] for each uniform stack that went past its end (AdStackRows).
  void finishFunction();
  /// Whether the lanes of `mask` stand at the shared depth of every lane
  /// stack of `ids` (an i1).
  /// For those of `wholeRows` also no other lane above it.
  LV *atSharedDepth(const std::vector<unsigned> &ids, LV *mask,
                    const std::vector<unsigned> &wholeRows = {});
  /// After row operations (EmitContext.h, LaneState::rowStacks) under
  /// `mask`: those lanes' depths are the shared depth again.
  void syncLaneCounts(const std::vector<unsigned> &ids, LV *mask);

private:
  const AdStackFrame &frame(unsigned id);
  /// The rows of `st` at `width` lanes (AdStackRows), made in the entry
  /// block on first use.
  AdStackRows &rows(const StackRef &st, unsigned width);
  llvm::AllocaInst *laneCount(unsigned id);
  /// The end (one past the last row) and the base of `r`'s stack: SSA
  /// values, or loads of the slots of a stack whose state is in memory.
  LV *endOf(const AdStackRows &r);
  LV *baseOf(const AdStackFrame &f, const AdStackRows &r);
  /// The stack's depth is one value (scalar code, or all lanes together).
  void uniformOp(AdStackOpStmt &op, const StackRef &st, unsigned width);
  /// The depth is an i32 count (LlvmTarget::adStackIndexedDepth).
  void indexedOp(AdStackOpStmt &op, const StackRef &st);
  /// Each lane keeps its own depth (operations under a partial mask).
  void perLaneOp(AdStackOpStmt &op, const StackRef &st);
  /// What perLaneOp's two paths need: the operation, the lanes' depths
  /// before it, the active lanes (and as 0/1 counts), the value pushed or
  /// added (in memory form), the underflow site (0 for a push).
  struct LaneStackOp {
    const StackRef *st = nullptr;
    StmtKind kind{};
    unsigned underflow = 0;
    LV *value = nullptr, *count = nullptr, *mask = nullptr, *activeOnes = nullptr;
    bool wholeRow = false; // a push may store the whole row (LaneState::wholeRowPushes)
  };
  /// Where a lane stack's rows are: its base, the bytes of one lane's
  /// primal, the row type and alignment, the bytes of a row and the offset
  /// of the adjoints in a row.
  struct LaneRows {
    LV *base = nullptr;
    unsigned primalBytes = 0;
    llvm::Type *memVec = nullptr;
    llvm::Align align;
    LV *rowBytes = nullptr, *adjointOffset = nullptr;
  };
  LaneRows laneRows(const StackRef &st);
  /// A lane stack's per-lane depths and its shared depth (splat).
  std::pair<LV *, LV *> depthsOf(unsigned id);
  /// The active lanes all stand at `depth`: their entries are one row.
  /// Returns what a read loaded (memory form), else null.
  LV *sharedRowOp(const LaneStackOp &op, LV *depth);
  /// The lanes stand at different depths: gathers and scatters.
  LV *gatherOp(const LaneStackOp &op);
  /// The overflow block `over` of a push: needed[id] = max(needed[id],
  /// asked()), asked() being the pushes past the capacity, then on to
  /// `done`.
  void overflow(BasicBlock *over, BasicBlock *done, const StackRef &st,
                const std::function<LV *()> &asked);
  /// A push that writes only below the capacity: `write` where `fits`
  /// holds, the overflow block (`asked`, as for overflow) where it does not.
  void checkedPush(LV *fits, const StackRef &st, const std::function<void()> &write,
                   const std::function<LV *()> &asked);
  unsigned underflowSite(AdStackOpStmt &op);
  /// needed[id] = max(needed[id], excess): the capacity a push asked for,
  /// less the capacity it had.
  void raiseNeeded(unsigned id, LV *excess);

  EmitContext &c_;
  Lanes lanes_;
};

class KernelEmitter : public ExhaustiveStmtVisitor<KernelEmitter> {
public:
  KernelEmitter(const Kernel &kernel, llvm::LLVMContext &context, const CodegenOptions &options,
                KernelLayout &layout, LlvmTarget &target);

  absl::StatusOr<std::unique_ptr<llvm::Module>> run();

  EmitContext &context() { return c_; }
  ControlFlowLowering &control() { return control_; }
  AdStackLowering &adstacks() { return adstacks_; }
  /// Emits the statements of `block` (up to a break or continue).
  void emitBlock(Block &block);
  /// Emits one iteration of parallel task `task`: its body, with the
  /// stores of constants that may wait emitted as late as they may
  /// (qd/analysis/ElementOwnership.h, sunkStores).
  void emitTaskBody(ForStmt &task);
  /// Emits one statement of a block.
  void emitStatement(Stmt &s) { visit(s); }
  /// Emits top-level statement `s` in the current function: a parallel task
  /// through LlvmTarget::emitParallelTask, a serial task's block, or a
  /// top-level scalar statement.
  void emitTopLevel(Stmt &s);
  /// Completes the current function after its last return (the adstacks'
  /// overflow report, AdStackLowering::finishFunction) and verifies it
  /// while it is still in cache (unless `verify` is false: the caller
  /// calls verifyFunction itself if the function stays); every target
  /// calls it for each function it emits.
  void finishFunction(bool verify = true);
  /// Verifies `f`; the first failure becomes the emission's error.
  void verifyFunction(llvm::Function &f);
  /// The plan of parallel task `task` under what the target and the
  /// options guarantee: near atomics only where the target keeps their
  /// iterations apart (LlvmTarget::keepsNearIterationsApart), distinct
  /// ndarrays only with CodegenOptions::distinctNdarrays.
  TaskVectorPlan planTask(const ForStmt &task) const;
  /// The top-level values task `task` uses, in order of first use.
  /// (`statements`, when given, counts the statements of the task's body.)
  std::vector<const Value *> capturesOf(ForStmt &task, size_t *statements = nullptr);
  /// What the runtime can read of a task bound before the launch.
  static KernelLayout::TaskBound taskBound(Bound b);

  /// Parallel bands (ForStmt::numDims() > 1). Their iterations are numbered
  /// row-major from 0; a row holds the iterations that differ only in the
  /// innermost index. Begins and extents (i64, extents >= 0) and the
  /// iteration count (saturated at INT64_MAX), emitted where the bounds are
  /// available.
  struct BandShape {
    std::vector<LV *> begin, extent;
    LV *count = nullptr;
  };
  BandShape bandShape(ForStmt &task);
  /// Sets the indices of dimensions 0 to N-2 for row `row` (i64).
  void setBandRow(ForStmt &task, const BandShape &shape, LV *row);
  /// Sets the innermost index to begin + `j` (`j` an i64 offset in the
  /// row); with `vector`, lane l's index is begin + j + l (lane-affine).
  void setBandInner(ForStmt &task, const BandShape &shape, LV *j, bool vector = false);

  // One case per statement kind (ExhaustiveStmtVisitor: a kind without a
  // case does not compile).
  void visitConstStmt(ConstStmt &s) { c_.set(&s, arith_.constant(s)); }
  void visitBinaryStmt(BinaryStmt &s) { c_.set(&s, arith_.binary(s)); }
  void visitUnaryStmt(UnaryStmt &s) { c_.set(&s, arith_.unary(s)); }
  void visitCmpStmt(CmpStmt &s) { c_.set(&s, arith_.compare(s)); }
  void visitSelectStmt(SelectStmt &s) { c_.set(&s, arith_.select(s)); }
  void visitCastStmt(CastStmt &s) { c_.set(&s, arith_.cast(s)); }
  void visitAllocaStmt(AllocaStmt &s) { memory_.alloca(s); }
  void visitLocalLoadStmt(LocalLoadStmt &s) { memory_.localLoad(s); }
  void visitLocalStoreStmt(LocalStoreStmt &s) { memory_.localStore(s); }
  void visitGlobalLoadStmt(GlobalLoadStmt &s) { memory_.globalAccess(s); }
  void visitGlobalStoreStmt(GlobalStoreStmt &s) {
    guarded(s, [&] { memory_.globalAccess(s); });
  }
  void visitAtomicAddStmt(AtomicAddStmt &s) { visitAtomicRmwStmt(s); }
  void visitAtomicMaxStmt(AtomicMaxStmt &s) { visitAtomicRmwStmt(s); }
  void visitAtomicRmwStmt(AtomicRmwStmt &s) {
    guarded(s, [&] { memory_.globalAccess(s); });
  }
  void visitShapeStmt(ShapeStmt &s) { memory_.shape(s); }
  void visitTaskIndexStmt(TaskIndexStmt &s);
  void visitForStmt(ForStmt &s) { control_.forLoop(s); }
  void visitSerialStmt(SerialStmt &s) { emitBlock(s.block(0)); }
  void visitWhileStmt(WhileStmt &s) { control_.whileLoop(s); }
  void visitBreakStmt(BreakStmt &s) { control_.jump(s); }
  void visitContinueStmt(ContinueStmt &s) { control_.jump(s); }
  void visitIfStmt(IfStmt &s) { control_.ifStmt(s); }
  void visitAdStackAllocaStmt(AdStackAllocaStmt &s) { adstacks_.alloca(s); }
  void visitAdStackPushStmt(AdStackPushStmt &s) { adstacks_.op(s); }
  void visitAdStackPopStmt(AdStackPopStmt &s) { adstacks_.op(s); }
  void visitAdStackLoadTopStmt(AdStackLoadTopStmt &s) { adstacks_.op(s); }
  void visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &s) { adstacks_.op(s); }
  void visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &s) { adstacks_.op(s); }

private:
  /// Emits `s` with `emit`, on the group's first thread only where the
  /// cooperative task being emitted says so (FunctionState::cooperative).
  void guarded(Stmt &s, const std::function<void()> &emit);

  EmitContext c_;
  ArithLowering arith_;
  MemoryLowering memory_;
  ControlFlowLowering control_;
  AdStackLowering adstacks_;
};

} // namespace qd::codegen
