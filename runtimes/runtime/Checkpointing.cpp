//===- Checkpointing.cpp - The checkpoint interval of a launch ------------===//
#include "qd/runtime/Checkpointing.h"

#include "LaunchInputs.h"

#include "qd/abi/DeviceEntries.h"
#include "qd/abi/KernelLayout.h"
#include "qd/ir/Checkpointing.h"
#include "qd/runtime/Program.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace qd {
namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();
/// The interval that tapes every loop fully (any k >= n does).
constexpr int64_t kFullyTaped = std::numeric_limits<int32_t>::max();
/// The most intervals chooseCheckpointInterval tries in each search.
constexpr int64_t kSearchLimit = int64_t(1) << 22;

/// A task bound's value at this launch (read through the inputs the
/// sizing reads), or nullopt where the launch does not say it (a bound
/// computed in the kernel).
std::optional<int64_t> boundAt(const SizeExprInputs &in, Bound b) {
  KernelLayout::TaskBound t = taskBoundOf(b);
  switch (t.kind) {
  case KernelLayout::TaskBound::Constant:
    return t.constant;
  case KernelLayout::TaskBound::Argument:
    return in.scalarArg(t.argument);
  case KernelLayout::TaskBound::NdarrayExtent:
    return in.ndarrayShape(t.argument, t.axis);
  case KernelLayout::TaskBound::FieldElement:
    if (auto *ld = dyn_cast<GlobalLoadStmt>(b.value); ld && t.component == Component::Primal) {
      std::vector<int64_t> idx;
      for (unsigned d = 0; d < ld->numIndices(); ++d)
        idx.push_back(cast<ConstStmt>(ld->index(d))->intValue()); // constants (taskBoundOf)
      return in.fieldElement(t.field->name(), idx);
    }
    break;
  case KernelLayout::TaskBound::Unknown:
    break;
  }
  return std::nullopt;
}

/// The iterations of the parallel tasks that hold checkpointed loops (the
/// most of them), or 0 where the launch does not say.
int64_t checkpointedIterations(const KernelSizing &sizing, const SizeExprInputs &in) {
  int64_t most = 0;
  for (const AdStackSize &s : sizing.stacks()) {
    if (!hasNameHint(s.stack->name(), kCheckpointStackName))
      continue;
    const Stmt *task = s.stack;
    while (task->parentStmt())
      task = task->parentStmt();
    auto *loop = dyn_cast<ForStmt>(task);
    if (!loop || !loop->isParallel())
      continue;
    int64_t n = 1;
    for (unsigned d = 0; d < loop->numDims(); ++d) {
      std::optional<int64_t> lo = boundAt(in, loop->begin(d)), hi = boundAt(in, loop->end(d));
      if (!lo || !hi)
        return 0;
      // (A band's points, saturated: only the comparison with a grid matters.)
      int64_t extent = std::max<int64_t>(*hi - *lo, 0);
      n = extent != 0 && n > (int64_t(1) << 40) / extent ? int64_t(1) << 40 : n * extent;
    }
    most = std::max(most, n);
  }
  return most;
}

int64_t mulAdd(int64_t acc, int64_t a, int64_t b) {
  int64_t p;
  if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(acc, p, &acc))
    return kSaturated;
  return acc;
}

} // namespace

int64_t checkpointedBytes(const CheckpointCosts &c, int64_t k) {
  int64_t n = std::max<int64_t>(c.tripCount, 0);
  if (k >= n)
    return mulAdd(c.otherBytes, c.tapeBytesPerIteration, n);
  int64_t segments = n / k + (n % k != 0);
  int64_t bytes = mulAdd(c.otherBytes, c.tapeBytesPerIteration, k);
  return bytes == kSaturated ? bytes : mulAdd(bytes, c.checkpointBytes, segments);
}

int64_t chooseCheckpointInterval(const CheckpointCosts &c, int64_t budget) {
  int64_t n = std::max<int64_t>(c.tripCount, 1);
  if (n <= 1 || budget <= 0 || checkpointedBytes(c, n) <= budget)
    return n;
  // The least memory: bytes(k) >= otherBytes + tape * k, so no k beyond the
  // first whose tape alone exceeds the best total can do better.
  int64_t best = 1, bestBytes = checkpointedBytes(c, 1);
  for (int64_t k = 2; k < n && k <= kSearchLimit; ++k) {
    if (mulAdd(c.otherBytes, c.tapeBytesPerIteration, k) > bestBytes)
      break;
    if (int64_t b = checkpointedBytes(c, k); b < bestBytes)
      best = k, bestBytes = b;
  }
  if (bestBytes > budget)
    return best;
  // The largest k that fits: its tape alone must fit.
  int64_t top = n - 1;
  if (c.tapeBytesPerIteration > 0)
    top = std::min(top, (budget - c.otherBytes) / c.tapeBytesPerIteration);
  for (int64_t k = top, tries = 0; k > best && tries < kSearchLimit; --k, ++tries)
    if (checkpointedBytes(c, k) <= budget)
      return k;
  return best;
}

int64_t chooseLaunchCheckpointInterval(int64_t fullBytes, int64_t budget, int64_t parallelism,
                                       const std::function<CheckpointCosts()> &one) {
  const int64_t p = std::max<int64_t>(parallelism, 1);
  const int64_t taped = fullBytes > 0 ? budget / fullBytes : p; // fully taped in flight
  // (taped >= p first: taped may be near INT64_MAX without a budget.)
  if (taped >= p || taped * kCheckpointParallelismRatio >= p)
    return kFullyTaped;
  CheckpointCosts costs = one();
  // A k covering the whole trip count tapes fully.
  auto interval = [&](int64_t k) {
    return costs.checkpointBytes > 0 && k >= costs.tripCount ? kFullyTaped : k;
  };
  // Checkpointed, every iteration in flight: the largest k that lets them
  // all fit (each k < n recomputes every iteration once).
  if (int64_t each = budget / p; each > 0 && p > 1) {
    int64_t k = chooseCheckpointInterval(costs, each);
    if (checkpointedBytes(costs, k) <= each)
      return interval(k);
  }
  if (taped >= 1)
    return kFullyTaped; // waves of fully taped iterations
  return interval(chooseCheckpointInterval(costs, budget));
}

absl::StatusOr<int64_t> Program::setCheckpointInterval(const Kernel &k, const KernelSizing &sizing,
                                                       std::span<const LaunchArg> args,
                                                       const LaunchOptions &options,
                                                       Backend &backend) {
  std::string name = checkpointIntervalField(k.name());
  const Field *f = module_.findField(name);
  if (!f)
    return 0;
  Buffer *storage = field(*f);
  if (!storage || f->elementType() != ScalarType::I32 || !f->shape().empty())
    return absl::FailedPreconditionError(fmt::format(
        "kernel @{}: the field @{} holds the interval of its checkpointed loops and must be a "
        "0-d i32; rename the field",
        k.name(), name));
  // One iteration's bytes at interval `interval`, and per kind of stack.
  runtime_detail::LaunchInputs inputs(*this, args);
  auto bytesAt = [&](int64_t interval, CheckpointCosts &costs) -> absl::Status {
    inputs.overrideField(name, interval);
    auto caps = evaluateCapacities(k, sizing, inputs, options.defaultAdStackCapacity);
    if (!caps.ok())
      return caps.status();
    costs = CheckpointCosts{};
    for (const AdStackSize &s : sizing.stacks()) {
      auto it = caps->find(s.stack);
      int64_t cap = it != caps->end() ? it->second : std::max<int64_t>(s.stack->capacity(), 1);
      // A stack's bytes are rounded up to 8 (adStackBytes): 7 more for
      // each that depends on k keeps the model an upper bound.
      int64_t entry = adStackEntryBytes(*s.stack);
      if (hasNameHint(s.stack->name(), kCheckpointStackName)) {
        costs.tripCount = std::max(costs.tripCount, cap);
        costs.checkpointBytes += entry;
        costs.otherBytes += 7;
      } else if (hasNameHint(s.stack->name(), kSegmentStackName)) {
        costs.tapeBytesPerIteration += entry * cap;
        costs.otherBytes += 7;
      } else {
        costs.otherBytes += adStackBytes(entry, cap);
      }
    }
    return absl::OkStatus();
  };
  int64_t interval = options.checkpointInterval;
  if (interval <= 0) {
    CheckpointCosts full, one;
    if (absl::Status s = bytesAt(kFullyTaped, full); !s.ok())
      return s;
    int64_t fullBytes = full.otherBytes + full.tapeBytesPerIteration;
    // What one iteration may take: the budget, or the backend's default
    // (a launch that does not fit it checkpoints instead of failing).
    int64_t budget = backend.adStackIterationBudget(k, options.adStackMemoryBudget);
    // At k = 1 the stored states number n, and a segment tapes one
    // iteration.
    absl::Status costsAtOne;
    int64_t parallelism = backend.adStackParallelism(k, checkpointedIterations(sizing, inputs));
    interval = chooseLaunchCheckpointInterval(fullBytes, budget, parallelism, [&] {
      costsAtOne = bytesAt(1, one);
      return one;
    });
    if (!costsAtOne.ok())
      return costsAtOne;
  }
  interval = std::min(interval, kFullyTaped);
  absl::StatusOr<int64_t> now = storage->readInteger(0);
  if (!now.ok() || *now != interval)
    storage->set(0, Scalar::ofInt(ScalarType::I32, interval));
  return interval == kFullyTaped ? 0 : interval;
}

} // namespace qd
