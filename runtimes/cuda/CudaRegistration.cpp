//===- CudaRegistration.cpp - The CUDA backend in the backend registry ----===//
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CudaBackend.h"

namespace qd {

absl::Status registerCudaBackend() {
  BackendInfo info;
  info.name = "cuda";
  info.summary = "an NVIDIA GPU through the CUDA driver (PTX from LLVM's NVPTX target)";
  info.options = {
      {"device", "N", "the CUDA device ordinal (default 0)"},
      {"arch", "sm_N", "the PTX architecture (default: the device's own)"},
      {"block-size", "1..1024", "threads per block of parallel tasks (default 128)"},
      {"max-threads", "N", "upper bound of the grid's threads (0: from the occupancy)"},
      {"grid-waves", "N",
       "a launch without heap or loops runs at most N resident grids of threads (default 4; "
       "0: one per iteration)"},
      {"cooperative-tasks", "N",
       "tasks of at most N iterations share their long loops over a block (0: never)"},
      {"cooperative-scatter-tasks", "N",
       "the same for tasks whose shared loop scatters atomic adds (default 4096)"},
      {"fused-launches", "N",
       "a launch of at most N threads runs its entries in one block (default 1024; 0: never)"},
      {"max-registers", "N", "registers per thread the JIT may use (0: its choice)"},
      {"local-tape-bytes", "N", "adstacks up to N bytes per thread in local memory (0: heap)"},
      {"local-tape-bytes-per-sm", "N", "local tapes resident per multiprocessor (0: no cap)"},
      {"distinct-ndarrays", "true|false",
       "code for distinct buffers where a launch's ndarray buffers do not overlap"},
      {"narrow-ndarray-offsets", "true|false",
       "code with 32-bit ndarray offsets where every ndarray has below 2^31 elements "
       "(default false)"},
      {"launch-graphs", "true|false",
       "a launch shape queued before goes as one recorded CUDA graph (default true)"},
  };
  info.create = [](const BackendOptions &given) -> absl::StatusOr<std::unique_ptr<Backend>> {
    CudaBackendOptions o;
    BackendOptionReader read("cuda", given);
    read.integer("device", o.device, 0, INT32_MAX);
    read.string("arch", o.arch);
    read.integer("block-size", o.blockSize, 1, 1024);
    read.integer("max-threads", o.maxThreads, 0);
    read.integer("grid-waves", o.gridWaves, 0);
    read.integer("cooperative-tasks", o.cooperativeTaskIterations, 0);
    read.integer("cooperative-scatter-tasks", o.cooperativeScatteringIterations, 0);
    read.integer("fused-launches", o.fusedLaunchThreads, 0);
    read.integer("max-registers", o.maxRegisters, 0, 255);
    read.integer("local-tape-bytes", o.localTapeBytes, 0);
    read.integer("local-tape-bytes-per-sm", o.localTapeBytesPerSm, 0);
    read.boolean("distinct-ndarrays", o.distinctNdarrays);
    read.boolean("narrow-ndarray-offsets", o.narrowNdarrayOffsets);
    read.boolean("launch-graphs", o.launchGraphs);
    if (!read.status().ok())
      return read.status();
    return CudaBackend::create(o);
  };
  return registerBackend(std::move(info));
}

} // namespace qd
