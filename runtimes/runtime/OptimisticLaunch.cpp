//===- OptimisticLaunch.cpp - Measured adstacks without counting first ----===//
//
// Program::launchOptimistic runs a kernel's try kernel (AdStackOptimistic.h)
// with the capacities the kernel's previous launch measured. Every
// iteration of the measured task raises `need` to its exact need; one that
// did not fit flags itself in `failed` and stops before its first visible
// write. If any did, the rerun kernel runs those iterations again with
// capacities that fit (the largest need measured). The measured need
// becomes the next launch's capacity, so capacities follow the needs down
// as well as up (docs/sizing.md, "Measured at launch").
//
//===----------------------------------------------------------------------===//
#include "LaunchInputs.h"
#include "qd/runtime/Program.h"

#include <fmt/format.h>

#include <unordered_map>

namespace qd {

absl::Status Program::launchOptimistic(const Kernel &k, const KernelSizing &sizing,
                                       std::span<const LaunchArg> args, Backend &backend,
                                       const LaunchOptions &sized, OptimisticState &state) {
  const OptimisticLaunch &o = *sizing.optimistic();
  auto failedIn = [&](const Kernel &variant, const absl::Status &s) {
    state.dirty = true;
    return absl::Status(s.code(), fmt::format("kernel @{} (its optimistic launch, @{}): {}",
                                              k.name(), variant.name(), std::string(s.message())));
  };
  runtime_detail::LaunchInputs inputs(*this, args);
  absl::StatusOr<int64_t> iterations = evaluateSizeExpr(*o.iterations, inputs);
  if (iterations.ok() && !inputs.error().ok())
    iterations = inputs.error();
  if (!iterations.ok())
    return absl::Status(iterations.status().code(),
                        fmt::format("kernel @{}: cannot count the iterations of its measured task "
                                    "for its optimistic launch: {}",
                                    k.name(), std::string(iterations.status().message())));
  int64_t flags = std::max<int64_t>(*iterations, 1);
  if (!state.failed || state.failed->numElements() < flags) {
    absl::StatusOr<Buffer> b = Buffer::create(ScalarType::I32, {flags});
    if (!b.ok())
      return b.status();
    state.failed = *std::move(b);
    state.dirty = false;
  } else if (state.dirty) {
    state.failed->fill(Scalar::ofInt(ScalarType::I32, 0));
    state.dirty = false;
  }
  constexpr int64_t spread = KernelSizing::kCountSpread;
  const int slots = sizing.numCounted();
  if (absl::Status s = zeroedBuffer(state.need, ScalarType::I64, slots * spread + 1); !s.ok())
    return s;
  Buffer *need = &*state.need;
  NdarrayArg needArg, failedArg;
  needArg.primal = need;
  failedArg.primal = &*state.failed;

  // The variants' stacks get the capacities of the source's.
  std::unordered_map<const AdStackAllocaStmt *, const OptimisticLaunch::Copies *> copyOf;
  for (const OptimisticLaunch::Copies &c : o.stacks)
    copyOf[c.source] = &c;
  auto variantOptions = [&](bool rerun, std::span<const int64_t> measured) {
    LaunchOptions v = sized;
    v.adStackCapacities.clear();
    for (auto &[stack, cap] : sized.adStackCapacities) {
      const OptimisticLaunch::Copies &c = *copyOf.at(stack);
      if (const AdStackAllocaStmt *to = rerun ? c.inRerun : c.inTry)
        v.adStackCapacities[to] = cap;
    }
    for (const AdStackSize &s : sizing.stacks())
      if (s.measuredAtLaunch()) {
        const OptimisticLaunch::Copies &c = *copyOf.at(s.stack);
        v.adStackCapacities[rerun ? c.inRerun : c.inTry] = measured[s.countSlot];
      }
    return v;
  };

  std::vector<LaunchArg> tryArgs(args.begin(), args.end());
  tryArgs.push_back(LaunchArg::ndarray(&needArg));
  tryArgs.push_back(LaunchArg::ndarray(&failedArg));
  // (A capacity the i32 count cannot reach is as good as one below it:
  // pushes past it flag the iteration, which reruns with its need.)
  std::vector<int64_t> tryCapacity = state.capacity;
  for (int64_t &cap : tryCapacity) {
    cap = std::min<int64_t>(cap, kAdStackCountSaturated - 1);
    tryArgs.push_back(LaunchArg::i32(static_cast<int32_t>(cap)));
  }
  if (absl::Status s = backend.launch(*this, *o.tryKernel, tryArgs,
                                      variantOptions(/*rerun=*/false, tryCapacity));
      !s.ok())
    return failedIn(*o.tryKernel, s);

  // One copy back from a GPU; the reads below are the host's.
  if (absl::Status s = need->syncToHost(); !s.ok())
    return s;
  absl::StatusOr<int64_t> overflowed = need->readInteger(slots * spread);
  if (!overflowed.ok())
    return overflowed.status();
  std::vector<int64_t> measured(slots);
  for (int i = 0; i < slots; ++i) {
    absl::StatusOr<int64_t> v = need->maxInteger(i * spread, (i + 1) * spread);
    if (!v.ok())
      return v.status();
    measured[i] = std::max<int64_t>(*v, 1);
    if (measured[i] >= kAdStackCountSaturated) {
      state.capacity.clear(); // the next launch counts
      state.dirty = true;
      return absl::ResourceExhaustedError(fmt::format(
          "kernel @{}: an iteration pushes one of its adstacks measured at launch {} times or "
          "more, more than its optimistic launch counts; the iterations that fit ran, the others "
          "did not. Launch it with LaunchOptions::optimisticAdStacks = false",
          k.name(), kAdStackCountSaturated));
    }
  }
  if (*overflowed > 0) {
    std::vector<LaunchArg> rerunArgs(args.begin(), args.end());
    rerunArgs.push_back(LaunchArg::ndarray(&failedArg));
    if (absl::Status s = backend.launch(*this, *o.rerunKernel, rerunArgs,
                                        variantOptions(/*rerun=*/true, measured));
        !s.ok())
      return failedIn(*o.rerunKernel, s);
  }
  state.capacity = measured;
  LaunchOptions recorded = sized;
  for (const AdStackSize &s : sizing.stacks())
    if (s.measuredAtLaunch())
      recorded.adStackCapacities[s.stack] = measured[s.countSlot];
  recordLaunch(recorded, {MeasuredLaunch::Path::Optimistic, *overflowed});
  return absl::OkStatus();
}

} // namespace qd
