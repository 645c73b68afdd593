//===- CpuBackend.cpp - LLVM JIT backend for the CPU ----------------------===//
#include "qd/runtime/CpuBackend.h"

#include "PerfMap.h"
#include "StackThreads.h"
#include "ThreadPool.h"

#include "qd/runtime/Buffer.h"
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/LaunchWatchdog.h"

#include "qd/codegen/KernelSizingCache.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/Optimize.h"
#include "qd/ir/Printer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

namespace qd {

using cpu::TaskFn;
using KernelFn = void (*)(QdLaunchContext *);

namespace {

/// Seconds between laps.
class Stopwatch {
public:
  double lap() {
    auto now = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

/// Marks a module for the light tier's code generation (TieredCompiler).
constexpr const char *kLightTierFlag = "qd.light-tier";

} // namespace

/// `lanes`: the width of the task's vector code (1 without), which chunks
/// are multiples of; `reach`: how close iterations that must not run at the
/// same time may be (0: any may; ThreadPool::run).
extern "C" void qd_rt_parallel_for(QdLaunchContext *ctx, TaskFn fn, const int64_t *captures,
                                   int64_t begin, int64_t end, int64_t lanes, int64_t reach) {
  static_cast<cpu::ThreadPool *>(ctx->runtime)->run(ctx, fn, captures, begin, end, lanes, reach);
}

struct CpuBackend::Impl {
  struct Compiled {
    KernelFn fn = nullptr;
    KernelLayout layout;
    CompileTimes times;
    OptimizationTier tier = OptimizationTier::Full;
    TaskMergeStats merge;
    uint64_t frameBytes = 0; // the largest frame of its functions
  };

  std::unique_ptr<llvm::orc::LLJIT> jit;
  /// The largest stack frame of the last object the JIT compiled
  /// (TieredCompiler writes it, compile() reads it after the lookup that
  /// compiled the kernel).
  std::shared_ptr<std::atomic<uint64_t>> lastFrame = std::make_shared<std::atomic<uint64_t>>(0);
  std::unique_ptr<cpu::ThreadPool> pool;
  size_t maxStackBytes = 0;
  unsigned vectorWidth = 1;
  VectorMathIsa vectorMath = VectorMathIsa::None;
  /// CodegenOptions::fitLanesToRegisters (the automatic width).
  bool fitLanes = false;
  bool mergeTasks = true;
  uint64_t availableMemory = 0;
  TierLimits tierLimits;
  /// The default adstack memory budget (CpuBackendOptions::
  /// availableMemoryBytes).
  int64_t defaultBudget() const {
    return defaultAdStackBudget(availableMemory ? availableMemory : availableHostMemoryBytes());
  }
  /// Keyed by Kernel::uniqueId(), never by address: a destroyed kernel's
  /// address may be reused by a new one.
  /// Guards `cache`, `counter` and the JIT: a kernel compiles
  /// once, whichever thread asks first (the others wait for it). Entries
  /// are never erased, so a pointer to one stays valid without the lock.
  mutable std::mutex compileMutex;
  /// Held for a whole launch: a launch uses every worker of the pool and
  /// the one heap, so launches from several threads run one at a time.
  mutable std::mutex launchMutex;
  /// Keyed by (kernel, bounds checks, stop checks, distinct ndarrays:
  /// CodegenOptions::distinctNdarrays, for launches whose buffers do not
  /// overlap).
  std::map<std::tuple<uint64_t, bool, bool, bool>, Compiled> cache;
  /// Adstack sizing, computed with the kernel's first compilation (or
  /// when Program::launch asks first).
  KernelSizingCache sizings;
  unsigned counter = 0;
  /// Aligned to abi::kHostVectorAlignment.
  struct AlignedDelete {
    void operator()(char *p) const {
      ::operator delete[](p, std::align_val_t(abi::kHostVectorAlignment));
    }
  };
  std::unique_ptr<char[], AlignedDelete> heap;
  int64_t heapBytes = 0;
  AdStackHeapUsage lastUsage;
  std::vector<AdStackPlacement> lastPlacement;
  std::vector<int32_t> lastTaskLanes;

  /// Grows the heap to at least `bytes`: amortised doubling, but never past
  /// `budget` or what the host has.
  absl::Status growHeap(const Kernel &kernel, int64_t bytes, int64_t budget) {
    if (bytes <= heapBytes)
      return absl::OkStatus();
    int64_t grown = heapBytes > INT64_MAX / 2 ? bytes : std::max(bytes, 2 * heapBytes);
    grown = std::min(grown, std::max(bytes, budget));
    if (std::string why = hostAllocationProblem(static_cast<uint64_t>(bytes)); !why.empty())
      return absl::ResourceExhaustedError(
          fmt::format("kernel @{}: cannot allocate {} bytes of adstack heap: {}; give the stacks "
                      "smaller capacities or a smaller LaunchOptions::adStackMemoryBudget",
                      kernel.name(), bytes, why));
    if (!hostAllocationProblem(static_cast<uint64_t>(grown)).empty())
      grown = bytes; // doubling would pass the host's memory: exactly the need
    heap.reset(static_cast<char *>(::operator new[](
        size_t(grown), std::align_val_t(abi::kHostVectorAlignment), std::nothrow)));
    if (!heap) {
      heapBytes = 0;
      return absl::ResourceExhaustedError(fmt::format(
          "kernel @{}: cannot allocate {} bytes of adstack heap", kernel.name(), grown));
    }
    heapBytes = grown;
    return absl::OkStatus();
  }

  /// The first of `kernel`'s compilations in the cache, or null; with the
  /// compile mutex held.
  const Compiled *firstCompiled(const Kernel &kernel) const {
    for (auto &[key, c] : cache)
      if (std::get<0>(key) == kernel.uniqueId())
        return &c;
    return nullptr;
  }

  absl::StatusOr<Compiled *> compile(const Kernel &kernel, bool boundsChecked,
                                     bool stopChecks = false, bool distinct = true) {
    std::lock_guard<std::mutex> lock(compileMutex);
    auto key = std::tuple(kernel.uniqueId(), boundsChecked, stopChecks, distinct);
    if (auto it = cache.find(key); it != cache.end())
      return &it->second;
    Compiled c;
    Stopwatch watch;
    sizings.of(kernel);
    c.times.sizing = watch.lap();
    auto context = std::make_unique<llvm::LLVMContext>();
    // Nobody reads the JIT's IR (llvmIR emits it again, with names):
    // naming every value cost 5% of a large kernel's emission.
    context->setDiscardValueNames(true);
    auto module = emitOptimized(kernel, {boundsChecked, stopChecks, distinct}, *context, c.layout,
                                c.tier, watch, c.times, &c.merge);
    if (!module.ok())
      return module.status();
    llvm::Module &m = **module;
    // Unique names per compiled kernel in the shared JIT.
    std::string prefix = fmt::format("qdk{}_", counter++);
    for (llvm::Function &f : m)
      if (!f.isDeclaration())
        f.setName(prefix + f.getName().str());
    if (c.tier == OptimizationTier::Light)
      m.addModuleFlag(llvm::Module::Warning, kLightTierFlag, 1);
    llvm::orc::ThreadSafeModule tsm(std::move(*module), std::move(context));
    if (llvm::Error e = jit->addIRModule(std::move(tsm)))
      return absl::InternalError("cpu backend: cannot add the module to the JIT: " +
                                 llvm::toString(std::move(e)));
    lastFrame->store(0);
    auto sym = jit->lookup(prefix + "qd_kernel");
    if (!sym)
      return absl::InternalError("cpu backend: " + llvm::toString(sym.takeError()));
    c.fn = sym->toPtr<KernelFn>();
    c.frameBytes = lastFrame->load();
    c.times.codegen = watch.lap();
    return &cache.emplace(key, std::move(c)).first->second;
  }

  /// The kernel's module, optimised for the host, and its tier; the laps
  /// of `watch` time emission and optimisation into `times`.
  /// What a compilation of a kernel depends on besides the backend's options.
  struct Variant {
    bool boundsChecked = false, stopChecks = false, distinctNdarrays = true;
  };

  absl::StatusOr<std::unique_ptr<llvm::Module>>
  emitOptimized(const Kernel &kernel, Variant variant, llvm::LLVMContext &context,
                KernelLayout &layout, OptimizationTier &tier, Stopwatch &watch, CompileTimes &times,
                TaskMergeStats *merge = nullptr) {
    CodegenOptions opts;
    opts.boundsChecked = variant.boundsChecked;
    opts.vectorWidth = vectorWidth;
    opts.vectorMath = vectorMath;
    opts.fitLanesToRegisters = fitLanes;
    opts.stopChecks = variant.stopChecks;
    opts.distinctNdarrays = variant.distinctNdarrays;
    TaskMerger merger;
    if (mergeTasks)
      opts.taskMerger = &merger;
    auto module = emitKernel(kernel, context, opts, layout);
    if (!module.ok())
      return module.status();
    llvm::Module &m = **module;
    m.setDataLayout(jit->getDataLayout());
    m.setTargetTriple(jit->getTargetTriple().str());
    TaskMergeStats merged = merger.finish();
    if (merge)
      *merge = merged;
    tier = chooseTier(m, tierLimits);
    times.emit = watch.lap();
    auto tm = hostTargetMachine(); // without one, target-independent cost models
    optimizeModule(m, tm.ok() ? tm->get() : nullptr, tier);
    times.optimize = watch.lap();
    return module;
  }
};

/// The JIT's compiler: machine code of the tier a module was marked with
/// (Impl::compile). Called with the compile mutex held.
/// Also records the largest stack frame of each object in `lastFrame`
/// (UINT64_MAX when the object's .stack_sizes cannot be read).
class TieredCompiler final : public llvm::orc::IRCompileLayer::IRCompiler {
public:
  TieredCompiler(std::unique_ptr<llvm::TargetMachine> full,
                 std::unique_ptr<llvm::TargetMachine> light,
                 std::shared_ptr<std::atomic<uint64_t>> lastFrame)
      : IRCompiler(llvm::orc::irManglingOptionsFromTargetOptions(full->Options)),
        full_(std::move(full)), light_(std::move(light)), lastFrame_(std::move(lastFrame)) {
    full_->Options.EmitStackSizeSection = true;
    light_->Options.EmitStackSizeSection = true;
  }

  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module &m) override {
    bool light = m.getModuleFlag(kLightTierFlag) != nullptr;
    auto object = llvm::orc::SimpleCompiler(light ? *light_ : *full_)(m);
    if (object)
      lastFrame_->store(cpu::largestStackFrame((*object)->getMemBufferRef()).value_or(UINT64_MAX));
    return object;
  }

private:
  std::unique_ptr<llvm::TargetMachine> full_, light_;
  std::shared_ptr<std::atomic<uint64_t>> lastFrame_;
};

namespace {

/// The widest extension whose libmvec variants the host can call, or None
/// when libmvec does not load (it then stays loaded, and the JIT's
/// process-symbol generator finds its functions).
VectorMathIsa hostVectorMath() {
  static const VectorMathIsa isa = [] {
    llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
    auto has = [&](const char *f) {
      auto it = features.find(f);
      return it != features.end() && it->second;
    };
    std::string error;
    if (llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1", &error))
      return VectorMathIsa::None;
    return has("avx512f")  ? VectorMathIsa::Avx512
           : has("avx2")   ? VectorMathIsa::Avx2
           : has("sse4.1") ? VectorMathIsa::Sse4
                           : VectorMathIsa::None;
  }();
  return isa;
}

/// CpuBackendOptions::vectorIsa, checked against the host.
absl::StatusOr<VectorMathIsa> chooseVectorMath(const CpuBackendOptions &options) {
  VectorMathIsa host = hostVectorMath();
  if (!options.vectorMath || options.vectorIsa == "none")
    return VectorMathIsa::None;
  if (options.vectorIsa == "auto")
    return host;
  for (VectorMathIsa isa : {VectorMathIsa::Sse4, VectorMathIsa::Avx2, VectorMathIsa::Avx512})
    if (options.vectorIsa == toString(isa)) {
      if (isa > host)
        return absl::InvalidArgumentError(fmt::format(
            "cpu backend: vector math ISA '{}' is not available on this host (it has '{}'); "
            "choose 'auto' or one it has",
            options.vectorIsa, toString(host)));
      return isa;
    }
  return absl::InvalidArgumentError(
      fmt::format("cpu backend: unknown vector math ISA '{}'; choose auto, none, sse4, avx2 or "
                  "avx512",
                  options.vectorIsa));
}

} // namespace

CpuBackend::CpuBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuBackend::~CpuBackend() = default;

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::create(const CpuBackendOptions &options) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto impl = std::make_unique<Impl>();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb)
    return absl::InternalError("cpu backend: cannot detect the host: " +
                               llvm::toString(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(*jtmb)
                 .setCompileFunctionCreator(
                     [lastFrame = impl->lastFrame](llvm::orc::JITTargetMachineBuilder full)
                         -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                       llvm::orc::JITTargetMachineBuilder light = full;
                       light.setCodeGenOptLevel(llvm::CodeGenOptLevel::None);
                       auto fullTm = full.createTargetMachine();
                       if (!fullTm)
                         return fullTm.takeError();
                       auto lightTm = light.createTargetMachine();
                       if (!lightTm)
                         return lightTm.takeError();
                       return std::make_unique<TieredCompiler>(std::move(*fullTm),
                                                               std::move(*lightTm), lastFrame);
                     })
                 .create();
  if (!jit)
    return absl::InternalError("cpu backend: cannot create the JIT: " +
                               llvm::toString(jit.takeError()));
  impl->jit = std::move(*jit);
  if (options.perfMap)
    cpu::writePerfMap(*impl->jit);
  llvm::orc::JITDylib &main = impl->jit->getMainJITDylib();
  // libm and the rest of the process (sinf, atan2...).
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      impl->jit->getDataLayout().getGlobalPrefix());
  if (!gen)
    return absl::InternalError("cpu backend: " + llvm::toString(gen.takeError()));
  main.addGenerator(std::move(*gen));
  llvm::orc::SymbolMap runtime;
  runtime[impl->jit->mangleAndIntern("qd_rt_parallel_for")] = {
      llvm::orc::ExecutorAddr::fromPtr(&qd_rt_parallel_for), llvm::JITSymbolFlags::Exported};
  if (llvm::Error e = main.define(llvm::orc::absoluteSymbols(std::move(runtime))))
    return absl::InternalError("cpu backend: " + llvm::toString(std::move(e)));
  if (options.vectorWidth > 64 || (options.vectorWidth & (options.vectorWidth - 1)))
    return absl::InvalidArgumentError(
        fmt::format("cpu backend: vector width {} is not a power of two in [1, 64]; use 1 for "
                    "scalar code or 0 (the default: chosen from the host)",
                    options.vectorWidth));
  absl::StatusOr<VectorMathIsa> isa = chooseVectorMath(options);
  if (!isa.ok())
    return isa.status();
  // Auto: 4 registers' lanes, 64 with AVX-512 and 32 with AVX2, so that a
  // task whose body is one serial chain of math calls per lane keeps 4
  // independent libmvec calls in flight; 8 otherwise. A task whose loops
  // carry many values gets fewer lanes, down to one register's
  // (CodegenOptions::fitLanesToRegisters): measured on the three gradient
  // benchmarks (docs/performance.md, "Vector width").
  unsigned width = options.vectorWidth;
  bool wide = *isa == VectorMathIsa::Avx512 || *isa == VectorMathIsa::Avx2;
  if (width == 0)
    width = *isa == VectorMathIsa::Avx512 ? 64 : wide ? 32 : 8;
  // Chunks shorter than a group of lanes would run every group partial:
  // compile scalar code, whose stacks need no room for lanes.
  impl->vectorWidth = options.chunk > 0 && options.chunk < width ? 1 : width;
  impl->vectorMath = impl->vectorWidth > 1 ? *isa : VectorMathIsa::None;
  impl->fitLanes = options.vectorWidth == 0 && wide && impl->vectorWidth > 1;
  impl->tierLimits = {options.fullOptimizationLimit, options.fullOptimizationDepth};
  impl->mergeTasks = options.mergeTasks;
  impl->availableMemory = options.availableMemoryBytes;
  unsigned threads = options.threads ? options.threads : std::thread::hardware_concurrency();
  impl->pool = std::make_unique<cpu::ThreadPool>(std::max(1u, threads), options.chunk,
                                                 options.workerStackBytes);
  if (!impl->pool->ok())
    return absl::ResourceExhaustedError(
        fmt::format("cpu backend: cannot start {} worker threads with {} bytes of stack each; "
                    "ask for fewer (CpuBackendOptions::threads) or less stack (workerStackBytes)",
                    threads, options.workerStackBytes));
  impl->maxStackBytes = options.maxStackBytes;
  return std::unique_ptr<CpuBackend>(new CpuBackend(std::move(impl)));
}

unsigned CpuBackend::numThreads() const {
  return impl_->pool->size();
}
unsigned CpuBackend::vectorWidth() const {
  return impl_->vectorWidth;
}
bool CpuBackend::usesVectorMath() const {
  return impl_->vectorMath != VectorMathIsa::None;
}
std::optional<uint64_t> CpuBackend::stackFrameBytes(const Kernel &kernel) const {
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  std::optional<uint64_t> most;
  for (auto &[key, c] : impl_->cache)
    if (std::get<0>(key) == kernel.uniqueId())
      most = std::max(most.value_or(0), c.frameBytes);
  return most;
}
size_t CpuBackend::workerStackBytes() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->pool->stackBytes();
}
std::string_view CpuBackend::vectorMathIsa() const {
  return toString(impl_->vectorMath);
}
std::vector<AdStackPlacement> CpuBackend::lastAdStackPlacement() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->lastPlacement;
}

int64_t CpuBackend::lastAdStackHeapBytes() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->lastUsage.bytes;
}

std::optional<AdStackHeapUsage> CpuBackend::lastAdStackHeapUsage() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  AdStackHeapUsage u = impl_->lastUsage;
  u.threadKind = "workers";
  return u;
}
int64_t CpuBackend::adStackHeapCapacityBytes() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->heapBytes;
}

std::optional<OptimizationTier> CpuBackend::compileTier(const Kernel &kernel) const {
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  const Impl::Compiled *c = impl_->firstCompiled(kernel);
  return c ? std::optional(c->tier) : std::nullopt;
}

std::optional<TaskMergeStats> CpuBackend::taskFunctions(const Kernel &kernel) const {
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  const Impl::Compiled *c = impl_->firstCompiled(kernel);
  return c ? std::optional(c->merge) : std::nullopt;
}

CompileTimes CpuBackend::compileTimes(const Kernel &kernel) const {
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  CompileTimes sum;
  for (auto &[key, c] : impl_->cache)
    if (std::get<0>(key) == kernel.uniqueId())
      sum += c.times;
  return sum;
}

double CpuBackend::compileSeconds(const Kernel &kernel) const {
  return compileTimes(kernel).total();
}

absl::StatusOr<const KernelSizing *> CpuBackend::adStackSizing(const Kernel &kernel) {
  return &impl_->sizings.of(kernel);
}

absl::StatusOr<const KernelLayout *> CpuBackend::layout(const Kernel &kernel, bool boundsChecked) {
  auto c = impl_->compile(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return &(*c)->layout;
}

int64_t CpuBackend::adStackIterationBudget(const Kernel &kernel, int64_t budget) {
  if (budget <= 0)
    budget = impl_->defaultBudget();
  absl::StatusOr<const KernelLayout *> l = layout(kernel);
  if (!l.ok())
    return budget;
  int64_t lanes = 1;
  for (const KernelLayout::Stack &st : (*l)->stacks)
    if (st.parallelTask >= 0)
      lanes = std::max<int64_t>(lanes, (*l)->tasks.at(st.parallelTask).lanes);
  // A stack of lanes starts on a vector boundary (LaunchPlan::
  // layoutAdStacks): up to that much padding each.
  int64_t padding =
      lanes > 1 ? int64_t(abi::kHostVectorAlignment) * int64_t((*l)->stacks.size()) : 0;
  return std::max<int64_t>(budget - padding, 0) / lanes;
}

int64_t CpuBackend::adStackParallelism(const Kernel &kernel, int64_t iterations) {
  int64_t workers = numThreads();
  if (iterations <= 0)
    return workers;
  // A worker holds a group of lanes at a time.
  int64_t lanes = 1;
  if (absl::StatusOr<const KernelLayout *> l = layout(kernel); l.ok())
    for (const KernelLayout::Task &t : (*l)->tasks)
      lanes = std::max<int64_t>(lanes, t.lanes);
  return std::max<int64_t>(1, std::min(workers, (iterations + lanes - 1) / lanes));
}

std::vector<int32_t> CpuBackend::lastTaskLanes() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->lastTaskLanes;
}

absl::StatusOr<std::string> CpuBackend::llvmIR(const Kernel &kernel, bool boundsChecked) {
  // Emitted again: compiled kernels keep no IR (printing megabytes of it
  // for every large kernel cost more than its O3 pipeline).
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  llvm::LLVMContext context;
  KernelLayout layout;
  OptimizationTier tier;
  Stopwatch watch;
  CompileTimes times;
  auto m = impl_->emitOptimized(kernel, {boundsChecked, false, true}, context, layout, tier, watch,
                                times);
  if (!m.ok())
    return m.status();
  std::string ir;
  llvm::raw_string_ostream os(ir);
  (*m)->print(os, nullptr);
  return ir;
}

absl::Status CpuBackend::launch(Program &program, const Kernel &kernel,
                                std::span<const LaunchArg> args, const LaunchOptions &options) {
  if (absl::Status s = validateLaunchArgs(kernel, args); !s.ok())
    return s;
  if (absl::Status s = refuseGlobalAccessChecks(kernel, options, "CPU"); !s.ok())
    return s;
  if (absl::Status s = refuseLaunchStream(kernel, options, "CPU"); !s.ok())
    return s;
  // A launch that may be stopped runs code that checks (CodegenOptions::
  // stopChecks); one whose ndarray buffers overlap, code that does not take
  // them to be distinct (CodegenOptions::distinctNdarrays).
  auto compiled = impl_->compile(kernel, options.boundsChecked, options.stoppable(),
                                 !ndarrayBuffersOverlap(args));
  if (!compiled.ok())
    return compiled.status();
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  const KernelLayout &layout = (*compiled)->layout;
  // Room for the kernel's frame, plus what the runtime and libmvec's
  // functions use below it.
  constexpr uint64_t kStackMargin = 256 << 10;
  uint64_t frame = (*compiled)->frameBytes;
  if (frame > impl_->maxStackBytes)
    return absl::ResourceExhaustedError(fmt::format(
        "kernel @{}: its compiled code needs a stack frame of {}, more than the {} the CPU backend "
        "gives a kernel (CpuBackendOptions::maxStackBytes); vector code keeps what a task tapes "
        "in its frame: compile it with fewer lanes (vectorWidth, now {}) or split the kernel",
        kernel.name(),
        frame == UINT64_MAX ? std::string("size it cannot read") : fmt::format("{} bytes", frame),
        fmt::format("{} bytes", impl_->maxStackBytes), impl_->vectorWidth));
  size_t stack = static_cast<size_t>(frame + kStackMargin);
  if (!impl_->pool->ensureStack(stack))
    return absl::ResourceExhaustedError(fmt::format(
        "kernel @{}: cannot start the worker threads with {} bytes of stack for its "
        "frame of {} bytes; compile it with fewer lanes (CpuBackendOptions::vectorWidth)",
        kernel.name(), stack, frame));
  absl::StatusOr<LaunchPlan> plan = LaunchPlan::bind(program, kernel, layout, args, options);
  if (!plan.ok())
    return plan.status();

  // Lanes of each vectorised task: its code runs every chunk in groups of
  // lanes (a chunk shorter than a group is one partial group), so its
  // stacks always get lane entries.
  std::vector<int32_t> taskLanes(layout.tasks.size() + 1, 1);
  for (size_t t = 0; t < layout.tasks.size(); ++t)
    taskLanes[t] = static_cast<int32_t>(layout.tasks[t].lanes);
  if (absl::Status s = plan->layoutAdStacks(taskLanes); !s.ok())
    return s;

  // The heap is one slice per worker; where the budget holds fewer
  // slices, fewer workers run the launch's tasks (more waves).
  int64_t budget = plan->adStackBudget(impl_->defaultBudget());
  int64_t workers = std::min<int64_t>(numThreads(), plan->threadsWithin(budget));
  if (workers < 1)
    return plan->overBudgetError(budget,
                                 options.adStackMemoryBudget > 0
                                     ? std::string("LaunchOptions::adStackMemoryBudget")
                                     : fmt::format("the default: {} of the host's available memory",
                                                   kDefaultAdStackBudgetFraction));
  impl_->pool->limitWorkers(unsigned(workers));
  absl::StatusOr<int64_t> heapNeed = plan->heapBytes(workers);
  if (!heapNeed.ok())
    return heapNeed.status();
  if (absl::Status s = impl_->growHeap(kernel, *heapNeed, budget); !s.ok())
    return s;
  impl_->lastUsage = plan->heapUsage(workers, budget, taskLanes);
  impl_->lastPlacement = plan->adStackPlacement(workers);
  impl_->lastTaskLanes.assign(taskLanes.begin(), taskLanes.end() - 1);

  if (absl::Status s = syncLaunchBuffersToHost(program, kernel, args); !s.ok())
    return s;
  std::vector<void *> globals = plan->hostSlotPointers();
  std::vector<int64_t> needed = plan->zeroNeeded();
  QdErrorRecord record{};
  // The code reads `stop` at loop back edges; the watchdog (if the options
  // ask for one) sets it.
  std::atomic<int32_t> stop{0};
  static_assert(sizeof(stop) == sizeof(int32_t) && std::atomic<int32_t>::is_always_lock_free);
  QdLaunchContext ctx =
      plan->hostContext(globals, impl_->heap.get(), needed, record, impl_->pool.get(),
                        taskLanes.data(), reinterpret_cast<const int32_t *>(&stop));
  {
    LaunchWatchdog watchdog(options, [&](StopReason why) {
      stop.store(static_cast<int32_t>(why), std::memory_order_relaxed);
    });
    // The calling thread runs the kernel and a worker's share of its tasks
    // unless its stack cannot hold the frame (StackThreads.h).
    std::optional<size_t> left = cpu::stackLeft();
    if (left && *left >= stack)
      (*compiled)->fn(&ctx);
    else if (cpu::StackThread runner(stack, [&] { (*compiled)->fn(&ctx); }); !runner.ok())
      return absl::ResourceExhaustedError(
          fmt::format("kernel @{}: cannot start a thread with {} bytes of stack for its frame "
                      "of {} bytes; compile it with fewer lanes (CpuBackendOptions::vectorWidth)",
                      kernel.name(), stack, (*compiled)->frameBytes));
  }
  return plan->finish(record, needed);
}

} // namespace qd
