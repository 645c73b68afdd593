//===- BenchChecks.h - Status checks and medians of the benchmarks -*- C++ -*-===//
//
// What the single-kernel benchmarks (qd-bench-measured-sizing,
// qd-bench-adstack-budget) share: a failed step ends the benchmark through
// `die` (BenchMain.h), and times are reported as medians.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "BenchMain.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"

#include <absl/status/statusor.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
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

/// The integer after `flag` ("--n=") where `arg` starts with it.
inline std::optional<int64_t> intFlag(const std::string &arg, const std::string &flag) {
  if (arg.rfind(flag, 0) != 0)
    return std::nullopt;
  return std::atoll(arg.c_str() + flag.size());
}

/// Backend `name` (every backend registered), or null after `bench` says
/// there is none here and why ("nothing measured": the caller exits 0).
inline std::unique_ptr<qd::Backend> backendOrNothing(const std::string &bench,
                                                     const std::string &name) {
  qd::registerAllBackends();
  absl::StatusOr<std::unique_ptr<qd::Backend>> created = qd::createBackend(name);
  if (created.ok())
    return *std::move(created);
  fmt::print("{}: no {} backend ({}); nothing measured\n", bench, name,
             std::string(created.status().message()));
  return nullptr;
}

/// The median of `v` (not empty; the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace qdbench
