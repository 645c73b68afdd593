//===- CpuRegistration.cpp - The CPU backend in the backend registry ------===//
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"

namespace qd {

absl::Status registerCpuBackend() {
  BackendInfo info;
  info.name = "cpu";
  info.summary = "native code from the LLVM ORC JIT, parallel tasks on worker threads";
  info.options = {
      {"threads", "0..1024", "worker threads of parallel tasks (0: one per hardware thread)"},
      {"chunk", "N", "iterations per chunk of a parallel task (0: about 8 chunks per worker)"},
      {"vector-width", "0..64", "SIMD lanes, a power of two (1: scalar code; 0: from the host)"},
      {"vector-math", "true|false", "vector math through glibc's libmvec (default true)"},
      {"vector-isa", "auto|sse4|avx2|avx512|none", "the libmvec variants to call"},
      {"light", "true|false", "compile every kernel with the light tier (few passes)"},
      {"available-memory-bytes", "N",
       "the host memory the default adstack budget is half of (0: what the host has now)"},
      {"perf-map", "true|false", "name compiled functions for perf in /tmp/perf-<pid>.map"},
  };
  info.create = [](const BackendOptions &given) -> absl::StatusOr<std::unique_ptr<Backend>> {
    CpuBackendOptions o;
    BackendOptionReader read("cpu", given);
    read.integer("threads", o.threads, 0, 1024);
    read.integer("chunk", o.chunk, 0);
    read.integer("vector-width", o.vectorWidth, 0, 64);
    read.boolean("vector-math", o.vectorMath);
    read.string("vector-isa", o.vectorIsa);
    read.boolean("perf-map", o.perfMap);
    bool light = false;
    read.boolean("light", light);
    read.integer("available-memory-bytes", o.availableMemoryBytes, 0);
    if (light)
      o.fullOptimizationLimit = 0;
    if (!read.status().ok())
      return read.status();
    return CpuBackend::create(o);
  };
  return registerBackend(std::move(info));
}

} // namespace qd
