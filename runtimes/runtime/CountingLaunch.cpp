//===- CountingLaunch.cpp - Running a kernel's counting kernel ------------===//
//
// Program::countAdStacks: the counting kernel of a kernel whose adstacks
// are measured at launch (docs/sizing.md, "Measured at launch"), run on
// copies of what it writes, again with larger bounds where a bounded
// stack's need exceeds its bound, and with smaller ones where one of its
// iterations does not fit the adstack memory budget.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/Program.h"

#include "qd/ir/Status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

namespace qd {

namespace {

/// Lowers the bounds of a counting kernel's bounded stacks after a launch
/// whose one iteration did not fit the budget: halfway down to the largest
/// bound a stack's need is known to exceed (`beyond`), or to a quarter
/// where none is known (at least one). False when no bound can go lower.
bool lowerCountBounds(const std::vector<int> &boundArgs, std::span<const int64_t> beyond,
                      std::vector<int64_t> &bounds) {
  bool lowered = false;
  for (size_t i = 0; i < boundArgs.size(); ++i) {
    if (boundArgs[i] < 0 || bounds[i] <= std::max<int64_t>(beyond[i] + 1, 1))
      continue;
    bounds[i] = beyond[i] > 0 ? beyond[i] + (bounds[i] - beyond[i]) / 2
                              : std::max<int64_t>(bounds[i] / 4, 1);
    bounds[i] = std::max(bounds[i], beyond[i] + 1);
    lowered = true;
  }
  return lowered;
}

} // namespace

absl::StatusOr<std::vector<int64_t>> Program::countAdStacks(
    const Kernel &kernel, const KernelSizing &sizing, std::span<const LaunchArg> args,
    Backend &backend, const LaunchOptions &options, int &runs, MeasuredAdStackNeeds *perIteration) {
  runs = 1;
  const std::vector<int> &boundArgs = sizing.countBoundArgs();
  bool anyBound = std::any_of(boundArgs.begin(), boundArgs.end(), [](int a) { return a >= 0; });
  if (!anyBound)
    return countAdStacksOnce(kernel, sizing, args, backend, options, {}, perIteration);
  // Bounded stacks: the bounds the last launch of `kernel` left (twice its
  // need), or the default capacity; a count past its bound runs again with
  // at least twice the bound.
  CountState &state = countState(kernel);
  std::vector<int64_t> bounds;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bounds = state.bounds;
  }
  if (bounds.empty()) {
    bounds.assign(boundArgs.size(), 0);
    for (const AdStackSize &s : sizing.stacks())
      if (s.measuredAtLaunch())
        bounds[s.countSlot] = std::clamp<int64_t>(s.capacity, 1, kMaxCountBound);
  }
  // Under a budget that one iteration of the counting kernel at these
  // bounds exceeds, the bounds (guesses) go down, but never to one a need
  // is known to exceed (`beyond`): the count fails only where one more
  // entry than that does not fit, and then the kernel's own stacks, which
  // hold at least as much, do not either.
  std::vector<int64_t> beyond(boundArgs.size(), 0);
  for (;; ++runs) {
    absl::StatusOr<std::vector<int64_t>> need =
        countAdStacksOnce(kernel, sizing, args, backend, options, bounds, perIteration);
    if (!need.ok() && isOverBudget(need.status()) && options.adStackMemoryBudget > 0 &&
        lowerCountBounds(boundArgs, beyond, bounds))
      continue;
    if (!need.ok())
      return need.status();
    bool again = false;
    for (size_t i = 0; i < boundArgs.size(); ++i) {
      if (boundArgs[i] < 0 || (*need)[i] <= bounds[i])
        continue;
      if (bounds[i] >= kMaxCountBound)
        return absl::ResourceExhaustedError(fmt::format(
            "kernel @{}: a thread pushes one of its adstacks measured at launch more than {} "
            "times (the largest bound its counting kernel @{} takes); give the stack an explicit "
            "capacity (LaunchOptions::adStackCapacities) to run it anyway",
            kernel.name(), kMaxCountBound, sizing.countKernel()->name()));
      beyond[i] = bounds[i];
      bounds[i] = std::min<int64_t>(std::max((*need)[i], 2 * bounds[i]), kMaxCountBound);
      again = true;
    }
    if (again)
      continue;
    for (size_t i = 0; i < boundArgs.size(); ++i)
      if (boundArgs[i] >= 0)
        bounds[i] = std::clamp<int64_t>(2 * (*need)[i], kMinCountBound, kMaxCountBound);
    std::lock_guard<std::mutex> lock(mutex_);
    state.bounds = bounds;
    return need;
  }
}

absl::StatusOr<std::vector<int64_t>>
Program::countAdStacksOnce(const Kernel &kernel, const KernelSizing &sizing,
                           std::span<const LaunchArg> args, Backend &backend,
                           const LaunchOptions &options, std::span<const int64_t> bounds,
                           MeasuredAdStackNeeds *perIteration) {
  const int64_t spread = perIteration ? perIteration->spread : KernelSizing::kCountSpread;
  // `need` is kept per kernel, unless a launch of the same kernel from
  // another thread holds it; per-iteration needs go to a buffer of their
  // own, which the launch's heap layout reads after this returns.
  CountState &state = countState(kernel);
  std::unique_lock<std::mutex> held(state.mutex, std::try_to_lock);
  std::optional<Buffer> own;
  std::optional<Buffer> &needSlot = held.owns_lock() && !perIteration ? state.need : own;
  const int64_t elements = sizing.numCounted() * spread;
  std::shared_ptr<Buffer> &kept = state.perIteration;
  if (perIteration && held.owns_lock() && kept && kept.use_count() == 1 &&
      kept->numElements() == elements) {
    if (!state.perIterationZeroed)
      kept->fill(Scalar::ofInt(ScalarType::I64, 0));
    state.perIterationZeroed = false;
    perIteration->need = kept;
  } else {
    if (absl::Status s = zeroedBuffer(needSlot, ScalarType::I64, elements); !s.ok())
      return s;
    if (perIteration)
      perIteration->need = std::make_shared<Buffer>(*std::move(own));
    if (perIteration && held.owns_lock()) {
      kept = perIteration->need;
      state.perIterationZeroed = false;
    }
  }
  Buffer *need = perIteration ? perIteration->need.get() : &*needSlot;
  NdarrayArg needArg;
  needArg.primal = need;
  std::vector<LaunchArg> countArgs(args.begin(), args.end());
  // Memory the counting kernel writes goes to copies, one per buffer (so
  // arguments that are one buffer stay one), made from the current contents.
  std::map<const Buffer *, Buffer> copies;
  auto copyOf = [&](const Buffer *b) -> absl::StatusOr<Buffer *> {
    if (auto it = copies.find(b); it != copies.end())
      return &it->second;
    if (absl::Status s = b->syncToHost(); !s.ok())
      return s;
    std::vector<int64_t> shape = b->shape();
    if (shape.empty())
      shape = {1}; // a 0-d field is a 1-element ndarray in the counting kernel
    absl::StatusOr<Buffer> c = Buffer::create(b->elementType(), shape);
    if (!c.ok())
      return c.status();
    std::memcpy(c->data(), b->data(), b->sizeInBytes());
    return &copies.emplace(b, *std::move(c)).first->second;
  };
  std::deque<NdarrayArg> shadows;
  for (unsigned i : sizing.countShadowArgs()) {
    NdarrayArg a = args[i].ndarrayValue();
    for (Buffer **part : {&a.primal, &a.grad, &a.dual})
      if (*part) {
        absl::StatusOr<Buffer *> c = copyOf(*part);
        if (!c.ok())
          return c.status();
        *part = *c;
      }
    countArgs[i] = LaunchArg::ndarray(&shadows.emplace_back(a));
  }
  countArgs.push_back(LaunchArg::ndarray(&needArg));
  for (auto [f, component] : sizing.countShadowFields()) {
    const Buffer *b = field(*f, component);
    if (!b)
      return absl::FailedPreconditionError(fmt::format("kernel @{}: field @{} has no {} storage",
                                                       kernel.name(), f->name(),
                                                       toString(component)));
    absl::StatusOr<Buffer *> c = copyOf(b);
    if (!c.ok())
      return c.status();
    NdarrayArg a;
    a.primal = *c;
    countArgs.push_back(LaunchArg::ndarray(&shadows.emplace_back(a)));
  }
  for (size_t i = 0; i < bounds.size(); ++i)
    if (int arg = sizing.countBoundArgs()[i]; arg >= 0) {
      if (countArgs.size() <= size_t(arg))
        countArgs.resize(arg + 1, LaunchArg::i32(0));
      countArgs[arg] = LaunchArg::i32(static_cast<int32_t>(bounds[i]));
    }
  LaunchOptions countOptions = options;
  countOptions.adStackCapacities.clear();
  const Kernel &counter = *sizing.countKernel();
  if (absl::Status s = launchSized(counter, countArgs, backend, countOptions, /*record=*/false);
      !s.ok()) {
    return reworded(s, fmt::format("kernel @{}: measuring its adstacks before the launch (the "
                                   "counting kernel @{}) failed: {}",
                                   kernel.name(), counter.name(), std::string(s.message())));
  }
  std::vector<int64_t> out(sizing.numCounted());
  for (int i = 0; i < sizing.numCounted(); ++i) {
    absl::StatusOr<int64_t> v = need->maxInteger(i * spread, (i + 1) * spread);
    if (!v.ok())
      return v.status();
    if (*v >= kAdStackCountSaturated)
      return absl::ResourceExhaustedError(fmt::format(
          "kernel @{}: a thread pushes one of its adstacks measured at launch {} times or more, "
          "more than the counting kernel @{} counts (and more than a heap holds); give the "
          "stack an explicit capacity (LaunchOptions::adStackCapacities) to run it anyway",
          kernel.name(), kAdStackCountSaturated, sizing.countKernel()->name()));
    out[i] = *v;
  }
  return out;
}

} // namespace qd
