//===- qd/runtime/VulkanBackend.h - Kernels on Vulkan compute -----*- C++ -*-===//
//
// Compiles kernels to SPIR-V (qd::codegen_spirv) and runs them through
// Vulkan on one device. The Vulkan loader (libvulkan.so.1) is opened at run
// time, never linked: the library builds and its other tests run on
// machines without Vulkan, and creating the backend there fails with a
// clear error.
//
// A kernel runs as its layout's launches (KernelLayout::launches), one
// compute dispatch each, recorded in one command buffer with barriers
// between them: runs of top-level statements as one invocation, each
// parallel task as a grid-stride loop over a bounded grid of T invocations
// (VulkanBackendOptions::maxThreads), so adstack storage does not grow with
// the element count. Adstacks live in one device heap, interleaved across
// the T invocations, sized before every launch by the launch plan (from
// launch data, so bounds change without recompiling) and grown by
// amortised doubling. A push past a capacity writes nothing and raises a
// counter; the launch then fails with the CPU backend's overflow error and
// the next launch works.
//
// Data stays on the device: each field component and ndarray buffer a
// launch binds gets a device-local copy the first time (a DeviceMirror,
// qd/runtime/Buffer.h), copied again through a staging buffer only when
// the host changed it, and back only when the host reads it. i1 elements
// are 32-bit on the device. Launches are serialised per backend. A launch
// with a timeout or a cancel flag runs code with stop checks, which read a
// host-visible word the launch's watchdog sets (SpirvOptions::stopChecks).
//
// With VulkanBackendOptions::validation, the Khronos validation layer checks
// every call, and its warnings and errors are collected
// (validationMessages()); the tests run with it and expect none.
// Mesa's lavapipe silently ends the loops of an invocation after 65535
// iterations in all; on it (VulkanDeviceInfo::endsLongLoops) the code
// checks every loop's exit, and a loop the driver ended is a
// ResourceExhausted error naming it (VulkanBackendOptions::loopExitChecks;
// docs/runtime.md, "Vulkan backend").
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/codegen/spirv/SpirvCodegen.h"
#include "qd/runtime/AcceleratorBackend.h"

#include <absl/status/statusor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qd {

/// Whether the code checks that loops end where the program says
/// (SpirvOptions::checkLoopExits).
enum class VulkanLoopExitChecks {
  Auto, // on where the driver ends long loops (lavapipe), off elsewhere
  On,
  Off,
};

struct VulkanBackendOptions {
  /// Which device: a physical-device index ("0", "1"), or a substring of
  /// its name ("llvmpipe", "NVIDIA"). Empty: the QD_VULKAN_DEVICE
  /// environment variable, else the first discrete GPU, else device 0.
  std::string device;
  /// Invocations per workgroup of parallel tasks.
  unsigned workgroupSize = 64;
  /// The invocations of the grid parallel tasks run on (T, rounded down to
  /// whole workgroups; at least one workgroup, at most 65535).
  int64_t maxThreads = 65536;
  /// A launch without adstack heap (its stacks in local tapes, or none)
  /// whose tasks' iterations are known at launch runs one invocation per
  /// iteration (whole workgroups, at most the device's
  /// maxComputeWorkGroupCount[0] of them) instead of maxThreads: on an
  /// H200 the sin x64 gradient's kernel took 2.39 instead of 2.65 ms at
  /// 2^24 elements. false: maxThreads for every launch.
  bool invocationPerIteration = true;
  /// With invocationPerIteration, a launch whose parallel tasks have no
  /// loops runs at most this many times maxThreads invocations, each
  /// several iterations where there are more (0: no bound)
  /// (docs/runtime.md, "Grid"): on the H200 `wave`'s forward at 2048^2
  /// took 0.26-0.27 ms per step at a thread per cell and 0.21 at 4.
  int64_t gridWaves = 4;
  /// How long a launch polls its fence before it sleeps in
  /// vkWaitForFences, in microseconds. Waking from the driver's wait took
  /// about 20 us on NVIDIA's driver (launch overhead 57 us asleep, 36 us
  /// polling); a launch that runs longer than this spends it on a host
  /// core. Devices on the host's processor (lavapipe) never poll: their
  /// work needs the cores. 0: always sleep.
  int64_t pollMicroseconds = 500;
  /// Largest adstack heap in bytes (0: the device's maxStorageBufferRange,
  /// the most one storage buffer may hold). A launch whose stacks need more
  /// for the whole grid runs on fewer invocations (lastLaunchThreads());
  /// only a launch where one invocation needs more fails.
  uint64_t maxHeapBytes = 0;
  /// Local tapes: a launch whose adstacks all fit in this many bytes per
  /// invocation (each stack's capacity rounded up to a power of two, at
  /// least 32 entries) keeps them in per-invocation arrays (Function
  /// storage: a GPU's cached local memory) instead of the heap, with code
  /// compiled per set of array sizes (at most 4 per kernel; further
  /// launches use the heap). 0: always the heap.
  int64_t localTapeBytes = 2048;
  /// The Khronos validation layer (VK_LAYER_KHRONOS_validation, Debian's
  /// vulkan-validationlayers), with synchronisation validation where the
  /// layer offers it. Its warnings and errors are recorded
  /// (VulkanBackend::validationMessages) and passed to
  /// onValidationMessage.
  ///  - Off: no layer.
  ///  - IfInstalled: the layer where it and VK_EXT_debug_utils are
  ///    available, else none (VulkanBackend::validationActive() says which).
  ///  - Required: the layer, else create() fails with FailedPrecondition
  ///    naming the package (what the tests ask for).
  enum class Validation { Off, IfInstalled, Required };
  Validation validation = Validation::Off;
  /// With validation on: called with each warning and error the layer
  /// reports, on the thread that caused it (so it must be thread-safe), as
  /// long as the device lives: also after the backend is gone while a
  /// program's buffers still hold the device, and while the device and the
  /// instance are destroyed (where leaked objects are reported).
  std::function<void(const std::string &message)> onValidationMessage;
  /// Use the device's float atomic adds where it has them; false: the
  /// compare-exchange loop every device runs (tests both on one device).
  bool floatAtomics = true;
  /// Sum atomic adds to one element over the subgroup first where the
  /// device has subgroup vote and arithmetic operations
  /// (SpirvFeatures::subgroupArithmetic); false: one add per invocation.
  bool subgroupSums = true;
  /// Launches whose ndarray buffers do not overlap run code compiled for
  /// distinct buffers (SpirvOptions::distinctNdarrays); false: every launch
  /// runs the code that lets buffers overlap.
  bool distinctNdarrays = true;
  /// Declare the buffers no access of a kernel writes NonWritable
  /// (SpirvOptions::readOnlyBuffers), except in kernels that add floats
  /// with the device's atomic instruction (docs/runtime.md, "SPIR-V code
  /// generation").
  bool readOnlyBuffers = true;
  /// Cooperative tasks (SpirvOptions::cooperativeTaskIterations, docs/
  /// runtime.md "Cooperative tasks"): a task of at most this many
  /// iterations around long serial loops runs a workgroup per iteration
  /// that shares the loops; 0: never. The workgroups have
  /// `cooperativeGroupSize` invocations, at most what the device allows.
  int64_t cooperativeTaskIterations = kDefaultCooperativeTaskIterations;
  int64_t cooperativeScatteringIterations = kDefaultCooperativeScatteringIterations;
  unsigned cooperativeGroupSize = 256;
  /// Loop exit checks: Mesa's lavapipe ends the loops of an invocation
  /// after 65535 iterations in all, silently; with the checks such a loop
  /// is a ResourceExhausted error naming it (VulkanDeviceInfo::
  /// checkLoopExits says what was decided).
  VulkanLoopExitChecks loopExitChecks = VulkanLoopExitChecks::Auto;
};

struct VulkanDeviceInfo {
  std::string name;
  uint32_t apiVersion = 0, vendorId = 0, deviceId = 0, index = 0;
  bool discrete = false;
  /// A software device on the host's processor (VK_PHYSICAL_DEVICE_TYPE_CPU:
  /// lavapipe, SwiftShader).
  bool cpu = false;
  SpirvFeatures features;
  uint64_t maxStorageBufferRange = 0;
  /// VkPhysicalDeviceDriverProperties::driverID (a VkDriverId; 0 where the
  /// device does not report it) and driverName.
  uint32_t driverId = 0;
  std::string driverName;
  /// The driver ends an invocation's loops after a number of iterations
  /// (lavapipe: VK_DRIVER_ID_MESA_LLVMPIPE, or "llvmpipe" in the name of
  /// a device that reports no driver ID).
  bool endsLongLoops = false;
  /// The code checks loop exits: VulkanBackendOptions::loopExitChecks, Auto
  /// deciding by endsLongLoops.
  bool checkLoopExits = false;
  /// VkPhysicalDeviceLimits::maxComputeWorkGroupCount[0].
  uint32_t maxWorkgroupsX = 65535;
  /// VkPhysicalDeviceLimits::maxComputeWorkGroupInvocations and
  /// maxComputeWorkGroupSize[0] (at least 128 on every Vulkan device).
  uint32_t maxWorkgroupInvocations = 128;
  /// Timestamps of the compute queue: valid bits (0: none) and nanoseconds
  /// per tick (VkPhysicalDeviceLimits::timestampPeriod).
  uint32_t timestampValidBits = 0;
  double timestampPeriodNs = 0;
};

/// Timing (AcceleratorBackend::timeKernels) writes timestamp queries before
/// the first dispatch and after the last; it fails (FailedPrecondition,
/// naming the device) where the compute queue has no timestamps.
/// lastLaunchThreads() is fewer than gridThreads() where the tasks have
/// fewer iterations or the heap of the whole grid would not fit
/// (VulkanBackendOptions::maxHeapBytes), one per iteration for a launch
/// without heap (VulkanBackendOptions::invocationPerIteration).
class VulkanBackend : public AcceleratorBackend {
public:
  /// Opens the loader, an instance and the device. FailedPrecondition,
  /// saying why, where there is no loader, no device or none matching, or
  /// validation is Required and the layer is missing.
  static absl::StatusOr<std::unique_ptr<VulkanBackend>>
  create(const VulkanBackendOptions &options = {});
  ~VulkanBackend() override;

  std::string_view name() const override { return "vulkan"; }
  /// Measured stacks take the optimistic launch (docs/sizing.md, "Which one
  /// runs, and why": as fast as counting on NVIDIA's driver, faster on
  /// lavapipe, and it refines upper bounds).
  bool optimisticAdStacks() const override { return true; }

  /// The device's SPIR-V features (VulkanDeviceInfo::features).
  BackendCapabilities capabilities() const override {
    const SpirvFeatures &f = deviceInfo().features;
    return {f.int64, f.float64, f.int64Atomics, !deviceInfo().endsLongLoops};
  }
  std::optional<AdStackHeapUsage> lastAdStackHeapUsage() const override {
    AdStackHeapUsage u = lastAdStackUsage();
    u.threadKind = "invocations";
    return u;
  }

  const VulkanDeviceInfo &deviceInfo() const;
  /// The SPIR-V of a kernel as the backend runs it (compiles it if needed).
  absl::StatusOr<const SpirvKernel *> spirv(const Kernel &kernel, bool boundsChecked = false);
  /// T: the invocations of the grid of parallel tasks.
  int64_t gridThreads() const;

  /// Whether the validation layer is on (VulkanBackendOptions::validation).
  bool validationActive() const;
  /// The warnings and errors the validation layer reported since the
  /// backend was created or the messages were last cleared, in order, one
  /// string each ("error [validation] Validation Error: [ VUID-... ] ...");
  /// the first 1000 are kept, validationMessageCount() counts all.
  std::vector<std::string> validationMessages() const;
  size_t validationMessageCount() const;
  void clearValidationMessages();

  /// The Vulkan objects the backend runs on, for interop and tests
  /// (VkInstance, VkPhysicalDevice, VkDevice and the loader's
  /// PFN_vkGetInstanceProcAddr, untyped so that this header needs no
  /// Vulkan headers). They live as long as the backend.
  struct NativeHandles {
    void *instance = nullptr, *physicalDevice = nullptr, *device = nullptr;
    void (*getInstanceProcAddr)() = nullptr;
  };
  NativeHandles nativeHandles() const;

  struct Impl;

private:
  explicit VulkanBackend(std::unique_ptr<Impl> impl);
  Impl &impl_;
};

/// Registers the Vulkan backend as `vulkan` (qd/runtime/BackendRegistry.h;
/// its options set VulkanBackendOptions, and BackendOptions::onDiagnostic
/// receives the validation layer's messages). AlreadyExists when it is
/// registered.
absl::Status registerVulkanBackend();

} // namespace qd
