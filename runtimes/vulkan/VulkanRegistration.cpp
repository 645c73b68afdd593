//===- VulkanRegistration.cpp - The Vulkan backend in the backend registry ===//
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/VulkanBackend.h"

namespace qd {

absl::Status registerVulkanBackend() {
  BackendInfo info;
  info.name = "vulkan";
  info.summary = "SPIR-V on a Vulkan device (QD_VULKAN_DEVICE picks one by index or name)";
  info.options = {
      {"device", "NAME",
       "the device, by index or a substring of its name (default: "
       "QD_VULKAN_DEVICE, else the first discrete GPU)"},
      {"workgroup-size", "1..1024", "invocations per workgroup of parallel tasks (default 64)"},
      {"max-threads", "N", "invocations of the grid of parallel tasks (default 65536)"},
      {"grid-waves", "N",
       "a launch without heap or loops runs at most N grids of invocations (default 4; 0: one "
       "per iteration)"},
      {"max-heap-bytes", "N", "largest adstack heap (0: the device's storage buffer range)"},
      {"local-tape-bytes", "N", "adstacks up to N bytes per invocation in local arrays"},
      {"validation", "off|if-installed|required", "the Khronos validation layer (default off)"},
      {"loop-checks", "auto|on|off",
       "check that loops end where the program says (auto: on "
       "llvmpipe only)"},
      {"float-atomics", "true|false", "the device's float atomic adds where it has them"},
      {"subgroup-sums", "true|false",
       "atomic adds to one element summed over the subgroup first where the device can"},
      {"distinct-ndarrays", "true|false",
       "code for distinct buffers where a launch's ndarray buffers do not overlap"},
      {"read-only-buffers", "true|false",
       "declare the buffers a kernel never writes NonWritable (default true)"},
      {"cooperative-tasks", "N",
       "tasks of at most N iterations share their long loops over a workgroup (0: never)"},
      {"cooperative-scatter-tasks", "N",
       "the same for tasks whose shared loop scatters atomic adds (default 4096)"},
  };
  info.create = [](const BackendOptions &given) -> absl::StatusOr<std::unique_ptr<Backend>> {
    VulkanBackendOptions o;
    BackendOptionReader read("vulkan", given);
    read.string("device", o.device);
    read.integer("workgroup-size", o.workgroupSize, 1, 1024);
    read.integer("max-threads", o.maxThreads, 1);
    read.integer("grid-waves", o.gridWaves, 0);
    read.integer("max-heap-bytes", o.maxHeapBytes, 0);
    read.integer("local-tape-bytes", o.localTapeBytes, 0);
    using V = VulkanBackendOptions::Validation;
    read.choice<V>("validation", o.validation,
                   {{"off", V::Off}, {"if-installed", V::IfInstalled}, {"required", V::Required}});
    using C = VulkanLoopExitChecks;
    read.choice<C>("loop-checks", o.loopExitChecks,
                   {{"auto", C::Auto}, {"on", C::On}, {"off", C::Off}});
    read.boolean("float-atomics", o.floatAtomics);
    read.boolean("subgroup-sums", o.subgroupSums);
    read.boolean("distinct-ndarrays", o.distinctNdarrays);
    read.boolean("read-only-buffers", o.readOnlyBuffers);
    read.integer("cooperative-tasks", o.cooperativeTaskIterations, 0);
    read.integer("cooperative-scatter-tasks", o.cooperativeScatteringIterations, 0);
    if (!read.status().ok())
      return read.status();
    o.onValidationMessage = given.onDiagnostic;
    return VulkanBackend::create(o);
  };
  return registerBackend(std::move(info));
}

} // namespace qd
