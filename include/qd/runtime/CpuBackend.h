//===- qd/runtime/CpuBackend.h - LLVM JIT backend for the CPU ---*- C++ -*-===//
//
// Compiles kernels to native code with the LLVM ORC JIT (O3) and runs them:
// serial code on the calling thread, each parallel task in chunks on a pool
// of worker threads. Compiled kernels are cached per (kernel, bounds
// checking) for the lifetime of the backend.
//
// Adstacks live in one heap the backend owns (never on a thread's stack):
// each task lays out its stacks in a per-worker slice (offset, capacity per
// stack), the slice size ("stride") is the largest over the tasks, and the
// heap holds one slice per worker. Capacities come from the launch options
// (Program::launch sizes every stack before each launch), so a new bound
// needs no recompilation; the heap grows by amortised doubling and is
// reused across launches. A push past a capacity writes nothing; the launch
// then fails with an error naming the kernel, task, stack and the capacity
// it needed, and the next launch starts clean.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/codegen/llvm/MergeTasks.h"
#include "qd/codegen/llvm/Optimize.h"
#include "qd/runtime/Program.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

struct CpuBackendOptions {
  /// Worker threads for parallel tasks (0: one per hardware thread).
  unsigned threads = 0;
  /// Iterations per chunk of a parallel task (0: about 8 chunks per worker,
  /// whole groups of lanes). Below the vector width, tasks compile to
  /// scalar code; otherwise a chunk that is not whole groups ends in a
  /// partial group.
  int64_t chunk = 0;
  /// SIMD lanes of vectorised parallel tasks: a power of two up to 64, 1
  /// for scalar code only, 0 to choose from the host (64 when libmvec runs
  /// with AVX-512, 32 with AVX2, else 8; vectorWidth() says) and, with
  /// AVX2 or AVX-512, per task fewer where its loops carry more values
  /// than the vector registers hold (CodegenOptions::fitLanesToRegisters;
  /// lastTaskLanes() says).
  /// Results of a vectorised task equal the scalar code's except for the
  /// rounding of float atomic sums that several lanes add to the same
  /// element (their order changes) and the vector math below.
  unsigned vectorWidth = 0;
  /// Vector sin, cos, exp, log, tan, tanh, pow and atan2 use glibc's
  /// libmvec (at most 4 ulp from the scalar functions), through the widest
  /// variants `vectorIsa` allows; false: each lane calls the scalar
  /// function, bit-identical to the scalar code.
  bool vectorMath = true;
  /// The registers libmvec calls use: "auto" (the host's widest: "avx512"
  /// with AVX-512F, "avx2" with AVX2, "sse4" with SSE4.1), or one of those
  /// names to cap it ("none": no libmvec). Naming an extension the host
  /// lacks is an error. A vector wider than the registers is split into
  /// calls of their width, which run overlapped: with vectorWidth 16 on
  /// AVX2, two 8-lane chains are in flight.
  std::string vectorIsa = "auto";
  /// Kernels whose largest LLVM function (as emitted, before optimisation)
  /// has more instructions than this, or whose loops nest deeper than
  /// fullOptimizationDepth, compile with the light tier
  /// (OptimizationTier::Light: a few linear passes and code generation
  /// without optimisation); the others with the full one (O3). 0: always
  /// light; SIZE_MAX: by depth only.
  size_t fullOptimizationLimit = TierLimits().fullInstructions;
  unsigned fullOptimizationDepth = TierLimits().fullLoopDepth;
  /// The stack of each worker thread the backend starts. A kernel whose
  /// compiled code has a larger frame (vector code keeps what a task tapes
  /// in its frame: about 8 MB for the gradient of a 16 000-statement chain
  /// at 64 lanes) restarts the workers with enough; a launch whose calling
  /// thread has too little stack left runs on a thread of its own.
  size_t workerStackBytes = size_t(8) << 20;
  /// The largest frame the backend runs: a kernel whose compiled code has
  /// a larger one fails to launch with an error that names it (use fewer
  /// lanes, vectorWidth, or split the kernel). Threads get the frame plus
  /// 256 KB for the runtime and the math library below it.
  size_t maxStackBytes = size_t(1) << 30;
  /// Parallel tasks whose code differs only in integer constants (the
  /// steps of an unrolled loop) share one compiled function, the constants
  /// passed at run time (mergeEquivalentTasks); false: a function per task.
  /// The results are the same either way.
  bool mergeTasks = true;
  /// The host memory the default adstack memory budget is a fraction of
  /// (kDefaultAdStackBudgetFraction; 0: what the host has available now,
  /// availableHostMemoryBytes). Tests set it to see what a launch does
  /// when memory is short.
  uint64_t availableMemoryBytes = 0;
  /// Append every function the JIT compiles to /tmp/perf-<pid>.map, so
  /// that `perf report` names the code of each kernel's tasks
  /// (`qdk<n>_qd_task_<t>`: the backend's n-th compilation, its task t).
  bool perfMap = false;
};

class CpuBackend : public Backend {
public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> create(const CpuBackendOptions &options = {});
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options) override;
  /// Computed with the kernel's first compilation and kept with it.
  absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &kernel) override;
  /// True: on the CPU the optimistic launch of measured stacks costs 2-8% of
  /// a gradient whose needs did not grow, the counting kernel 30%
  /// (docs/performance.md, "Measured sizing").
  bool optimisticAdStacks() const override { return true; }
  /// The budget (or the default) over the lanes of the kernel's widest
  /// task with heap stacks: a worker's slice holds a group of lanes.
  int64_t adStackIterationBudget(const Kernel &kernel, int64_t budget) override;
  int64_t adStackParallelism(const Kernel &kernel, int64_t iterations) override;

  /// The last launch's heap: one slice per worker that ran (fewer than
  /// numThreads() where LaunchOptions::adStackMemoryBudget holds fewer).
  std::optional<AdStackHeapUsage> lastAdStackHeapUsage() const override;

  unsigned numThreads() const;
  unsigned vectorWidth() const;
  /// Whether vectorised tasks call libmvec (see CpuBackendOptions).
  bool usesVectorMath() const;
  /// The extension whose libmvec variants they call ("none" when they do
  /// not).
  std::string_view vectorMathIsa() const;
  /// Adstack heap bytes the last launch used (stride x workers).
  int64_t lastAdStackHeapBytes() const;
  std::vector<AdStackPlacement> lastAdStackPlacement() const override;
  /// Bytes currently allocated for the adstack heap.
  int64_t adStackHeapCapacityBytes() const;
  /// Seconds spent compiling `kernel` (0 if it was not compiled yet).
  double compileSeconds(const Kernel &kernel) const;
  /// The same, by step, summed over the kernel's compilations.
  CompileTimes compileTimes(const Kernel &kernel) const;
  /// The tier `kernel` was compiled with (CpuBackendOptions::
  /// fullOptimizationLimit), or nullopt if it was not compiled yet.
  std::optional<OptimizationTier> compileTier(const Kernel &kernel) const;
  /// The parallel tasks of a compilation of `kernel` and the functions
  /// compiled for them (CpuBackendOptions::mergeTasks), or nullopt if it was
  /// not compiled yet.
  std::optional<TaskMergeStats> taskFunctions(const Kernel &kernel) const;
  /// The launch layout of a compiled kernel (compiles it if needed): its
  /// parallel tasks with their lanes (and why a task has none), stacks,
  /// global slots and error sites. Of the code for launches whose ndarray
  /// buffers do not overlap (CodegenOptions::distinctNdarrays), as
  /// llvmIR's.
  absl::StatusOr<const KernelLayout *> layout(const Kernel &kernel, bool boundsChecked = false);
  /// Per parallel task of the last launch: the lanes of its code (1 when
  /// scalar); its stacks' entries were laid out for that many lanes.
  std::vector<int32_t> lastTaskLanes() const;
  /// The largest stack frame of a compiled kernel's functions, in bytes
  /// (nullopt if it was not compiled yet).
  std::optional<uint64_t> stackFrameBytes(const Kernel &kernel) const;
  /// The stack of the backend's worker threads now.
  size_t workerStackBytes() const;
  /// The optimised LLVM IR of a compiled kernel (for tests and debugging).
  absl::StatusOr<std::string> llvmIR(const Kernel &kernel, bool boundsChecked = false);

  struct Impl;

private:
  explicit CpuBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Registers the CPU backend as `cpu` (qd/runtime/BackendRegistry.h; its
/// options set CpuBackendOptions). AlreadyExists when it is registered.
absl::Status registerCpuBackend();

} // namespace qd
