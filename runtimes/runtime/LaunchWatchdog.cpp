//===- LaunchWatchdog.cpp - Stopping runaway launches ---------------------===//
#include "qd/runtime/LaunchWatchdog.h"

namespace qd {

LaunchWatchdog::LaunchWatchdog(const LaunchOptions &options, std::function<void(StopReason)> stop)
    : stop_(std::move(stop)) {
  using Clock = std::chrono::steady_clock;
  if (options.timeout.count() <= 0 && !options.cancel)
    return;
  Clock::time_point deadline = Clock::time_point::max();
  if (options.timeout.count() > 0) {
    auto now = Clock::now();
    // A timeout beyond the clock's range is no timeout.
    if (options.timeout < Clock::time_point::max() - now)
      deadline = now + std::chrono::duration_cast<Clock::duration>(options.timeout);
  }
  thread_ = std::thread([this, deadline, cancel = options.cancel] { watch(deadline, cancel); });
}

LaunchWatchdog::~LaunchWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  done_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

StopReason LaunchWatchdog::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

void LaunchWatchdog::watch(std::chrono::steady_clock::time_point deadline,
                           const std::atomic<bool> *cancel) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!finished_) {
    StopReason why = StopReason::None;
    if (cancel && cancel->load(std::memory_order_acquire))
      why = StopReason::Cancelled;
    else if (std::chrono::steady_clock::now() >= deadline)
      why = StopReason::Timeout;
    if (why != StopReason::None) {
      reason_ = why;
      stop_(why);
      return;
    }
    auto wake = deadline;
    if (cancel) {
      auto poll = std::chrono::steady_clock::now() + kPollInterval;
      wake = std::min(wake, poll);
    }
    if (wake == std::chrono::steady_clock::time_point::max())
      done_.wait(lock);
    else
      done_.wait_until(lock, wake);
  }
}

int64_t stopLimit(const LaunchOptions &options, StopReason reason) {
  if (reason == StopReason::Timeout)
    return options.timeout.count();
  if (reason == StopReason::LoopLimit)
    return options.maxLoopIterations;
  return 0;
}

} // namespace qd
