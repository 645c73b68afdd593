//===- CudaBackend.cpp - NVIDIA GPUs through the CUDA driver --------------===//
#include "qd/runtime/CudaBackend.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/Ptx.h"
#include "qd/runtime/LaunchPlan.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace qd {

using cuda::CUdeviceptr;
using cuda::DeviceBuffer;

struct CudaBackend::Impl {
  struct Compiled {
    KernelLayout layout;
    std::string ptx;
    std::unique_ptr<cuda::Module> module;
    std::vector<cuda::CUfunction> functions; // per layout.launches entry
    int64_t blocks = 1;                      // of every parallel entry
  };

  CudaBackendOptions options;
  std::unique_ptr<cuda::Device> device;
  std::string arch;
  mutable std::mutex compileMutex, launchMutex;
  std::map<std::pair<uint64_t, bool>, Compiled> cache;
  std::map<uint64_t, std::unique_ptr<KernelSizing>> sizings;
  DeviceBuffer heap;
  int64_t lastHeapBytes = 0;

  const KernelSizing &sizingOfLocked(const Kernel &kernel) {
    std::unique_ptr<KernelSizing> &slot = sizings[kernel.uniqueId()];
    if (!slot)
      slot = std::make_unique<KernelSizing>(sizeAdStacks(kernel));
    return *slot;
  }

  absl::StatusOr<Compiled *> compile(const Kernel &kernel, bool boundsChecked) {
    std::lock_guard<std::mutex> lock(compileMutex);
    auto key = std::pair(kernel.uniqueId(), boundsChecked);
    if (auto it = cache.find(key); it != cache.end())
      return &it->second;
    sizingOfLocked(kernel);
    Compiled c;
    llvm::LLVMContext context;
    CodegenOptions opts;
    opts.boundsChecked = boundsChecked;
    auto module = emitKernel(kernel, context, opts, c.layout, CodegenTarget::Nvptx);
    if (!module.ok())
      return module.status();
    PtxOptions ptxOptions;
    ptxOptions.arch = arch;
    absl::StatusOr<std::string> ptx = emitPtx(**module, ptxOptions);
    if (!ptx.ok())
      return ptx.status();
    c.ptx = *std::move(ptx);
    auto loaded = cuda::Module::load(*device, c.ptx);
    if (!loaded.ok())
      return absl::Status(loaded.status().code(),
                          fmt::format("kernel @{}: the driver rejected its PTX: {}", kernel.name(),
                                      std::string(loaded.status().message())));
    c.module = *std::move(loaded);
    // One grid for every parallel entry (the heap is laid out for its
    // threads): the fewest blocks any entry keeps resident on all SMs.
    int64_t blocks = -1;
    for (const KernelLayout::Launch &l : c.layout.launches) {
      auto fn = c.module->function(l.function);
      if (!fn.ok())
        return fn.status();
      c.functions.push_back(*fn);
      if (l.kind != KernelLayout::Launch::Parallel)
        continue;
      int perSm = 0;
      if (absl::Status s = device->check(device->api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                                             &perSm, *fn, int(options.blockSize), 0),
                                         "cuOccupancyMaxActiveBlocksPerMultiprocessor");
          !s.ok())
        return s;
      int64_t b = int64_t(std::max(perSm, 1)) * std::max(device->info().multiprocessors, 1);
      blocks = blocks < 0 ? b : std::min(blocks, b);
    }
    c.blocks = std::max<int64_t>(blocks, 1);
    if (options.maxThreads > 0)
      c.blocks = std::max<int64_t>(
          1, std::min<int64_t>(c.blocks, options.maxThreads / int64_t(options.blockSize)));
    return &cache.emplace(key, std::move(c)).first->second;
  }

  int64_t threadsOf(const Compiled &c) const { return c.blocks * int64_t(options.blockSize); }
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>>
CudaBackend::create(const CudaBackendOptions &options) {
  if (options.blockSize == 0 || options.blockSize > 1024)
    return absl::InvalidArgumentError(
        fmt::format("cuda backend: block size {} is outside [1, 1024]", options.blockSize));
  auto device = cuda::Device::open(options.device);
  if (!device.ok())
    return device.status();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->device = *std::move(device);
  impl->arch = options.arch.empty() ? impl->device->smArch() : options.arch;
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

const cuda::DeviceInfo &CudaBackend::deviceInfo() const {
  return impl_->device->info();
}
const std::string &CudaBackend::arch() const {
  return impl_->arch;
}
int64_t CudaBackend::lastAdStackHeapBytes() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->lastHeapBytes;
}

absl::StatusOr<const KernelSizing *> CudaBackend::adStackSizing(const Kernel &kernel) {
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  return &impl_->sizingOfLocked(kernel);
}

absl::StatusOr<std::string> CudaBackend::ptx(const Kernel &kernel, bool boundsChecked) {
  auto c = impl_->compile(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return (*c)->ptx;
}

absl::StatusOr<int64_t> CudaBackend::gridThreads(const Kernel &kernel, bool boundsChecked) {
  auto c = impl_->compile(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return impl_->threadsOf(**c);
}

namespace {

/// Device copies of a launch's host arrays, freed when the launch ends.
class DeviceArrays {
public:
  explicit DeviceArrays(const cuda::Device &d) : device_(d) {}
  /// A device copy of `bytes` bytes at `host` (a zeroed block when null).
  absl::StatusOr<CUdeviceptr> copy(const void *host, size_t bytes) {
    auto buf = DeviceBuffer::allocate(device_, std::max<size_t>(bytes, 8));
    if (!buf.ok())
      return buf.status();
    absl::Status s = host ? device_.copyToDevice(buf->get(), host, bytes)
                          : device_.zero(buf->get(), std::max<size_t>(bytes, 8));
    if (!s.ok())
      return s;
    buffers_.push_back(*std::move(buf));
    return buffers_.back().get();
  }
  template <typename T> absl::StatusOr<CUdeviceptr> copy(const std::vector<T> &v) {
    return copy(v.data(), v.size() * sizeof(T));
  }

private:
  const cuda::Device &device_;
  std::vector<DeviceBuffer> buffers_;
};

} // namespace

absl::Status CudaBackend::launch(Program &program, const Kernel &kernel,
                                 std::span<const LaunchArg> args, const LaunchOptions &options) {
  if (absl::Status s = validateLaunchArgs(kernel, args); !s.ok())
    return s;
  if (options.checkGlobalAccesses)
    return absl::UnimplementedError(fmt::format(
        "kernel @{}: the cuda backend does not check global accesses "
        "(LaunchOptions::checkGlobalAccesses); launch on the interpreter for that check, or run "
        "the static `check-global-accesses` pass",
        kernel.name()));
  auto compiled = impl_->compile(kernel, options.boundsChecked);
  if (!compiled.ok())
    return compiled.status();
  const Impl::Compiled &c = **compiled;
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  const cuda::Device &device = *impl_->device;

  absl::StatusOr<LaunchPlan> plan = LaunchPlan::bind(program, kernel, c.layout, args, options);
  if (!plan.ok())
    return plan.status();
  if (absl::Status s = plan->layoutAdStacks(); !s.ok())
    return s;
  int64_t threads = impl_->threadsOf(c);
  absl::StatusOr<int64_t> heapBytes = plan->heapBytes(threads);
  if (!heapBytes.ok())
    return heapBytes.status();
  if (size_t(*heapBytes) > impl_->heap.size()) {
    size_t grown = std::max<size_t>(size_t(*heapBytes), 2 * impl_->heap.size());
    impl_->heap.reset();
    auto heap = DeviceBuffer::allocate(device, grown);
    if (!heap.ok())
      return absl::ResourceExhaustedError(
          fmt::format("kernel @{}: cannot allocate {} bytes of adstack heap on the GPU: {}",
                      kernel.name(), grown, std::string(heap.status().message())));
    impl_->heap = *std::move(heap);
  }
  impl_->lastHeapBytes = *heapBytes;

  // Device copies of the bound buffers and of the launch's arrays.
  DeviceArrays arrays(device);
  const std::vector<Buffer *> &buffers = plan->slotBuffers();
  std::vector<CUdeviceptr> slots;
  for (Buffer *b : buffers) {
    auto p = arrays.copy(b->data(), b->sizeInBytes());
    if (!p.ok())
      return p.status();
    slots.push_back(*p);
  }
  slots.push_back(0);
  std::vector<int64_t> needed = plan->zeroNeeded();
  auto dGlobals = arrays.copy(slots);
  auto dShapes = arrays.copy(plan->shapes());
  auto dScalars = arrays.copy(plan->scalars());
  auto dOffsets = arrays.copy(plan->heap().offsets);
  auto dCaps = arrays.copy(plan->heap().capacities);
  auto dNeeded = arrays.copy(needed);
  auto dRecord = arrays.copy(nullptr, sizeof(QdErrorRecord));
  auto dValues = arrays.copy(nullptr, size_t(c.layout.numValues + 1) * 8);
  auto dLanes = arrays.copy(std::vector<int32_t>(c.layout.tasks.size() + 1, 1));
  for (auto *p :
       {&dGlobals, &dShapes, &dScalars, &dOffsets, &dCaps, &dNeeded, &dRecord, &dValues, &dLanes})
    if (!p->ok())
      return p->status();
  auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void *>(uintptr_t(p)); };
  QdLaunchContext ctx{.globals = static_cast<void **>(ptr(*dGlobals)),
                      .ndShapes = static_cast<const int64_t *>(ptr(*dShapes)),
                      .scalars = static_cast<const int64_t *>(ptr(*dScalars)),
                      .heap = static_cast<char *>(ptr(impl_->heap.get())),
                      .stride = plan->heap().stride,
                      .offsets = static_cast<const int64_t *>(ptr(*dOffsets)),
                      .capacities = static_cast<const int64_t *>(ptr(*dCaps)),
                      .needed = static_cast<int64_t *>(ptr(*dNeeded)),
                      .error = static_cast<QdErrorRecord *>(ptr(*dRecord)),
                      .runtime = nullptr,
                      .taskLanes = static_cast<const int32_t *>(ptr(*dLanes)),
                      .threads = threads,
                      .values = static_cast<int64_t *>(ptr(*dValues))};
  auto dCtx = arrays.copy(&ctx, sizeof(ctx));
  if (!dCtx.ok())
    return dCtx.status();

  CUdeviceptr ctxArg = *dCtx;
  void *params[] = {&ctxArg};
  for (size_t i = 0; i < c.layout.launches.size(); ++i) {
    bool parallel = c.layout.launches[i].kind == KernelLayout::Launch::Parallel;
    unsigned grid = parallel ? unsigned(c.blocks) : 1;
    unsigned block = parallel ? impl_->options.blockSize : 1;
    if (absl::Status s =
            device.check(device.api().cuLaunchKernel(c.functions[i], grid, 1, 1, block, 1, 1, 0,
                                                     nullptr, params, nullptr),
                         "cuLaunchKernel(" + c.layout.launches[i].function + ")");
        !s.ok())
      return s;
  }

  // The copies back wait for the launches (the default stream).
  QdErrorRecord record{};
  if (absl::Status s = device.copyToHost(&record, *dRecord, sizeof(record)); !s.ok())
    return absl::Status(s.code(), fmt::format("kernel @{}: the launch failed on the GPU: {}",
                                              kernel.name(), std::string(s.message())));
  if (absl::Status s = device.copyToHost(needed.data(), *dNeeded, needed.size() * 8); !s.ok())
    return s;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (absl::Status s = device.copyToHost(buffers[i]->data(), slots[i], buffers[i]->sizeInBytes());
        !s.ok())
      return s;
  return plan->finish(record, needed);
}

} // namespace qd
