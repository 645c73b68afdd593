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
#include "qd/codegen/spirv/SpirvCodegen.h"
#include "qd/ir/Visitor.h"

#include <array>
#include <map>
#include <set>
#include <unordered_map>

namespace qd::spirv {

/// How a global slot's elements are stored.
struct SlotInfo {
  ScalarType elem;
  /// The storage element type (bool: uint; a float with a compare-exchange
  /// add: uint/ulong) and its variable (binding 2 + slot).
  Id storage = 0, var = 0, pointer = 0;
  /// Floats stored as integers (a compare-exchange loop adds to them).
  bool floatAsBits = false;
};

/// An adstack's per-function state: its first word for this invocation,
/// the words between entries, its capacity, and locals for its depth and
/// its excess pushes (past the capacity, not popped yet).
struct StackState {
  Id base = 0, row = 0, capacity = 0, depth = 0, excess = 0;
};

struct LoopFrame {
  Id continueTo, breakTo;
  const Stmt *stmt;
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
  void visitGlobalStoreStmt(GlobalStoreStmt &s) { globalAccess(s); }
  void visitAtomicAddStmt(AtomicAddStmt &s) { globalAccess(s); }
  void visitAtomicMaxStmt(AtomicMaxStmt &s) { globalAccess(s); }
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
    std::array<Id, ForStmt::kMaxDims> bandIndex{};
    int parallelTask = -1;
  };

  // Kernel structure (NvptxTarget's entries, here as entry points).
  absl::Status prescan();
  void declareBindings();
  void beginFunction(Function &fn, const std::string &name, bool parallel);
  void endFunction(Function &fn, const std::string &name, bool parallel);
  void emitParallelTask(ForStmt &task);
  void emitTopLevel(Stmt &s);
  void emitBlock(Block &block);

  // Values.
  Id get(const Value *v);
  void set(const Value *v, Id id) { fn_->values[v] = id; }
  Id boundValue(Bound b);
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

  // Parts.
  Id integerBinary(BinaryStmt &s, Id x, Id y);
  Id floatMinMax(Id x, Id y, ScalarType t, bool isMin);
  void globalAccess(GlobalAccessStmt &g);
  unsigned slotOf(const GlobalAccessStmt &g);
  void atomicAdd(const SlotInfo &slot, Id ptr, Id value);
  const StackState &stack(unsigned id);
  void adStackOp(AdStackOpStmt &op);
  /// A loop: header (OpLoopMerge), `cond()` deciding whether to run the
  /// body (null: always), `body()`, a continue block running `step()`.
  void loop(const Stmt *stmt, const std::function<Id()> &cond, const std::function<void()> &body,
            const std::function<void()> &step);

  const Kernel &kernel_;
  const SpirvOptions &opts_;
  SpirvKernel &out_;
  KernelLayout &layout_;
  SpirvModule m_;
  SpirvBuilder b_;
  Function *fn_ = nullptr;
  const Stmt *currentTask_ = nullptr;
  std::string error_;

  std::vector<SlotInfo> slots_;
  std::map<const Stmt *, unsigned> slotOfStmt_;
  std::unordered_map<const Value *, unsigned> stackIds_;
  Id controlVar_ = 0, heapVar_ = 0, uintPtr_ = 0, gidVar_ = 0;
  bool needsInt64_ = false, needsFloat64_ = false;

  DeviceEntryPlan plan_;
  unsigned current_ = 0;
};

} // namespace qd::spirv
