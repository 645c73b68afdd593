//===- GpuTargets.cpp - The qd backends qd-bench-gpu measures --------------===//
//
// See GpuTargets.h.
//
//===----------------------------------------------------------------------===//
#include "GpuTargets.h"

#include "BenchMain.h"

#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/CudaBackend.h"
#include "qd/runtime/VulkanBackend.h"

#include <fmt/format.h>

#include <chrono>

namespace qdbench {
namespace {

/// The Vulkan grid on a GPU: about one full wave of an H100 (132 SMs x 2048
/// resident invocations = 270336), where the backend's default (65536)
/// would fill a quarter of it. A CPU device (lavapipe) keeps the default.
constexpr int64_t kVulkanGpuThreads = int64_t(1) << 18;

/// Why a backend could not be created (its row reads n/a); a bad option
/// stops the benchmark.
std::string creationFailure(const absl::Status &s, const std::string &what) {
  if (s.code() == absl::StatusCode::kInvalidArgument)
    die(fmt::format("{}: {}", what, s.ToString()));
  return std::string(s.message());
}

/// Kernel time apart from the launch's host work and copies: CUDA events,
/// Vulkan timestamp queries around the launch's kernels (about 1 us more
/// per launch). A device that cannot time them has no kernel column.
template <typename B> void timeKernelsOf(Target &t, B *backend) {
  if (absl::Status s = backend->timeKernels(true); !s.ok()) {
    t.machine += fmt::format("; kernels not timed: {}", std::string(s.message()));
    return;
  }
  t.kernelMs = [backend]() -> std::optional<double> {
    absl::StatusOr<double> ms = backend->lastKernelMs();
    return ms.ok() ? std::optional<double>(*ms) : std::nullopt;
  };
}

Target cudaTarget(const Options &o) {
  Target t;
  t.kind = t.label = "cuda";
  qd::CudaBackendOptions options;
  options.device = o.device;
  options.blockSize = o.blockSize;
  options.maxRegisters = o.maxRegisters;
  options.maxThreads = o.cudaThreads;
  options.gridWaves = o.cudaGridWaves;
  options.narrowNdarrayOffsets = o.cudaNarrowOffsets;
  options.localTapeBytesPerSm = o.cudaTapeBytesPerSm;
  auto created = qd::CudaBackend::create(options);
  if (!created.ok()) {
    t.unavailable = creationFailure(created.status(), "CudaBackend::create");
    return t;
  }
  qd::CudaBackend *cuda = created->get();
  t.owned = *std::move(created);
  const qd::cuda::DeviceInfo &info = cuda->deviceInfo();
  t.machine = fmt::format(
      "{} (device {}, compute {}.{}, {} SMs), PTX for {}, {} threads per block, {}", info.name,
      info.ordinal, info.computeMajor, info.computeMinor, info.multiprocessors, cuda->arch(),
      options.blockSize,
      options.maxRegisters ? fmt::format("at most {} registers per thread", options.maxRegisters)
                           : std::string("registers: the JIT's choice"));
  if (o.timeoutMs > 0)
    t.machine += fmt::format(", launches with a {} ms timeout (stop checks)", o.timeoutMs);
  t.heapBytes = [cuda] { return cuda->lastAdStackHeapBytes(); };
  // The last launch's grid: a local-tape launch may run on fewer threads
  // than gridThreads (CudaBackendOptions::localTapeBytesPerSm).
  t.gridThreads = [cuda](const qd::Kernel &) { return cuda->lastLaunchThreads(); };
  timeKernelsOf(t, cuda);
  return t;
}

std::string countName(int64_t n) {
  return n % 1024 == 0 ? fmt::format("{}K", n / 1024) : std::to_string(n);
}

/// `threads`: the grid (VulkanBackendOptions::maxThreads); 0: by the device.
Target vulkanTarget(const Options &o, int64_t threads, bool labelGrid) {
  Target t;
  t.kind = "vulkan";
  t.label = labelGrid ? "vulkan:" + countName(threads) : t.kind;
  qd::VulkanBackendOptions options;
  options.device = o.vulkanDevice;
  options.workgroupSize = o.vulkanWorkgroup;
  options.readOnlyBuffers = o.vulkanReadOnlyBuffers;
  options.maxThreads = threads ? threads : kVulkanGpuThreads;
  auto created = qd::VulkanBackend::create(options);
  if (created.ok() && (*created)->deviceInfo().cpu) {
    if (!o.backendsGiven) {
      t.unavailable = fmt::format("the Vulkan device is '{}', which runs on the CPU, not a GPU "
                                  "(--backends ...,vulkan runs it anyway)",
                                  (*created)->deviceInfo().name);
      return t;
    }
    if (!threads) {
      options.maxThreads = qd::VulkanBackendOptions().maxThreads;
      created = qd::VulkanBackend::create(options);
    }
  }
  if (!created.ok()) {
    t.unavailable = creationFailure(created.status(), "VulkanBackend::create");
    return t;
  }
  qd::VulkanBackend *vulkan = created->get();
  t.owned = *std::move(created);
  const qd::VulkanDeviceInfo &info = vulkan->deviceInfo();
  uint32_t v = info.apiVersion;
  t.machine = fmt::format(
      "{} (device {}, {}, Vulkan {}.{}.{}), SPIR-V, workgroups of {}, a grid of {} invocations "
      "(--vulkan-threads; fewer where the adstack heap would not fit one storage buffer of {} "
      "MiB)",
      info.name, info.index,
      info.discrete ? "discrete GPU"
      : info.cpu    ? "CPU device"
                    : "GPU",
      (v >> 22) & 0x7f, (v >> 12) & 0x3ff, v & 0xfff, options.workgroupSize, vulkan->gridThreads(),
      info.maxStorageBufferRange >> 20);
  t.heapBytes = [vulkan] { return vulkan->lastAdStackHeapBytes(); };
  t.gridThreads = [vulkan](const qd::Kernel &) { return vulkan->lastLaunchThreads(); };
  timeKernelsOf(t, vulkan);
  return t;
}

Target cpuTarget() {
  Target t;
  t.kind = t.label = "cpu";
  absl::StatusOr<std::unique_ptr<qd::CpuBackend>> made = qd::CpuBackend::create({});
  if (!made.ok())
    die(fmt::format("CpuBackend::create: {}", made.status().ToString()));
  std::unique_ptr<qd::CpuBackend> created = *std::move(made);
  qd::CpuBackend *cpu = created.get();
  t.owned = std::move(created);
  t.machine = fmt::format("the CPU backend, {} threads (a check of this program and a baseline, "
                          "not a GPU measurement; 'grid thr' are its worker threads)",
                          cpu->numThreads());
  t.heapBytes = [cpu] { return cpu->lastAdStackHeapBytes(); };
  t.gridThreads = [cpu](const qd::Kernel &) { return int64_t(cpu->numThreads()); };
  return t;
}

} // namespace

/// The backends of --backends, in their order (one Vulkan target per
/// --vulkan-threads value).
std::vector<Target> makeTargets(const Options &o) {
  std::vector<Target> targets;
  for (const std::string &b : o.backends) {
    if (b == "cuda") {
      targets.push_back(cudaTarget(o));
    } else if (b == "vulkan") {
      if (o.vulkanThreads.empty())
        targets.push_back(vulkanTarget(o, 0, false));
      for (int64_t threads : o.vulkanThreads)
        targets.push_back(vulkanTarget(o, threads, o.vulkanThreads.size() > 1));
    } else {
      targets.push_back(cpuTarget());
    }
  }
  for (Target &t : targets)
    if (t.unavailable.empty()) {
      t.backend = t.owned.get();
      t.launchOptions.timeout = std::chrono::milliseconds(o.timeoutMs);
    }
  return targets;
}

} // namespace qdbench
