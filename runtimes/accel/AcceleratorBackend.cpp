//===- AcceleratorBackend.cpp - One launch for every device ---------------===//
#include "qd/runtime/AcceleratorBackend.h"

#include "AcceleratorState.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/codegen/KernelSizingCache.h"
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/LaunchTrace.h"
#include "qd/runtime/LaunchWatchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <tuple>

namespace qd {

using accel::DeviceKernel;

absl::Status accel::AcceleratorDevice::checkBindable(const Buffer &) const {
  return absl::OkStatus();
}

absl::Status accel::AcceleratorDevice::checkFrame(const DeviceKernel &, const LaunchFrame &) const {
  return absl::OkStatus();
}

absl::Status accel::AcceleratorDevice::collect(uint64_t ticket, LaunchReport &) {
  return absl::InternalError(
      fmt::format("{} backend: asked for the report of asynchronous launch {}, but it runs none",
                  backendName(), ticket));
}

namespace {

/// "field @x", "argument %a.grad": a global slot in messages.
std::string slotName(const KernelLayout::GlobalSlot &slot) {
  return (slot.field ? "field " : "argument ") +
         globalName(slot.field != nullptr, slot.field ? slot.field->name() : slot.ndarray->name(),
                    slot.component);
}

absl::Status prefixed(const Kernel &kernel, const absl::Status &s) {
  return absl::Status(s.code(),
                      fmt::format("kernel @{}: {}", kernel.name(), std::string(s.message())));
}

/// A QD_TRACE_LAUNCHES line for a launch whose execute took `us`.
void traceLaunch(const Kernel &kernel, const accel::LaunchFrame &frame,
                 const accel::LaunchReport &report, double us) {
  std::string groups;
  for (size_t i = 0; i < frame.groups.size(); ++i)
    groups += fmt::format("{}{}{}", i ? "," : "", frame.groups[i],
                          i < frame.cooperative.size() && frame.cooperative[i] ? "c" : "");
  launchTrace(fmt::format("@{} threads {} groups [{}]{}{}{}{}: {:.1f} us", kernel.name(),
                          frame.threads, groups, frame.async ? " async" : "",
                          frame.groupTable ? " compacted" : "", report.graph ? " graph" : "",
                          report.fused ? " fused" : "", us));
}

/// The error an asynchronous launch reported, returned by a later call:
/// its own message, then why it comes late (and how many later
/// asynchronous launches failed too, which it stands for).
absl::Status deferredError(const absl::Status &s, size_t laterFailures) {
  return absl::Status(s.code(),
                      fmt::format("{} (reported by a later call: the launch was asynchronous, "
                                  "LaunchOptions::async{})",
                                  std::string(s.message()),
                                  laterFailures
                                      ? fmt::format("; {} later asynchronous launch{} failed "
                                                    "too",
                                                    laterFailures, laterFailures > 1 ? "es" : "")
                                      : std::string()));
}

} // namespace

absl::StatusOr<AcceleratorBackend::State::Variant *>
AcceleratorBackend::State::variant(const Kernel &kernel, bool boundsChecked, bool stopChecks,
                                   const std::vector<int64_t> &local,
                                   const KernelLayout *heapLayout, bool distinct, bool narrow) {
  std::lock_guard<std::mutex> lock(compileMutex);
  auto key = std::tuple(kernel.uniqueId(), boundsChecked, stopChecks, distinct, narrow, local);
  if (auto it = cache.find(key); it != cache.end())
    return &it->second;
  sizings.of(kernel);
  accel::CompileRequest request;
  request.boundsChecked = boundsChecked;
  request.stopChecks = stopChecks;
  request.distinctNdarrays = distinct;
  request.narrowNdarrayOffsets = narrow;
  for (size_t i = 0; i < local.size() && heapLayout; ++i)
    request.localAdStackEntries[heapLayout->stacks.at(i).stmt] = local[i];
  absl::StatusOr<std::unique_ptr<DeviceKernel>> code = device.compile(kernel, request);
  if (!code.ok())
    return code.status();
  Variant &v = cache[key];
  v.code = *std::move(code);
  v.distinct = distinct;
  v.narrow = narrow;
  return &v;
}

absl::StatusOr<AcceleratorBackend::State::Variant *> AcceleratorBackend::State::localTapeVariant(
    Variant &heapCode, absl::StatusOr<LaunchPlan> &plan, Program &program, const Kernel &kernel,
    std::span<const LaunchArg> args, const LaunchOptions &options) {
  // Stacks this launch's capacities let fit in each thread's local memory
  // run from there (code compiled for those array sizes), the rest of the
  // kernel unchanged.
  std::vector<int64_t> local =
      localTapeEntries(heapCode.code->layout(), plan->heap().capacities, limits.localTapeBytes,
                       heapCode.localVariants, kMaxLocalVariants);
  if (local.empty())
    return &heapCode;
  absl::StatusOr<Variant *> v =
      variant(kernel, options.boundsChecked, options.stoppable(), local, &heapCode.code->layout(),
              heapCode.distinct, heapCode.narrow);
  if (!v.ok())
    return v.status();
  auto &known = heapCode.localVariants;
  if (std::find(known.begin(), known.end(), local) == known.end())
    known.push_back(local);
  plan = LaunchPlan::bind(program, kernel, (*v)->code->layout(), args, options);
  if (!plan.ok())
    return plan.status();
  if (absl::Status s = plan->layoutAdStacks(); !s.ok())
    return s;
  return v;
}

AcceleratorBackend::State::Budget AcceleratorBackend::State::budget(const LaunchPlan &plan) const {
  Budget b;
  if (plan.heap().stride == 0)
    return b;
  int64_t given = plan.adStackBudget(0);
  if (given > 0) {
    b.bytes = given;
    b.source = "LaunchOptions::adStackMemoryBudget";
    return b;
  }
  return defaultBudget();
}

AcceleratorBackend::State::Budget AcceleratorBackend::State::defaultBudget() const {
  Budget b;
  // The heap this backend holds is memory the launch may use again.
  uint64_t spare = device.freeMemoryBytes();
  if (spare == 0) {
    b.source = fmt::format("{} reports no free memory", device.deviceName());
    return b;
  }
  spare += heapAllocated ? heapBytes : 0;
  b.bytes = defaultAdStackBudget(spare);
  b.source = fmt::format("the default: {} of the {} bytes free on {}",
                         kDefaultAdStackBudgetFraction, spare, device.deviceName());
  return b;
}

absl::StatusOr<int64_t> AcceleratorBackend::State::grid(const DeviceKernel &code,
                                                        const LaunchPlan &plan,
                                                        const Budget &budget) const {
  const int64_t group = std::max<int64_t>(limits.groupSize, 1);
  int64_t threads = code.gridThreads();
  // Tasks with fewer iterations than the grid has threads run on whole
  // groups enough for them: the heap is laid out for the threads that run.
  // A launch without heap whose iterations are known may run one thread
  // per iteration: the device then hands groups to its multiprocessors as
  // they free up (docs/runtime.md, "Grid").
  if (std::optional<int64_t> most = plan.fixedParallelIterations()) {
    int64_t cap = threads;
    if (limits.perIterationThreads > 0 && plan.heap().stride == 0) {
      cap = std::max(threads, limits.perIterationThreads);
      // Short iterations of the same cost run several to a thread: a block
      // per 128 of them spent more on starting blocks than on the work
      // (docs/runtime.md, "Grid").
      const std::vector<KernelLayout::Task> &tasks = code.layout().tasks;
      if (limits.gridWaves > 0 && !tasks.empty() &&
          std::all_of(tasks.begin(), tasks.end(),
                      [](const KernelLayout::Task &t) { return t.loopFree; }))
        cap = std::max(threads, std::min(limits.perIterationThreads, threads * limits.gridWaves));
    }
    threads = std::clamp<int64_t>((*most + group - 1) / group * group,
                                  std::min<int64_t>(group, threads), cap);
  }
  // Where the heap of every thread does not fit the device's largest
  // buffer or the launch's budget, fewer threads run the launch (each
  // parallel task is a grid-stride loop over T, so any T gives the same
  // result, in more waves of iterations).
  if (plan.heap().stride == 0)
    return threads;
  int64_t largest = limits.maxHeapBytes == 0 || limits.maxHeapBytes > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : int64_t(limits.maxHeapBytes);
  int64_t fit = plan.threadsWithin(std::min(largest, budget.bytes));
  if (fit < 1 && budget.bytes <= largest)
    return plan.overBudgetError(budget.bytes, budget.source);
  if (fit < 1)
    return absl::ResourceExhaustedError(fmt::format(
        "kernel @{}: the adstacks of one thread need {} bytes of heap, more than the {} bytes "
        "one heap may hold on {} ({}); lower the capacities",
        plan.kernel().name(), plan.heap().stride, limits.maxHeapBytes, device.deviceName(),
        limits.maxHeapSource));
  // Whole groups where one fits: a group's threads past T would share
  // their rows with the threads of the first group.
  if (fit < threads)
    threads = fit >= group ? fit / group * group : fit;
  return threads;
}

int64_t AcceleratorBackend::State::oneWave(const DeviceKernel &code,
                                           const accel::GroupTableShape &shape) const {
  // Every iteration on a thread of its own, in whole groups of the table
  // and of the device, where the device runs that many threads in one
  // launch (else its resident grid: the grid-stride loops run the rest).
  const int64_t group =
      std::lcm<int64_t>(abi::kAdStackGroupThreads, std::max(limits.groupSize, 1u));
  // The table kernel indexes its table with i32 (groups of one thread: a
  // group per thread).
  const int64_t tableMost = int64_t(INT32_MAX) / (shape.stacks + 2 + accel::kGroupShifts);
  const int64_t most =
      std::max(code.gridThreads(), std::min(limits.perIterationThreads, tableMost) / group * group);
  int64_t iterations = std::max<int64_t>(shape.end - shape.begin, 1);
  return std::clamp<int64_t>((iterations + group - 1) / group * group,
                             std::min<int64_t>(group, code.gridThreads()), most);
}

std::vector<uint32_t> AcceleratorBackend::State::groups(const DeviceKernel &code,
                                                        const LaunchPlan &plan, int64_t threads,
                                                        std::vector<bool> &cooperative) const {
  // A parallel task whose extent is known now and fits the grid needs only
  // the groups that have an iteration.
  const KernelLayout &layout = code.layout();
  const int64_t group = std::max<unsigned>(limits.groupSize, 1);
  const int64_t full = (threads + group - 1) / group;
  std::vector<uint32_t> groups;
  cooperative.assign(layout.launches.size(), false);
  for (const KernelLayout::Launch &l : layout.launches) {
    if (l.kind != KernelLayout::Launch::Parallel) {
      groups.push_back(1);
      continue;
    }
    int64_t n = full;
    const KernelLayout::Task &task = layout.tasks[l.task];
    std::optional<int64_t> count = plan.fixedIterations(task);
    // A cooperative task runs a group per iteration (its bounds are
    // literals, so the count is known).
    // A task with cooperative code as well takes it where its iterations
    // are few enough.
    bool chosen = !l.cooperativeFunction.empty() && count && *count <= l.cooperativeIterations &&
                  plan.mayShareLoops(l);
    if (chosen)
      cooperative[groups.size()] = true;
    if ((task.cooperative || chosen) && count)
      n = *count;
    else if (count)
      n = std::min(n, (*count + group - 1) / group);
    groups.push_back(uint32_t(n));
  }
  return groups;
}

absl::Status AcceleratorBackend::State::growHeap(const Kernel &kernel, int64_t bytes,
                                                 int64_t budget, bool doubling) {
  if (heapAllocated && size_t(bytes) <= heapBytes)
    return absl::OkStatus();
  size_t grown = std::max<size_t>(size_t(bytes), doubling ? 2 * heapBytes : 0);
  if (uint64_t most = limits.maxHeapBytes)
    grown = std::min<size_t>(grown, std::max<size_t>(size_t(bytes), most));
  grown = std::min<size_t>(grown, std::max<size_t>(size_t(bytes), size_t(budget)));
  heapAllocated = false;
  if (absl::Status s = device.allocateHeap(grown); !s.ok())
    return absl::ResourceExhaustedError(
        fmt::format("kernel @{}: cannot allocate {} bytes of adstack heap on {}: {}", kernel.name(),
                    grown, device.deviceName(), std::string(s.message())));
  heapBytes = grown;
  heapAllocated = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DeviceMirror *>>
AcceleratorBackend::State::mirrorSlots(const Kernel &kernel, const LaunchPlan &plan) {
  // The bound buffers on the device: resident copies, uploaded only when
  // the host side changed since the last launch.
  const std::vector<Buffer *> &buffers = plan.slotBuffers();
  std::vector<DeviceMirror *> slots;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer *b = buffers[i];
    const KernelLayout::GlobalSlot &slot = plan.layout().slots[i];
    if (absl::Status s = device.checkBindable(*b); !s.ok())
      return absl::Status(s.code(), fmt::format("kernel @{}: {} {}", kernel.name(), slotName(slot),
                                                std::string(s.message())));
    absl::StatusOr<DeviceMirror *> m = b->prepareOnDevice(
        &device, [&] { return absl::StatusOr<std::unique_ptr<DeviceMirror>>(device.mirror(*b)); });
    if (!m.ok())
      return absl::Status(m.status().code(),
                          fmt::format("kernel @{}: cannot put {} on {}: {}", kernel.name(),
                                      slotName(slot), device.deviceName(),
                                      std::string(m.status().message())));
    slots.push_back(*m);
  }
  return slots;
}

absl::Status AcceleratorBackend::State::launch(Program &program, const Kernel &kernel,
                                               std::span<const LaunchArg> args,
                                               const LaunchOptions &options) {
  // A launch that may be stopped runs code that checks; one whose ndarray
  // buffers do not overlap, code that takes them to be distinct where the
  // device compiles such code; one whose buffers all fit 32-bit offsets,
  // code that computes them so.
  bool distinct = device.compilesDistinctNdarrays() && !ndarrayBuffersOverlap(args);
  bool narrow = device.compilesNarrowNdarrayOffsets() && ndarraysFitNarrowOffsets(args);
  absl::StatusOr<Variant *> heapCode =
      variant(kernel, options.boundsChecked, options.stoppable(), {}, nullptr, distinct, narrow);
  if (!heapCode.ok())
    return heapCode.status();
  std::lock_guard<std::mutex> lock(launchMutex);
  // A synchronous launch reports the asynchronous ones before it first; an
  // asynchronous one collects the oldest when the device has no room.
  if (absl::Status s = drain(runsAsync(options) ? device.maxInFlight() - 1 : 0); !s.ok())
    return s;
  return launchLocked(program, kernel, args, options, **heapCode);
}

absl::Status AcceleratorBackend::State::launchLocked(Program &program, const Kernel &kernel,
                                                     std::span<const LaunchArg> args,
                                                     const LaunchOptions &options,
                                                     Variant &heapCode) {
  absl::StatusOr<LaunchPlan> plan =
      LaunchPlan::bind(program, kernel, heapCode.code->layout(), args, options);
  if (!plan.ok())
    return plan.status();
  if (heapCode.code->layout().launches.empty())
    return absl::OkStatus();
  if (absl::Status s = plan->layoutAdStacks(); !s.ok())
    return s;
  absl::StatusOr<Variant *> chosen =
      localTapeVariant(heapCode, plan, program, kernel, args, options);
  if (!chosen.ok())
    return chosen.status();
  DeviceKernel &code = *(*chosen)->code;

  accel::LaunchFrame frame;
  frame.plan = &*plan;
  frame.stream = options.stream;
  frame.async = runsAsync(options);
  Budget heapBudget = budget(*plan);
  // A compacted heap is laid out before the waves are chosen: first for
  // one thread per iteration (one wave), with fewer threads only where the
  // sum of the groups' needs does not fit the budget.
  std::optional<accel::GroupTableShape> shape;
  const AdStackIterationCapacities *capacities = options.iterationCapacities.get();
  if (options.measuredNeeds && device.groupTableUnit() != 0)
    shape = accel::groupTableShape(*plan, *options.measuredNeeds, capacities);
  std::optional<Compacted> compacted;
  // The interleaved heap under the same budget (at its waves): a compacted
  // heap that is not smaller gives way to it (compacting never takes more
  // memory), and windows are chosen below it.
  int64_t interleavedBytes = INT64_MAX;
  if (shape) {
    absl::StatusOr<int64_t> t = grid(code, *plan, heapBudget);
    absl::StatusOr<int64_t> bytes = t.ok() ? plan->heapBytes(*t) : t.status();
    if (bytes.ok())
      interleavedBytes = *bytes;
    // Windows run the kernel once each: only a kernel of one parallel
    // dispatch (no serial entries to repeat), not in its cooperative form.
    const std::vector<KernelLayout::Launch> &launches = code.layout().launches;
    std::vector<bool> cooperative;
    groups(code, *plan, 1, cooperative);
    bool windowed = launches.size() == 1 && launches[0].kind == KernelLayout::Launch::Parallel &&
                    !cooperative[0];
    absl::StatusOr<std::optional<Compacted>> c =
        compact(program, *plan, *shape, options, oneWave(code, *shape), heapBudget.bytes,
                windowed ? interleavedBytes - 1 : 0);
    if (!c.ok())
      return c.status();
    compacted = *c;
    // The table kernel has read the needs: zeroed on the device for the
    // next counting kernel.
    if (absl::Status s = zeroNeeds(program, *plan, *options.measuredNeeds); !s.ok())
      return s;
  }
  if (compacted && compacted->bytes >= interleavedBytes)
    compacted.reset();
  absl::StatusOr<int64_t> threads =
      compacted ? absl::StatusOr<int64_t>(compacted->threads) : grid(code, *plan, heapBudget);
  if (!threads.ok())
    return threads.status();
  frame.threads = *threads;
  // Without a compacted heap, every iteration has the launch's capacities.
  if (capacities && !compacted)
    if (absl::Status s = fillCapacities(program, *plan, *capacities); !s.ok())
      return s;
  if (compacted) {
    frame.groupTable = compacted->table;
    frame.groupTableBytes = compacted->tableBytes;
    frame.groupShift = std::countr_zero(uint64_t(compacted->lanes));
  }
  if (absl::Status s = device.checkFrame(code, frame); !s.ok())
    return s;
  absl::StatusOr<int64_t> heapNeed =
      compacted ? compacted->heapBytes : plan->heapBytes(frame.threads);
  if (!heapNeed.ok())
    return heapNeed.status();
  if (absl::Status s = growHeap(kernel, *heapNeed, heapBudget.bytes, !compacted); !s.ok())
    return s;
  lastUsage = plan->heapUsage(frame.threads, heapBudget.bytes);
  if (compacted) {
    lastUsage.bytes = compacted->bytes;
    lastUsage.needBytes = compacted->needBytes;
    lastUsage.groups = compacted->groups;
    lastUsage.groupThreads = compacted->lanes;
    lastUsage.tableColumns = compacted->oneColumn ? 1 : shape->stacks;
    lastUsage.tableRuns = compacted->runs;
  }
  lastThreads = frame.threads;
  lastPlacement = plan->adStackPlacement(frame.threads);
  frame.groups = groups(code, *plan, frame.threads, frame.cooperative);
  absl::StatusOr<std::vector<DeviceMirror *>> slots = mirrorSlots(kernel, *plan);
  if (!slots.ok())
    return slots.status();
  frame.slots = *std::move(slots);
  if (compacted && !compacted->windows.empty()) {
    // In flight: the threads of one window.
    lastUsage.waves = int64_t(compacted->windows.size());
    lastUsage.threads = compacted->windows.front().threads;
    return runWindows(code, frame, *plan, options, compacted->windows);
  }
  return run(code, frame, *plan, options);
}

absl::Status AcceleratorBackend::State::runWindows(DeviceKernel &code, accel::LaunchFrame &frame,
                                                   const LaunchPlan &plan,
                                                   const LaunchOptions &options,
                                                   std::span<const Compacted::Window> windows) {
  auto enter = [&](const Compacted::Window &w) {
    frame.threadOffset = w.first;
    frame.heapShift = w.shift;
    frame.groups = groups(code, plan, w.threads, frame.cooperative);
  };
  if (device.executesWindows()) {
    // One execute: the first window is the frame's, the rest follow it
    // (one parallel entry: one group count each).
    frame.moreWindows.clear();
    for (const Compacted::Window &w : windows.subspan(1)) {
      enter(w);
      frame.moreWindows.push_back({w.first, w.shift, frame.groups.at(0)});
    }
    enter(windows.front());
    return run(code, frame, plan, options);
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  LaunchOptions each = options;
  double kernelMs = 0;
  for (const Compacted::Window &w : windows) {
    enter(w);
    // The launch's timeout covers all of its windows.
    if (options.timeout.count() > 0)
      each.timeout = std::max(options.timeout - (Clock::now() - start), Clock::duration(1));
    if (absl::Status s = run(code, frame, plan, each); !s.ok())
      return s;
    kernelMs += lastKernelMs;
  }
  if (frame.timed)
    lastKernelMs = kernelMs;
  return absl::OkStatus();
}

absl::Status AcceleratorBackend::State::run(DeviceKernel &code, accel::LaunchFrame &frame,
                                            const LaunchPlan &plan, const LaunchOptions &options) {
  const Kernel &kernel = plan.kernel();
  std::optional<std::atomic_ref<int32_t>> stop;
  if (options.stoppable() && code.readsStopWord()) {
    absl::StatusOr<int32_t *> word = device.stopWord();
    if (!word.ok())
      return prefixed(kernel, word.status());
    frame.stopWord = *word;
    stop.emplace(**word);
    // A cancel flag already set stops the launch at its first check.
    bool cancelled = options.cancel && options.cancel->load(std::memory_order_acquire);
    stop->store(cancelled ? int32_t(StopReason::Cancelled) : 0, std::memory_order_release);
  }
  frame.timed = timing;
  lastKernelMs = -1;
  accel::LaunchReport report;
  report.needed = plan.zeroNeeded();
  absl::Status ran;
  {
    // Watches the dispatches and the copy back, which waits for them.
    LaunchWatchdog watchdog(options, [&](StopReason why) {
      if (stop)
        stop->store(int32_t(why), std::memory_order_release);
    });
    const bool trace = launchTraceOn();
    auto start = trace ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    ran = device.execute(code, frame, report);
    if (trace)
      traceLaunch(kernel, frame, report, microsecondsSince(start));
  }
  if (ran.ok() && report.ticket)
    pending.push_back({report.ticket, plan.detached()});
  // What the code stores to is newer on the device now, even when the
  // launch stopped early or failed (borrowed host memory comes back now).
  const std::vector<Buffer *> &buffers = plan.slotBuffers();
  for (size_t i = 0; i < buffers.size(); ++i)
    if (absl::Status s = buffers[i]->finishOnDevice(code.layout().slots[i].written);
        !s.ok() && ran.ok())
      ran = s;
  if (!ran.ok())
    return absl::Status(ran.code(),
                        fmt::format("kernel @{}: the launch failed on {}: {}", kernel.name(),
                                    device.deviceName(), std::string(ran.message())));
  if (report.ticket)
    return absl::OkStatus();
  if (frame.timed)
    lastKernelMs = report.kernelMs;
  return plan.finish(report.record, report.needed);
}

absl::Status AcceleratorBackend::State::drain(size_t keep) {
  absl::Status first;
  size_t laterFailures = 0;
  while (pending.size() > keep) {
    Pending p = std::move(pending.front());
    pending.pop_front();
    accel::LaunchReport report;
    report.needed = p.plan.zeroNeeded();
    absl::Status s = device.collect(p.ticket, report);
    s = s.ok() ? p.plan.finish(report.record, report.needed)
               : absl::Status(s.code(), fmt::format("kernel @{}: the launch failed on {}: {}",
                                                    p.plan.kernel().name(), device.deviceName(),
                                                    std::string(s.message())));
    if (s.ok())
      continue;
    if (first.ok())
      first = s;
    else
      ++laterFailures;
  }
  return first.ok() ? first : deferredError(first, laterFailures);
}

AcceleratorBackend::AcceleratorBackend(std::unique_ptr<accel::AcceleratorDevice> device)
    : device_(std::move(device)), state_(std::make_unique<State>(*device_)) {}

AcceleratorBackend::~AcceleratorBackend() = default;

absl::Status AcceleratorBackend::launch(Program &program, const Kernel &kernel,
                                        std::span<const LaunchArg> args,
                                        const LaunchOptions &options) {
  if (absl::Status s = validateLaunchArgs(kernel, args); !s.ok())
    return s;
  if (absl::Status s = refuseGlobalAccessChecks(kernel, options, device_->backendName()); !s.ok())
    return s;
  if (!device_->streams())
    if (absl::Status s = refuseLaunchStream(kernel, options, device_->backendName()); !s.ok())
      return s;
  return state_->launch(program, kernel, args, options);
}

absl::Status AcceleratorBackend::synchronize() {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  return state_->drain(0);
}

size_t AcceleratorBackend::pendingLaunches() const {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  return state_->pending.size();
}

absl::StatusOr<const KernelSizing *> AcceleratorBackend::adStackSizing(const Kernel &kernel) {
  return &state_->sizings.of(kernel);
}

absl::StatusOr<DeviceKernel *> AcceleratorBackend::heapCode(const Kernel &kernel,
                                                            bool boundsChecked, bool stopChecks) {
  absl::StatusOr<State::Variant *> v =
      state_->variant(kernel, boundsChecked, stopChecks, {}, nullptr);
  if (!v.ok())
    return v.status();
  return (*v)->code.get();
}

int64_t AcceleratorBackend::adStackIterationBudget(const Kernel &, int64_t budget) {
  if (budget <= 0) {
    std::lock_guard<std::mutex> lock(state_->launchMutex);
    budget = state_->defaultBudget().bytes;
  }
  // A thread holds one iteration; one heap holds no more than the device's
  // largest buffer.
  uint64_t most = state_->limits.maxHeapBytes;
  return most == 0 || most >= uint64_t(budget) ? budget : int64_t(most);
}

int64_t AcceleratorBackend::adStackParallelism(const Kernel &kernel, int64_t iterations) {
  // The grid of the code whose stacks live in the heap (what a launch
  // with adstacks runs, all threads resident).
  absl::StatusOr<DeviceKernel *> code = heapCode(kernel, false, false);
  int64_t threads = code.ok() ? std::max<int64_t>((*code)->gridThreads(), 1) : 1;
  return iterations > 0 ? std::min(threads, iterations) : threads;
}

bool AcceleratorBackend::compactsAdStacks() const {
  return device_->groupTableUnit() != 0;
}

int64_t AcceleratorBackend::lastLaunchThreads() const {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  return state_->lastThreads;
}

std::vector<AdStackPlacement> AcceleratorBackend::lastAdStackPlacement() const {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  return state_->lastPlacement;
}

int64_t AcceleratorBackend::lastAdStackHeapBytes() const {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  return state_->lastUsage.bytes;
}

AdStackHeapUsage AcceleratorBackend::lastAdStackUsage() const {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  return state_->lastUsage;
}

absl::Status AcceleratorBackend::timeKernels(bool on) {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  state_->lastKernelMs = -1;
  if (absl::Status s = device_->timeKernels(on); !s.ok())
    return s;
  state_->timing = on;
  return absl::OkStatus();
}

absl::StatusOr<double> AcceleratorBackend::lastKernelMs() const {
  std::lock_guard<std::mutex> lock(state_->launchMutex);
  if (!state_->timing)
    return absl::FailedPreconditionError(
        fmt::format("{} backend: kernel timing is off; call timeKernels(true) before the launches",
                    device_->backendName()));
  if (state_->lastKernelMs < 0)
    return absl::FailedPreconditionError(
        fmt::format("{} backend: no launch has run its kernels since timing was turned on",
                    device_->backendName()));
  return state_->lastKernelMs;
}

} // namespace qd
