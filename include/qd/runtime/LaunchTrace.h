//===- LaunchTrace.h - A line per device launch and transfer -*- C++ -*-===//
//
// A debugging aid for where a launch's time goes: with the environment
// variable QD_TRACE_LAUNCHES set (to anything but "0"), the accelerator
// backends print one line to stderr per device launch (the kernel, its
// threads and groups, the host time of the device's execute: for a
// synchronous launch, its dispatches too) and the Vulkan device one per
// host transfer. Off, a trace point costs one load of a cached flag.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <string_view>

namespace qd {

/// Whether QD_TRACE_LAUNCHES asked for the trace (read once).
bool launchTraceOn();

/// Prints "qd-trace: <ms> ms: <line>" to stderr (whole lines, under a
/// lock; <ms> counts from the first line).
void launchTrace(std::string_view line);

/// Microseconds from `start` to now (the times trace lines print).
inline double microsecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace qd
