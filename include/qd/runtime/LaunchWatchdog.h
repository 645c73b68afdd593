//===- qd/runtime/LaunchWatchdog.h - Stopping runaway launches --*- C++ -*-===//
//
// A launch with LaunchOptions::timeout or ::cancel gets a watchdog: an entry
// in a process-wide watch list whose one thread sleeps until the earliest
// deadline (polling cancel flags meanwhile) and then tells the launch to
// stop, once, through a callback. Backends turn that into the word their
// code reads at loop back edges (QdLaunchContext::stop); the launch then
// ends with the loop's stop error (launchStoppedError). One thread for all
// launches: a thread per launch cost about 85 us a launch.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/LaunchContext.h"
#include "qd/runtime/Program.h"

#include <chrono>
#include <functional>

namespace qd {

class LaunchWatchdog {
public:
  /// How often cancel flags are polled.
  static constexpr std::chrono::milliseconds kPollInterval{1};

  /// Starts watching if `options` asks for a timeout or a cancel flag
  /// (nothing otherwise). `stop` runs at most once, on the watch thread,
  /// and never after the destructor returned.
  LaunchWatchdog(const LaunchOptions &options, std::function<void(StopReason)> stop);
  /// Stops watching (the launch is over).
  ~LaunchWatchdog();
  LaunchWatchdog(const LaunchWatchdog &) = delete;
  LaunchWatchdog &operator=(const LaunchWatchdog &) = delete;

  /// The reason given to `stop`, if it ran (read after the launch).
  StopReason reason() const;

  /// One watched launch (the watch list's element).
  struct Entry {
    std::chrono::steady_clock::time_point deadline;
    const std::atomic<bool> *cancel = nullptr;
    std::function<void(StopReason)> stop;
    StopReason reason = StopReason::None;
  };

private:
  Entry entry_;
  bool watched_ = false;
};

/// The limit a stop error reports for `reason` (launchStoppedError's
/// `limit`): the timeout in nanoseconds, or the loop iteration limit.
int64_t stopLimit(const LaunchOptions &options, StopReason reason);

} // namespace qd
