//===- ThreadPool.cpp - The CPU backend's workers -------------------------===//
#include "ThreadPool.h"

#include <algorithm>

namespace qd::cpu {

ThreadPool::ThreadPool(unsigned n, int64_t chunk, size_t stackBytes)
    : n_(std::max(1u, n)), chunk_(chunk) {
  start(stackBytes);
}

ThreadPool::~ThreadPool() {
  stopAll();
}

void ThreadPool::limitWorkers(unsigned n) {
  active_ = std::clamp(n, 1u, n_);
}

bool ThreadPool::ensureStack(size_t bytes) {
  if (bytes <= stackBytes_ && ok_)
    return true;
  stopAll();
  start(std::max(bytes, stackBytes_));
  return ok_;
}

int64_t ThreadPool::chunkFor(int64_t total, int64_t lanes) const {
  if (chunk_ > 0)
    return chunk_;
  int64_t chunk = std::max<int64_t>(1, total / (int64_t(n_) * 8));
  return lanes > 1 ? (chunk + lanes - 1) / lanes * lanes : chunk;
}

void ThreadPool::run(QdLaunchContext *ctx, TaskFn fn, const int64_t *captures, int64_t begin,
                     int64_t end, int64_t lanes, int64_t reach) {
  if (end <= begin)
    return;
  int64_t total = end - begin;
  int64_t chunk = chunkFor(total, lanes);
  if (active_ == 1 || total <= chunk) {
    fn(ctx, captures, begin, end, 0);
    return;
  }
  if (reach <= 0)
    return dispatch(
        {ctx, fn, captures, begin, end, chunk, active_, 0, 1, (total + chunk - 1) / chunk});
  int64_t group = std::max<int64_t>(lanes, 1);
  chunk = std::max(chunk, (reach + group - 1) / group * group);
  int64_t count = total / chunk;
  count -= count % 2;
  if (count < 2) { // too close for two chunks apart: one worker runs them all
    fn(ctx, captures, begin, end, 0);
    return;
  }
  for (int64_t phase = 0; phase < 2; ++phase)
    dispatch({ctx, fn, captures, begin, end, chunk, active_, phase, 2, count});
}

void ThreadPool::dispatch(const Job &job) {
  {
    std::lock_guard lock(mu_);
    job_ = job;
    next_.store(0);
    busy_ = n_ - 1;
    ++generation_;
  }
  cv_.notify_all();
  work(0);
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return busy_ == 0; });
}

void ThreadPool::start(size_t stackBytes) {
  stackBytes_ = stackBytes;
  stop_ = false;
  generation_ = 0;
  ok_ = true;
  for (unsigned w = 1; w < n_ && ok_; ++w) {
    threads_.push_back(std::make_unique<StackThread>(stackBytes, [this, w] { loop(w); }));
    ok_ = threads_.back()->ok();
  }
}

void ThreadPool::stopAll() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    ++generation_;
  }
  cv_.notify_all();
  threads_.clear(); // joins
}

void ThreadPool::work(unsigned worker) {
  Job job;
  {
    std::lock_guard lock(mu_);
    job = job_;
  }
  while (worker < job.workers) {
    int64_t k = job.first + next_.fetch_add(1) * job.step;
    if (k >= job.count)
      break;
    // After an error (a stop included) the launch fails: no new chunks.
    if (std::atomic_ref<int32_t>(job.ctx->error->site).load(std::memory_order_relaxed) != 0)
      break;
    int64_t b = job.begin + k * job.chunk;
    job.fn(job.ctx, job.captures, b, k == job.count - 1 ? job.end : b + job.chunk,
           static_cast<int32_t>(worker));
  }
}

void ThreadPool::loop(unsigned worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_)
        return;
    }
    work(worker);
    {
      std::lock_guard lock(mu_);
      if (--busy_ == 0)
        done_.notify_one();
    }
  }
}

} // namespace qd::cpu
