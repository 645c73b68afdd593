//===- LlvmTarget.h - What a target adds to the LLVM emitter ----*- C++ -*-===//
//
// The LLVM emitter (KernelEmitter) lowers arithmetic, control flow, memory
// and adstack operations the same way for every target. What differs
// between targets goes through the hooks below: how a parallel task's
// iterations are spread over threads, which thread is running, where an
// adstack entry lives, which math library is called, how atomics and error
// records are written. CpuTarget implements them for the host CPU; a GPU
// target (NVPTX, AMDGPU) subclasses LlvmTarget and implements each hook as
// its comment describes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/ir/Stmt.h"

#include <llvm/ADT/ArrayRef.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>

#include <memory>
#include <optional>

namespace qd::codegen {

class EmitContext;
class KernelEmitter;
struct AdStackFrame;
struct StackRef;

class LlvmTarget {
public:
  virtual ~LlvmTarget() = default;

  /// Kernel structure. Emits the kernel's entry functions, lowering each
  /// top-level statement with KernelEmitter::emitTopLevel inside a function
  /// of the target's own, and fills what KernelLayout says about them.
  /// CPU: one `qd_kernel(ctx)` that runs every top-level statement in order.
  /// GPU: one device entry per run of non-parallel statements and one per
  /// parallel task (KernelLayout::launches), with the top-level values a
  /// later entry uses passed through ctx->values.
  virtual void emitEntries(KernelEmitter &emitter) = 0;

  /// Task mapping. Emits the top-level parallel `for` `task` at the
  /// insertion point of the entry function, and records it in
  /// KernelLayout::tasks. Its body is lowered by `emitter` in a function
  /// state of the target's own (EmitContext::beginFunction).
  /// CPU: outlines `qd_task_<n>(ctx, captures, begin, end, worker)` over a
  /// chunk, runs groups of SIMD lanes (the last one partial), and calls
  /// `qd_rt_parallel_for`. NVPTX: the device entry `qd_task_<n>(ctx)`, whose
  /// threads run a grid-stride loop over [begin, end) in a grid of
  /// ctx->threads threads (no lanes: lanes stay 1).
  virtual void emitParallelTask(KernelEmitter &emitter, ForStmt &task) = 0;
  /// Whether the target never runs two iterations of a task that update one
  /// element of a near class at the same time (TaskAssumptions::
  /// nearIterationsApart, ElementOwnership.h "Near atomics"), so that its
  /// near atomics may be plain read-modify-writes. CPU: true, as
  /// emitParallelTask passes their reach to `qd_rt_parallel_for`, which
  /// runs chunks at least that long in two phases (even, then odd). GPU:
  /// false, every thread of a launch may run at once.
  virtual bool keepsNearIterationsApart() const { return false; }

  /// Whether loads of fields that no access of the kernel writes
  /// (WrittenAliasClasses) carry !invariant.load, which lets the device
  /// read them through its read-only caches (NVPTX: ld.global.nc). GPU
  /// targets: true; an entry runs once per launch. The CPU: false.
  virtual bool marksReadOnlyLoads() const { return false; }

  /// The index (i32) of the thread running the current function, which
  /// selects its slice of per-thread memory (the adstack heap).
  /// CPU: the worker argument of `qd_task_<n>` (0 in the entry function).
  /// GPU: the global thread id (block id * block size + thread id, from the
  /// target's special registers), read in the entry block.
  virtual llvm::Value *threadIndex(EmitContext &c) = 0;

  /// Device memory: `p`, a pointer the launch context holds (a field or
  /// ndarray base, the heap, the context's own arrays), emitted with `b`,
  /// as the target wants memory through it addressed. CPU: `p`. NVPTX: `p`
  /// cast to the global address space and back, so that address-space
  /// inference turns generic loads and stores through it into global ones.
  virtual llvm::Value *devicePointer(llvm::IRBuilderBase &b, llvm::Value *p) { return p; }
  /// Launch words (KernelLayout::launchWords): the address space of the
  /// module's constant array the runtime fills before each launch, or none
  /// when the target reads every launch value through ctx (CPU).
  /// NVPTX: 4 (`.const`), which ptxas reads as constant-bank operands;
  /// AMDGPU: 4 (constant memory), read with scalar loads into SGPRs.
  virtual std::optional<unsigned> launchWordsAddressSpace() const { return std::nullopt; }
  /// Back edges between two reads of the stop word (a power of two; see
  /// CodegenOptions::stopChecks).
  virtual unsigned stopCheckInterval() const { return abi::kStopCheckInterval; }
  /// Whether one thread in abi::kDeviceStopCheckSpread starts its
  /// back-edge count at interval - 1 instead of 0 (EmitContext::stopCheck):
  /// on a GPU, where a launch may run a thread per task iteration, each
  /// with fewer back edges than the interval.
  virtual bool staggersStopChecks() const { return false; }
  /// How many adstacks of a function keep their state (top, peak, end,
  /// base) in SSA values; the state of the others stays in memory
  /// (see AdStackLowering::rows).
  virtual unsigned registerStackStates() const { return ~0u; }

  /// Adstack depth: false (CPU), the address of the next free row, which a
  /// push or pop moves by one row (AdStackRows); true (GPU), an i32 count
  /// of the pushes not yet popped, those past the capacity included, with
  /// entry d at base + d * rowBytes (one 32x32->64-bit multiply-add). An
  /// indexed stack's whole state is one 32-bit register; the runtime keeps
  /// capacities and row sizes below 2^31.
  virtual bool adStackIndexedDepth() const { return false; }
  /// Adstack entry address, part 1: the per-function base of stack `id`,
  /// emitted in the entry block (EmitContext::entryBuilder).
  /// CPU: heap + thread * ctx->stride + ctx->offsets[id] (thread-major).
  /// GPU: heap + offsets[id] * T + thread * entry bytes, for the layout
  /// interleaved across the T threads of the launch (DESIGN.md), so that a
  /// warp's pushes and loads coalesce; under a compacted heap, heap + the
  /// group's region + lane * entry bytes.
  virtual llvm::Value *adStackBase(EmitContext &c, unsigned id) = 0;
  /// Adstack entry address, part 2: the bytes between entry d and entry
  /// d + 1 of a stack, for `width` lanes that share one depth (1 outside
  /// vector code), emitted in the entry block; entry d is at base + d *
  /// rowBytes. CPU: entryBytes * width (lane l's primal at + l * elem, the
  /// lanes' adjoints after all primals). GPU: T * entry bytes (32 * entry
  /// bytes under a compacted heap).
  virtual llvm::Value *adStackRowBytes(EmitContext &c, const StackRef &stack, unsigned width) = 0;
  /// The capacity of stack `id` in this thread's layout, emitted in the
  /// entry block, given the launch's (`capacity`, i64). CPU: `capacity`.
  /// GPU: the group's own under a compacted heap (ctx->groupTable).
  virtual llvm::Value *adStackCapacity(EmitContext &, unsigned, llvm::Value *capacity) {
    return capacity;
  }
  /// The adjoint of the entry whose primal is at `primal` (base + d * rowBytes)
  /// `primal`. CPU: primal + elem bytes * width. GPU: wherever its layout
  /// keeps adjoints (NVPTX: primal + elem bytes, inside the interleaved
  /// entry).
  virtual llvm::Value *adStackAdjoint(EmitContext &c, const StackRef &stack, llvm::Value *primal,
                                      unsigned width) = 0;

  /// Math calls: `fn` of `type` applied to `args`, which are vectors in
  /// vector code (one value per lane) and scalars otherwise.
  /// CPU: LLVM intrinsics and libm; glibc's libmvec for vector sin, cos,
  /// exp and log (CodegenOptions::libmvec). NVPTX: libdevice (`__nv_sinf`,
  /// ...). AMDGPU: ocml (`__ocml_sin_f32`, ...).
  virtual llvm::Value *mathCall(EmitContext &c, MathFn fn, ScalarType type,
                                llvm::ArrayRef<llvm::Value *> args) = 0;

  /// Atomics: an atomic read-modify-write of `value` at `ptr`, with relaxed
  /// (monotonic) ordering; only its effect is used. CPU: `atomicrmw`.
  /// GPU: `atomicrmw` with a device-wide sync scope; AMDGPU may need a
  /// compare-and-swap loop for float adds the hardware lacks.
  virtual void atomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, llvm::Value *ptr,
                            llvm::Value *value, llvm::Align align) = 0;
  /// atomicUpdate of an element whose indices do not depend on the
  /// iteration, so that neighbouring threads may well update the same one
  /// (a sum into one element). NVPTX adds up a warp's values first when
  /// they all go to one address, and one thread updates; elsewhere
  /// atomicUpdate.
  virtual void uniformAtomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, llvm::Value *ptr,
                                   llvm::Value *value, llvm::Align align) {
    atomicUpdate(c, op, ptr, value, align);
  }

  /// Raising an error: records error site `site` in the launch's error
  /// record if no site is recorded yet, and if so writes `data` (i64
  /// values, at most kMaxErrorData) to its data. The emitter then leaves
  /// the function. CPU: a compare-and-swap on ctx->error->site. GPU: the
  /// same on the record in device memory (system scope so the host reads
  /// it after the launch).
  virtual void raiseError(EmitContext &c, unsigned site, llvm::ArrayRef<llvm::Value *> data) = 0;
};

/// The hooks of `target`.
std::unique_ptr<LlvmTarget> createTarget(CodegenTarget target);
/// The host CPU's hooks.
std::unique_ptr<LlvmTarget> createCpuTarget();
/// NVIDIA GPUs through LLVM's NVPTX back end (NvptxTarget.cpp; what GPU
/// targets share is GpuTarget.h's).
std::unique_ptr<LlvmTarget> createNvptxTarget();
/// AMD GPUs through LLVM's AMDGPU back end (AmdgpuTarget.cpp).
std::unique_ptr<LlvmTarget> createAmdgpuTarget();

} // namespace qd::codegen
