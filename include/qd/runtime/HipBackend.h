//===- qd/runtime/HipBackend.h - AMD GPUs through HIP -----------*- C++ -*-===//
//
// Compiles kernels to AMDGPU code objects with LLVM's AMDGPU back end
// (qd::codegen_llvm's AMDGPU target, qd/codegen/llvm/Hsaco.h), loads them
// with HIP's module API and runs them on one GPU, exactly as the CUDA
// backend runs PTX (qd/runtime/CudaBackend.h; both are the shared GPU
// runtime, runtimes/gpu/GpuRuntime.h): device entries in
// KernelLayout::launches order, grid-stride parallel tasks on a grid
// bounded by occupancy, the adstack heap interleaved across the grid's
// threads and grown by doubling, device-resident data, the error record and
// overflow counters copied back in one copy.
//
// HIP is opened at run time (qd/runtime/HipDriver.h): creating the backend
// on a machine without ROCm or without an AMD GPU fails with a clear
// FailedPrecondition error. Execution on AMD hardware is untested until a
// machine with one is available (docs/runtime.md, "AMDGPU backend").
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/codegen/llvm/Hsaco.h"
#include "qd/runtime/GpuBackend.h"
#include "qd/runtime/HipDriver.h"

#include <absl/status/statusor.h>

#include <memory>
#include <string>

namespace qd {

struct HipBackendOptions {
  /// Which GPU (a HIP device ordinal).
  int device = 0;
  /// The architecture, gfx90a, gfx942 or gfx1100 (qd/codegen/llvm/Hsaco.h);
  /// empty: the device's own.
  std::string arch;
  /// Threads per block of parallel tasks, at most 1024 (code objects are
  /// built for it: HsacoOptions::maxBlockSize; a multiple of the wave size
  /// leaves no lane idle).
  unsigned blockSize = 256;
  /// Upper bound of the grid's threads (0: resident blocks from the
  /// kernel's occupancy times the number of compute units).
  int64_t maxThreads = 0;
};

class HipBackend : public GpuBackend {
public:
  /// Opens HIP and the device. Fails with FailedPrecondition, saying why,
  /// where there is no HIP or no such GPU, and with InvalidArgument for a
  /// bad option or an architecture qd cannot compile for.
  static absl::StatusOr<std::unique_ptr<HipBackend>> create(const HipBackendOptions &options = {});

  std::string_view name() const override { return "amdgpu"; }

  const hip::DeviceInfo &deviceInfo() const;
  /// The architecture kernels are compiled for.
  const std::string &arch() const;
  /// The code object of a kernel (compiles it if needed).
  absl::StatusOr<std::string> codeObject(const Kernel &kernel, bool boundsChecked = false) {
    return loadedCode(kernel, boundsChecked);
  }

  /// The LLVM IR of the reduction kernels launch-time sizing runs (for
  /// tests that compile it).
  static std::string reductionIR();
  /// Their code object for `arch` (emitHsaco of reductionIR()).
  static absl::StatusOr<std::string> reductionCodeObject(const std::string &arch);

  struct Impl;

private:
  explicit HipBackend(std::unique_ptr<Impl> impl);
  Impl &impl() const;
};

/// Registers the backend as `amdgpu` (qd/runtime/BackendRegistry.h; its
/// options set HipBackendOptions). AlreadyExists when it is registered.
absl::Status registerHipBackend();

} // namespace qd
