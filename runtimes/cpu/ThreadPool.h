//===- ThreadPool.h - The CPU backend's workers ----------------*- C++ -*-===//
//
// Persistent worker threads that run the chunks of one parallel task at a
// time (qd_rt_parallel_for). The calling thread is worker 0.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "StackThreads.h"

#include "qd/abi/LaunchContext.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace qd::cpu {

/// A parallel task's function: iterations [begin, end) on worker `worker`.
using TaskFn = void (*)(QdLaunchContext *, const int64_t *, int64_t, int64_t, int32_t);

class ThreadPool {
public:
  ThreadPool(unsigned n, int64_t chunk, size_t stackBytes);
  ~ThreadPool();
  unsigned size() const { return n_; }
  /// Runs the next launches' tasks on workers [0, n) only (at least 1, at
  /// most size()): the adstack heap has slices for n workers. Between
  /// launches only (the launch mutex).
  void limitWorkers(unsigned n);
  /// False when the system refused a worker thread.
  bool ok() const { return ok_; }
  size_t stackBytes() const { return stackBytes_; }
  /// Workers with at least `bytes` of stack: the pool starts them anew
  /// when it has less. Between launches only (the launch mutex).
  bool ensureStack(size_t bytes);

  /// About 8 chunks per worker; for a task with vector code of `lanes`
  /// lanes, a whole number of groups (at least one), so that only a task's
  /// last chunk has a partial group.
  int64_t chunkFor(int64_t total, int64_t lanes = 1) const;
  /// Runs iterations [begin, end) of `fn` in chunks on the active workers.
  /// With `reach` > 0, iterations at most `reach` apart must not run at the
  /// same time (they update the same elements without atomics,
  /// ElementOwnership.h "Near atomics"): an even number of chunks of at
  /// least `reach` iterations, the even ones first, then the odd ones
  /// (iterations at the two ends count as close too: cyclic reaches).
  void run(QdLaunchContext *ctx, TaskFn fn, const int64_t *captures, int64_t begin, int64_t end,
           int64_t lanes, int64_t reach = 0);

private:
  /// Chunks first, first + step, ... below count, of `chunk` iterations
  /// from begin (the last one up to end).
  struct Job {
    QdLaunchContext *ctx;
    TaskFn fn;
    const int64_t *captures;
    int64_t begin, end, chunk;
    unsigned workers; // those that take chunks
    int64_t first, step, count;
  };
  /// Runs `job` on the active workers and waits for them.
  void dispatch(const Job &job);

  void start(size_t stackBytes);
  void stopAll();
  void work(unsigned worker);
  void loop(unsigned worker);

  unsigned n_;
  unsigned active_ = n_;
  int64_t chunk_;
  std::vector<std::unique_ptr<StackThread>> threads_;
  size_t stackBytes_ = 0;
  bool ok_ = true;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  unsigned busy_ = 0;
  Job job_{};
  std::atomic<int64_t> next_{0};
};

} // namespace qd::cpu
