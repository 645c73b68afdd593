//===- LaunchPlan.cpp - What a launch binds and reports -------------------===//
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/LaunchWatchdog.h"

#include "qd/abi/LaunchContext.h"
#include "qd/abi/LaunchErrors.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>

namespace qd {

absl::StatusOr<LaunchPlan> LaunchPlan::bind(Program &program, const Kernel &kernel,
                                            const KernelLayout &layout,
                                            std::span<const LaunchArg> args,
                                            const LaunchOptions &options) {
  if (options.maxLoopIterations != 0)
    return absl::InvalidArgumentError(fmt::format(
        "kernel @{}: compiled code does not count loop iterations "
        "(LaunchOptions::maxLoopIterations); stop it with LaunchOptions::timeout or ::cancel, or "
        "launch on the interpreter",
        kernel.name()));
  LaunchPlan plan;
  plan.program_ = &program;
  plan.kernel_ = &kernel;
  plan.layout_ = &layout;
  plan.args_ = args;
  plan.options_ = &options;

  for (const auto &slot : layout.slots) {
    Buffer *b = slot.field ? program.field(*slot.field, slot.component)
                           : args[slot.ndarray->index()].ndarrayValue().component(slot.component);
    if (!b) {
      return absl::FailedPreconditionError(fmt::format(
          "kernel @{} uses '{}', which has no storage in this launch", kernel.name(),
          globalName(slot.field != nullptr, slot.field ? slot.field->name() : slot.ndarray->name(),
                     slot.component)));
    }
    plan.buffers_.push_back(b);
  }

  plan.shapes_.assign(layout.numShapes + 1, 0);
  plan.scalars_.assign(args.size() + 1, 0);
  for (unsigned i = 0; i < args.size(); ++i) {
    if (args[i].isNdarray()) {
      const Buffer &b = *args[i].ndarrayValue().primal;
      for (unsigned d = 0; d < b.ndim(); ++d)
        plan.shapes_[layout.shapeOffset[i] + d] = b.shape()[d];
      continue;
    }
    const Scalar &s = args[i].scalarValue();
    if (s.type == ScalarType::F32) {
      float f = static_cast<float>(s.f);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      plan.scalars_[i] = bits;
    } else if (s.type == ScalarType::F64) {
      std::memcpy(&plan.scalars_[i], &s.f, 8);
    } else {
      plan.scalars_[i] = s.i;
    }
  }
  return plan;
}

std::vector<void *> LaunchPlan::hostSlotPointers() const {
  std::vector<void *> out;
  out.reserve(buffers_.size() + 1);
  for (Buffer *b : buffers_)
    out.push_back(b->data());
  out.push_back(nullptr); // never empty
  return out;
}

std::optional<int64_t> LaunchPlan::taskBound(const KernelLayout::TaskBound &b) const {
  switch (b.kind) {
  case KernelLayout::TaskBound::Constant:
    return b.constant;
  case KernelLayout::TaskBound::Argument:
    return static_cast<int32_t>(scalars_[b.argument]);
  case KernelLayout::TaskBound::NdarrayExtent:
    return static_cast<int32_t>(shapes_[layout_->shapeOffset[b.argument] + b.axis]);
  case KernelLayout::TaskBound::FieldElement:
    if (const Buffer *f = program_->field(*b.field, b.component))
      return f->get(b.constant).i;
    break;
  case KernelLayout::TaskBound::Unknown:
    break;
  }
  return std::nullopt;
}

std::optional<int64_t> LaunchPlan::fixedExtent(const KernelLayout::TaskBound &begin,
                                               const KernelLayout::TaskBound &end) const {
  auto fixed = [](const KernelLayout::TaskBound &b) {
    return b.kind == KernelLayout::TaskBound::Constant ||
           b.kind == KernelLayout::TaskBound::Argument ||
           b.kind == KernelLayout::TaskBound::NdarrayExtent;
  };
  if (!fixed(begin) || !fixed(end))
    return std::nullopt;
  std::optional<int64_t> b = taskBound(begin), e = taskBound(end);
  if (!b || !e)
    return std::nullopt;
  return std::max<int64_t>(*e - *b, 0);
}

std::optional<int64_t> LaunchPlan::fixedIterations(const KernelLayout::Task &task) const {
  if (task.band.empty())
    return fixedExtent(task.begin, task.end);
  // A band: the product of its extents (each at most 2^31).
  int64_t n = 1;
  for (size_t d = 0; d + 1 < task.band.size(); d += 2) {
    std::optional<int64_t> e = fixedExtent(task.band[d], task.band[d + 1]);
    if (!e || (*e != 0 && n > INT64_MAX / *e))
      return std::nullopt;
    n *= *e;
  }
  return n;
}

bool LaunchPlan::mayShareLoops(const KernelLayout::Launch &l) const {
  if (l.cooperativeLoops.empty())
    return true;
  for (size_t i = 0; i + 1 < l.cooperativeLoops.size(); i += 2) {
    std::optional<int64_t> e = fixedExtent(l.cooperativeLoops[i], l.cooperativeLoops[i + 1]);
    if (!e || *e >= l.cooperativeLeastLoopIterations)
      return true;
  }
  return false;
}

std::optional<int64_t> LaunchPlan::fixedParallelIterations() const {
  int64_t most = 0;
  for (const KernelLayout::Launch &l : layout_->launches) {
    if (l.kind != KernelLayout::Launch::Parallel)
      continue;
    std::optional<int64_t> n = fixedIterations(layout_->tasks.at(l.task));
    if (!n)
      return std::nullopt;
    most = std::max(most, *n);
  }
  return most;
}

absl::Status LaunchPlan::layoutAdStacks(std::span<const int32_t> lanes) {
  // Per task, its stacks one after the other in a thread's slice; the slice
  // is as large as the largest task needs (tasks run one after another).
  size_t numStacks = layout_->stacks.size();
  heap_ = AdStackHeapLayout();
  heap_.offsets.assign(numStacks + 1, 0);
  heap_.capacities.assign(numStacks + 1, 0);
  heap_.stackBytes.assign(numStacks + 1, 0);
  std::map<const Stmt *, int64_t> used;
  // A stack of SIMD lanes starts on a vector boundary (its entries are
  // whole vectors), and then so does every thread's slice.
  const KernelLayout::Stack *lastVectorStack = nullptr;
  auto heapTooLarge = [&](const KernelLayout::Stack &st) {
    return absl::ResourceExhaustedError(fmt::format(
        "{}: error: cannot allocate the adstack heap: one thread's stacks need more than {} "
        "bytes ({}); give the stacks smaller capacities",
        st.stmt->loc().str(), INT64_MAX, launchWhere(*kernel_, st.task)));
  };
  // Rounds `bytes` up to abi::kHostVectorAlignment; false past INT64_MAX.
  auto alignUp = [](int64_t &bytes) {
    constexpr int64_t align = abi::kHostVectorAlignment;
    if (bytes > INT64_MAX - (align - 1))
      return false;
    bytes = (bytes + align - 1) / align * align;
    return true;
  };
  for (size_t i = 0; i < numStacks; ++i) {
    const auto &st = layout_->stacks[i];
    int64_t cap = st.stmt->capacity();
    if (auto it = options_->adStackCapacities.find(st.stmt);
        it != options_->adStackCapacities.end())
      cap = it->second;
    else if (Value *arg = st.stmt->capacityArgument())
      cap = std::max<int64_t>(args_[cast<Argument>(arg)->index()].scalarValue().i, 1);
    else if (cap == 0)
      cap = options_->defaultAdStackCapacity;
    if (cap <= 0)
      return adStackNoCapacityError(*kernel_, *st.stmt, st.task);
    if (cap > kMaxAdStackCapacity)
      return adStackTooLargeError(*kernel_, *st.stmt, st.task, cap);
    heap_.capacities[i] = cap;
    if (st.localEntries > 0) {
      // Kept in each thread's local array: no heap. The runtime chose code
      // whose arrays hold this launch's capacities.
      if (cap > st.localEntries)
        return absl::InternalError(fmt::format(
            "{}: the adstack's capacity {} exceeds the {} entries of its local array ({})",
            st.stmt->loc().str(), cap, st.localEntries, launchWhere(*kernel_, st.task)));
      heap_.stackBytes[i] = st.localEntries * int64_t(st.entryBytes);
      continue;
    }
    int64_t &at = used[st.task];
    int64_t n =
        st.parallelTask >= 0 && size_t(st.parallelTask) < lanes.size() ? lanes[st.parallelTask] : 1;
    if (n > 1) {
      lastVectorStack = &st;
      if (!alignUp(at))
        return heapTooLarge(st);
    }
    heap_.offsets[i] = at;
    // cap >= 1: the code reads entry >= 0. cap <= 2^40 and an entry is at
    // most 16 bytes x 64 lanes, so one stack fits; their sum may not.
    int64_t bytes = adStackBytes(st.entryBytes * n, cap);
    heap_.stackBytes[i] = bytes;
    if (__builtin_add_overflow(at, bytes, &at))
      return heapTooLarge(st);
    heap_.stride = std::max(heap_.stride, at);
  }
  if (lastVectorStack && !alignUp(heap_.stride))
    return heapTooLarge(*lastVectorStack);
  return absl::OkStatus();
}

std::vector<AdStackPlacement> LaunchPlan::adStackPlacement(int64_t threads) const {
  std::vector<AdStackPlacement> out;
  for (size_t i = 0; i < layout_->stacks.size(); ++i) {
    const KernelLayout::Stack &st = layout_->stacks[i];
    AdStackPlacement p;
    p.stack = st.stmt;
    p.memory =
        st.localEntries > 0 ? AdStackPlacement::Memory::LocalTape : AdStackPlacement::Memory::Heap;
    p.capacity = heap_.capacities[i];
    p.entries = st.localEntries > 0 ? st.localEntries : heap_.capacities[i];
    p.bytesPerThread = heap_.stackBytes[i];
    p.threads = threads;
    out.push_back(p);
  }
  return out;
}

absl::StatusOr<int64_t> LaunchPlan::heapBytes(int64_t threads) const {
  int64_t bytes;
  if (__builtin_mul_overflow(heap_.stride, threads, &bytes))
    return absl::ResourceExhaustedError(fmt::format(
        "kernel @{}: cannot allocate {} x {} bytes of adstack heap ({} threads with {} bytes "
        "each): the size does not fit in 64 bits; give the stacks smaller capacities",
        kernel_->name(), threads, heap_.stride, threads, heap_.stride));
  return bytes;
}

int64_t defaultAdStackBudget(uint64_t freeBytes) {
  if (freeBytes == 0)
    return INT64_MAX;
  double budget = double(freeBytes) * kDefaultAdStackBudgetFraction;
  return budget >= double(INT64_MAX) ? INT64_MAX : std::max<int64_t>(int64_t(budget), 1);
}

int64_t LaunchPlan::adStackBudget(int64_t deviceDefault) const {
  return options_->adStackMemoryBudget > 0 ? options_->adStackMemoryBudget : deviceDefault;
}

int64_t LaunchPlan::threadsWithin(int64_t budget) const {
  return heap_.stride == 0 ? INT64_MAX : std::max<int64_t>(budget, 0) / heap_.stride;
}

absl::Status LaunchPlan::overBudgetError(int64_t budget, std::string_view source) const {
  // The stack that takes the most of one thread's slice names the launch.
  size_t most = 0;
  for (size_t i = 0; i < layout_->stacks.size(); ++i)
    if (layout_->stacks[i].localEntries == 0 && heap_.stackBytes[i] > heap_.stackBytes[most])
      most = i;
  const KernelLayout::Stack &st = layout_->stacks.at(most);
  absl::Status error = absl::ResourceExhaustedError(fmt::format(
      "{}: error: one iteration's adstacks need {} bytes of heap ({}; the largest, adstack "
      "%{}: capacity {}, {} bytes), more than the adstack memory budget of {} bytes ({}); raise "
      "the budget (LaunchOptions::adStackMemoryBudget, qd-run --adstack-memory-budget=BYTES), "
      "give the stacks smaller capacities, or shorten the loop that fills the stack (running "
      "fewer iterations at a time cannot help: one alone does not fit)",
      st.stmt->loc().str(), heap_.stride, launchWhere(*kernel_, st.task), st.stmt->name(),
      heap_.capacities[most], heap_.stackBytes[most], budget, source));
  // (From a string_view: Debian's Abseil has no Cord(std::string&&) that
  // clang's mangling of the template finds.)
  std::string stride = std::to_string(heap_.stride);
  error.SetPayload(kOverBudgetPayload, absl::Cord(absl::string_view(stride)));
  return error;
}

bool isOverBudget(const absl::Status &s) {
  return s.GetPayload(kOverBudgetPayload).has_value();
}

AdStackHeapUsage LaunchPlan::heapUsage(int64_t threads, int64_t budget,
                                       std::span<const int32_t> lanes) const {
  AdStackHeapUsage u;
  u.threads = threads;
  u.budgetBytes = budget;
  u.checkpointInterval = options_ ? options_->checkpointInterval : 0;
  absl::StatusOr<int64_t> bytes = heapBytes(threads);
  u.bytes = bytes.ok() ? *bytes : INT64_MAX;
  if (heap_.stride == 0)
    return u;
  // Per parallel task with heap stacks: the threads that hold an iteration
  // (a group of lanes) and how often they go over the task's iterations.
  std::vector<bool> seen(layout_->tasks.size(), false);
  int64_t busy = 0;
  u.waves = 1;
  for (const KernelLayout::Stack &st : layout_->stacks) {
    if (st.localEntries > 0)
      continue;
    if (st.parallelTask < 0 || seen[st.parallelTask]) {
      busy = std::max<int64_t>(busy, st.parallelTask < 0 ? 1 : 0);
      continue;
    }
    seen[st.parallelTask] = true;
    const KernelLayout::Task &task = layout_->tasks[st.parallelTask];
    std::optional<int64_t> b = taskBound(task.begin), e = taskBound(task.end);
    if (!b || !e) {
      busy = threads; // not known before the launch: every thread may work
      continue;
    }
    int64_t n = size_t(st.parallelTask) < lanes.size() ? std::max(lanes[st.parallelTask], 1) : 1;
    int64_t items = (std::max<int64_t>(*e - *b, 0) + n - 1) / n;
    busy = std::max(busy, std::min(items, threads));
    if (threads > 0)
      u.waves = std::max(u.waves, (items + threads - 1) / threads);
  }
  u.needBytes = heap_.stride * busy; // busy <= threads: no overflow
  return u;
}

QdLaunchContext LaunchPlan::hostContext(std::vector<void *> &globals, char *heap,
                                        std::vector<int64_t> &needed, QdErrorRecord &record,
                                        void *runtime, const int32_t *taskLanes,
                                        const int32_t *stop) const {
  return QdLaunchContext{.globals = globals.data(),
                         .ndShapes = shapes_.data(),
                         .scalars = scalars_.data(),
                         .heap = heap,
                         .stride = heap_.stride,
                         .offsets = heap_.offsets.data(),
                         .capacities = heap_.capacities.data(),
                         .needed = needed.data(),
                         .error = &record,
                         .runtime = runtime,
                         .taskLanes = taskLanes,
                         .threads = 0,
                         .groupTable = nullptr,
                         .groupShift = 0,
                         .values = nullptr,
                         .stop = stop,
                         .threadOffset = 0};
}

std::string LaunchPlan::indexErrorText(const GlobalAccessStmt &g,
                                       std::span<const int64_t, abi::kMaxErrorData> data) const {
  const std::vector<int64_t> *shape = nullptr;
  if (!program_) {
    const Argument *nd = g.field() ? nullptr : cast<Argument>(g.ndarray());
    for (size_t i = 0; i < layout_->slots.size() && i < slotShapes_.size(); ++i) {
      const KernelLayout::GlobalSlot &slot = layout_->slots[i];
      if (slot.field == g.field() && slot.ndarray == nd && slot.component == g.component())
        shape = &slotShapes_[i];
    }
  } else if (const Buffer *buf =
                 g.field() ? program_->field(*g.field(), g.component())
                           : args_[cast<Argument>(g.ndarray())->index()].ndarrayValue().component(
                                 g.component())) {
    shape = &buf->shape();
  }
  size_t shown = std::min<size_t>(g.numIndices(), abi::kMaxErrorData);
  std::string name = globalAccessName(g);
  if (!shape)
    return fmt::format("index is out of range for '{}'", name);
  return indexOutOfRangeText(name, data.first(shown), *shape, g.numIndices() > abi::kMaxErrorData);
}

LaunchPlan LaunchPlan::detached() const {
  LaunchPlan d;
  d.kernel_ = kernel_;
  d.layout_ = layout_;
  d.heap_ = heap_;
  d.slotShapes_.reserve(buffers_.size());
  for (const Buffer *b : buffers_)
    d.slotShapes_.push_back(b ? b->shape() : std::vector<int64_t>());
  return d;
}

absl::Status LaunchPlan::finish(const QdErrorRecord &record,
                                std::span<const int64_t> needed) const {
  // needed[s]: the pushes past the capacity (QdLaunchContext::needed).
  for (size_t i = 0; i < layout_->stacks.size() && i < needed.size(); ++i)
    if (needed[i] > 0) {
      const auto &st = layout_->stacks[i];
      int64_t need;
      if (__builtin_add_overflow(heap_.capacities[i], needed[i], &need))
        need = INT64_MAX;
      return adStackOverflowError(*kernel_, *st.stmt, st.task, heap_.capacities[i], need);
    }
  if (record.site <= 0)
    return absl::OkStatus();
  if (size_t(record.site) > layout_->sites.size())
    return absl::InternalError(
        fmt::format("kernel @{}: the code reported error site {}, but its layout has {} sites",
                    kernel_->name(), record.site, layout_->sites.size()));
  const auto &site = layout_->sites[record.site - 1];
  if (site.stopCheck) {
    auto reason = static_cast<StopReason>(record.data[0]);
    return launchStoppedError(*kernel_, *site.stmt, taskOf(site.stmt), reason,
                              stopLimit(options_ ? *options_ : LaunchOptions(), reason));
  }
  if (site.loopExitCheck)
    return loopEndedEarlyError(*kernel_, *site.stmt, taskOf(site.stmt));
  std::string what =
      site.indexCheck ? indexErrorText(cast<GlobalAccessStmt>(*site.stmt), record.data) : site.what;
  return statementError(*kernel_, *site.stmt, taskOf(site.stmt), what);
}

std::vector<int64_t> localTapeEntries(const KernelLayout &layout,
                                      std::span<const int64_t> capacities, int64_t limitBytes,
                                      const std::vector<std::vector<int64_t>> &known,
                                      size_t maxVariants) {
  if (limitBytes <= 0 || layout.stacks.empty())
    return {};
  std::vector<int64_t> local;
  int64_t bytes = 0;
  for (size_t i = 0; i < layout.stacks.size(); ++i) {
    int64_t entries = std::max<int64_t>(32, int64_t(std::bit_ceil(uint64_t(capacities[i]))));
    bytes += entries * layout.stacks[i].entryBytes;
    if (bytes > limitBytes)
      return {};
    local.push_back(entries);
  }
  bool compiled = std::find(known.begin(), known.end(), local) != known.end();
  return compiled || known.size() < maxVariants ? local : std::vector<int64_t>();
}

} // namespace qd
