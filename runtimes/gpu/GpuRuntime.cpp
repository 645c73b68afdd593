//===- GpuRuntime.cpp - What the GPU backends do alike --------------------===//
#include "GpuRuntime.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/LaunchWatchdog.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

namespace qd::gpu {

const KernelSizing &GpuRuntime::sizingOfLocked(const Kernel &kernel) {
  std::unique_ptr<KernelSizing> &slot = sizings_[kernel.uniqueId()];
  if (!slot)
    slot = std::make_unique<KernelSizing>(sizeAdStacks(kernel));
  return *slot;
}

absl::StatusOr<const KernelSizing *> GpuRuntime::sizing(const Kernel &kernel) {
  std::lock_guard<std::mutex> lock(compileMutex_);
  return &sizingOfLocked(kernel);
}

int64_t GpuRuntime::lastHeapBytes() const {
  std::lock_guard<std::mutex> lock(launchMutex_);
  return lastHeapBytes_;
}

int64_t GpuRuntime::lastLaunchThreads() const {
  std::lock_guard<std::mutex> lock(launchMutex_);
  return lastLaunchThreads_;
}

absl::Status GpuRuntime::timeKernels(bool on) {
  std::lock_guard<std::mutex> lock(launchMutex_);
  lastKernelMs_ = -1;
  if (!on) {
    timer_.reset();
    return absl::OkStatus();
  }
  if (timer_)
    return absl::OkStatus();
  auto timer = device_->createTimer();
  if (!timer.ok())
    return timer.status();
  timer_ = *std::move(timer);
  return absl::OkStatus();
}

absl::StatusOr<double> GpuRuntime::lastKernelMs() const {
  std::lock_guard<std::mutex> lock(launchMutex_);
  if (!timer_)
    return absl::FailedPreconditionError(fmt::format(
        "{} backend: kernel timing is off; call timeKernels(true) before the launches", backend_));
  if (lastKernelMs_ < 0)
    return absl::FailedPreconditionError(fmt::format(
        "{} backend: no launch has run its kernels since timing was turned on", backend_));
  return lastKernelMs_;
}

int64_t GpuRuntime::skippedUploads() const {
  std::lock_guard<std::mutex> lock(launchMutex_);
  return arena_.skippedUploads();
}

absl::StatusOr<GpuRuntime::Compiled *> GpuRuntime::compile(const Kernel &kernel, bool boundsChecked,
                                                           bool stopChecks,
                                                           const std::vector<int64_t> &local,
                                                           const KernelLayout *heapLayout) {
  std::lock_guard<std::mutex> lock(compileMutex_);
  auto key = std::tuple(kernel.uniqueId(), boundsChecked, stopChecks, local);
  if (auto it = cache_.find(key); it != cache_.end())
    return &it->second;
  sizingOfLocked(kernel);
  Compiled c;
  llvm::LLVMContext context;
  CodegenOptions opts;
  opts.boundsChecked = boundsChecked;
  opts.stopChecks = stopChecks;
  for (size_t i = 0; i < local.size() && heapLayout; ++i)
    opts.localAdStackEntries[heapLayout->stacks.at(i).stmt] = local[i];
  auto module = emitKernel(kernel, context, opts, c.layout, target());
  if (!module.ok())
    return module.status();
  absl::StatusOr<std::string> code = translate(**module);
  if (!code.ok())
    return code.status();
  c.code = *std::move(code);
  auto loaded = load(c.code);
  if (!loaded.ok())
    return absl::Status(
        loaded.status().code(),
        fmt::format("kernel @{}: {}", kernel.name(), std::string(loaded.status().message())));
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
    auto fn = c.module->entry(l.function);
    if (!fn.ok())
      return fn.status();
    c.functions.push_back(*fn);
    if (l.kind != KernelLayout::Launch::Parallel)
      continue;
    absl::StatusOr<int> perSm = device_->residentBlocks(*fn, blockSize_);
    if (!perSm.ok())
      return perSm.status();
    int64_t b = int64_t(std::max(*perSm, 1)) * std::max(device_->multiprocessors(), 1);
    blocks = blocks < 0 ? b : std::min(blocks, b);
  }
  c.blocks = std::max<int64_t>(blocks, 1);
  // Local tapes live in memory the GPU caches per multiprocessor: beyond a
  // budget per SM, fewer resident threads run faster (docs/performance.md,
  // "Local tapes and occupancy").
  if (!local.empty() && localTapeBytesPerSm_ > 0 && heapLayout) {
    int64_t perThread = 0;
    for (size_t i = 0; i < local.size(); ++i)
      perThread += local[i] * heapLayout->stacks.at(i).entryBytes;
    if (perThread > 0) {
      int64_t perSm = std::max<int64_t>(1, localTapeBytesPerSm_ / (perThread * blockSize_));
      c.blocks = std::min<int64_t>(c.blocks, perSm * std::max(device_->multiprocessors(), 1));
    }
  }
  if (maxThreads_ > 0)
    c.blocks = std::max<int64_t>(1, std::min<int64_t>(c.blocks, maxThreads_ / int64_t(blockSize_)));
  return &cache_.emplace(key, std::move(c)).first->second;
}

absl::StatusOr<std::vector<int64_t>> GpuRuntime::launchWords(const Compiled &c,
                                                             const LaunchPlan &plan,
                                                             std::span<const DevicePtr> slots,
                                                             int64_t threads) const {
  const KernelLayout &layout = c.layout;
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
            "{}: error: the adstack's {} {} is more than the {} backend's limit of 2^31 - 1 "
            "({}); give it a smaller capacity, or the grid fewer threads ({}::maxThreads)",
            st.stmt->loc().str(), w.kind == K::Capacity ? "capacity" : "row size in bytes", value,
            backend_, launchWhere(plan.kernel(), st.task), options_));
      }
      words.push_back(value);
      break;
    }
    case K::StackBase:
      words.push_back(int64_t(heap_.get()) + h.offsets[w.index] * threads);
      break;
    }
  }
  return words;
}

absl::StatusOr<Buffer> GpuRuntime::borrowDeviceArray(ScalarType elem, std::vector<int64_t> shape,
                                                     uint64_t devicePointer) {
  absl::StatusOr<size_t> bytes = Buffer::byteSize(elem, shape);
  if (!bytes.ok())
    return bytes.status();
  auto mirror = GpuMirror::borrow(this, device_, reducer_, devicePointer, *bytes);
  if (!mirror.ok())
    return absl::Status(mirror.status().code(),
                        fmt::format("{} backend: cannot borrow device memory for a {} array: {}",
                                    backend_, toString(elem),
                                    std::string(mirror.status().message())));
  return Buffer::onDevice(elem, std::move(shape), *std::move(mirror));
}

absl::Status GpuRuntime::growHeap(const Kernel &kernel, int64_t bytes) {
  if (size_t(bytes) <= heap_.size())
    return absl::OkStatus();
  size_t grown = std::max<size_t>(size_t(bytes), 2 * heap_.size());
  heap_.reset();
  auto heap = DeviceBuffer::allocate(*device_, grown);
  if (!heap.ok())
    return absl::ResourceExhaustedError(
        fmt::format("kernel @{}: cannot allocate {} bytes of adstack heap on the GPU: {}",
                    kernel.name(), grown, std::string(heap.status().message())));
  heap_ = *std::move(heap);
  return absl::OkStatus();
}

absl::Status GpuRuntime::launch(Program &program, const Kernel &kernel,
                                std::span<const LaunchArg> args, const LaunchOptions &options) {
  if (absl::Status s = validateLaunchArgs(kernel, args); !s.ok())
    return s;
  if (absl::Status s = refuseGlobalAccessChecks(kernel, options, backend_); !s.ok())
    return s;
  // A launch that may be stopped runs code that checks (CodegenOptions::stopChecks).
  auto compiled = compile(kernel, options.boundsChecked, options.stoppable());
  if (!compiled.ok())
    return compiled.status();
  std::lock_guard<std::mutex> lock(launchMutex_);
  const Device &device = *device_;

  absl::StatusOr<LaunchPlan> plan =
      LaunchPlan::bind(program, kernel, (*compiled)->layout, args, options);
  if (!plan.ok())
    return plan.status();
  if (absl::Status s = plan->layoutAdStacks(); !s.ok())
    return s;
  // Stacks this launch's capacities let fit in each thread's local memory
  // run from there (code compiled for those array sizes), the rest of the
  // kernel unchanged.
  if (std::vector<int64_t> local =
          localTapeEntries((*compiled)->layout, plan->heap().capacities, localTapeBytes_,
                           (*compiled)->localVariants, kMaxLocalVariants);
      !local.empty()) {
    Compiled &heapCode = **compiled;
    compiled = compile(kernel, options.boundsChecked, options.stoppable(), local, &heapCode.layout);
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
  Compiled &c = **compiled;
  // Tasks with fewer iterations than the grid has threads run on whole
  // blocks enough for them: the heap is laid out for the threads that run.
  // A launch without heap (its stacks in local tapes, or none) whose
  // iterations are known runs one thread per iteration: the hardware then
  // hands blocks to SMs as they free up, which beat the resident grid by
  // 1.03x-1.12x on the gradient benchmarks (docs/performance.md, "Session
  // 19"); a budget of local tape bytes per SM or a thread cap keeps the
  // resident grid.
  int64_t blocks = c.blocks;
  if (std::optional<int64_t> most = plan->fixedParallelIterations()) {
    bool perIteration = plan->heap().stride == 0 && maxThreads_ == 0 && localTapeBytesPerSm_ == 0;
    // (At most 2^31 - 1 threads: HIP's limit of a grid, and the grid-stride
    // loop runs the rest.)
    int64_t cap = perIteration ? std::max(c.blocks, int64_t(INT32_MAX) / blockSize_) : c.blocks;
    blocks = std::clamp<int64_t>((*most + blockSize_ - 1) / blockSize_, 1, cap);
  }
  int64_t threads = blocks * int64_t(blockSize_);
  absl::StatusOr<int64_t> heapBytes = plan->heapBytes(threads);
  if (!heapBytes.ok())
    return heapBytes.status();
  if (absl::Status s = growHeap(kernel, *heapBytes); !s.ok())
    return s;
  lastHeapBytes_ = *heapBytes;
  lastLaunchThreads_ = threads;

  // The bound buffers on the device: resident copies, uploaded only when
  // the host side changed since the last launch.
  const std::vector<Buffer *> &buffers = plan->slotBuffers();
  std::vector<DevicePtr> slots;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer *b = buffers[i];
    absl::StatusOr<DeviceMirror *> m = b->prepareOnDevice(this, [&] {
      return absl::StatusOr<std::unique_ptr<DeviceMirror>>(
          GpuMirror::allocate(this, device_, reducer_, b->sizeInBytes()));
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
  if (!stopWord_) {
    auto word = MappedHostMemory::allocate(device, sizeof(int32_t));
    if (!word.ok())
      return absl::Status(word.status().code(),
                          fmt::format("kernel @{}: cannot allocate the launch's stop word: {}",
                                      kernel.name(), std::string(word.status().message())));
    stopWord_ = *std::move(word);
  }
  std::atomic_ref<int32_t> stop(*static_cast<int32_t *>(stopWord_->host()));
  stop.store(0, std::memory_order_relaxed);
  arena_.clear();
  std::vector<int64_t> needed = plan->zeroNeeded();
  std::vector<int32_t> lanes(c.layout.tasks.size() + 1, 1);
  size_t ctxOff = arena_.place(sizeof(QdLaunchContext));
  size_t globalsOff = arena_.put(std::span<const DevicePtr>(slots));
  size_t shapesOff = arena_.put(std::span<const int64_t>(plan->shapes()));
  size_t scalarsOff = arena_.put(std::span<const int64_t>(plan->scalars()));
  size_t offsetsOff = arena_.put(std::span<const int64_t>(plan->heap().offsets));
  size_t capsOff = arena_.put(std::span<const int64_t>(plan->heap().capacities));
  size_t lanesOff = arena_.put(std::span<const int32_t>(lanes));
  size_t valuesOff = arena_.place(size_t(c.layout.numValues + 1) * 8);
  // The record and the counters last and adjacent: they come back in one copy.
  size_t recordOff = arena_.place(sizeof(QdErrorRecord));
  size_t neededOff = arena_.put(std::span<const int64_t>(needed));
  size_t reportBytes = neededOff + needed.size() * 8 - recordOff;
  if (absl::Status s = arena_.reserve(device); !s.ok())
    return s;
  auto at = [&](size_t off) { return reinterpret_cast<void *>(uintptr_t(arena_.base() + off)); };
  QdLaunchContext ctx{.globals = static_cast<void **>(at(globalsOff)),
                      .ndShapes = static_cast<const int64_t *>(at(shapesOff)),
                      .scalars = static_cast<const int64_t *>(at(scalarsOff)),
                      .heap = reinterpret_cast<char *>(uintptr_t(heap_.get())),
                      .stride = plan->heap().stride,
                      .offsets = static_cast<const int64_t *>(at(offsetsOff)),
                      .capacities = static_cast<const int64_t *>(at(capsOff)),
                      .needed = static_cast<int64_t *>(at(neededOff)),
                      .error = static_cast<QdErrorRecord *>(at(recordOff)),
                      .runtime = nullptr,
                      .taskLanes = static_cast<const int32_t *>(at(lanesOff)),
                      .threads = threads,
                      .values = static_cast<int64_t *>(at(valuesOff)),
                      .stop = reinterpret_cast<const int32_t *>(uintptr_t(stopWord_->device()))};
  arena_.write(ctxOff, &ctx, sizeof(ctx));
  if (absl::Status s = arena_.upload(device); !s.ok())
    return s;
  if (c.launchWords) {
    absl::StatusOr<std::vector<int64_t>> words = launchWords(c, *plan, slots, threads);
    if (!words.ok())
      return words.status();
    if (*words != c.wordsOnDevice) {
      c.wordsOnDevice.clear();
      if (absl::Status s = device.copyToDevice(c.launchWords, words->data(), words->size() * 8);
          !s.ok())
        return s;
      c.wordsOnDevice = *std::move(words);
    }
  }

  uint64_t ctxArg[] = {arena_.base() + ctxOff};
  // Watches the launches and the copy back, which waits for them.
  LaunchWatchdog watchdog(options, [&](StopReason why) {
    stop.store(static_cast<int32_t>(why), std::memory_order_release);
  });
  lastKernelMs_ = -1;
  absl::Status launched = timer_ ? timer_->start() : absl::OkStatus();
  for (size_t i = 0; i < c.layout.launches.size() && launched.ok(); ++i) {
    bool parallel = c.layout.launches[i].kind == KernelLayout::Launch::Parallel;
    launched = device.launch(c.functions[i], parallel ? unsigned(blocks) : 1,
                             parallel ? blockSize_ : 1, ctxArg, c.layout.launches[i].function);
  }
  if (launched.ok() && timer_)
    launched = timer_->stop();
  if (!launched.ok()) {
    arena_.forget();
    for (size_t i = 0; i < buffers.size(); ++i)
      (void)buffers[i]->finishOnDevice(c.layout.slots[i].written);
    return launched;
  }

  // The copy back waits for the launches (the default stream).
  std::vector<std::byte> report(reportBytes);
  if (absl::Status s = arena_.download(device, recordOff, report.data(), reportBytes); !s.ok())
    return absl::Status(s.code(), fmt::format("kernel @{}: the launch failed on the GPU: {}",
                                              kernel.name(), std::string(s.message())));
  // What the code stores to is newer on the device now, even when the
  // launch stopped early (borrowed host memory comes back now).
  for (size_t i = 0; i < buffers.size(); ++i)
    if (absl::Status s = buffers[i]->finishOnDevice(c.layout.slots[i].written); !s.ok())
      return absl::Status(s.code(),
                          fmt::format("kernel @{}: {}", kernel.name(), std::string(s.message())));
  if (timer_) {
    absl::StatusOr<double> ms = timer_->elapsedMs();
    if (!ms.ok())
      return ms.status();
    lastKernelMs_ = *ms;
  }
  QdErrorRecord record;
  std::memcpy(&record, report.data(), sizeof(record));
  std::memcpy(needed.data(), report.data() + (neededOff - recordOff), needed.size() * 8);
  return plan->finish(record, needed);
}

} // namespace qd::gpu
