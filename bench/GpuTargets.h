//===- GpuTargets.h - The qd backends qd-bench-gpu measures ------*- C++ -*-===//
//
// The targets of --backends (GpuGradientBench.cpp): CUDA, Vulkan (one per
// --vulkan-threads value) and the CPU backend, each with what it runs on and
// the probes the table reads (heap, grid, kernel time).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "BenchStats.h"
#include "GpuBenchOptions.h"

#include "qd/runtime/Program.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace qdbench {

/// A backend the gradients run on: a GPU (cuda, vulkan), or the CPU backend
/// (a check of this program where there is no GPU, and the baseline of
/// Vulkan on a CPU device).
struct Target {
  std::string kind;        // cuda, vulkan, cpu
  std::string label;       // in the table: the kind, or vulkan:64K with several grids
  std::string machine;     // what it runs on
  std::string unavailable; // why it did not run (n/a), else empty
  std::unique_ptr<qd::Backend> owned;
  qd::Backend *backend = nullptr;
  /// Of every timed launch (--timeout-ms: the code with stop checks).
  qd::LaunchOptions launchOptions;
  std::function<int64_t()> heapBytes;
  /// The invocations of the last launch's grid (the CPU: its worker threads).
  std::function<int64_t(const qd::Kernel &)> gridThreads;
  /// The GPU time of the last launch's kernels (CUDA: events), or none.
  std::function<std::optional<double>()> kernelMs;
  Timing overhead; // launchOverhead()
};

/// The backends of --backends, in their order (one Vulkan target per
/// --vulkan-threads value); those that cannot be created say why.
std::vector<Target> makeTargets(const Options &o);

} // namespace qdbench
