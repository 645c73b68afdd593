//===- GpuRuntime.cpp - The LLVM GPU device of the launch -----------------===//
#include "GpuRuntime.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/runtime/LaunchPlan.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace qd::gpu {

std::string GpuRuntime::deviceName() const {
  return fmt::format("'{}'", device_->name());
}

accel::DeviceLimits GpuRuntime::limits() const {
  accel::DeviceLimits l;
  l.groupSize = blockSize_;
  // One thread per iteration beat the resident grid by 1.03x-1.12x on the
  // gradient benchmarks without heap, but loses to a few iterations per
  // thread on loop-free tasks (gridWaves_) (docs/runtime.md, "Grid"); a
  // thread cap or a budget of local tape bytes per SM keeps the resident
  // grid. At most 2^31 - 1 threads: HIP's limit of a grid (the grid-stride
  // loops run the rest).
  if (maxThreads_ == 0 && localTapeBytesPerSm_ == 0)
    l.perIterationThreads = int64_t(INT32_MAX) / blockSize_ * blockSize_;
  l.gridWaves = gridWaves_;
  l.localTapeBytes = localTapeBytes_;
  return l;
}

int64_t GpuRuntime::skippedUploads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return arena_.skippedUploads();
}

int64_t GpuRuntime::graphLaunches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return graphLaunches_;
}

absl::Status GpuRuntime::timeKernels(bool on) {
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

absl::StatusOr<std::unique_ptr<accel::DeviceKernel>>
GpuRuntime::compile(const Kernel &kernel, const accel::CompileRequest &request) {
  auto c = std::make_unique<GpuKernel>();
  c->graphDevice = device_.get();
  c->stopChecks = request.stopChecks;
  llvm::LLVMContext context;
  CodegenOptions opts;
  opts.boundsChecked = request.boundsChecked;
  opts.stopChecks = request.stopChecks;
  opts.distinctNdarrays = request.distinctNdarrays;
  opts.narrowNdarrayOffsets = request.narrowNdarrayOffsets;
  opts.cooperativeTaskIterations = cooperativeTaskIterations_;
  opts.cooperativeScatteringIterations = cooperativeScatteringIterations_;
  opts.fusedEntry = fusedLaunchThreads_ > 0;
  opts.localAdStackEntries = request.localAdStackEntries;
  auto module = emitKernel(kernel, context, opts, c->kernelLayout, target());
  if (!module.ok())
    return module.status();
  absl::StatusOr<std::string> code = translate(**module);
  if (!code.ok())
    return code.status();
  c->code = *std::move(code);
  auto loaded = load(c->code);
  if (!loaded.ok())
    return absl::Status(
        loaded.status().code(),
        fmt::format("kernel @{}: {}", kernel.name(), std::string(loaded.status().message())));
  c->module = *std::move(loaded);
  const KernelLayout &layout = c->kernelLayout;
  if (!layout.launchWords.empty()) {
    auto words = c->module->global(kLaunchWordsSymbol);
    if (!words.ok())
      return words.status();
    if (words->second != layout.launchWords.size() * 8)
      return absl::InternalError(
          fmt::format("kernel @{}: the module's {} holds {} bytes, its layout {} words",
                      kernel.name(), kLaunchWordsSymbol, words->second, layout.launchWords.size()));
    c->launchWords = words->first;
  }
  for (const KernelLayout::Launch &l : layout.launches) {
    auto fn = c->module->entry(l.function);
    if (!fn.ok())
      return fn.status();
    c->functions.push_back(*fn);
    bool parallel = l.kind == KernelLayout::Launch::Parallel;
    c->blockSizes.push_back(!parallel                             ? 1
                            : layout.tasks.at(l.task).cooperative ? cooperativeBlock(*fn)
                                                                  : blockSize_);
    Function coop{};
    if (!l.cooperativeFunction.empty()) {
      auto alt = c->module->entry(l.cooperativeFunction);
      if (!alt.ok())
        return alt.status();
      coop = *alt;
    }
    c->cooperative.push_back(coop);
    c->cooperativeBlockSizes.push_back(coop ? cooperativeBlock(coop) : 0);
  }
  if (!layout.fusedFunction.empty()) {
    auto fn = c->module->entry(layout.fusedFunction);
    if (!fn.ok())
      return fn.status();
    c->fused = *fn;
    // The largest block the fused code can run, up to the backend's bound.
    for (int64_t b = std::min<int64_t>(fusedLaunchThreads_, 1024); b >= 32 && !c->fusedThreads;
         b -= 32)
      if (absl::StatusOr<int> fits = device_->residentBlocks(*fn, unsigned(b));
          fits.ok() && *fits > 0)
        c->fusedThreads = b;
  }
  absl::StatusOr<int64_t> blocks = residentBlocks(*c, request);
  if (!blocks.ok())
    return blocks.status();
  c->threads = *blocks * int64_t(blockSize_);
  return std::unique_ptr<accel::DeviceKernel>(std::move(c));
}

unsigned GpuRuntime::cooperativeBlock(Function f) const {
  // A cooperative task's group shares the task's loops: the larger the
  // group, the more threads share them and hide their loads' latency.
  for (unsigned b = 1024; b > blockSize_; b /= 2)
    if (absl::StatusOr<int> fits = device_->residentBlocks(f, b); fits.ok() && *fits > 0)
      return b;
  return blockSize_;
}

absl::StatusOr<int64_t> GpuRuntime::residentBlocks(const GpuKernel &c,
                                                   const accel::CompileRequest &request) const {
  // One grid for every parallel entry (the heap is laid out for its
  // threads): the fewest blocks any entry keeps resident on all SMs.
  const int64_t sms = std::max(device_->multiprocessors(), 1);
  int64_t blocks = -1;
  for (size_t i = 0; i < c.kernelLayout.launches.size(); ++i) {
    const KernelLayout::Launch &l = c.kernelLayout.launches[i];
    // A cooperative task takes a group per iteration, not this grid.
    if (l.kind != KernelLayout::Launch::Parallel || c.kernelLayout.tasks.at(l.task).cooperative)
      continue;
    absl::StatusOr<int> perSm = device_->residentBlocks(c.functions[i], blockSize_);
    if (!perSm.ok())
      return perSm.status();
    int64_t b = int64_t(std::max(*perSm, 1)) * sms;
    blocks = blocks < 0 ? b : std::min(blocks, b);
  }
  blocks = std::max<int64_t>(blocks, 1);
  // Local tapes live in memory the GPU caches per multiprocessor: beyond a
  // budget per SM, fewer resident threads run faster (docs/performance.md,
  // "Local tapes and occupancy").
  if (localTapeBytesPerSm_ > 0) {
    int64_t perThread = 0;
    for (const KernelLayout::Stack &st : c.kernelLayout.stacks)
      if (auto it = request.localAdStackEntries.find(st.stmt);
          it != request.localAdStackEntries.end())
        perThread += it->second * st.entryBytes;
    if (perThread > 0) {
      int64_t perSm = std::max<int64_t>(1, localTapeBytesPerSm_ / (perThread * blockSize_));
      blocks = std::min<int64_t>(blocks, perSm * sms);
    }
  }
  if (maxThreads_ > 0)
    blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, maxThreads_ / int64_t(blockSize_)));
  return blocks;
}

absl::Status GpuRuntime::checkFrame(const accel::DeviceKernel &kernel,
                                    const accel::LaunchFrame &frame) const {
  // The code keeps an indexed depth (an i32 count) and the bytes between
  // rows in 32 bits.
  const KernelLayout &layout = kernel.layout();
  const LaunchPlan &plan = *frame.plan;
  for (const KernelLayout::LaunchWord &w : layout.launchWords) {
    using K = KernelLayout::LaunchWord;
    if (w.kind != K::Capacity && w.kind != K::RowBytes)
      continue;
    const KernelLayout::Stack &st = layout.stacks[w.index];
    int64_t value = w.kind == K::Capacity ? plan.heap().capacities[w.index]
                                          : frame.threads * int64_t(st.entryBytes);
    if (value > INT32_MAX)
      return absl::ResourceExhaustedError(fmt::format(
          "{}: error: the adstack's {} {} is more than the {} backend's limit of 2^31 - 1 "
          "({}); give it a smaller capacity, or the grid fewer threads ({}::maxThreads)",
          st.stmt->loc().str(), w.kind == K::Capacity ? "capacity" : "row size in bytes", value,
          backend_, launchWhere(plan.kernel(), st.task), options_));
  }
  return absl::OkStatus();
}

std::vector<int64_t> GpuRuntime::launchWords(const GpuKernel &c, const accel::LaunchFrame &frame,
                                             std::span<const DevicePtr> slots) const {
  const KernelLayout &layout = c.kernelLayout;
  const LaunchPlan &plan = *frame.plan;
  const AdStackHeapLayout &h = plan.heap();
  std::vector<int64_t> words;
  words.reserve(layout.launchWords.size());
  for (const KernelLayout::LaunchWord &w : layout.launchWords) {
    using K = KernelLayout::LaunchWord;
    switch (w.kind) {
    case K::Threads:
      words.push_back(frame.threads);
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
      words.push_back(h.capacities[w.index]);
      break;
    case K::RowBytes:
      words.push_back(frame.threads * int64_t(layout.stacks[w.index].entryBytes));
      break;
    case K::StackBase:
      words.push_back(int64_t(heap_.get()) + h.offsets[w.index] * frame.threads);
      break;
    case K::GroupTable:
      words.push_back(frame.groupTable ? int64_t(frame.groupTable->address()) : 0);
      break;
    case K::GroupShift:
      words.push_back(frame.groupShift);
      break;
    case K::ThreadOffset:
      words.push_back(frame.threadOffset);
      break;
    case K::Zero:
      words.push_back(0);
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
  auto mirror = GpuMirror::borrow(owner(), mirrorContext(), devicePointer, *bytes);
  if (!mirror.ok())
    return absl::Status(mirror.status().code(),
                        fmt::format("{} backend: cannot borrow device memory for a {} array: {}",
                                    backend_, toString(elem),
                                    std::string(mirror.status().message())));
  return Buffer::onDevice(elem, std::move(shape), *std::move(mirror));
}

absl::StatusOr<std::unique_ptr<DeviceMirror>> GpuRuntime::mirror(const Buffer &buffer) {
  auto m = GpuMirror::allocate(owner(), mirrorContext(), buffer.sizeInBytes());
  if (!m.ok())
    return m.status();
  return std::unique_ptr<DeviceMirror>(*std::move(m));
}

absl::Status GpuRuntime::allocateHeap(size_t bytes) {
  // Launches in flight may use the heap freed now.
  if (absl::Status s = queue_->waitAll(); !s.ok())
    return s;
  heap_.reset();
  if (bytes == 0)
    return absl::OkStatus();
  auto heap = DeviceBuffer::allocate(*device_, bytes);
  if (!heap.ok())
    return heap.status();
  heap_ = *std::move(heap);
  return absl::OkStatus();
}

absl::StatusOr<int32_t *> GpuRuntime::stopWord() {
  if (!stopWord_) {
    auto word = MappedHostMemory::allocate(*device_, sizeof(int32_t));
    if (!word.ok())
      return absl::Status(word.status().code(),
                          fmt::format("cannot allocate the launch's stop word: {}",
                                      std::string(word.status().message())));
    stopWord_ = *std::move(word);
  }
  return static_cast<int32_t *>(stopWord_->host());
}

size_t GpuRuntime::layoutArena(const GpuKernel &c, const accel::LaunchFrame &frame,
                               std::span<const DevicePtr> slots, size_t neededCount,
                               size_t &recordOff, size_t &reportBytes) {
  // Every per-launch array in one block: one copy there, one copy back.
  const LaunchPlan &plan = *frame.plan;
  arena_.clear();
  std::vector<int32_t> lanes(c.kernelLayout.tasks.size() + 1, 1);
  std::vector<int64_t> zeros(neededCount, 0);
  size_t ctxOff = arena_.place(sizeof(QdLaunchContext));
  size_t globalsOff = arena_.put(slots);
  size_t shapesOff = arena_.put(std::span<const int64_t>(plan.shapes()));
  size_t scalarsOff = arena_.put(std::span<const int64_t>(plan.scalars()));
  size_t offsetsOff = arena_.put(std::span<const int64_t>(plan.heap().offsets));
  size_t capsOff = arena_.put(std::span<const int64_t>(plan.heap().capacities));
  size_t lanesOff = arena_.put(std::span<const int32_t>(lanes));
  size_t valuesOff = arena_.place(size_t(c.kernelLayout.numValues + 1) * 8);
  // The record and the counters last and adjacent: they come back in one copy.
  recordOff = arena_.place(sizeof(QdErrorRecord));
  size_t neededOff = arena_.put(std::span<const int64_t>(zeros));
  reportBytes = neededOff + neededCount * 8 - recordOff;
  // The block's address is known once it is large enough.
  if (arena_.mustGrow())
    return SIZE_MAX;
  auto at = [&](size_t off) { return reinterpret_cast<void *>(uintptr_t(arena_.base() + off)); };
  QdLaunchContext ctx{
      .globals = static_cast<void **>(at(globalsOff)),
      .ndShapes = static_cast<const int64_t *>(at(shapesOff)),
      .scalars = static_cast<const int64_t *>(at(scalarsOff)),
      .heap = reinterpret_cast<char *>(uintptr_t(heap_.get()) - uintptr_t(frame.heapShift)),
      .stride = plan.heap().stride,
      .offsets = static_cast<const int64_t *>(at(offsetsOff)),
      .capacities = static_cast<const int64_t *>(at(capsOff)),
      .needed = static_cast<int64_t *>(at(neededOff)),
      .error = static_cast<QdErrorRecord *>(at(recordOff)),
      .runtime = nullptr,
      .taskLanes = static_cast<const int32_t *>(at(lanesOff)),
      .threads = frame.threads,
      .groupTable = frame.groupTable
                        ? reinterpret_cast<const uint32_t *>(uintptr_t(frame.groupTable->address()))
                        : nullptr,
      .groupShift = frame.groupShift,
      .values = static_cast<int64_t *>(at(valuesOff)),
      .stop = frame.stopWord ? reinterpret_cast<const int32_t *>(uintptr_t(stopWord_->device()))
                             : nullptr,
      .threadOffset = frame.threadOffset};
  arena_.write(ctxOff, &ctx, sizeof(ctx));
  return ctxOff;
}

absl::Status GpuRuntime::enqueueWork(GpuKernel &c, const accel::LaunchFrame &frame,
                                     const Work &work, std::byte *staging, StreamTimer *timer,
                                     Stream stream) {
  if (work.copyWords)
    if (absl::Status s = device_->copyToDeviceAsync(c.launchWords, staging + work.wordsAt,
                                                    c.wordsOnDevice.size() * 8, stream);
        !s.ok())
      return s;
  if (work.upload)
    if (absl::Status s = arena_.upload(*device_, staging, stream); !s.ok())
      return s;
  uint64_t ctxArg[] = {arena_.base() + work.ctxOff};
  absl::Status launched = timer ? timer->start(stream) : absl::OkStatus();
  const bool fused = runsFused(c, frame);
  if (launched.ok() && fused)
    launched = device_->launch(c.fused, 1, unsigned(frame.threads), ctxArg,
                               c.kernelLayout.fusedFunction, stream);
  for (size_t i = 0; i < c.kernelLayout.launches.size() && launched.ok() && !fused; ++i) {
    if (frame.groups[i] == 0)
      continue;
    bool coop = i < frame.cooperative.size() && frame.cooperative[i];
    launched = device_->launch(coop ? c.cooperative[i] : c.functions[i], frame.groups[i],
                               coop ? c.cooperativeBlockSizes[i] : c.blockSizes[i], ctxArg,
                               c.kernelLayout.launches[i].function, stream);
  }
  if (launched.ok() && timer)
    launched = timer->stop(stream);
  if (launched.ok())
    launched = device_->copyToHostAsync(staging + work.reportAt, arena_.base() + work.recordOff,
                                        work.reportBytes, stream);
  return launched;
}

// A launch whose threads fit one block of the fused entry runs it instead of
// its entries one by one: its tasks are small, and what the launches cost
// is mostly the wait between them.
bool GpuRuntime::runsFused(const GpuKernel &c, const accel::LaunchFrame &frame) {
  return c.fused && frame.threads >= 1 && frame.threads <= c.fusedThreads && !frame.groupTable &&
         frame.threadOffset == 0 && frame.moreWindows.empty() &&
         std::ranges::none_of(frame.cooperative, [](bool b) { return b; });
}

void GpuKernel::dropGraphs() {
  for (auto &[key, g] : graphs)
    graphDevice->destroyGraph(g.graph);
  graphs.clear();
}

uint64_t GpuRuntime::memoryMoves() const {
  return arenaMoves_ + queue_->reallocations();
}

absl::StatusOr<Graph> GpuRuntime::graphFor(GpuKernel &c, const accel::LaunchFrame &frame,
                                           size_t slot, const Work &work) {
  if (!useGraphs_ || frame.timed || !device_->hasGraphs())
    return nullptr;
  // Launch shapes that keep changing (a grid per size) are not kept, nor
  // graphs recorded against memory freed since.
  constexpr size_t kMaxShapes = 64;
  const uint64_t moves = memoryMoves();
  if (c.graphs.size() >= kMaxShapes || c.graphsMemory != moves) {
    c.dropGraphs();
    c.graphsMemory = moves;
  }
  // (The words' offset follows from the block's size.)
  GpuKernel::GraphKey key{.slot = slot,
                          .block = arena_.base(),
                          .context = arena_.base() + work.ctxOff,
                          .upload = work.upload,
                          .copyWords = work.copyWords,
                          .blockBytes = arena_.size(),
                          .reportFrom = work.recordOff,
                          .reportAt = work.reportAt,
                          .reportBytes = work.reportBytes,
                          .groups = frame.groups,
                          .cooperative = frame.cooperative,
                          .fused = runsFused(c, frame)};
  GpuKernel::GraphEntry &entry = c.graphs[key];
  if (entry.graph || ++entry.queued < 2)
    return entry.graph;
  absl::StatusOr<Stream> capture = device_->beginCapture();
  if (!capture.ok()) {
    useGraphs_ = false; // the launches go one by one
    return nullptr;
  }
  absl::Status recorded = enqueueWork(c, frame, work, queue_->staging(slot), nullptr, *capture);
  absl::StatusOr<Graph> graph = device_->endCapture(*capture);
  if (!recorded.ok()) {
    if (graph.ok())
      device_->destroyGraph(*graph);
    return recorded;
  }
  if (!graph.ok()) {
    useGraphs_ = false;
    return nullptr;
  }
  entry.graph = *graph;
  return entry.graph;
}

absl::Status GpuRuntime::enqueue(GpuKernel &c, const accel::LaunchFrame &frame, size_t slot,
                                 size_t ctxOff, std::span<const DevicePtr> slots, size_t recordOff,
                                 size_t reportBytes, size_t reportAt, bool &graphed) {
  Stream stream = frame.stream;
  std::byte *staging = queue_->staging(slot);
  if (absl::Status s = queue_->order(stream); !s.ok())
    return s;
  Work work{.ctxOff = ctxOff,
            .recordOff = recordOff,
            .reportBytes = reportBytes,
            .reportAt = reportAt,
            .wordsAt = (arena_.size() + 15) & ~size_t(15)};
  // An asynchronous launch cannot tell whether the code wrote the record,
  // so the next launch uploads again.
  work.upload = !arena_.held(!frame.async);
  if (c.launchWords) {
    std::vector<int64_t> words = launchWords(c, frame, slots);
    if (words != c.wordsOnDevice) {
      std::memcpy(staging + work.wordsAt, words.data(), words.size() * 8);
      c.wordsOnDevice = std::move(words);
      work.copyWords = true;
    }
  }
  absl::StatusOr<Graph> graph = graphFor(c, frame, slot, work);
  if (!graph.ok())
    return graph.status();
  if (!*graph)
    return enqueueWork(c, frame, work, staging, frame.timed ? timer_.get() : nullptr, stream);
  // The graph's copies read the launch block and the words from the
  // slot's staging memory when it runs.
  if (work.upload)
    arena_.stage(staging);
  ++graphLaunches_;
  graphed = true;
  return device_->launchGraph(*graph, stream);
}

void GpuRuntime::readReport(size_t slot, accel::LaunchReport &report) const {
  const std::byte *at = queue_->staging(slot) + slotReports_[slot].offset;
  std::memcpy(&report.record, at, sizeof(report.record));
  size_t n = std::min(report.needed.size(), slotReports_[slot].neededCount);
  std::memcpy(report.needed.data(), at + slotReports_[slot].neededOffset, n * 8);
}

absl::Status GpuRuntime::execute(accel::DeviceKernel &kernel, const accel::LaunchFrame &frame,
                                 accel::LaunchReport &report) {
  std::lock_guard<std::mutex> lock(mutex_);
  GpuKernel &c = static_cast<GpuKernel &>(kernel);
  std::vector<DevicePtr> slots;
  for (DeviceMirror *m : frame.slots)
    slots.push_back(m->address());
  slots.push_back(0);
  size_t recordOff = 0, reportBytes = 0;
  size_t ctxOff = layoutArena(c, frame, slots, report.needed.size(), recordOff, reportBytes);
  if (ctxOff == SIZE_MAX) {
    // Growing the block frees it: launches in flight may still read it.
    if (absl::Status s = queue_->waitAll(); !s.ok())
      return s;
    if (absl::Status s = arena_.reserve(*device_); !s.ok())
      return s;
    ++arenaMoves_;
    ctxOff = layoutArena(c, frame, slots, report.needed.size(), recordOff, reportBytes);
  }
  // The slot's staging memory: the launch block, the launch words, the report.
  size_t wordsAt = (arena_.size() + 15) & ~size_t(15);
  size_t reportAt = (wordsAt + c.kernelLayout.launchWords.size() * 8 + 15) & ~size_t(15);
  absl::StatusOr<size_t> slot = queue_->acquire(reportAt + reportBytes);
  if (!slot.ok())
    return slot.status();
  slotReports_[*slot] = {reportAt, reportBytes - report.needed.size() * 8, report.needed.size()};
  report.fused = runsFused(c, frame);
  absl::Status s =
      enqueue(c, frame, *slot, ctxOff, slots, recordOff, reportBytes, reportAt, report.graph);
  // The event goes after whatever was queued, so that the staging memory is
  // reused only once the stream has read it, even after a failure.
  absl::Status submitted = queue_->submit(*slot, frame.stream);
  if (s.ok())
    s = submitted;
  if (s.ok() && frame.async) {
    arena_.forget();
    report.ticket = *slot + 1;
    return absl::OkStatus();
  }
  absl::Status waited = submitted.ok() ? queue_->wait(*slot) : submitted;
  if (s.ok())
    s = waited;
  if (s.ok()) {
    readReport(*slot, report);
    arena_.readBack(recordOff, queue_->staging(*slot) + reportAt, reportBytes);
  } else {
    arena_.forget();
    c.wordsOnDevice.clear();
  }
  queue_->release(*slot);
  if (s.ok() && frame.timed) {
    absl::StatusOr<double> ms = timer_->elapsedMs();
    if (!ms.ok())
      return ms.status();
    report.kernelMs = *ms;
  }
  return s;
}

absl::Status GpuRuntime::collect(uint64_t ticket, accel::LaunchReport &report) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t slot = size_t(ticket - 1);
  absl::Status s = queue_->wait(slot);
  if (s.ok())
    readReport(slot, report);
  queue_->release(slot);
  return s;
}

} // namespace qd::gpu
