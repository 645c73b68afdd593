//===- GpuTarget.h - What GPU targets share in the LLVM emitter -*- C++ -*-===//
//
// NVPTX and AMDGPU run a kernel the same way: device entries
// `void <name>(QdLaunchContext *ctx)` launched in KernelLayout::launches
// order,
//
//   qd_serial_<k>  a maximal run of top-level statements and serial tasks,
//                  run by one thread;
//   qd_task_<n>    parallel task n, a grid-stride loop
//                    for (i = begin + global id; i < end; i += T)
//                  over a grid of T threads.
//
// A top-level value a later entry uses is stored by its entry into
// ctx->values[slot] (8 bytes, as toSlot encodes it) and loaded by every
// later entry that uses it. An entry that finds an error recorded does
// nothing, so the launches after an error are skipped as the CPU's entry
// function stops at it.
//
// Adstacks are interleaved across the T threads: entry d of stack s of
// thread t is at heap + offsets[s] * T + (d * T + t) * entry bytes, its
// adjoint slot after its primal, the depth an i32 count. Under a compacted
// heap (ctx->groupTable set; docs/runtime.md, "Compacted heap") each group
// of G = 1 << ctx->groupShift threads (G a power of two up to
// abi::kAdStackGroupThreads, chosen per launch) has its own region and
// capacity per stack, read from the table: entry d of lane l at heap +
// region + (d * G + l) * entry bytes. One compiled kernel serves both
// layouts. What every thread
// reads again and again (T, stack regions, capacities, row sizes, field
// bases) comes from the launch words, a constant array (address space 4 on
// both targets) the runtime fills before each launch; the rest through ctx.
// Every pointer the context holds is device (global, address space 1 on
// both targets) memory.
//
// GpuTarget implements all of that; a subclass says what its target names
// differently: the triple and data layout, how an entry function is
// declared (calling convention, annotations), the special registers of the
// global thread id, the math library's symbols and the atomics' scope.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelEmitter.h"

#include "qd/analysis/CooperativeTask.h"

#include <map>
#include <string>
#include <vector>

namespace qd::codegen {

class GpuTarget : public LlvmTarget {
public:
  bool marksReadOnlyLoads() const override { return true; }
  void emitEntries(KernelEmitter &emitter) final;
  void emitParallelTask(KernelEmitter &emitter, ForStmt &task) final;
  LV *threadIndex(EmitContext &c) final { return c.fn->thread; }
  LV *devicePointer(llvm::IRBuilderBase &b, LV *p) final;
  /// Launch words live in the target's constant address space (NVPTX
  /// `.const`, AMDGPU constant memory read with scalar loads): 4 on both.
  std::optional<unsigned> launchWordsAddressSpace() const final { return 4; }
  bool adStackIndexedDepth() const final { return true; }
  unsigned stopCheckInterval() const final { return abi::kDeviceStopCheckInterval; }
  bool staggersStopChecks() const final { return true; }
  LV *adStackBase(EmitContext &c, unsigned id) final;
  LV *adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned width) final;
  LV *adStackCapacity(EmitContext &c, unsigned id, LV *capacity) final;
  LV *adStackAdjoint(EmitContext &c, const StackRef &stack, LV *primal, unsigned width) final;
  LV *mathCall(EmitContext &c, MathFn fn, ScalarType type, llvm::ArrayRef<LV *> args) final;
  void atomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, LV *ptr, LV *value,
                    llvm::Align align) final;
  void raiseError(EmitContext &c, unsigned site, llvm::ArrayRef<LV *> data) final {
    c.recordError(site, data);
  }

protected:
  /// The target's name in messages ("nvptx", "amdgpu").
  virtual const char *targetName() const = 0;
  /// Sets the module's triple and data layout; an error message, or "".
  virtual std::string prepareModule(EmitContext &c) = 0;
  /// Declares the device entry `name`, taking the launch context, as the
  /// target wants a kernel declared.
  virtual llvm::Function *declareEntry(EmitContext &c, const std::string &name) = 0;
  /// The launch context argument of entry `fn` as a generic pointer,
  /// emitted into its entry block with `eb`.
  virtual LV *contextArgument(llvm::IRBuilderBase &eb, llvm::Function *fn) { return fn->getArg(0); }
  /// The thread's place in the grid, read from the target's special
  /// registers with `eb` (i32 each): its group (block, workgroup), the
  /// threads per group and its index in the group; `groups`, the groups
  /// launched, is set by groupCount.
  struct GroupIds {
    LV *group = nullptr, *size = nullptr, *lane = nullptr, *groups = nullptr;
  };
  virtual GroupIds groupIds(EmitContext &c, llvm::IRBuilderBase &eb) = 0;
  /// The groups launched (i32), `ids.size` threads each.
  virtual LV *groupCount(EmitContext &c, llvm::IRBuilderBase &eb, const GroupIds &ids) = 0;
  /// Waits until every thread of the group gets here; their global and
  /// group-shared memory writes before it are then visible to all of them.
  virtual void groupBarrier(EmitContext &c) = 0;
  /// The math library's symbol for `fn` on `type` (`__nv_sinf`,
  /// `__ocml_sin_f32`).
  virtual std::string mathSymbol(MathFn fn, ScalarType type) const = 0;
  /// The synchronisation scope of atomic updates to global memory.
  virtual llvm::SyncScope::ID atomicScope(EmitContext &c) const = 0;

private:
  /// ctx->threads (T), from the launch words.
  LV *threads(EmitContext &c);
  /// Stack `id`'s frame with AdStackFrame::groupStart, ::groupCapacity
  /// and ::groupRow set in a parallel task (from the table's header and
  /// this thread's group's entries; every load reads the launch context's
  /// first word where the launch has no table, so that it stays in
  /// bounds); null outside one, whose stacks are never compacted.
  AdStackFrame *groupSlot(EmitContext &c, unsigned id);
  /// One device entry: a parallel task, or a run of other top-level
  /// statements.
  struct Entry {
    ForStmt *task = nullptr;
    std::vector<Stmt *> stmts;
  };

  /// Splits the kernel into entries and gives a ctx->values slot to every
  /// top-level value a later entry uses.
  void planEntries(EmitContext &c);
  /// KernelLayout::fusedFunction, where the kernel qualifies
  /// (CodegenOptions::fusedEntry).
  void emitFusedEntry(EmitContext &c);
  /// Starts entry function `name` (the current entry's): the error check,
  /// then the values it loads from ctx->values and those it recomputes.
  /// `thread`: its thread index
  /// (null: the global thread id).
  void beginEntry(KernelEmitter &e, FunctionState &state, const std::string &name, LV *thread);
  /// Starts the entry of parallel task `task` (its launch, function and
  /// plan, which `state` points to); the layout's task is the caller's.
  /// `alternative`: the name of a second function of the task just
  /// emitted, which adds no launch.
  void beginTask(KernelEmitter &e, ForStmt &task, FunctionState &state, TaskVectorPlan &plan,
                 const std::string *alternative = nullptr);

  /// Parallel task `task` run cooperatively (qd/analysis/CooperativeTask.h):
  /// a group per iteration, `plan.loop`'s iterations spread over its
  /// threads. GpuCooperative.cpp.
  /// `alternative`: the task has a run-time trip count and was just emitted
  /// one iteration per thread; this is its second form
  /// (KernelLayout::Launch::cooperativeFunction).
  void emitCooperativeTask(KernelEmitter &e, ForStmt &task, const CooperativeTaskPlan &plan,
                           bool alternative);
  /// The shared loop: each thread's iterations, then the group's sums.
  void emitSharedLoop(KernelEmitter &e, const CooperativeTaskPlan::SharedLoop &plan,
                      const GroupIds &ids);
  /// The sum over the group of every thread's `partial` (of `type`), the
  /// same on every thread: a tree in group-shared memory, in a fixed order.
  LV *groupSum(EmitContext &c, LV *partial, ScalarType type, const GroupIds &ids);
  /// The plan of `task` under the codegen options (not cooperative when
  /// the code may leave a thread early: bounds or stop checks).
  CooperativeTaskPlan planCooperative(const EmitContext &c, const ForStmt &task) const;

  std::vector<Entry> entries_;
  std::map<const Value *, unsigned> slotOf_;
  /// Per entry: the values it loads, in slot order.
  std::vector<std::vector<const Stmt *>> imports_;
  /// Per entry: the top-level values it computes itself, in kernel order.
  std::vector<std::vector<Stmt *>> recomputes_;
  unsigned current_ = 0;
  /// The kernel's adstacks (KernelLayout::stacks, once emitted).
  size_t numStacks_ = 0;
};

} // namespace qd::codegen
