//===- HipRegistration.cpp - The AMDGPU backend in the backend registry ---===//
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/HipBackend.h"

namespace qd {

absl::Status registerHipBackend() {
  BackendInfo info;
  info.name = "amdgpu";
  info.summary = "an AMD GPU through HIP (code objects from LLVM's AMDGPU target; untested on "
                 "hardware so far)";
  info.options = {
      {"device", "N", "the HIP device ordinal (default 0)"},
      {"arch", "gfx90a|gfx942|gfx1100", "the architecture (default: the GPU's own)"},
      {"block-size", "1..1024", "threads per block of parallel tasks (default 256)"},
      {"max-threads", "N", "upper bound of the grid's threads (0: from the occupancy)"},
  };
  info.create = [](const BackendOptions &given) -> absl::StatusOr<std::unique_ptr<Backend>> {
    HipBackendOptions o;
    BackendOptionReader read("amdgpu", given);
    read.integer("device", o.device, 0, INT32_MAX);
    read.string("arch", o.arch);
    read.integer("block-size", o.blockSize, 1, 1024);
    read.integer("max-threads", o.maxThreads, 0);
    if (!read.status().ok())
      return read.status();
    return HipBackend::create(o);
  };
  return registerBackend(std::move(info));
}

} // namespace qd
