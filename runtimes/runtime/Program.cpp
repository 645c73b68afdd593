//===- Program.cpp - Module instances and launches ------------------------===//
#include "qd/runtime/Program.h"

#include "LaunchInputs.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/ir/Casting.h"
#include "qd/ir/Checkpointing.h"
#include "qd/ir/Visitor.h"
#include "qd/runtime/LaunchTrace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>
#include <map>
#include <optional>

namespace qd {

absl::StatusOr<std::unique_ptr<Program>> Program::create(const Module &module) {
  std::unique_ptr<Program> p(new Program(module));
  for (const auto &f : module.fields()) {
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      if (!f->hasComponent(c))
        continue;
      absl::StatusOr<Buffer> b = Buffer::create(f->elementType(), f->shape());
      if (!b.ok())
        return absl::Status(b.status().code(),
                            fmt::format("cannot allocate field '@{}': {}", f->name(),
                                        std::string(b.status().message())));
      p->fields_.emplace(std::pair(f.get(), c), *std::move(b));
    }
  }
  return p;
}

Buffer *Program::field(const Field &f, Component c) {
  auto it = fields_.find({&f, c});
  return it == fields_.end() ? nullptr : &it->second;
}

Buffer *Program::field(std::string_view name, Component c) {
  Field *f = module_.findField(name);
  return f ? field(*f, c) : nullptr;
}

namespace {

/// The analyses (qd/analysis/ElementOwnership.h) take ndarray arguments of
/// different element types or ranks to be different memory: no launch
/// accepts one buffer for both. Two borrowed buffers can still overlap, so
/// a launch where they do is refused here instead of computing a wrong
/// result. Arguments of one type and rank may overlap (the analyses assume
/// they may).
struct NdarrayRange {
  Buffer::StorageRange storage;
  unsigned arg;
  Component component;
};

/// The storage of every non-empty buffer `args` give an ndarray argument or
/// companion, ordered by memory space and first byte.
std::vector<NdarrayRange> ndarrayRanges(std::span<const LaunchArg> args) {
  std::vector<NdarrayRange> ranges;
  for (unsigned i = 0; i < args.size(); ++i) {
    if (!args[i].isNdarray())
      continue;
    for (Component c : {Component::Primal, Component::Grad, Component::Dual})
      if (const Buffer *b = args[i].ndarrayValue().component(c); b && b->sizeInBytes() > 0)
        ranges.push_back({b->storageRange(), i, c});
  }
  std::sort(ranges.begin(), ranges.end(), [](const NdarrayRange &a, const NdarrayRange &b) {
    auto key = [](const NdarrayRange &r) {
      return std::pair(reinterpret_cast<uintptr_t>(r.storage.space), r.storage.begin);
    };
    return key(a) < key(b);
  });
  return ranges;
}

/// Calls `f(a, b)` for every pair of `ranges` (ndarrayRanges' order) that
/// overlap, until it returns true; whether one did. Each range meets only
/// the ranges that start before it ends: no quadratic walk for a launch of
/// many distinct buffers.
template <typename F> bool anyOverlap(const std::vector<NdarrayRange> &ranges, F &&f) {
  for (size_t x = 0; x < ranges.size(); ++x)
    for (size_t y = x + 1;
         y < ranges.size() && ranges[y].storage.space == ranges[x].storage.space &&
         ranges[y].storage.begin < ranges[x].storage.end;
         ++y)
      if (f(ranges[x], ranges[y]))
        return true;
  return false;
}

absl::Status checkNdarrayOverlap(const Kernel &kernel, std::span<const LaunchArg> args) {
  absl::Status status;
  anyOverlap(ndarrayRanges(args), [&](const NdarrayRange &x, const NdarrayRange &y) {
    const Type &tx = kernel.argument(x.arg)->type(), &ty = kernel.argument(y.arg)->type();
    if (tx.element() == ty.element() && tx.ndim() == ty.ndim())
      return false;
    // Named in argument order.
    bool inOrder = std::pair(x.arg, x.component) < std::pair(y.arg, y.component);
    const NdarrayRange &a = inOrder ? x : y, &b = inOrder ? y : x;
    auto name = [&](const NdarrayRange &r) {
      return globalName(false, kernel.argument(r.arg)->name(), r.component);
    };
    status = absl::InvalidArgumentError(fmt::format(
        "kernel @{}: the buffers given for '{}' ({}) and '{}' ({}) overlap; ndarrays of "
        "different element types or ranks must not share memory (qd's analyses take them to "
        "be distinct)",
        kernel.name(), name(a), kernel.argument(a.arg)->type().str(), name(b),
        kernel.argument(b.arg)->type().str()));
    return true;
  });
  return status;
}

} // namespace

bool ndarrayBuffersOverlap(std::span<const LaunchArg> args) {
  return anyOverlap(ndarrayRanges(args),
                    [](const NdarrayRange &, const NdarrayRange &) { return true; });
}

bool ndarraysFitNarrowOffsets(std::span<const LaunchArg> args) {
  for (const LaunchArg &a : args)
    if (a.isNdarray())
      for (Component c : {Component::Primal, Component::Grad, Component::Dual})
        if (const Buffer *b = a.ndarrayValue().component(c);
            b && b->numElements() > std::numeric_limits<int32_t>::max())
          return false;
  return true;
}

absl::Status refuseGlobalAccessChecks(const Kernel &kernel, const LaunchOptions &options,
                                      std::string_view backend) {
  if (!options.checkGlobalAccesses)
    return absl::OkStatus();
  return absl::UnimplementedError(fmt::format(
      "kernel @{}: the {} backend does not check global accesses "
      "(LaunchOptions::checkGlobalAccesses); launch on the interpreter for that check, or run "
      "the static `check-global-accesses` pass",
      kernel.name(), backend));
}

absl::Status refuseLaunchStream(const Kernel &kernel, const LaunchOptions &options,
                                std::string_view backend) {
  if (!options.stream)
    return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "kernel @{}: the {} backend has no streams, so it cannot launch on the one given "
      "(LaunchOptions::stream); pass a null stream, or launch on a GPU backend (cuda, amdgpu)",
      kernel.name(), backend));
}

absl::Status validateLaunchArgs(const Kernel &kernel, std::span<const LaunchArg> args) {
  if (args.size() != kernel.numArguments())
    return absl::InvalidArgumentError(fmt::format(
        "kernel @{} takes {} argument{} but {} {} given", kernel.name(), kernel.numArguments(),
        kernel.numArguments() == 1 ? "" : "s", args.size(), args.size() == 1 ? "was" : "were"));
  for (unsigned i = 0; i < kernel.numArguments(); ++i) {
    const Argument &param = *kernel.argument(i);
    const LaunchArg &arg = args[i];
    // Formatted only for an error: this runs before every launch.
    auto what = [&] {
      return fmt::format("argument {} (%{}) of kernel @{}", i, param.name(), kernel.name());
    };
    if (!param.isNdarray()) {
      if (arg.isNdarray())
        return absl::InvalidArgumentError(fmt::format(
            "{} is a scalar of type {}, but an ndarray was given", what(), param.type().str()));
      if (arg.scalarValue().type != param.type().element())
        return absl::InvalidArgumentError(fmt::format("{} has type {}, but a {} value was given",
                                                      what(), param.type().str(),
                                                      toString(arg.scalarValue().type)));
      continue;
    }
    if (!arg.isNdarray() || !arg.ndarrayValue().primal)
      return absl::InvalidArgumentError(
          fmt::format("{} is an {}, but a scalar was given", what(), param.type().str()));
    const NdarrayArg &nd = arg.ndarrayValue();
    const Buffer &primal = *nd.primal;
    if (primal.elementType() != param.type().element() || primal.ndim() != param.type().ndim())
      return absl::InvalidArgumentError(
          fmt::format("{} is an {}, but the buffer given holds {} with {} dimension{}", what(),
                      param.type().str(), toString(primal.elementType()), primal.ndim(),
                      primal.ndim() == 1 ? "" : "s"));
    for (Component c : {Component::Grad, Component::Dual}) {
      if (!param.hasComponent(c))
        continue;
      const Buffer *b = nd.component(c);
      if (!b)
        return absl::InvalidArgumentError(
            fmt::format("{} declares a {} companion, but no {} buffer was given", what(),
                        toString(c), toString(c)));
      if (b->elementType() != primal.elementType() || b->shape() != primal.shape())
        return absl::InvalidArgumentError(
            fmt::format("the {} buffer of {} must have the primal's element type and shape",
                        toString(c), what()));
    }
  }
  return checkNdarrayOverlap(kernel, args);
}

absl::Status syncLaunchBuffersToHost(Program &program, const Kernel &kernel,
                                     std::span<const LaunchArg> args) {
  absl::Status status;
  // `what` names the buffer, only when it failed: a walk of a large kernel
  // runs before every launch.
  auto sync = [&](const Buffer *b, auto &&what) {
    if (!b || !status.ok())
      return;
    if (absl::Status s = b->syncToHost(); !s.ok())
      status = absl::Status(s.code(), fmt::format("kernel @{}: {}: {}", kernel.name(), what(),
                                                  std::string(s.message())));
  };
  walk(const_cast<Kernel &>(kernel), [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s); g && g->isField())
      sync(program.field(*g->field(), g->component()),
           [&] { return fmt::format("field @{}", g->field()->name()); });
  });
  for (unsigned i = 0; i < args.size() && i < kernel.numArguments(); ++i)
    if (args[i].isNdarray())
      for (Component c : {Component::Primal, Component::Grad, Component::Dual})
        sync(args[i].ndarrayValue().component(c),
             [&] { return fmt::format("argument %{}", kernel.argument(i)->name()); });
  return status;
}

absl::StatusOr<std::vector<LaunchArg>> orderLaunchArgs(const Kernel &kernel,
                                                       std::span<const NamedLaunchArg> named) {
  std::vector<std::optional<LaunchArg>> slots(kernel.numArguments());
  for (const NamedLaunchArg &a : named) {
    const Argument *param = kernel.findArgument(a.name);
    if (!param) {
      std::vector<std::string> takes;
      for (unsigned i = 0; i < kernel.numArguments(); ++i)
        takes.push_back("%" + kernel.argument(i)->name());
      return absl::InvalidArgumentError(fmt::format(
          "kernel @{} has no argument named %{}; it takes {}", kernel.name(), a.name,
          takes.empty() ? std::string("none") : fmt::format("{}", fmt::join(takes, ", "))));
    }
    std::optional<LaunchArg> &slot = slots[param->index()];
    if (slot)
      return absl::InvalidArgumentError(
          fmt::format("argument %{} of kernel @{} is given twice", a.name, kernel.name()));
    slot = a.value;
  }
  std::vector<LaunchArg> ordered;
  for (unsigned i = 0; i < kernel.numArguments(); ++i) {
    if (!slots[i])
      return absl::InvalidArgumentError(fmt::format("argument %{} of kernel @{} is missing",
                                                    kernel.argument(i)->name(), kernel.name()));
    ordered.push_back(*slots[i]);
  }
  return ordered;
}

absl::Status Program::launchByName(std::string_view name, std::span<const NamedLaunchArg> args,
                                   Backend &backend, const LaunchOptions &options) {
  Kernel *k = module_.findKernel(name);
  if (!k)
    return absl::NotFoundError(fmt::format("no kernel named '@{}' in the module", name));
  absl::StatusOr<std::vector<LaunchArg>> ordered = orderLaunchArgs(*k, args);
  if (!ordered.ok())
    return ordered.status();
  return launch(name, *ordered, backend, options);
}

absl::Status Program::launch(std::string_view name, std::span<const LaunchArg> args,
                             Backend &backend, const LaunchOptions &options) {
  Kernel *k = module_.findKernel(name);
  if (!k)
    return absl::NotFoundError(fmt::format("no kernel named '@{}' in the module", name));
  if (absl::Status s = validateLaunchArgs(*k, args); !s.ok())
    return s;
  if (absl::Status s = checkFieldStorage(*k, args); !s.ok())
    return s;
  if (!launchTraceOn())
    return launchSized(*k, args, backend, options, /*record=*/true);
  launchTrace(fmt::format("Program::launch @{} on {} begins", name, backend.name()));
  auto start = std::chrono::steady_clock::now();
  absl::Status s = launchSized(*k, args, backend, options, /*record=*/true);
  launchTrace(fmt::format("Program::launch @{} on {}: {:.1f} us", name, backend.name(),
                          microsecondsSince(start)));
  return s;
}

const std::vector<Program::AccessedField> &Program::accessedFields(const Kernel &k) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, fresh] = accessedFields_.try_emplace(&k);
  if (fresh)
    walk(const_cast<Kernel &>(k), [&](Stmt &s) {
      auto *g = dyn_cast<GlobalAccessStmt>(&s);
      if (!g || !g->isField())
        return;
      const Buffer *b = field(*g->field(), g->component());
      if (b && std::none_of(it->second.begin(), it->second.end(),
                            [&](const AccessedField &a) { return a.buffer == b; }))
        it->second.push_back({b, g->field(), g->component()});
    });
  return it->second;
}

absl::Status Program::checkFieldStorage(const Kernel &k, std::span<const LaunchArg> args) {
  const std::vector<AccessedField> &fields = accessedFields(k);
  for (unsigned i = 0; i < args.size() && !fields.empty(); ++i) {
    if (!args[i].isNdarray())
      continue;
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      const Buffer *b = args[i].ndarrayValue().component(c);
      if (!b)
        continue;
      const Buffer::StorageRange r = b->storageRange();
      for (const AccessedField &f : fields) {
        const Buffer::StorageRange fr = f.buffer->storageRange();
        bool shared = f.buffer == b || (fr.space == r.space && fr.begin < r.end &&
                                        r.begin < fr.end && b->sizeInBytes() > 0);
        if (!shared)
          continue;
        return absl::InvalidArgumentError(fmt::format(
            "kernel @{}: the buffer given for '{}' is the storage of field '{}', which the "
            "kernel accesses; qd's analyses take fields and ndarrays to be distinct memory, so "
            "pass a copy of the field (Buffer::create and copy its contents) instead",
            k.name(), globalName(false, k.argument(i)->name(), c),
            globalName(true, f.field->name(), f.component)));
      }
    }
  }
  return absl::OkStatus();
}

bool Program::boundsAreSmall(
    const KernelSizing &sz,
    const std::unordered_map<const AdStackAllocaStmt *, int64_t> &capacities,
    std::span<const LaunchArg> args, const LaunchOptions &options) {
  if (options.refineAdStacksAboveBytes <= 0 || !sz.optimistic())
    return false;
  int64_t perIteration = 0;
  for (const AdStackSize &s : sz.stacks())
    if (s.refined && !options.adStackCapacities.count(s.stack)) {
      auto it = capacities.find(s.stack);
      if (it == capacities.end())
        return false;
      perIteration += it->second * 2 * ((bitWidth(s.stack->elementType()) + 7) / 8);
    }
  runtime_detail::LaunchInputs inputs(*this, args);
  absl::StatusOr<int64_t> iterations = evaluateSizeExpr(*sz.optimistic()->iterations, inputs);
  if (!iterations.ok() || !inputs.error().ok())
    return false;
  int64_t bytes;
  return !__builtin_mul_overflow(perIteration, std::max<int64_t>(*iterations, 1), &bytes) &&
         bytes <= options.refineAdStacksAboveBytes;
}

absl::Status Program::launchSized(const Kernel &k, std::span<const LaunchArg> args,
                                  Backend &backend, const LaunchOptions &options, bool record) {
  if (!options.sizeAdStacks)
    return backend.launch(*this, k, args, options);
  absl::StatusOr<const KernelSizing *> sizing = backend.adStackSizing(k);
  if (!sizing.ok())
    return sizing.status();
  // The interval of checkpointed loops is a module field that the sizing
  // and the kernel read: concurrent launches of one gradient take turns,
  // from setting it to the end of the launch (an asynchronous launch's
  // device copy is not written before it ran: uploads wait for the
  // launches in flight).
  std::unique_lock<std::mutex> turn;
  if (module_.findField(checkpointIntervalField(k.name())))
    turn = std::unique_lock<std::mutex>(intervalTurn(k));
  absl::StatusOr<int64_t> interval = setCheckpointInterval(k, **sizing, args, options, backend);
  if (!interval.ok())
    return interval.status();
  if (record) {
    std::lock_guard<std::mutex> lock(mutex_);
    lastCheckpointInterval_ = *interval;
  }
  auto capacities = adStackCapacities(k, **sizing, args, options.defaultAdStackCapacity);
  if (!capacities.ok())
    return capacities.status();
  // Stacks measured at launch: run the counting kernel first, unless every
  // one of them has an explicit capacity. A kernel with an optimistic
  // launch counts at its first launch only. A counting kernel
  // (`record` false) may measure stacks too: those it keeps as real stacks
  // because other counts read their values (AdStackCounting.cpp), which its
  // own counting kernel, one stage less, measures. It always counts.
  // A refined stack (a measured one with a static bound too) is measured
  // only where that is cheap: by the optimistic launch, or by the counting
  // kernel that runs for the other stacks anyway. Otherwise its bound is
  // its capacity (adStackCapacities).
  const KernelSizing &sz = **sizing;
  bool measure = false, refine = false, explicitMeasured = false;
  if (sz.countKernel())
    for (const AdStackSize &s : sz.stacks())
      if (s.measuredAtLaunch()) {
        bool given = options.adStackCapacities.count(s.stack);
        (s.refined ? refine : measure) |= !given;
        explicitMeasured |= given;
      }
  if (refine && !measure && boundsAreSmall(sz, *capacities, args, options))
    refine = false;
  OptimisticState *optimistic = nullptr;
  std::unique_lock<std::mutex> optimisticLock;
  bool optimisticWanted =
      record && options.optimisticAdStacks.value_or(backend.optimisticAdStacks());
  if ((measure || refine) && !explicitMeasured && optimisticWanted && sz.optimistic()) {
    // A launch of the same kernel from another thread holds the state: this
    // one counts instead.
    OptimisticState &state = optimisticState(k);
    optimisticLock = std::unique_lock<std::mutex>(state.mutex, std::try_to_lock);
    if (optimisticLock.owns_lock())
      optimistic = &state;
  }
  LaunchOptions sized = options;
  // The backend reports the interval the loops run with.
  sized.checkpointInterval = *interval;
  // Measuring reads what the device counted: the host waits for it.
  if (measure || refine)
    sized.async = false;
  if (optimistic && optimistic->capacity.empty() && options.optimisticInitialCapacity > 0)
    optimistic->capacity.assign(sz.numCounted(), options.optimisticInitialCapacity);
  if (optimistic && optimistic->capacity.empty() && !measure) {
    // Only refined stacks: their bounds hold for the first launch, which
    // measures their needs (no counting kernel to compile and run).
    optimistic->capacity.assign(sz.numCounted(), 1);
    for (const AdStackSize &s : sz.stacks())
      if (s.measuredAtLaunch())
        optimistic->capacity[s.countSlot] =
            std::min<int64_t>(capacities->at(s.stack), kAdStackCountSaturated - 1);
  }
  if (optimistic && !optimistic->capacity.empty()) {
    for (auto &[stack, cap] : *capacities)
      sized.adStackCapacities.try_emplace(stack, cap);
    return launchOptimistic(k, sz, args, backend, sized, *optimistic);
  }
  int countingRuns = 0;
  std::shared_ptr<MeasuredAdStackNeeds> perIteration;
  if (measure) {
    if (backend.compactsAdStacks() && options.compactAdStacks)
      perIteration = perIterationNeeds(sz, args);
    // Nothing reads the needs after this launch but an optimistic state.
    if (perIteration)
      perIteration->zeroAfterUse = !optimistic;
    absl::StatusOr<std::vector<int64_t>> need =
        countAdStacks(k, sz, args, backend, sized, countingRuns, perIteration.get());
    sized.measuredNeeds = perIteration;
    if (!need.ok())
      return need.status();
    for (const AdStackSize &s : sz.stacks())
      if (s.measuredAtLaunch())
        (*capacities)[s.stack] = std::max<int64_t>((*need)[s.countSlot], 1);
    if (optimistic) {
      optimistic->counted = perIteration;
      optimistic->rowsMeasured = false;
      optimistic->capacity.assign(sz.numCounted(), 1);
      for (int i = 0; i < sz.numCounted(); ++i)
        optimistic->capacity[i] = std::max<int64_t>((*need)[i], 1);
    }
  }
  for (auto &[stack, cap] : *capacities)
    sized.adStackCapacities.try_emplace(stack, cap); // explicit entries win
  if (record)
    recordLaunch(sized, {measure ? MeasuredLaunch::Path::Counted : MeasuredLaunch::Path::None, 0,
                         countingRuns});
  absl::Status launched = backend.launch(*this, k, args, sized);
  if (perIteration && perIteration->zeroed) {
    // The buffer the next counted launch reuses is zero on the device.
    CountState &state = countState(k);
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.perIteration == perIteration->need)
      state.perIterationZeroed = true;
  }
  return launched;
}

void Program::recordLaunch(const LaunchOptions &sized, MeasuredLaunch measured) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastCapacities_.clear();
  for (auto &[stack, cap] : sized.adStackCapacities)
    lastCapacities_[stack] = cap;
  lastMeasured_ = measured;
}

absl::Status Program::zeroedBuffer(std::optional<Buffer> &slot, ScalarType type, int64_t n) {
  if (slot && slot->numElements() == n) {
    slot->fill(Scalar::ofInt(type, 0));
    return absl::OkStatus();
  }
  absl::StatusOr<Buffer> b = Buffer::create(type, {n});
  if (!b.ok())
    return b.status();
  slot = *std::move(b);
  return absl::OkStatus();
}

namespace {

/// The value of a task bound before the launch: a literal, a scalar
/// argument or an ndarray extent (nullopt otherwise).
std::optional<int64_t> boundBeforeLaunch(Bound b, std::span<const LaunchArg> args) {
  if (!b.value)
    return b.constant;
  if (auto *c = dyn_cast<ConstStmt>(b.value))
    return c->intValue();
  if (auto *a = dyn_cast<Argument>(b.value); a && !args[a->index()].isNdarray())
    return args[a->index()].scalarValue().i;
  if (auto *sh = dyn_cast<ShapeStmt>(b.value))
    if (auto *a = dyn_cast<Argument>(sh->ndarray()); a && args[a->index()].isNdarray())
      return args[a->index()].ndarrayValue().primal->shape().at(sh->axis());
  return std::nullopt;
}

} // namespace

std::shared_ptr<MeasuredAdStackNeeds> Program::perIterationNeeds(const KernelSizing &sizing,
                                                                 std::span<const LaunchArg> args) {
  // Every measured stack in one 1-D parallel task at the kernel's top
  // level, whose iterations are known now.
  auto needs = std::make_shared<MeasuredAdStackNeeds>();
  const ForStmt *task = nullptr;
  for (const AdStackSize &s : sizing.stacks()) {
    if (!s.measuredAtLaunch())
      continue;
    const Stmt *top = s.stack;
    while (top->parentStmt())
      top = top->parentStmt();
    auto *f = dyn_cast<ForStmt>(top);
    if (!f || !f->isParallel() || f->numDims() != 1 || (task && task != f))
      return nullptr;
    task = f;
    needs->slots[s.stack] = s.countSlot;
  }
  if (!task)
    return nullptr;
  std::optional<int64_t> begin = boundBeforeLaunch(task->begin(), args),
                         end = boundBeforeLaunch(task->end(), args);
  if (!begin || !end)
    return nullptr;
  int64_t iterations = std::max<int64_t>(*end - *begin, 1);
  if (iterations > (int64_t(1) << 30) / std::max(sizing.numCounted(), 1))
    return nullptr; // the counting kernel indexes `need` with i32
  needs->spread = std::bit_ceil(uint64_t(std::max(iterations, KernelSizing::kCountSpread)));
  return needs;
}

namespace {

/// The state `states` keeps for `k`, made on first use (under `mutex`).
template <class State>
State &stateOf(std::mutex &mutex, std::map<const Kernel *, std::unique_ptr<State>> &states,
               const Kernel &k) {
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<State> &slot = states[&k];
  if (!slot)
    slot = std::make_unique<State>();
  return *slot;
}

} // namespace

Program::CountState &Program::countState(const Kernel &k) {
  return stateOf(mutex_, counting_, k);
}

std::mutex &Program::intervalTurn(const Kernel &k) {
  return stateOf(mutex_, intervalTurns_, k);
}

Program::OptimisticState &Program::optimisticState(const Kernel &k) {
  return stateOf(mutex_, optimistic_, k);
}

absl::StatusOr<std::unordered_map<const AdStackAllocaStmt *, int64_t>>
Program::adStackCapacities(const Kernel &kernel, const KernelSizing &sizing,
                           std::span<const LaunchArg> args, int64_t defaultCapacity) {
  return evaluateCapacities(kernel, sizing, runtime_detail::LaunchInputs(*this, args),
                            defaultCapacity);
}

absl::StatusOr<std::unordered_map<const AdStackAllocaStmt *, int64_t>>
Program::evaluateCapacities(const Kernel &kernel, const KernelSizing &sizing,
                            const runtime_detail::LaunchInputs &inputs, int64_t defaultCapacity) {
  std::unordered_map<const AdStackAllocaStmt *, int64_t> out;
  for (const AdStackSize &s : sizing.stacks()) {
    switch (s.tier) {
    case SizingTier::Declared:
      break; // the backend reads the declared capacity
    case SizingTier::Constant:
      out[s.stack] = s.capacity;
      break;
    case SizingTier::Default:
    case SizingTier::Measured: // launch() replaces it with the counted need
      out[s.stack] = defaultCapacity > 0 ? defaultCapacity : s.capacity;
      break;
    case SizingTier::LaunchTime: {
      absl::StatusOr<int64_t> v = evaluateSizeExpr(*s.expr, inputs);
      if (v.ok() && !inputs.error().ok())
        v = inputs.error();
      if (!v.ok())
        return absl::Status(
            v.status().code(),
            fmt::format("{}: error: cannot size adstack {} of kernel @{} for this launch: its "
                        "bound is {}, and {}",
                        s.stack->loc().str(), s.name(), kernel.name(),
                        printSizeExpr(*s.expr, sizing.names()), std::string(v.status().message())));
      out[s.stack] = std::max<int64_t>(*v, 1);
      break;
    }
    }
  }
  return out;
}

} // namespace qd
