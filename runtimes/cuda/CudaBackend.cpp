//===- CudaBackend.cpp - NVIDIA GPUs through the CUDA driver --------------===//
//
// The CUDA specifics of the GPU runtime (runtimes/gpu/GpuRuntime.h): PTX
// from the NVPTX target, loaded by the driver's JIT (with a register cap),
// and the hand-written PTX of the launch-time reductions.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/CudaBackend.h"

#include "../gpu/GpuRuntime.h"
#include "CudaReduction.h"

#include "qd/codegen/llvm/Ptx.h"

#include <fmt/format.h>

namespace qd {

struct CudaBackend::Impl final : gpu::GpuRuntime {
  Impl(const CudaBackendOptions &options, std::shared_ptr<const cuda::Device> device,
       std::shared_ptr<gpu::Reducer> reducer)
      : GpuRuntime("cuda", "CudaBackendOptions", device, std::move(reducer), options.blockSize,
                   options.maxThreads, options.localTapeBytes, options.localTapeBytesPerSm),
        options(options), cudaDevice(std::move(device)),
        arch(options.arch.empty() ? cudaDevice->smArch() : options.arch) {
    cooperativeTaskIterations_ = options.cooperativeTaskIterations;
    cooperativeScatteringIterations_ = options.cooperativeScatteringIterations;
    fusedLaunchThreads_ = options.fusedLaunchThreads;
    distinctNdarrays_ = options.distinctNdarrays;
    narrowNdarrayOffsets_ = options.narrowNdarrayOffsets;
    gridWaves_ = options.gridWaves;
    useGraphs(options.launchGraphs);
  }

  CodegenTarget target() const override { return CodegenTarget::Nvptx; }
  absl::StatusOr<std::string> translate(llvm::Module &module) override {
    PtxOptions ptxOptions;
    ptxOptions.arch = arch;
    return emitPtx(module, ptxOptions);
  }
  absl::StatusOr<std::unique_ptr<gpu::LoadedModule>> load(const std::string &ptx) override {
    auto loaded = cuda::Module::load(*cudaDevice, ptx, options.maxRegisters);
    if (!loaded.ok())
      return absl::Status(
          loaded.status().code(),
          fmt::format("the driver rejected its PTX: {}", std::string(loaded.status().message())));
    return std::unique_ptr<gpu::LoadedModule>(*std::move(loaded));
  }

  CudaBackendOptions options;
  std::shared_ptr<const cuda::Device> cudaDevice;
  std::string arch;
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : GpuBackend(std::move(impl)) {}

CudaBackend::Impl &CudaBackend::impl() const {
  return static_cast<Impl &>(runtime());
}

absl::StatusOr<std::unique_ptr<CudaBackend>>
CudaBackend::create(const CudaBackendOptions &options) {
  if (options.blockSize == 0 || options.blockSize > 1024)
    return absl::InvalidArgumentError(
        fmt::format("cuda backend: block size {} is outside [1, 1024]", options.blockSize));
  auto opened = cuda::Device::open(options.device);
  if (!opened.ok())
    return opened.status();
  std::shared_ptr<const cuda::Device> device(*std::move(opened));
  auto reducer = std::make_shared<gpu::Reducer>(
      device, [device]() -> absl::StatusOr<std::unique_ptr<gpu::LoadedModule>> {
        auto m = cuda::Module::load(*device, cuda::reductionPtx());
        if (!m.ok())
          return m.status();
        return std::unique_ptr<gpu::LoadedModule>(*std::move(m));
      });
  return std::unique_ptr<CudaBackend>(
      new CudaBackend(std::make_unique<Impl>(options, device, std::move(reducer))));
}

const cuda::DeviceInfo &CudaBackend::deviceInfo() const {
  return impl().cudaDevice->info();
}
const std::string &CudaBackend::arch() const {
  return impl().arch;
}

std::string CudaBackend::reductionPtx() {
  return cuda::reductionPtx();
}

} // namespace qd
