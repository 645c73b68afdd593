//===- GpuBenchOptions.h - qd-bench-gpu's command line ----------*- C++ -*-===//
//
// The options of qd-bench-gpu (GpuGradientBench.cpp, whose header comment
// describes them) and their parser.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GradientKernels.h"

#include "qd/runtime/CudaBackend.h"
#include "qd/runtime/VulkanBackend.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qdbench {

/// qd-bench-gpu's command line.
struct Options {
  int reps = 20, warmup = 3, device = 0;
  int64_t maxN = 0, timeoutMs = 0;
  std::string only = "a,b,c";
  /// The kernel shapes (GradientKernels.h); the first is the others' baseline.
  std::vector<KernelShape> shapes = {KernelShape::Fields, KernelShape::Ndarray};
  /// In table order; the first that runs is the one the others are compared with.
  std::vector<std::string> backends = {"cuda", "vulkan"};
  bool backendsGiven = false; // --backends: a Vulkan CPU device runs too
  unsigned blockSize = qd::CudaBackendOptions().blockSize, maxRegisters = 0;
  int64_t cudaThreads = 0, cudaTapeBytesPerSm = 0;
  /// CudaBackendOptions::gridWaves.
  int64_t cudaGridWaves = 0;
  /// CudaBackendOptions::narrowNdarrayOffsets (--cuda-narrow-offsets).
  bool cudaNarrowOffsets = false;
  std::string json;                   // --json FILE
  std::string vulkanDevice;           // empty: QD_VULKAN_DEVICE, else the backend's choice
  std::vector<int64_t> vulkanThreads; // one Vulkan row each; empty: by the device
  unsigned vulkanWorkgroup = qd::VulkanBackendOptions().workgroupSize;
  bool vulkanReadOnlyBuffers = qd::VulkanBackendOptions().readOnlyBuffers;
  std::vector<std::string> peerFiles;
};

/// Parses the command line; dies with the usage on a bad option.
Options parseOptions(int argc, char **argv);

} // namespace qdbench
