//===- VulkanReduction.h - Launch-time reductions on a Vulkan device -*- C++ -*-===//
//
// Private to qd::runtime_vulkan.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "VulkanDevice.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <mutex>

namespace qd::vk {

/// The maximum of a range of integers in a device buffer, reduced on the
/// device: a compute shader (hand-written SPIR-V) folds the range with
/// `kLanes` invocations, each over every kLanes-th element, into a
/// host-visible buffer of one 64-bit maximum per invocation, which the host
/// reduces. What the counting kernel measured per iteration (2^20
/// iterations: 8 MiB per stack) thus costs one dispatch and a 128 KiB read
/// instead of a copy of the whole range to the host.
class Reducer {
public:
  /// Invocations of one reduction.
  static constexpr uint32_t kLanes = 16384;

  /// `device` is not owned: the device keeps its reducer.
  explicit Reducer(const Device &device) : device_(device) {}
  Reducer(const Reducer &) = delete;
  Reducer &operator=(const Reducer &) = delete;

  /// The largest of elements [begin, end) of `buffer`: signed 32-bit
  /// integers, or 64-bit ones with `wide`. The pipeline is created at the
  /// first call.
  absl::StatusOr<int64_t> max(const DeviceBuffer &buffer, uint64_t begin, uint64_t end, bool wide);

private:
  absl::Status create();

  const Device &device_;
  std::mutex mutex_;
  ComputeProgram program_;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  /// kLanes (low word, high word) pairs, host-visible.
  DeviceBuffer lanes_;
};

} // namespace qd::vk
