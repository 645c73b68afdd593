//===- qd/codegen/llvm/KernelCodegen.h - LLVM IR for kernels ----*- C++ -*-===//
//
// Lowers a verified kernel to an LLVM module with one entry function,
//
//   void qd_kernel(QdLaunchContext *ctx)
//
// that runs the kernel's top-level statements and tasks in order. A parallel
// task is outlined into
//
//   void qd_task_<n>(QdLaunchContext *ctx, const int64_t *captures,
//                    int64_t begin, int64_t end, int32_t worker)
//
// which runs iterations [begin, end); the entry function hands it to the
// runtime through `qd_rt_parallel_for` (declared, defined by the runtime).
// Captures are the top-level values the task uses, one 8-byte slot each.
//
// Semantics follow docs/ir.md exactly (the interpreter is the reference):
// wrapping integer arithmetic, INT_MIN / -1 wraps, saturating float-to-int
// casts, NaN-losing float min/max with -0 < +0. Integer division by zero,
// out-of-range shifts, out-of-range indices (when bounds checks are on) and
// adstack underflow record an *error site* in the context and continue with
// a harmless value; the runtime turns the first one into an error.
//
// Adstacks live in a heap the runtime owns: the stack with id `s` of the
// worker `w` starts at heap + w * stride + offsets[s] and holds its entries
// (the primal, plus an adjoint slot when a `load_top_adj`/`acc_adjoint`
// uses it); the depth lives in a function-local variable. A push past
// capacities[s] writes nothing and raises needed[s] (an atomic max), so the
// runtime can report the capacity the launch needed.
//
// With CodegenOptions::vectorWidth > 1, a parallel task that may be
// vectorised (TaskVectorPlan) also gets vector code that runs whole groups
// of that many consecutive iterations, one per lane, before the scalar code
// runs the rest of the chunk. It runs only when ctx->taskLanes[t] (set by
// the runtime per launch) is at least the task's KernelLayout::Task::lanes;
// the runtime then lays out the task's stack entries with one slot per lane.
//
// CodegenTarget::Nvptx and ::Amdgpu emit device entries instead
// (KernelLayout::launches, lib/codegen/llvm/GpuTarget.h and docs/runtime.md,
// "NVPTX target"); qd/codegen/llvm/Ptx.h turns an NVPTX module into PTX,
// qd/codegen/llvm/Hsaco.h an AMDGPU module into a code object.
//
// The emitter is target-neutral; the CPU specifics above (chunked tasks,
// lanes, libmvec, the thread-major heap) are CodegenTarget::Cpu's hooks
// (lib/codegen/llvm/LlvmTarget.h, CpuTarget.cpp). `qd-translate` prints the
// emitted IR.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/analysis/CooperativeTask.h"
#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace qd {

class TaskMerger;

/// The x86-64 vector extension whose libmvec variants generated code may
/// call (CodegenOptions::vectorMath).
enum class VectorMathIsa : uint8_t { None, Sse4, Avx2, Avx512 };
/// `none`, `sse4`, `avx2`, `avx512`.
std::string_view toString(VectorMathIsa isa);

struct CodegenOptions {
  /// Check every field/ndarray index (an error site instead of a wild
  /// access).
  bool boundsChecked = false;
  /// SIMD lanes of a vectorised parallel task (1: scalar code only). A task
  /// that may be vectorised (see qd/analysis/TaskVectorPlan.h) runs
  /// whole groups of `vectorWidth` consecutive iterations at once, then the
  /// remaining iterations one at a time.
  unsigned vectorWidth = 1;
  /// Vector sin, cos, exp, log, tan, tanh, pow and atan2 call glibc's
  /// libmvec (at most 4 ulp from the scalar functions) with the widest
  /// variants this ISA allows that fit the vector: SSE4 ('b': 4 floats or 2
  /// doubles), AVX2 ('d': 8 or 4), AVX-512 ('e': 16 or 8). A wider vector is
  /// split into calls of that width (independent calls the core overlaps); a
  /// narrower one than 'b' calls the scalar function per lane. The caller
  /// must make those symbols resolvable. None: each lane calls the scalar
  /// function.
  VectorMathIsa vectorMath = VectorMathIsa::None;
  /// With vectorMath AVX2 or AVX-512: a task whose loops carry many values
  /// per lane runs fewer lanes than vectorWidth (at least 16), so that
  /// what its loops carry fits the vector registers: the ISA's lanes times
  /// the largest power of two at most registers / carried values
  /// (`lanesForTask`). What the CPU backend's automatic width does.
  bool fitLanesToRegisters = false;
  /// Loops with run-time trip counts read QdLaunchContext::stop at their
  /// back edges (every abi::kStopCheckInterval-th back edge of a thread on
  /// the CPU, every abi::kDeviceStopCheckInterval-th on a GPU) and leave
  /// with the loop's stop error when the host asks: what LaunchOptions::
  /// timeout and ::cancel need. Off, the code has no checks (on an H100
  /// they cost up to 75% of a benchmark gradient's time, docs/performance.md).
  bool stopChecks = false;
  /// The code may take every component of every ndarray argument to be
  /// storage of its own (NdarrayAliasing::Distinct, ElementOwnership.h):
  /// more of its tasks get lanes (CPU), private atomics and cooperative
  /// loops (GPU targets). Only a launch whose buffers do not overlap may
  /// run it (ndarrayBuffersOverlap): the CPU, CUDA and HIP runtimes check
  /// each launch and compile both variants.
  bool distinctNdarrays = false;
  /// GPU targets: the element offset of an ndarray access is computed in
  /// 32 bits (one multiply-add per index instead of a 64-bit product by the
  /// run-time extent). Only a launch each of whose ndarray buffers has at
  /// most INT32_MAX elements may run it (ndarraysFitNarrowOffsets): an
  /// in-bounds access's offset, and every partial sum of it, is then below
  /// 2^31. The CUDA and HIP runtimes check each launch and compile both
  /// variants. Ignored by the CPU.
  bool narrowNdarrayOffsets = false;
  /// GPU targets: a parallel task of at most this many iterations (a
  /// literal trip count) whose body holds a long serial loop runs each
  /// iteration on a whole group of threads that share the loop's
  /// iterations and add up its sums (qd/analysis/CooperativeTask.h); 0:
  /// one iteration per thread always. Off under boundsChecked and
  /// stopChecks. Ignored by the CPU.
  int64_t cooperativeTaskIterations = kDefaultCooperativeTaskIterations;
  /// The same bound for a task whose shared loop scatters atomic adds by
  /// its index (CooperativeTaskOptions::mostScatteringIterations).
  int64_t cooperativeScatteringIterations = kDefaultCooperativeScatteringIterations;
  /// GPU targets: emit KernelLayout::fusedFunction as well (`qd_fused`),
  /// where the kernel has more than one launch, no adstacks and no
  /// cooperative task (a task with a cooperative form as well is called in
  /// its other form): the runtime runs it instead of the launches one by
  /// one when they are small (docs/runtime.md, "Fused launches").
  bool fusedEntry = false;
  /// GPU targets: stacks kept in a local array of each thread (`entries`
  /// entries, PTX local memory, which the GPU caches in L1) instead of the
  /// interleaved heap. A launch of such code must give each of them a
  /// capacity of at most `entries` (LaunchPlan checks); KernelLayout::Stack::
  /// localEntries says which stacks these are.
  std::map<const AdStackAllocaStmt *, int64_t> localAdStackEntries;
  /// CPU target: each task's call is handed to this merger as soon as the
  /// task's function is complete (qd/codegen/llvm/MergeTasks.h); the caller
  /// calls its finish() on the module emitKernel returns. Null: a function
  /// per task.
  TaskMerger *taskMerger = nullptr;
};

/// The values the loops of parallel task `task` carry per lane: scalar
/// locals declared outside a loop of the task and stored inside it (64-bit
/// ones count twice).
unsigned loopCarriedValues(const ForStmt &task);
/// The lanes a task carrying `carried` values runs with `options`
/// (CodegenOptions::fitLanesToRegisters; otherwise vectorWidth).
unsigned lanesForTask(const CodegenOptions &options, unsigned carried);

/// What the generated code runs on (lib/codegen/llvm/LlvmTarget.h holds
/// each target's hooks).
enum class CodegenTarget {
  /// The host CPU: chunked tasks run by the runtime's thread pool, SIMD
  /// lanes, libm/libmvec.
  Cpu,
  /// NVIDIA GPUs: device entries listed in KernelLayout::launches (serial
  /// runs on one thread, parallel tasks as grid-stride loops), the adstack
  /// heap interleaved across threads, libdevice math, no SIMD lanes
  /// (vectorWidth is ignored). qd/codegen/llvm/Ptx.h turns the module into
  /// PTX.
  Nvptx,
  /// AMD GPUs: the device entries, heap layout and launches of Nvptx
  /// (lib/codegen/llvm/GpuTarget.h), AMDGPU kernels, ocml math.
  /// qd/codegen/llvm/Hsaco.h turns the module into a code object for
  /// gfx90a, gfx942 or gfx1100.
  Amdgpu,
};

/// The target named `name` ("cpu", "nvptx", "amdgpu"), or InvalidArgument listing the known ones.
absl::StatusOr<CodegenTarget> parseCodegenTarget(std::string_view name);
/// The name parseCodegenTarget accepts for `target`.
const char *codegenTargetName(CodegenTarget target);

/// Emits `kernel` into a new module of `context`.
absl::StatusOr<std::unique_ptr<llvm::Module>>
emitKernel(const Kernel &kernel, llvm::LLVMContext &context, const CodegenOptions &options,
           KernelLayout &layout, CodegenTarget target = CodegenTarget::Cpu);

} // namespace qd
