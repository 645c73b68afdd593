//===- BenchChecks.h - Status checks and medians of the benchmarks -*- C++ -*-===//
//
// What the single-kernel benchmarks (qd-bench-measured-sizing,
// qd-bench-adstack-budget) share: a failed step ends the benchmark through
// `die` (BenchMain.h), and times are reported as medians.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "BenchMain.h"

#include <absl/status/statusor.h>

#include <algorithm>
#include <string>
#include <vector>

namespace qdbench {

/// The value, or `die` with the error.
template <typename T> T check(absl::StatusOr<T> v) {
  if (!v.ok())
    die(std::string(v.status().message()));
  return *std::move(v);
}

inline void check(const absl::Status &s) {
  if (!s.ok())
    die(std::string(s.message()));
}

/// The median of `v` (not empty; the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace qdbench
