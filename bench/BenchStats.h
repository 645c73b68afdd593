//===- BenchStats.h - Median and min of timed runs --------------*- C++ -*-===//
//
// What the GPU benchmarks (qd-bench-gpu, qd-bench-sims) report of repeated
// runs: the median and the minimum, and how a time in ms is printed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace qdbench {

/// Median and min of timed runs, ms.
struct Timing {
  double medianMs = 0, minMs = 0;
};

/// Median and min of `ms` (zeros when empty).
inline Timing summarize(std::vector<double> ms) {
  if (ms.empty())
    return {};
  std::sort(ms.begin(), ms.end());
  size_t h = ms.size() / 2;
  double median = ms.size() % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h]);
  return {median, ms.front()};
}

/// A time in ms with three significant digits or so.
inline std::string fmtMs(double v) {
  if (v < 1)
    return fmt::format("{:.3f}", v);
  if (v < 100)
    return fmt::format("{:.2f}", v);
  return fmt::format("{:.1f}", v);
}

} // namespace qdbench
