//===- CudaBackend.cpp - NVIDIA GPUs through the CUDA driver --------------===//
#include "qd/runtime/CudaBackend.h"

#include "CudaMemory.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/analysis/AdStackSizing.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/Ptx.h"
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/LaunchWatchdog.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

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
    /// The module's launch words (kLaunchWordsSymbol; 0 when it has none).
    CUdeviceptr launchWords = 0;
    /// Heap code: the local array sizes its local-tape variants were
    /// compiled for (at most kMaxLocalVariants).
    std::vector<std::vector<int64_t>> localVariants;
  };
  static constexpr size_t kMaxLocalVariants = 4;

  CudaBackendOptions options;
  std::shared_ptr<const cuda::Device> device;
  std::shared_ptr<cuda::Reducer> reducer;
  std::string arch;
  mutable std::mutex compileMutex, launchMutex;
  /// Keyed by (kernel, bounds checks, stop checks, local array entries per
  /// stack id: empty for the code that keeps every stack in the heap).
  std::map<std::tuple<uint64_t, bool, bool, std::vector<int64_t>>, Compiled> cache;
  std::map<uint64_t, std::unique_ptr<KernelSizing>> sizings;
  DeviceBuffer heap;
  cuda::LaunchArena arena;
  /// QdLaunchContext::stop: a host word the device reads (allocated at the
  /// first launch).
  std::unique_ptr<cuda::MappedHostMemory> stopWord;
  int64_t lastHeapBytes = 0;

  const KernelSizing &sizingOfLocked(const Kernel &kernel) {
    std::unique_ptr<KernelSizing> &slot = sizings[kernel.uniqueId()];
    if (!slot)
      slot = std::make_unique<KernelSizing>(sizeAdStacks(kernel));
    return *slot;
  }

  /// The code of `kernel`; with `local` (entries per stack id, of the
  /// heap code's layout `heapLayout`), the variant that keeps those stacks
  /// in local arrays.
  absl::StatusOr<Compiled *> compile(const Kernel &kernel, bool boundsChecked,
                                     bool stopChecks = false,
                                     const std::vector<int64_t> &local = {},
                                     const KernelLayout *heapLayout = nullptr) {
    std::lock_guard<std::mutex> lock(compileMutex);
    auto key = std::tuple(kernel.uniqueId(), boundsChecked, stopChecks, local);
    if (auto it = cache.find(key); it != cache.end())
      return &it->second;
    sizingOfLocked(kernel);
    Compiled c;
    llvm::LLVMContext context;
    CodegenOptions opts;
    opts.boundsChecked = boundsChecked;
    opts.stopChecks = stopChecks;
    for (size_t i = 0; i < local.size() && heapLayout; ++i)
      opts.localAdStackEntries[heapLayout->stacks.at(i).stmt] = local[i];
    auto module = emitKernel(kernel, context, opts, c.layout, CodegenTarget::Nvptx);
    if (!module.ok())
      return module.status();
    PtxOptions ptxOptions;
    ptxOptions.arch = arch;
    absl::StatusOr<std::string> ptx = emitPtx(**module, ptxOptions);
    if (!ptx.ok())
      return ptx.status();
    c.ptx = *std::move(ptx);
    auto loaded = cuda::Module::load(*device, c.ptx, options.maxRegisters);
    if (!loaded.ok())
      return absl::Status(loaded.status().code(),
                          fmt::format("kernel @{}: the driver rejected its PTX: {}", kernel.name(),
                                      std::string(loaded.status().message())));
    c.module = *std::move(loaded);
    if (!c.layout.launchWords.empty()) {
      auto words = c.module->global(kLaunchWordsSymbol);
      if (!words.ok())
        return words.status();
      if (words->second != c.layout.launchWords.size() * 8)
        return absl::InternalError(fmt::format(
            "kernel @{}: the module's {} holds {} bytes, its layout {} words", kernel.name(),
            kLaunchWordsSymbol, words->second, c.layout.launchWords.size()));
      c.launchWords = words->first;
    }
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

  /// Local array entries per stack for a launch of `heapCode` with
  /// `capacities`: each a power of two of at least 32 that holds its
  /// capacity, if together they fit in options.localTapeBytes per thread
  /// and the code has such a variant already or fewer than
  /// kMaxLocalVariants; otherwise empty (the heap code). Called under
  /// launchMutex, which guards `localVariants`.
  std::vector<int64_t> localEntriesFor(const Compiled &heapCode,
                                       std::span<const int64_t> capacities) {
    const KernelLayout &layout = heapCode.layout;
    if (options.localTapeBytes <= 0 || layout.stacks.empty())
      return {};
    std::vector<int64_t> local;
    int64_t bytes = 0;
    for (size_t i = 0; i < layout.stacks.size(); ++i) {
      int64_t entries = std::max<int64_t>(32, int64_t(std::bit_ceil(uint64_t(capacities[i]))));
      bytes += entries * layout.stacks[i].entryBytes;
      if (bytes > options.localTapeBytes)
        return {};
      local.push_back(entries);
    }
    const auto &known = heapCode.localVariants;
    bool compiled = std::find(known.begin(), known.end(), local) != known.end();
    return compiled || known.size() < kMaxLocalVariants ? local : std::vector<int64_t>();
  }
};

namespace {

/// The values of `layout.launchWords` for a launch of `plan` over `threads`
/// threads with the heap at `heap`.
absl::StatusOr<std::vector<int64_t>> launchWords(const LaunchPlan &plan,
                                                 std::span<const CUdeviceptr> slots,
                                                 int64_t threads, CUdeviceptr heap) {
  const KernelLayout &layout = plan.layout();
  std::vector<int64_t> words;
  words.reserve(layout.launchWords.size());
  const AdStackHeapLayout &h = plan.heap();
  for (const KernelLayout::LaunchWord &w : layout.launchWords) {
    using K = KernelLayout::LaunchWord;
    switch (w.kind) {
    case K::Threads:
      words.push_back(threads);
      break;
    case K::Global:
      words.push_back(int64_t(slots[w.index]));
      break;
    case K::Shape:
      words.push_back(plan.shapes()[w.index]);
      break;
    case K::Scalar:
      words.push_back(plan.scalars()[w.index]);
      break;
    case K::Capacity:
    case K::RowBytes: {
      // The code keeps an indexed depth (an i32 count) and the bytes
      // between rows in 32 bits.
      int64_t value = w.kind == K::Capacity ? h.capacities[w.index]
                                            : threads * int64_t(layout.stacks[w.index].entryBytes);
      if (value > INT32_MAX) {
        const KernelLayout::Stack &st = layout.stacks[w.index];
        return absl::ResourceExhaustedError(fmt::format(
            "{}: error: the adstack's {} {} is more than the cuda backend's limit of 2^31 - 1 "
            "({}); give it a smaller capacity, or the grid fewer threads "
            "(CudaBackendOptions::maxThreads)",
            st.stmt->loc().str(), w.kind == K::Capacity ? "capacity" : "row size in bytes", value,
            launchWhere(plan.kernel(), st.task)));
      }
      words.push_back(value);
      break;
    }
    case K::StackBase:
      words.push_back(int64_t(heap) + h.offsets[w.index] * threads);
      break;
    }
  }
  return words;
}

} // namespace

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
  impl->device = std::shared_ptr<const cuda::Device>(*std::move(device));
  impl->reducer = std::make_shared<cuda::Reducer>(impl->device);
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

absl::StatusOr<Buffer> CudaBackend::borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                                      uint64_t devicePointer) {
  absl::StatusOr<size_t> bytes = Buffer::byteSize(elem, shape);
  if (!bytes.ok())
    return bytes.status();
  auto mirror =
      cuda::CudaMirror::borrow(impl_.get(), impl_->device, impl_->reducer, devicePointer, *bytes);
  if (!mirror.ok())
    return absl::Status(mirror.status().code(),
                        fmt::format("cuda backend: cannot borrow device memory for a {} array: {}",
                                    toString(elem), std::string(mirror.status().message())));
  return Buffer::onDevice(elem, std::move(shape), *std::move(mirror));
}

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
  // A launch that may be stopped runs code that checks (CodegenOptions::stopChecks).
  auto compiled = impl_->compile(kernel, options.boundsChecked, options.stoppable());
  if (!compiled.ok())
    return compiled.status();
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  const cuda::Device &device = *impl_->device;

  absl::StatusOr<LaunchPlan> plan =
      LaunchPlan::bind(program, kernel, (*compiled)->layout, args, options);
  if (!plan.ok())
    return plan.status();
  if (absl::Status s = plan->layoutAdStacks(); !s.ok())
    return s;
  // Stacks this launch's capacities let fit in each thread's local memory
  // run from there (code compiled for those array sizes), the rest of the
  // kernel unchanged.
  if (std::vector<int64_t> local = impl_->localEntriesFor(**compiled, plan->heap().capacities);
      !local.empty()) {
    Impl::Compiled &heapCode = **compiled;
    compiled =
        impl_->compile(kernel, options.boundsChecked, options.stoppable(), local, &heapCode.layout);
    if (!compiled.ok())
      return compiled.status();
    auto &known = heapCode.localVariants;
    if (std::find(known.begin(), known.end(), local) == known.end())
      known.push_back(local);
    plan = LaunchPlan::bind(program, kernel, (*compiled)->layout, args, options);
    if (!plan.ok())
      return plan.status();
    if (absl::Status s = plan->layoutAdStacks(); !s.ok())
      return s;
  }
  const Impl::Compiled &c = **compiled;
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

  // The bound buffers on the device: resident copies, uploaded only when
  // the host side changed since the last launch.
  const std::vector<Buffer *> &buffers = plan->slotBuffers();
  std::vector<CUdeviceptr> slots;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer *b = buffers[i];
    absl::StatusOr<DeviceMirror *> m = b->prepareOnDevice(impl_.get(), [&] {
      return absl::StatusOr<std::unique_ptr<DeviceMirror>>(
          cuda::CudaMirror::allocate(impl_.get(), impl_->device, impl_->reducer, b->sizeInBytes()));
    });
    if (!m.ok()) {
      const KernelLayout::GlobalSlot &slot = c.layout.slots[i];
      std::string what = slot.field ? "field @" + std::string(slot.field->name())
                                    : "argument %" + std::string(slot.ndarray->name());
      if (slot.component != Component::Primal)
        what += "." + std::string(toString(slot.component));
      return absl::Status(m.status().code(),
                          fmt::format("kernel @{}: cannot put {} on the GPU: {}", kernel.name(),
                                      what, std::string(m.status().message())));
    }
    slots.push_back((*m)->address());
  }
  slots.push_back(0);

  // Every per-launch array in one block: one copy there, one copy back.
  cuda::LaunchArena &arena = impl_->arena;
  if (!impl_->stopWord) {
    auto word = cuda::MappedHostMemory::allocate(device, sizeof(int32_t));
    if (!word.ok())
      return absl::Status(word.status().code(),
                          fmt::format("kernel @{}: cannot allocate the launch's stop word: {}",
                                      kernel.name(), std::string(word.status().message())));
    impl_->stopWord = *std::move(word);
  }
  std::atomic_ref<int32_t> stop(*static_cast<int32_t *>(impl_->stopWord->host()));
  stop.store(0, std::memory_order_relaxed);
  arena.clear();
  std::vector<int64_t> needed = plan->zeroNeeded();
  std::vector<int32_t> lanes(c.layout.tasks.size() + 1, 1);
  size_t ctxOff = arena.place(sizeof(QdLaunchContext));
  size_t globalsOff = arena.put(std::span<const CUdeviceptr>(slots));
  size_t shapesOff = arena.put(std::span<const int64_t>(plan->shapes()));
  size_t scalarsOff = arena.put(std::span<const int64_t>(plan->scalars()));
  size_t offsetsOff = arena.put(std::span<const int64_t>(plan->heap().offsets));
  size_t capsOff = arena.put(std::span<const int64_t>(plan->heap().capacities));
  size_t lanesOff = arena.put(std::span<const int32_t>(lanes));
  size_t valuesOff = arena.place(size_t(c.layout.numValues + 1) * 8);
  // The record and the counters last and adjacent: they come back in one copy.
  size_t recordOff = arena.place(sizeof(QdErrorRecord));
  size_t neededOff = arena.put(std::span<const int64_t>(needed));
  size_t reportBytes = neededOff + needed.size() * 8 - recordOff;
  if (absl::Status s = arena.reserve(device); !s.ok())
    return s;
  auto at = [&](size_t off) { return reinterpret_cast<void *>(uintptr_t(arena.base() + off)); };
  QdLaunchContext ctx{.globals = static_cast<void **>(at(globalsOff)),
                      .ndShapes = static_cast<const int64_t *>(at(shapesOff)),
                      .scalars = static_cast<const int64_t *>(at(scalarsOff)),
                      .heap = reinterpret_cast<char *>(uintptr_t(impl_->heap.get())),
                      .stride = plan->heap().stride,
                      .offsets = static_cast<const int64_t *>(at(offsetsOff)),
                      .capacities = static_cast<const int64_t *>(at(capsOff)),
                      .needed = static_cast<int64_t *>(at(neededOff)),
                      .error = static_cast<QdErrorRecord *>(at(recordOff)),
                      .runtime = nullptr,
                      .taskLanes = static_cast<const int32_t *>(at(lanesOff)),
                      .threads = threads,
                      .values = static_cast<int64_t *>(at(valuesOff)),
                      .stop =
                          reinterpret_cast<const int32_t *>(uintptr_t(impl_->stopWord->device()))};
  arena.write(ctxOff, &ctx, sizeof(ctx));
  if (absl::Status s = arena.upload(device); !s.ok())
    return s;
  if (c.launchWords) {
    absl::StatusOr<std::vector<int64_t>> words =
        launchWords(*plan, slots, threads, impl_->heap.get());
    if (!words.ok())
      return words.status();
    if (absl::Status s = device.copyToDevice(c.launchWords, words->data(), words->size() * 8);
        !s.ok())
      return s;
  }

  CUdeviceptr ctxArg = arena.base() + ctxOff;
  void *params[] = {&ctxArg};
  // Watches the launches and the copy back, which waits for them.
  LaunchWatchdog watchdog(options, [&](StopReason why) {
    stop.store(static_cast<int32_t>(why), std::memory_order_release);
  });
  absl::Status launched;
  for (size_t i = 0; i < c.layout.launches.size() && launched.ok(); ++i) {
    bool parallel = c.layout.launches[i].kind == KernelLayout::Launch::Parallel;
    unsigned grid = parallel ? unsigned(c.blocks) : 1;
    unsigned block = parallel ? impl_->options.blockSize : 1;
    launched = device.check(device.api().cuLaunchKernel(c.functions[i], grid, 1, 1, block, 1, 1, 0,
                                                        nullptr, params, nullptr),
                            "cuLaunchKernel(" + c.layout.launches[i].function + ")");
  }
  if (!launched.ok()) {
    for (size_t i = 0; i < buffers.size(); ++i)
      (void)buffers[i]->finishOnDevice(c.layout.slots[i].written);
    return launched;
  }

  // The copy back waits for the launches (the default stream).
  std::vector<std::byte> report(reportBytes);
  if (absl::Status s = arena.download(device, recordOff, report.data(), reportBytes); !s.ok())
    return absl::Status(s.code(), fmt::format("kernel @{}: the launch failed on the GPU: {}",
                                              kernel.name(), std::string(s.message())));
  // What the code stores to is newer on the device now, even when the
  // launch stopped early (borrowed host memory comes back now).
  for (size_t i = 0; i < buffers.size(); ++i)
    if (absl::Status s = buffers[i]->finishOnDevice(c.layout.slots[i].written); !s.ok())
      return absl::Status(s.code(),
                          fmt::format("kernel @{}: {}", kernel.name(), std::string(s.message())));
  QdErrorRecord record;
  std::memcpy(&record, report.data(), sizeof(record));
  std::memcpy(needed.data(), report.data() + (neededOff - recordOff), needed.size() * 8);
  return plan->finish(record, needed);
}

std::string CudaBackend::reductionPtx() {
  return cuda::Reducer::ptx();
}

} // namespace qd
