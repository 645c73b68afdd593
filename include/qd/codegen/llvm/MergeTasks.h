//===- qd/codegen/llvm/MergeTasks.h - One function per task body -*- C++ -*-===//
//
// A kernel built by unrolling a loop (a simulation's time steps) has many
// parallel tasks whose code differs only in integer constants: the step
// that indexes the per-step state, the id of each step's adstack, the ids
// of the error sites. mergeEquivalentTasks keeps one function per class of
// such tasks and passes the constants that differ through the task's
// capture buffer, so that LLVM's passes and machine code generation, which
// take most of a large kernel's compile time, run once per class instead
// of once per task.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

namespace llvm {
class CallInst;
class Module;
} // namespace llvm

namespace qd {

/// What mergeEquivalentTasks did to a module.
struct TaskMergeStats {
  /// Parallel task functions before merging, and after.
  size_t tasks = 0, functions = 0;
  /// Constants turned into parameters, summed over the kept functions.
  size_t parameters = 0;
};

/// On the CPU target's module (CpuTarget.cpp: `qd_kernel` calls
/// `qd_rt_parallel_for(ctx, task, captures, begin, end, lanes)` once per
/// task, each task a function of its own with its own capture buffer, an
/// `alloca [n x i64]` of `qd_kernel`): finds the task functions that are
/// instruction for instruction the same operations on the same types,
/// globals and non-integer constants, and differ at most in integer
/// constants (scalars, or splats in vector code) where a value computed at
/// run time may stand (not an intrinsic's immediate argument, a structure
/// index, a vector element index, a switch case, a branch condition or an
/// alloca's size). Of each class of such functions it keeps the first; each
/// integer constant position where the class's functions differ becomes a
/// load, in its entry block, of an i64 slot appended to the capture buffer
/// (one slot per distinct column of values), which every caller of the
/// class fills with its own value before its call. The other functions of
/// the class are deleted. The code computes the same values as before,
/// bit for bit: only where an integer comes from changes.
/// Call before optimising the module.
TaskMergeStats mergeEquivalentTasks(llvm::Module &module);

/// mergeEquivalentTasks one task at a time, while each task's function is
/// still in cache (a large kernel's functions are not by the time the
/// module is finished: merging afterwards walked each one from memory
/// again). add() takes each task's call of `qd_rt_parallel_for` as soon as
/// its function is complete; a task equivalent to an earlier one has its
/// body deleted there. finish() rewrites the calls and the kept functions,
/// and must run before the module is used (CodegenOptions::taskMerger).
class TaskMerger {
public:
  TaskMerger();
  ~TaskMerger();
  TaskMerger(const TaskMerger &) = delete;
  TaskMerger &operator=(const TaskMerger &) = delete;

  /// A call that is not a task's (mergeEquivalentTasks) is left alone.
  /// Returns whether the call's function stays in the module (false: its
  /// task is equivalent to an earlier one, and its body was deleted).
  bool add(llvm::CallInst *call);
  /// Merges the classes found; the merger is empty again afterwards.
  TaskMergeStats finish();

  struct Call;
  struct Class;
  struct Scratch;

private:
  std::vector<Class> classes_;
  std::unique_ptr<Scratch> scratch_; // reused by every add()
  std::unordered_map<size_t, std::vector<size_t>> buckets_;
  size_t tasks_ = 0;
};

} // namespace qd
