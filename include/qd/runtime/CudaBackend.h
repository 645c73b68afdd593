//===- qd/runtime/CudaBackend.h - NVIDIA GPUs through the CUDA driver -*- C++ -*-===//
//
// Compiles kernels to PTX with LLVM's NVPTX back end (qd::codegen_llvm's
// NVPTX target), loads them with the driver's JIT and runs them on one GPU.
// The driver is opened at run time (qd/runtime/CudaDriver.h): creating the
// backend on a machine without one fails with a clear error.
//
// A kernel runs as the device launches its layout lists
// (KernelLayout::launches): runs of top-level statements on one thread,
// each parallel task as a grid-stride loop over a grid bounded by the
// kernel's occupancy (resident blocks x SMs), so per-thread adstack storage
// does not grow with the element count. Adstacks live in one device heap,
// interleaved across the grid's threads (entry d of stack s of thread t at
// heap + offsets[s]*T + (d*T + t)*entryBytes), sized before every launch by
// the launch plan and grown by amortised doubling.
//
// Data: every buffer a launch binds is copied to the device before the
// launch and back after it (device residency, so that unchanged data stays
// on the GPU, is the next step; see docs/runtime.md). Launches are
// serialised per backend.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/runtime/CudaDriver.h"
#include "qd/runtime/Program.h"

#include <absl/status/statusor.h>

#include <memory>
#include <string>

namespace qd {

struct CudaBackendOptions {
  /// Which GPU (a CUDA device ordinal).
  int device = 0;
  /// PTX architecture, e.g. "sm_80"; empty: the device's own.
  std::string arch;
  /// Threads per block of parallel tasks.
  unsigned blockSize = 128;
  /// Upper bound of the grid's threads (0: resident blocks from the
  /// kernel's occupancy times the number of SMs).
  int64_t maxThreads = 0;
};

class CudaBackend : public Backend {
public:
  /// Opens the driver and the device. Fails with FailedPrecondition, saying
  /// why, where there is no driver or no such GPU.
  static absl::StatusOr<std::unique_ptr<CudaBackend>>
  create(const CudaBackendOptions &options = {});
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options) override;
  absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &kernel) override;

  const cuda::DeviceInfo &deviceInfo() const;
  /// The PTX architecture kernels are compiled for.
  const std::string &arch() const;
  /// The PTX of a kernel (compiles it if needed).
  absl::StatusOr<std::string> ptx(const Kernel &kernel, bool boundsChecked = false);
  /// The threads of the grid parallel tasks of `kernel` run on.
  absl::StatusOr<int64_t> gridThreads(const Kernel &kernel, bool boundsChecked = false);
  /// Adstack heap bytes the last launch used.
  int64_t lastAdStackHeapBytes() const;

  struct Impl;

private:
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace qd
