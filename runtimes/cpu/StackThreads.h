//===- StackThreads.h - Threads with the stack a kernel needs -------------===//
//
// Vector code keeps every value a task tapes in its frame: the gradient of
// a 16 000-statement chain at 64 lanes needs about 8 MB, more than a
// default thread has, and overflowing a stack kills the process. The JIT
// records each function's frame (LLVM's .stack_sizes section), and the
// CPU backend runs a kernel only on threads whose stacks hold it: its pool
// threads are created with a chosen stack size, and a launch whose caller
// has too little stack left runs on a thread of its own.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <llvm/Support/MemoryBufferRef.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace qd::cpu {

/// The largest frame among the functions of a relocatable ELF object
/// compiled with TargetOptions::EmitStackSizeSection (0 without the
/// section, nullopt when the section cannot be read).
std::optional<uint64_t> largestStackFrame(llvm::MemoryBufferRef object);

/// Bytes of stack the calling thread has left (below the current frame),
/// or nullopt where the platform does not say.
std::optional<size_t> stackLeft();

/// A thread with a stack of `bytes`, running `body`; joined on
/// destruction. ok() is false when the system refused the thread (no body
/// runs then).
class StackThread {
public:
  StackThread(size_t bytes, std::function<void()> body);
  ~StackThread();
  StackThread(const StackThread &) = delete;
  StackThread &operator=(const StackThread &) = delete;
  bool ok() const { return started_; }

private:
  static void *start(void *self);
  std::function<void()> body_;
  unsigned long handle_ = 0;
  bool started_ = false;
};

} // namespace qd::cpu
