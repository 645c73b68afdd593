//===- qd/runtime/LaunchWatchdog.h - Stopping runaway launches --*- C++ -*-===//
//
// A launch with LaunchOptions::timeout or ::cancel gets a watchdog: a thread
// that waits for the deadline (polling the cancel flag meanwhile) and then
// tells the launch to stop, once, through a callback. Backends turn that
// into the word their code reads at loop back edges (QdLaunchContext::stop);
// the launch then ends with the loop's stop error (launchStoppedError).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/LaunchContext.h"
#include "qd/runtime/Program.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace qd {

class LaunchWatchdog {
public:
  /// How often the cancel flag is polled.
  static constexpr std::chrono::milliseconds kPollInterval{1};

  /// Starts watching if `options` asks for a timeout or a cancel flag (no
  /// thread otherwise). `stop` runs at most once, on the watchdog's thread.
  LaunchWatchdog(const LaunchOptions &options, std::function<void(StopReason)> stop);
  /// Stops watching (the launch is over) and joins the thread.
  ~LaunchWatchdog();
  LaunchWatchdog(const LaunchWatchdog &) = delete;
  LaunchWatchdog &operator=(const LaunchWatchdog &) = delete;

  /// The reason given to `stop`, if it ran (read after the launch).
  StopReason reason() const;

private:
  void watch(std::chrono::steady_clock::time_point deadline, const std::atomic<bool> *cancel);

  std::function<void(StopReason)> stop_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  StopReason reason_ = StopReason::None;
  std::thread thread_;
};

/// The timeout a stop error reports for `reason` (LaunchStoppedError's
/// `limit`).
int64_t stopLimit(const LaunchOptions &options, StopReason reason);

} // namespace qd
