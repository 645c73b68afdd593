//===- qd/abi/KernelLayout.h - What a runtime needs to launch a kernel -*- C++ -*-===//
//
// The description a code generator hands to a runtime with the code of one
// kernel: which buffer each global slot of QdLaunchContext::globals binds,
// the error sites an error record may name, the adstacks and their entry
// sizes, and the parallel tasks with the bounds a runtime can read before
// the launch. Every code generator produces one and every runtime consumes
// it (through qd::runtime's LaunchPlan).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/LaunchContext.h"
#include "qd/ir/Module.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qd {

/// Everything the runtime needs to launch the code of one kernel.
struct KernelLayout {
  struct GlobalSlot {
    const Field *field = nullptr;      // or
    const Argument *ndarray = nullptr; // an ndarray argument
    Component component = Component::Primal;
    /// The code may store or atomically add to it (a device runtime then
    /// takes its device copy to be the newer one after the launch).
    bool written = false;
  };
  struct ErrorSite {
    const Stmt *stmt;
    std::string what;
    /// An index check of a global access: the error data holds the first
    /// min(numIndices, kMaxErrorData) indices of the failing access.
    bool indexCheck = false;
    /// The stop check at a loop's back edge: the error data holds the
    /// StopReason the host gave (QdLaunchContext::stop).
    bool stopCheck = false;
    /// The check after a loop that a driver may end before the program
    /// does (SpirvOptions::checkLoopExits): `stmt` is the loop, or the
    /// float atomic add whose compare-exchange loop it is.
    bool loopExitCheck = false;
  };
  struct Stack {
    const AdStackAllocaStmt *stmt;
    const Stmt *task;    // the top-level statement (task) holding it
    unsigned entryBytes; // bytes per entry of one lane
    int parallelTask;    // index in `tasks`, or -1 outside parallel tasks
    /// GPU code: > 0 when the stack lives in a local array of that many
    /// entries per thread (CodegenOptions::localAdStackEntries), not in the
    /// heap; its capacity must not exceed it.
    int64_t localEntries = 0;
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
    /// GPU targets: the task runs a group of threads per iteration
    /// (CodegenOptions::cooperativeTaskIterations): its launch takes one
    /// group per iteration.
    bool cooperative = false;
    /// GPU targets, a band (a task of several dimensions, whose `begin`
    /// and `end` are Unknown): each dimension's begin and end, in order,
    /// so that the runtime knows its iterations (the product of the
    /// extents); empty for a task of one dimension.
    std::vector<TaskBound> band = {};
    /// GPU targets: the task's body has no loop, so its iterations cost
    /// about the same (DeviceLimits::gridWaves).
    bool loopFree = false;
  };
  /// GPU targets: the device functions of the kernel in the order the
  /// runtime launches them, each `void fn(QdLaunchContext *ctx)` with `ctx`
  /// in device memory. A `Serial` entry runs a run of top-level statements
  /// (and serial tasks) on one thread; a `Parallel` entry runs parallel task
  /// `task` as a grid-stride loop over a grid of ctx->threads threads.
  /// Top-level values a later entry uses travel through ctx->values. Empty
  /// for the CPU, whose one entry function `qd_kernel` runs everything.
  struct Launch {
    enum Kind { Serial, Parallel } kind = Serial;
    std::string function;
    int task = -1; // index in `tasks` for Parallel entries
    /// GPU targets, a parallel task whose trip count is known only at
    /// launch: its cooperative code as well (qd/analysis/CooperativeTask.h),
    /// which the runtime runs, a group per iteration, when the launch has
    /// at most `cooperativeIterations` of them; "" when there is none.
    std::string cooperativeFunction;
    int64_t cooperativeIterations = 0;
    /// With cooperativeFunction: each shared loop's begin and end, in
    /// pairs. Where every one of them has an extent known at launch below
    /// cooperativeLeastLoopIterations, the group would have little to
    /// share: the runtime keeps one iteration per thread.
    std::vector<TaskBound> cooperativeLoops = {};
    int64_t cooperativeLeastLoopIterations = 0;
  };
  std::vector<Launch> launches;
  /// GPU targets with CodegenOptions::fusedEntry: one entry that runs every
  /// launch of `launches` in order in a single group of threads, a group
  /// barrier after each (a serial entry on the group's first thread), for
  /// launches whose threads fit one group; "" when there is none.
  std::string fusedFunction;
  /// GPU targets: slots of ctx->values.
  unsigned numValues = 0;
  /// A per-launch value a GPU target reads from the module's constant
  /// array kLaunchWordsSymbol (8 bytes each) instead of through ctx: what
  /// every thread reads again and again (field bases, capacities, the
  /// grid's size) then lives in the GPU's constant bank, where instructions
  /// take it as an operand, instead of in registers for the whole task.
  struct LaunchWord {
    enum Kind : uint8_t {
      Threads,      // ctx->threads
      Global,       // ctx->globals[index]
      Shape,        // ctx->ndShapes[index]
      Scalar,       // ctx->scalars[index]
      Capacity,     // ctx->capacities[index]
      StackBase,    // ctx->heap + ctx->offsets[index] * ctx->threads
      RowBytes,     // ctx->threads * stacks[index].entryBytes
      GroupTable,   // ctx->groupTable as an integer (0: the interleaved layout)
      GroupShift,   // ctx->groupShift
      ThreadOffset, // ctx->threadOffset
      Zero,         // 0: a loop bound the device's compiler must not see as a constant
    } kind = Threads;
    unsigned index = 0;
    bool operator==(const LaunchWord &) const = default;
  };
  /// The words of kLaunchWordsSymbol, in order (empty: the module has none,
  /// and reads everything through ctx).
  std::vector<LaunchWord> launchWords;
  std::vector<GlobalSlot> slots;
  std::vector<ErrorSite> sites;
  std::vector<Stack> stacks;
  std::vector<Task> tasks;
  /// Per kernel argument: index of its first extent in ndShapes (ndarrays).
  std::vector<unsigned> shapeOffset;
  unsigned numShapes = 0;
};

/// The constant array of a GPU module that holds KernelLayout::launchWords
/// (NVPTX: `.const`), and the most words it may have (the constant bank of
/// a module holds 64 KiB; a kernel that would need more reads the rest
/// through ctx).
inline constexpr const char *kLaunchWordsSymbol = "qd_launch";
inline constexpr unsigned kMaxLaunchWords = 4096;

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
