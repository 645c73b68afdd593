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
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace qd {

/// The launch context shared by generated code and the runtime (the
/// generated code addresses its fields by index: keep the order).
/// Entries of QdLaunchContext::errorData.
inline constexpr unsigned kMaxErrorData = 16;

struct QdLaunchContext {
  void **globals;            // data pointer of every global slot
  const int64_t *ndShapes;   // shapes of ndarray arguments, packed
  const int64_t *scalars;    // kernel arguments: ints sign-extended, floats as raw bits
  char *heap;                // adstack heap
  int64_t stride;            // bytes per worker in the heap
  const int64_t *offsets;    // per stack id: byte offset in a worker's slice
  const int64_t *capacities; // per stack id: capacity (entries)
  int64_t *needed;           // per stack id: largest count a push asked for
  int32_t *error;            // 0, or 1 + the id of the first error site hit
  int64_t *errorData;        // what that site recorded (indices of an index
                             // error), kMaxErrorData entries
  void *runtime;             // passed back to qd_rt_parallel_for
  const int32_t *taskLanes;  // per parallel task: lanes it may use in this
                             // launch (below its KernelLayout::Task::lanes:
                             // scalar code only)
};

struct CodegenOptions {
  /// Check every field/ndarray index (an error site instead of a wild
  /// access).
  bool boundsChecked = false;
  /// SIMD lanes of a vectorised parallel task (1: scalar code only). A task
  /// that may be vectorised (see lib/codegen/llvm/TaskVectorPlan.h) runs
  /// whole groups of `vectorWidth` consecutive iterations at once, then the
  /// remaining iterations one at a time.
  unsigned vectorWidth = 1;
  /// Vector sin/cos/exp/log call glibc's libmvec (its AVX2 variants, for
  /// vectorWidth 8): at most 4 ulp from the scalar functions. The caller
  /// must make those symbols resolvable. Otherwise each lane calls the
  /// scalar function.
  bool libmvec = false;
};

/// Everything the runtime needs to launch the code of one kernel.
struct KernelLayout {
  struct GlobalSlot {
    const Field *field = nullptr;      // or
    const Argument *ndarray = nullptr; // an ndarray argument
    Component component = Component::Primal;
  };
  struct ErrorSite {
    const Stmt *stmt;
    std::string what;
    /// An index check of a global access: the error data holds the first
    /// min(numIndices, kMaxErrorData) indices of the failing access.
    bool indexCheck = false;
  };
  struct Stack {
    const AdStackAllocaStmt *stmt;
    const Stmt *task;    // the top-level statement (task) holding it
    unsigned entryBytes; // bytes per entry of one lane
    int parallelTask;    // index in `tasks`, or -1 outside parallel tasks
  };
  /// A task bound the runtime can read before the launch: a constant, a
  /// scalar argument, an ndarray extent, or a field element at constant
  /// indices (`constant` is then its flat index; an earlier task of the
  /// kernel may change it, so it is a guess, which only decides whether the
  /// task's vector code may run).
  struct TaskBound {
    enum Kind { Constant, Argument, NdarrayExtent, FieldElement, Unknown } kind = Unknown;
    int64_t constant = 0;
    unsigned argument = 0, axis = 0;
    const Field *field = nullptr;
    Component component = Component::Primal;
  };
  /// A parallel task, in the order of their `qd_task_<n>` functions.
  struct Task {
    const ForStmt *stmt;
    /// SIMD lanes of its vector code (1: scalar code only), and why it has
    /// none when it could have.
    unsigned lanes = 1;
    std::string whyScalar;
    TaskBound begin, end;
  };
  std::vector<GlobalSlot> slots;
  std::vector<ErrorSite> sites;
  std::vector<Stack> stacks;
  std::vector<Task> tasks;
  /// Per kernel argument: index of its first extent in ndShapes (ndarrays).
  std::vector<unsigned> shapeOffset;
  unsigned numShapes = 0;
};

/// Emits `kernel` into a new module of `context`.
absl::StatusOr<std::unique_ptr<llvm::Module>> emitKernel(const Kernel &kernel,
                                                         llvm::LLVMContext &context,
                                                         const CodegenOptions &options,
                                                         KernelLayout &layout);

/// Bytes of one entry of `stack`: the primal, plus an adjoint slot for a
/// float stack whose adjoint is used (`load_top_adj` / `acc_adjoint`).
/// Reverse mode keeps adjoints in locals, so its stacks carry primals only.
unsigned adStackEntryBytes(const AdStackAllocaStmt &stack);
/// Heap bytes of `capacity` entries of `entryBytes` each (rounded up to 8).
int64_t adStackBytes(unsigned entryBytes, int64_t capacity);
/// The same for `stack` (walks its uses; launches use the layout's
/// precomputed `KernelLayout::Stack::entryBytes`).
int64_t adStackBytes(const AdStackAllocaStmt &stack, int64_t capacity);

} // namespace qd
