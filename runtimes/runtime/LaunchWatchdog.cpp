//===- LaunchWatchdog.cpp - Stopping runaway launches ---------------------===//
#include "qd/runtime/LaunchWatchdog.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

namespace qd {
namespace {

using Clock = std::chrono::steady_clock;

/// The watch list and its thread, made at the first watched launch and kept
/// for the life of the process (the thread sleeps while the list is empty).
class WatchList {
public:
  static WatchList &get() {
    static WatchList *list = new WatchList; // never destroyed: launches may run at exit
    return *list;
  }

  void add(LaunchWatchdog::Entry *e) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.insert(e);
    wake_.notify_one();
  }
  void remove(LaunchWatchdog::Entry *e) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(e);
  }
  StopReason reason(const LaunchWatchdog::Entry *e) {
    std::lock_guard<std::mutex> lock(mutex_);
    return e->reason;
  }

private:
  WatchList() {
    std::thread([this] { run(); }).detach();
  }

  // Stops whatever is due and sleeps until the next deadline or poll. An
  // entry's callback runs under the mutex, so once remove() returned it
  // never runs again.
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      Clock::time_point now = Clock::now(), next = Clock::time_point::max();
      for (LaunchWatchdog::Entry *e : entries_) {
        if (e->reason != StopReason::None)
          continue;
        if (e->cancel && e->cancel->load(std::memory_order_acquire))
          e->reason = StopReason::Cancelled;
        else if (now >= e->deadline)
          e->reason = StopReason::Timeout;
        if (e->reason != StopReason::None) {
          e->stop(e->reason);
          continue;
        }
        next = std::min(next, e->deadline);
        if (e->cancel)
          next = std::min(next, now + LaunchWatchdog::kPollInterval);
      }
      if (next == Clock::time_point::max())
        wake_.wait(lock);
      else
        wake_.wait_until(lock, next);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::unordered_set<LaunchWatchdog::Entry *> entries_;
};

} // namespace

LaunchWatchdog::LaunchWatchdog(const LaunchOptions &options, std::function<void(StopReason)> stop) {
  if (!options.stoppable())
    return;
  entry_.deadline = Clock::time_point::max();
  if (options.timeout.count() > 0) {
    auto now = Clock::now();
    // A timeout beyond the clock's range is no timeout.
    if (options.timeout < Clock::time_point::max() - now)
      entry_.deadline = now + std::chrono::duration_cast<Clock::duration>(options.timeout);
  }
  entry_.cancel = options.cancel;
  entry_.stop = std::move(stop);
  watched_ = true;
  WatchList::get().add(&entry_);
}

LaunchWatchdog::~LaunchWatchdog() {
  if (watched_)
    WatchList::get().remove(&entry_);
}

StopReason LaunchWatchdog::reason() const {
  return watched_ ? WatchList::get().reason(&entry_) : StopReason::None;
}

int64_t stopLimit(const LaunchOptions &options, StopReason reason) {
  if (reason == StopReason::Timeout)
    return options.timeout.count();
  if (reason == StopReason::LoopLimit)
    return options.maxLoopIterations;
  return 0;
}

} // namespace qd
