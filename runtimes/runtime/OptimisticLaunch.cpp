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
#include "qd/ir/Status.h"
#include "qd/runtime/Program.h"

#include <fmt/format.h>

#include <unordered_map>

namespace qd {
namespace {

using Copies = std::unordered_map<const AdStackAllocaStmt *, const OptimisticLaunch::Copies *>;

/// The measured stacks' slots, keyed by their copies in a variant.
std::unordered_map<const AdStackAllocaStmt *, int> variantSlots(const KernelSizing &sizing,
                                                                const Copies &copyOf, bool rerun) {
  std::unordered_map<const AdStackAllocaStmt *, int> slots;
  for (const AdStackSize &s : sizing.stacks())
    if (s.measuredAtLaunch()) {
      const OptimisticLaunch::Copies &c = *copyOf.at(s.stack);
      slots[rerun ? c.inRerun : c.inTry] = s.countSlot;
    }
  return slots;
}

/// The needs an optimistic launch measured in the first rows of `rows`
/// (`columns` iterations).
std::shared_ptr<const MeasuredAdStackNeeds>
rowNeeds(std::shared_ptr<Buffer> rows, int64_t columns,
         std::unordered_map<const AdStackAllocaStmt *, int> slots) {
  auto needs = std::make_shared<MeasuredAdStackNeeds>();
  needs->need = std::move(rows);
  needs->spread = columns;
  needs->rows = true;
  needs->slots = std::move(slots);
  return needs;
}

/// The try kernel's `failed` flags: at least `flags`, all zero.
template <class State> absl::Status clearedFlags(State &state, int64_t flags) {
  if (!state.failed || state.failed->numElements() < flags) {
    absl::StatusOr<Buffer> b = Buffer::create(ScalarType::I32, {flags});
    if (!b.ok())
      return b.status();
    state.failed = *std::move(b);
  } else if (state.dirty) {
    state.failed->fill(Scalar::ofInt(ScalarType::I32, 0));
  }
  state.dirty = false;
  return absl::OkStatus();
}

/// What the try kernel's `rows` and `mode` are for one launch
/// (OptimisticLaunch::tryKernel).
struct TryRows {
  Buffer *rows = nullptr;
  int32_t mode = 0;
  /// The needs the try launch's layout comes from (null: the launch's).
  std::shared_ptr<const MeasuredAdStackNeeds> previous;
  std::shared_ptr<const AdStackIterationCapacities> capacities;
};

/// The try kernel's rows on a backend that compacts (`compact`): [2 x
/// slots, columns], its layout from the needs the last launch measured
/// there, or else from the first (counted) launch's; each iteration's
/// capacity written by the backend. Elsewhere a 1 x 1 buffer, untouched.
/// (`State` is Program::OptimisticState.)
template <class State>
absl::StatusOr<TryRows> tryRows(State &state, const KernelSizing &sizing, const Copies &copyOf,
                                bool compact, int64_t columns) {
  TryRows r;
  if (!compact) {
    if (!state.noRows) {
      absl::StatusOr<Buffer> b = Buffer::create(ScalarType::I64, {1, 1});
      if (!b.ok())
        return b.status();
      state.noRows = *std::move(b);
    }
    r.rows = &*state.noRows;
    return r;
  }
  const int64_t slots = sizing.numCounted();
  if (!state.rows || state.rows->shape() != std::vector<int64_t>{2 * slots, columns}) {
    absl::StatusOr<Buffer> b = Buffer::create(ScalarType::I64, {2 * slots, columns});
    if (!b.ok())
      return b.status();
    state.rows = std::make_shared<Buffer>(*std::move(b));
    state.rowsMeasured = false;
  }
  r.rows = state.rows.get();
  r.mode = kIterationRowsStoreNeeds | kIterationRowsReadCapacities;
  auto capacities = std::make_shared<AdStackIterationCapacities>();
  capacities->rows = state.rows;
  capacities->firstRow = slots;
  capacities->slots = variantSlots(sizing, copyOf, /*rerun=*/false);
  if (state.rowsMeasured) {
    r.previous = rowNeeds(state.rows, columns, capacities->slots);
  } else if (state.counted) {
    auto previous = std::make_shared<MeasuredAdStackNeeds>(*state.counted);
    previous->slots = capacities->slots;
    r.previous = previous;
  }
  r.capacities = capacities;
  return r;
}

} // namespace

absl::Status Program::launchOptimistic(const Kernel &k, const KernelSizing &sizing,
                                       std::span<const LaunchArg> args, Backend &backend,
                                       const LaunchOptions &sized, OptimisticState &state) {
  const OptimisticLaunch &o = *sizing.optimistic();
  auto failedIn = [&](const Kernel &variant, const absl::Status &s) {
    state.dirty = true;
    state.rowsMeasured = false;
    return reworded(s, fmt::format("kernel @{} (its optimistic launch, @{}): {}", k.name(),
                                   variant.name(), std::string(s.message())));
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
  if (absl::Status s = clearedFlags(state, flags); !s.ok())
    return s;
  constexpr int64_t spread = KernelSizing::kCountSpread;
  const int slots = sizing.numCounted();
  if (absl::Status s = zeroedBuffer(state.need, ScalarType::I64, slots * spread + 1); !s.ok())
    return s;
  Buffer *need = &*state.need;
  NdarrayArg needArg, failedArg;
  needArg.primal = need;
  failedArg.primal = &*state.failed;

  // The variants' stacks get the capacities of the source's.
  Copies copyOf;
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

  const bool compact = backend.compactsAdStacks() && sized.compactAdStacks;
  absl::StatusOr<TryRows> rows = tryRows(state, sizing, copyOf, compact, flags);
  if (!rows.ok())
    return rows.status();
  NdarrayArg rowsArg;
  rowsArg.primal = rows->rows;
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
  tryArgs.push_back(LaunchArg::ndarray(&rowsArg));
  tryArgs.push_back(LaunchArg::i32(rows->mode));
  LaunchOptions tryOptions = variantOptions(/*rerun=*/false, tryCapacity);
  tryOptions.measuredNeeds = rows->previous;
  tryOptions.iterationCapacities = rows->capacities;
  if (absl::Status s = backend.launch(*this, *o.tryKernel, tryArgs, tryOptions); !s.ok())
    return failedIn(*o.tryKernel, s);
  // Its rows now hold this launch's needs: the next launch's layout, and
  // the rerun's.
  state.rowsMeasured = compact;

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
      state.rowsMeasured = false;
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
    LaunchOptions rerunOptions = variantOptions(/*rerun=*/true, measured);
    if (compact)
      rerunOptions.measuredNeeds =
          rowNeeds(state.rows, flags, variantSlots(sizing, copyOf, /*rerun=*/true));
    if (absl::Status s = backend.launch(*this, *o.rerunKernel, rerunArgs, rerunOptions); !s.ok())
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
