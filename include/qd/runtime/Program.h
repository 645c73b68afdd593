//===- qd/runtime/Program.h - Module instances and launches -----*- C++ -*-===//
#pragma once

#include "qd/analysis/KernelSizing.h"
#include "qd/ir/Module.h"
#include "qd/runtime/Buffer.h"

#include <absl/status/status.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace qd {

namespace runtime_detail {
class LaunchInputs;
} // namespace runtime_detail
struct MeasuredAdStackNeeds;
struct AdStackIterationCapacities;

/// An ndarray passed to a launch: the primal buffer and optional grad/dual
/// companions (required when the kernel argument declares them).
struct NdarrayArg {
  Buffer *primal = nullptr;
  Buffer *grad = nullptr;
  Buffer *dual = nullptr;
  Buffer *component(Component c) const {
    return c == Component::Primal ? primal : c == Component::Grad ? grad : dual;
  }
};

/// One launch argument: a typed scalar or an ndarray.
class LaunchArg {
public:
  static LaunchArg scalar(Scalar s) { return LaunchArg(s, nullptr); }
  static LaunchArg i32(int32_t v) { return scalar(Scalar::ofInt(ScalarType::I32, v)); }
  static LaunchArg i64(int64_t v) { return scalar(Scalar::ofInt(ScalarType::I64, v)); }
  static LaunchArg f32(float v) { return scalar(Scalar::ofFloat(ScalarType::F32, v)); }
  static LaunchArg f64(double v) { return scalar(Scalar::ofFloat(ScalarType::F64, v)); }
  static LaunchArg ndarray(const NdarrayArg *a) { return LaunchArg(Scalar(), a); }

  bool isNdarray() const { return ndarray_ != nullptr; }
  const Scalar &scalarValue() const { return scalar_; }
  const NdarrayArg &ndarrayValue() const { return *ndarray_; }

private:
  LaunchArg(Scalar s, const NdarrayArg *a) : scalar_(s), ndarray_(a) {}
  Scalar scalar_;
  const NdarrayArg *ndarray_;
};

/// A launch argument given by the name of the kernel argument it binds
/// (without the `%`): what a front-end holds, a keyword argument.
struct NamedLaunchArg {
  std::string_view name;
  LaunchArg value;
};

/// `named` in the order of `kernel`'s arguments: each argument given once,
/// by name, in any order. InvalidArgument naming the kernel and the
/// argument for a name the kernel does not take (with the names it takes),
/// one given twice or one missing.
absl::StatusOr<std::vector<LaunchArg>> orderLaunchArgs(const Kernel &kernel,
                                                       std::span<const NamedLaunchArg> named);

struct LaunchOptions {
  /// Report out-of-range field/ndarray indices as an error naming the
  /// statement instead of touching memory (the interpreter always checks).
  bool boundsChecked = false;
  /// Stop the launch when a field or ndarray element is written after it was
  /// read in the same launch (the rule reverse mode relies on; see
  /// docs/autodiff.md). Primal data only. The interpreter implements it;
  /// the CPU backend refuses a launch that asks for it.
  bool checkGlobalAccesses = false;
  /// Capacity of adstacks declared with capacity 0 that get no other
  /// capacity: with `sizeAdStacks`, the tier-3 stacks (0 = the sizing
  /// default, 256); without it, every such stack (0 = an error).
  int64_t defaultAdStackCapacity = 0;
  /// Size every capacity-0 adstack before the launch from the kernel's
  /// sizing (docs/sizing.md): constants, SizeExprs evaluated against this
  /// launch's arguments and field contents, or the default. Only
  /// `Program::launch` does this; `Backend::launch` takes the options as
  /// given.
  bool sizeAdStacks = true;
  /// Stacks measured at launch (docs/sizing.md, "Measured at launch"), in a
  /// kernel that has an optimistic launch: run it with the capacities the
  /// kernel's previous launch measured and rerun only the iterations that
  /// did not fit (true), or run the counting kernel before every launch
  /// (false). Unset: the backend's choice (Backend::optimisticAdStacks: the
  /// CPU, CUDA and Vulkan backends' is true, the others' false). The first
  /// launch of a kernel counts either way (see optimisticInitialCapacity;
  /// where only refined upper bounds are measured it runs at the bounds),
  /// and so does a launch that gives a measured stack an explicit capacity.
  std::optional<bool> optimisticAdStacks;
  /// With `optimisticAdStacks`: the capacity of the measured stacks at a
  /// kernel's first optimistic launch (0: the first launch counts instead).
  /// Iterations that need more run twice.
  int64_t optimisticInitialCapacity = 0;
  /// Stacks with a static upper bound that launches also measure (refined,
  /// docs/sizing.md) run at their bounds, unmeasured, where those bounds
  /// hold at most this many bytes over the launch's iterations (an entry
  /// counted as its value and its adjoint): measuring reads the device's
  /// counts back, a wait of the host each launch, to save memory that
  /// small. 0: always measure.
  int64_t refineAdStacksAboveBytes = int64_t(1) << 20;
  /// Per-launch capacities, overriding the declared and sized capacity.
  std::unordered_map<const AdStackAllocaStmt *, int64_t> adStackCapacities;
  /// Lay out a compacted adstack heap where the backend can
  /// (Backend::compactsAdStacks) and the counting kernel measured each
  /// iteration's needs: every group of 32 GPU threads gets the largest
  /// need among its own iterations, not the launch's largest
  /// (docs/runtime.md, "Compacted heap"). False: the interleaved layout,
  /// every thread at the largest need.
  bool compactAdStacks = true;
  /// A compacted heap's threads per group (a power of two from 1 to
  /// abi::kAdStackGroupThreads); 0: chosen per launch, the largest whose
  /// heap is within 1.05x of the fewest bytes (docs/runtime.md,
  /// "Compacted heap").
  int64_t adStackGroupThreads = 0;
  /// Set by Program::launch for a compacted heap: the needs the counting
  /// kernel (or an earlier optimistic launch) measured for each iteration
  /// (MeasuredAdStackNeeds).
  std::shared_ptr<const MeasuredAdStackNeeds> measuredNeeds;
  /// Set by Program::launch for an optimistic launch on a backend that
  /// compacts: the backend writes there the capacity each iteration's
  /// measured stacks have in the launch's layout (its group's on a
  /// compacted heap, the launch's otherwise), which the try kernel checks
  /// its pushes against (AdStackIterationCapacities).
  std::shared_ptr<const AdStackIterationCapacities> iterationCapacities;
  /// The most bytes of adstack heap this launch may lay out (0: the
  /// backend's default, a fraction of the memory the device can spare:
  /// kDefaultAdStackBudgetFraction of free device memory on a GPU, of the
  /// host's available RAM on the CPU). A launch whose heap for every
  /// thread does not fit runs fewer iterations at a time (waves: fewer GPU
  /// threads or CPU workers, each running its iterations one after
  /// another), and fails with ResourceExhausted naming the kernel and the
  /// stack only when one iteration alone needs more (docs/runtime.md,
  /// "Adstack memory budget"). Checkpointed loops (reverse-ad{checkpoint})
  /// compare the budget (or the default) with the bytes of one
  /// iteration's stacks when Program::launch chooses their interval
  /// (Backend::adStackIterationBudget; docs/autodiff.md, "Checkpointing
  /// long loops"): a launch whose one iteration does not fit checkpoints.
  int64_t adStackMemoryBudget = 0;
  /// The interval k of a gradient's checkpointed loops: iterations between
  /// stored states (0: Program::launch chooses it from
  /// adStackMemoryBudget; k >= a loop's trip count tapes it fully). A
  /// kernel without checkpointed loops ignores it. Program::launch hands
  /// the backend the interval it set (0: none, or fully taped), which the
  /// backend reports (AdStackHeapUsage::checkpointInterval).
  int64_t checkpointInterval = 0;
  /// Stop the launch once it has run this long (zero: no limit), with a
  /// DeadlineExceeded error naming the loop a thread was in. Loops check
  /// at their back edges (compiled code: every kStopCheckInterval-th back
  /// edge of a thread), so code between back edges is not interrupted, and
  /// what the launch stored before it stopped stays stored.
  std::chrono::nanoseconds timeout{0};
  /// A flag any thread may set to stop the launch the same way (Cancelled).
  /// It must outlive the launch; it is read, never written.
  const std::atomic<bool> *cancel = nullptr;
  /// The interpreter only: stop after this many loop iterations in all
  /// (every `for` and `while`, tasks included; zero: no limit), with a
  /// ResourceExhausted error naming the loop: deterministic, unlike
  /// `timeout`. Compiled backends refuse a launch that sets it.
  int64_t maxLoopIterations = 0;

  /// The stream of the caller's device work the launch joins (a CUstream
  /// on CUDA, a hipStream_t on AMDGPU; null: the backend's own, the
  /// default stream). The launch's copies and kernels go on it, after the
  /// work the caller queued there, with no wait on the host or on the
  /// whole device. Backends without streams (CPU, interpreter, Vulkan)
  /// refuse a non-null stream (InvalidArgument naming the backend).
  void *stream = nullptr;
  /// Return once the launch's work is queued, without waiting for the
  /// kernels (docs/runtime.md, "Asynchronous launches"). What the code
  /// reports (an adstack overflow, an index out of range) is decoded
  /// later and returned, with the same message, by the next call on the
  /// backend that waits for the launch: Backend::synchronize(), a
  /// synchronous launch, or a launch that has to wait. Launches that need
  /// the host anyway run synchronously: a timeout or cancel flag, stacks
  /// measured at launch, kernel timing. Backends without streams run every
  /// launch synchronously.
  bool async = false;

  /// Whether the host may stop the launch while it runs (a timeout or a
  /// cancel flag): compiled backends then run code with stop checks.
  bool stoppable() const { return timeout.count() > 0 || cancel; }
};

/// Checks arity, scalar types, ndarray element types, ranks and companions
/// of `args` against `kernel`'s parameters. Messages name the argument.
absl::Status validateLaunchArgs(const Kernel &kernel, std::span<const LaunchArg> args);

/// Whether two of the buffers `args` give ndarray arguments (any
/// components: one argument's primal and another's grad, or one's primal
/// and its own grad) overlap. Code compiled with NdarrayAliasing::Distinct
/// (qd/analysis/ElementOwnership.h) runs only when none do.
bool ndarrayBuffersOverlap(std::span<const LaunchArg> args);

/// Whether every buffer `args` give ndarray arguments (every component) has
/// at most INT32_MAX elements, so that code computing element offsets in 32
/// bits (CodegenOptions::narrowNdarrayOffsets) may run the launch.
bool ndarraysFitNarrowOffsets(std::span<const LaunchArg> args);

/// For a compiled backend, which does not check global accesses:
/// Unimplemented, naming `backend` and the alternatives, when `options`
/// asks for the check (LaunchOptions::checkGlobalAccesses).
absl::Status refuseGlobalAccessChecks(const Kernel &kernel, const LaunchOptions &options,
                                      std::string_view backend);

/// For a backend without streams: InvalidArgument naming `backend` when
/// `options` gives one (LaunchOptions::stream).
absl::Status refuseLaunchStream(const Kernel &kernel, const LaunchOptions &options,
                                std::string_view backend);

class Program;

/// Brings the host side of every buffer a launch of `kernel` may touch (the
/// fields it accesses, the ndarray arguments) up to date, for a backend
/// that runs on the host; reports a device copy that could not be read
/// back (see Buffer).
absl::Status syncLaunchBuffersToHost(Program &program, const Kernel &kernel,
                                     std::span<const LaunchArg> args);

/// Where one adstack of a launch lived and how much memory it took.
struct AdStackPlacement {
  const AdStackAllocaStmt *stack = nullptr;
  enum class Memory : uint8_t {
    Heap,      // the launch's adstack heap
    LocalTape, // each GPU thread's local array (CudaBackendOptions::localTapeBytes)
  };
  Memory memory = Memory::Heap;
  /// Entries the launch gave it.
  int64_t capacity = 0;
  /// Entries of its storage: the capacity, or the length of the local
  /// array (a power of two that holds it).
  int64_t entries = 0;
  /// Bytes of one thread's copy (all lanes of a SIMD thread).
  int64_t bytesPerThread = 0;
  /// Threads that hold a copy (GPU threads of the launch, CPU workers).
  int64_t threads = 0;
};

/// What a backend's device runs: every kernel, unless a backend says a
/// device lacks a type or an operation (a Vulkan device without
/// shaderInt64, say), where launching a kernel that needs it fails with
/// FailedPrecondition naming the feature.
struct BackendCapabilities {
  bool int64 = true;        ///< i64 values
  bool float64 = true;      ///< f64 values
  bool int64Atomics = true; ///< atomics on i64 elements
  /// Loops of any length; false where the driver ends an invocation's
  /// loops after a number of iterations (lavapipe), which a launch then
  /// reports as an error naming the loop.
  bool longLoops = true;
};

/// What the counting kernel measured for each iteration of the task that
/// holds a launch's measured stacks (LaunchOptions::measuredNeeds).
struct MeasuredAdStackNeeds {
  /// i64 elements: the need of iteration `i` of the stack with slot `k` is
  /// element k * spread + (i & (spread - 1)) (KernelSizing::kCountSpread
  /// layout, with `spread` a power of two of at least the iterations), or
  /// with `rows`, element [k, i - begin] of a 2-D `need` of `spread`
  /// columns (an optimistic launch's rows, OptimisticLaunch::tryKernel).
  std::shared_ptr<Buffer> need;
  int64_t spread = 0;
  bool rows = false;
  /// The measured stacks and their slots.
  std::unordered_map<const AdStackAllocaStmt *, int> slots;
  /// Set by the launch: nothing reads `need` after it, so a backend that
  /// laid out a compacted heap from it zeroes it on the device once done
  /// and sets `zeroed` (the next counted launch then reuses it as it is:
  /// no host fill and upload).
  bool zeroAfterUse = false;
  mutable bool zeroed = false;
};

/// Where a launch writes each iteration's capacities (LaunchOptions::
/// iterationCapacities): i64 rows of a 2-D buffer, one column per
/// iteration of the measured task (counted from its begin); the capacity
/// of the stack with slot k goes to row firstRow + k.
struct AdStackIterationCapacities {
  std::shared_ptr<Buffer> rows;
  int64_t firstRow = 0;
  /// The measured stacks and their slots.
  std::unordered_map<const AdStackAllocaStmt *, int> slots;
  /// Set by the launch: nothing reads `need` after it, so a backend that
  /// laid out a compacted heap from it zeroes it on the device once done
  /// and sets `zeroed` (the next counted launch then reuses it as it is:
  /// no host fill and upload).
  bool zeroAfterUse = false;
  mutable bool zeroed = false;
};

/// The default adstack memory budget (LaunchOptions::adStackMemoryBudget =
/// 0): this fraction of the memory the device reports free (CUDA
/// cuMemGetInfo, HIP hipMemGetInfo, the Vulkan heap's budget) or of the
/// host's available RAM (the CPU backend).
inline constexpr double kDefaultAdStackBudgetFraction = 0.5;

/// The default budget for a device with `freeBytes` to spare (0: unknown,
/// then no budget: INT64_MAX).
int64_t defaultAdStackBudget(uint64_t freeBytes);

/// The type URL of the payload on a launch's "one iteration's adstacks need
/// more than the budget" error (LaunchPlan::overBudgetError): no grid, wave
/// or window can run it.
inline constexpr char kOverBudgetPayload[] = "type.qd/adstack-over-budget";
/// Whether `s` is that error.
bool isOverBudget(const absl::Status &s);

/// The adstack heap a backend's last launch used, for reports.
struct AdStackHeapUsage {
  /// Bytes laid out: threads x the bytes of one thread's stacks.
  int64_t bytes = 0;
  /// The threads it was laid out for, and what they are ("workers", "GPU
  /// threads", "invocations").
  int64_t threads = 0;
  std::string_view threadKind;
  /// The sum of the needs of the iterations in flight at the launch's
  /// capacities: what the heap would hold if each iteration in flight got
  /// exactly its own stacks (today's layouts give each thread the largest
  /// need, so this equals `bytes` unless fewer iterations than threads run).
  int64_t needBytes = 0;
  /// The budget the launch ran under (LaunchOptions::adStackMemoryBudget, or
  /// the default; INT64_MAX where the device reports no free memory).
  int64_t budgetBytes = 0;
  /// How many times the threads went over the task's iterations: 1 when
  /// every iteration had a thread, more when the budget (or the device's
  /// largest buffer) left fewer threads than iterations (the largest over
  /// the kernel's parallel tasks with heap stacks; 0 without heap).
  int64_t waves = 0;
  /// Checkpointing of long loops: iterations between the stored states of
  /// the launch's checkpointed loops (0: none, or fully taped), as
  /// Program::lastCheckpointInterval() says.
  int64_t checkpointInterval = 0;
  /// A compacted heap: its groups of `groupThreads` threads (1-32), each
  /// at the largest need among its threads' iterations (0: the
  /// interleaved layout, every thread at the launch's largest need).
  int64_t groups = 0;
  int64_t groupThreads = 0;
  /// A compacted heap: the columns of its table (1: every stack shares
  /// one region per group), and how many times the launch ran the table
  /// kernel (1 where the layout the kernel's last launch of as many
  /// threads chose still applies).
  int64_t tableColumns = 0;
  int64_t tableRuns = 0;
};

/// A way of executing kernels (the interpreter, the CPU JIT, ...).
class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  /// Runs `kernel` (which belongs to `program.module()`) with validated args.
  virtual absl::Status launch(Program &program, const Kernel &kernel,
                              std::span<const LaunchArg> args, const LaunchOptions &options) = 0;
  /// Whether stacks measured at launch take the optimistic launch when
  /// LaunchOptions::optimisticAdStacks does not say (docs/sizing.md: where
  /// it was measured to be faster than counting).
  virtual bool optimisticAdStacks() const { return false; }
  /// The most bytes one iteration's adstacks may take in a launch of
  /// `kernel` under `budget` (LaunchOptions::adStackMemoryBudget; 0: the
  /// backend's default, a fraction of what the device can spare now): the
  /// budget over the iterations a thread holds at once (the CPU's lanes),
  /// and no more than the device's largest heap; INT64_MAX where nothing
  /// limits it (the interpreter's default). Program::launch chooses the
  /// interval of checkpointed loops against it.
  virtual int64_t adStackIterationBudget(const Kernel &kernel, int64_t budget) {
    return budget > 0 ? budget : INT64_MAX;
  }
  /// How many iterations of `kernel`'s parallel tasks (each as many as
  /// adStackIterationBudget counts as one) the backend runs at once, of a
  /// task of `iterations` (0: not known): the CPU's workers, a GPU's
  /// resident grid, no more than the task has; 1 where that is not known.
  /// Program::launch checkpoints long loops more often rather than run
  /// fewer of them at once (chooseLaunchCheckpointInterval).
  virtual int64_t adStackParallelism(const Kernel &kernel, int64_t iterations) {
    (void)kernel, (void)iterations;
    return 1;
  }
  /// Whether launches may lay out a compacted adstack heap from per-
  /// iteration needs (LaunchOptions::compactAdStacks, ::measuredNeeds).
  virtual bool compactsAdStacks() const { return false; }
  /// The sizing of `kernel`'s adstacks (docs/sizing.md), computed when the
  /// backend prepares the kernel (a compiled backend: with its code) and
  /// kept with it; a kernel must not change after that. Program::launch
  /// evaluates it against each launch's data.
  virtual absl::StatusOr<const KernelSizing *> adStackSizing(const Kernel &kernel) = 0;
  /// Where the adstacks of the last launch lived, in the order of the
  /// code's stacks (empty for a backend without a memory layout, the
  /// interpreter, or before a launch). Read it while no launch runs.
  virtual std::vector<AdStackPlacement> lastAdStackPlacement() const { return {}; }
  /// The sizing report of `kernel` (KernelSizing::report: per stack its
  /// bound, exact or upper bound, tier and method) from the sizing this
  /// backend keeps for it (adStackSizing; nothing is sized again), with,
  /// on the line of each stack the last launch placed, where it lived:
  ///   @k: adstack %s (f32) at k.qd:7:5: tier 1 constant [structural] = 5 (exact); last
  ///   launch: capacity 5, heap (24 bytes per thread)
  /// (one line; `local tape of 8 entries` for a GPU thread's local array).
  /// Read it while no launch runs.
  absl::StatusOr<std::string> sizingReport(const Kernel &kernel);
  /// What the device runs (BackendCapabilities: everything by default).
  virtual BackendCapabilities capabilities() const { return {}; }
  /// The adstack heap of the last launch; nullopt for a backend without
  /// one (the interpreter keeps each stack apart).
  virtual std::optional<AdStackHeapUsage> lastAdStackHeapUsage() const { return std::nullopt; }
  /// Waits for every asynchronous launch (LaunchOptions::async) and returns
  /// the first error one of them reported (the message it would have had,
  /// marked as deferred), or OK. A backend whose launches are all
  /// synchronous returns OK.
  virtual absl::Status synchronize() { return absl::OkStatus(); }
};

/// A module instantiated in memory: zero-initialised storage for every field
/// and each declared grad/dual companion. The module must outlive it.
class Program {
public:
  static absl::StatusOr<std::unique_ptr<Program>> create(const Module &module);

  const Module &module() const { return module_; }
  /// Storage of a field component, or null if the field or companion does
  /// not exist.
  Buffer *field(std::string_view name, Component c = Component::Primal);
  Buffer *field(const Field &f, Component c = Component::Primal);

  /// Validates the arguments, sizes the kernel's adstacks for this launch
  /// and runs kernel `name` on `backend`.
  absl::Status launch(std::string_view name, std::span<const LaunchArg> args, Backend &backend,
                      const LaunchOptions &options = {});
  /// Same, with the arguments by name (orderLaunchArgs).
  absl::Status launchByName(std::string_view name, std::span<const NamedLaunchArg> args,
                            Backend &backend, const LaunchOptions &options = {});

  /// The capacity of every capacity-0 adstack of `kernel`, sized by
  /// `sizing`, for a launch with `args` against the current field contents
  /// (what `launch` uses, with the backend's sizing).
  absl::StatusOr<std::unordered_map<const AdStackAllocaStmt *, int64_t>>
  adStackCapacities(const Kernel &kernel, const KernelSizing &sizing,
                    std::span<const LaunchArg> args, int64_t defaultCapacity = 0);
  /// The capacities the last sized launch used (read it while no launch
  /// runs).
  const std::unordered_map<const AdStackAllocaStmt *, int64_t> &lastAdStackCapacities() const {
    return lastCapacities_;
  }

  /// How the last sized launch measured its stacks measured at launch.
  struct MeasuredLaunch {
    enum class Path : uint8_t {
      None,       // no stack measured at launch
      Counted,    // the counting kernel ran first
      Optimistic, // the optimistic launch (plus a rerun where some overflowed)
    };
    Path path = Path::None;
    /// Optimistic: the iterations that overflowed and ran again.
    int64_t rerunIterations = 0;
    /// Counted: how often the counting kernel ran (more than once where a
    /// stack whose pushes depend on its own values needed a larger bound;
    /// docs/sizing.md).
    int countingRuns = 0;
  };
  /// Read it while no launch runs.
  const MeasuredLaunch &lastMeasuredLaunch() const { return lastMeasured_; }
  /// The checkpoint interval k the last sized launch of a kernel with
  /// checkpointed loops ran with: LaunchOptions::checkpointInterval when it
  /// was given, else the one chosen from the budget; 0 when the loops ran
  /// fully taped without a given k (no budget, or their tapes fit it), or
  /// for a kernel without checkpointed loops. Read it while no launch runs.
  int64_t lastCheckpointInterval() const { return lastCheckpointInterval_; }

private:
  /// What the optimistic launches of one kernel keep between launches.
  struct OptimisticState {
    std::mutex mutex;
    /// The capacities of the measured stacks (in `need` order) for the next
    /// launch: the need the last launch measured. Empty before the first.
    std::vector<int64_t> capacity;
    /// The try kernel's `failed` flags, all zero between launches unless
    /// `dirty` (a launch failed before its rerun cleared them).
    std::optional<Buffer> failed;
    bool dirty = false;
    /// The try kernel's `need`, zeroed before each launch.
    std::optional<Buffer> need;
    /// On a backend that compacts: the try kernel's `rows`, [2 x the
    /// measured stacks, the iterations] (OptimisticLaunch::tryKernel), and
    /// whether its first half holds the needs the last launch measured.
    std::shared_ptr<Buffer> rows;
    bool rowsMeasured = false;
    /// The per-iteration needs the kernel's first (counted) launch
    /// measured, for the second's layout.
    std::shared_ptr<const MeasuredAdStackNeeds> counted;
    /// `rows` of a launch that leaves them alone (1 x 1).
    std::optional<Buffer> noRows;
  };

  /// What the counting launches of one kernel keep between launches.
  struct CountState {
    /// Guards `need` (a launch that finds it held makes its own).
    std::mutex mutex;
    /// The counting kernel's `need`, zeroed before each run.
    std::optional<Buffer> need;
    /// Its per-iteration `need` (MeasuredAdStackNeeds::need), kept for the
    /// next launch, which zeroes and reuses it where nothing else holds it
    /// (no device allocation per launch; no zeroing either where the last
    /// launch's backend zeroed it on the device: perIterationZeroed).
    std::shared_ptr<Buffer> perIteration;
    bool perIterationZeroed = false;
    /// The bounds of its bounded stacks for the next launch (in `need`
    /// order; other slots unused; empty before the first). Guarded by the
    /// program's mutex_.
    std::vector<int64_t> bounds;
  };
  CountState &countState(const Kernel &k);
  std::mutex &intervalTurn(const Kernel &k);
  /// The field buffers `k` accesses, each with its field and component
  /// (walked once per kernel).
  struct AccessedField {
    const Buffer *buffer;
    const Field *field;
    Component component;
  };
  const std::vector<AccessedField> &accessedFields(const Kernel &k);
  /// Refuses an ndarray argument whose storage is (part of) a field's that
  /// `k` accesses: the analyses take fields and ndarrays to be distinct.
  absl::Status checkFieldStorage(const Kernel &k, std::span<const LaunchArg> args);
  /// `slot` as a zeroed buffer of `n` elements of `type`: kept where it has
  /// that size (on a GPU a new buffer is a device allocation per launch;
  /// zeroing it is one small upload), else made anew.
  static absl::Status zeroedBuffer(std::optional<Buffer> &slot, ScalarType type, int64_t n);

  explicit Program(const Module &m) : module_(m) {}
  /// launch() after validation: sizes the stacks (running the counting
  /// kernel of measured stacks first) and runs `k`; `record` keeps the
  /// capacities in lastAdStackCapacities() (not for a counting kernel).
  absl::Status launchSized(const Kernel &k, std::span<const LaunchArg> args, Backend &backend,
                           const LaunchOptions &options, bool record);
  /// Runs the counting kernel of `sizing` (`runs` times: again while a
  /// bounded stack outgrows its bound) and returns its `need` values.
  /// With `perIteration`, `need` has its spread and is kept there.
  absl::StatusOr<std::vector<int64_t>> countAdStacks(const Kernel &kernel,
                                                     const KernelSizing &sizing,
                                                     std::span<const LaunchArg> args,
                                                     Backend &backend, const LaunchOptions &options,
                                                     int &runs, MeasuredAdStackNeeds *perIteration);
  /// Whether the refined stacks of `sz` at their bounds (`capacities`)
  /// hold at most LaunchOptions::refineAdStacksAboveBytes over the
  /// launch's iterations (the optimistic launch's count of them).
  bool boundsAreSmall(const KernelSizing &sz,
                      const std::unordered_map<const AdStackAllocaStmt *, int64_t> &capacities,
                      std::span<const LaunchArg> args, const LaunchOptions &options);
  /// One run of the counting kernel, with `bounds` for its bounded stacks
  /// (KernelSizing::countBoundArgs; empty when it has none).
  absl::StatusOr<std::vector<int64_t>>
  countAdStacksOnce(const Kernel &kernel, const KernelSizing &sizing,
                    std::span<const LaunchArg> args, Backend &backend, const LaunchOptions &options,
                    std::span<const int64_t> bounds, MeasuredAdStackNeeds *perIteration);
  /// For a compacted heap: the spread and slots of per-iteration needs
  /// when every measured stack of `sizing` is in one 1-D parallel task
  /// whose iterations are known before the launch (no need buffer yet);
  /// null otherwise.
  static std::shared_ptr<MeasuredAdStackNeeds> perIterationNeeds(const KernelSizing &sizing,
                                                                 std::span<const LaunchArg> args);
  /// The bounds of a counting kernel's bounded stacks.
  static constexpr int64_t kMinCountBound = 32;
  static constexpr int64_t kMaxCountBound = int64_t(1) << 30;
  /// The optimistic launch of `k`'s measured stacks, with capacities in
  /// `sized` for every other stack (OptimisticLaunch.cpp).
  absl::Status launchOptimistic(const Kernel &k, const KernelSizing &sizing,
                                std::span<const LaunchArg> args, Backend &backend,
                                const LaunchOptions &sized, OptimisticState &state);
  OptimisticState &optimisticState(const Kernel &k);
  void recordLaunch(const LaunchOptions &sized, MeasuredLaunch measured);
  /// Sets the field of `k`'s checkpoint interval (qd/ir/Checkpointing.h), if
  /// it has one, for this launch: `options.checkpointInterval`, or chosen
  /// from what `backend` gives one iteration under the budget or its
  /// default (Backend::adStackIterationBudget; Checkpointing.cpp). Returns
  /// the interval (0: fully taped).
  absl::StatusOr<int64_t> setCheckpointInterval(const Kernel &k, const KernelSizing &sizing,
                                                std::span<const LaunchArg> args,
                                                const LaunchOptions &options, Backend &backend);
  /// adStackCapacities against `inputs`.
  absl::StatusOr<std::unordered_map<const AdStackAllocaStmt *, int64_t>>
  evaluateCapacities(const Kernel &kernel, const KernelSizing &sizing,
                     const runtime_detail::LaunchInputs &inputs, int64_t defaultCapacity);
  const Module &module_;
  /// Guards lastCapacities_: launches from several threads may size
  /// stacks at once (field storage is never reallocated after create()).
  mutable std::mutex mutex_;
  std::unordered_map<const AdStackAllocaStmt *, int64_t> lastCapacities_;
  MeasuredLaunch lastMeasured_;
  int64_t lastCheckpointInterval_ = 0;
  std::map<const Kernel *, std::unique_ptr<OptimisticState>> optimistic_;
  std::map<const Kernel *, std::unique_ptr<CountState>> counting_;
  /// Per kernel with checkpointed loops: held from setting the interval's
  /// field to the end of the launch (launches of one gradient take turns).
  std::map<const Kernel *, std::unique_ptr<std::mutex>> intervalTurns_;
  std::map<const Kernel *, std::vector<AccessedField>> accessedFields_;
  std::map<std::pair<const Field *, Component>, Buffer> fields_;
};

} // namespace qd
