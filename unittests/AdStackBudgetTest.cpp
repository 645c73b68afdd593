//===- AdStackBudgetTest.cpp - The adstack memory budget of a launch ------===//
//
// LaunchOptions::adStackMemoryBudget: a launch whose heap for every thread
// does not fit runs fewer iterations at a time (waves: fewer CPU workers,
// GPU threads or Vulkan invocations) with the same results, and one where
// a single iteration does not fit fails with a clear ResourceExhausted.
// The workload is skewed like a Newton solve: most elements iterate 3
// times, a few 60 times, so the stacks' capacity is 60 for every thread.
//
//===----------------------------------------------------------------------===//
#include "OptimisticLaunchHarness.h"

#include "qd/runtime/LaunchPlan.h"

#include <functional>

namespace qd {
namespace {

using optimistictest::cpu;

/// Registered backend `name` with every stack in the heap (no local
/// tapes), or null (saying why) on a machine without its device.
std::unique_ptr<Backend> heapOnly(const char *name, const char *maxThreads = nullptr) {
  registerAllBackends();
  BackendOptions o;
  o.set("local-tape-bytes", "0");
  if (maxThreads)
    o.set("max-threads", maxThreads);
  auto b = createBackend(name, o);
  if (!b.ok()) {
    std::cout << "[" << name << "] " << b.status().message() << "\n";
    return nullptr;
  }
  return *std::move(b);
}

Backend *vulkan() {
  static std::unique_ptr<Backend> backend = heapOnly("vulkan");
  return backend.get();
}

/// Vulkan with a grid of 64 invocations: a task of more iterations runs
/// in waves with the interleaved layout.
Backend *smallGridVulkan() {
  static std::unique_ptr<Backend> backend = heapOnly("vulkan", "64");
  return backend.get();
}

Backend *cuda() {
  static std::unique_ptr<Backend> backend = heapOnly("cuda");
  return backend.get();
}

constexpr int kElements = 256;

// kWhile of OptimisticLaunchHarness.h over kElements elements.
std::string whileKernel() {
  return fmt::format(R"(
field @x : f32[{0}] grad
field @m : i32[{0}]
field @y : f32[{0}] grad

kernel @k() {{
  parallel for %i = 0 to {0} {{
    %v = alloca f32
    %c = alloca i32
    %x = load @x[%i] : f32
    store %v, %x
    %m = load @m[%i] : i32
    while {{
      %k = load %c : i32
      %done = cmp ge %k, %m : i32
      if %done {{
        break
      }}
      %a = load %v : f32
      %s = sin %a : f32
      %b = add %s, %x : f32
      store %v, %b
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }}
    %r = load %v : f32
    store @y[%i], %r
  }}
}}
)",
                     kElements);
}

/// Most elements need 3 iterations, every 37th needs 60.
int skewedNeed(int i) {
  return i % 37 == 5 ? 60 : 3;
}

class SkewedGradient {
public:
  SkewedGradient() : module_(optimistictest::parseWithGradient(whileKernel().c_str())) {
    program_ = *Program::create(*module_);
    for (int i = 0; i < kElements; ++i) {
      program_->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.1 * (i % 5) - 0.2));
      program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, skewedNeed(i)));
    }
  }
  /// Launches @k_grad with @y's adjoint 1 and returns @x's adjoint.
  absl::StatusOr<std::vector<double>> gradient(Backend &backend, const LaunchOptions &options) {
    for (int i = 0; i < kElements; ++i) {
      program_->field("y", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
      program_->field("x", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 0.0));
    }
    if (absl::Status s = program_->launch("k_grad", {}, backend, options); !s.ok())
      return s;
    Buffer &b = *program_->field("x", Component::Grad);
    if (absl::Status s = b.syncToHost(); !s.ok())
      return s;
    std::vector<double> out;
    for (int i = 0; i < kElements; ++i)
      out.push_back(b.get(i).f);
    return out;
  }

  /// Element i iterates m times.
  void setIterations(int i, int m) {
    program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, m));
  }
  Program &program() { return *program_; }

private:
  std::unique_ptr<Module> module_;
  std::unique_ptr<Program> program_;
};

/// The interleaved layout (every thread at the largest need), whose waves
/// the first tests check; `bytes` of budget (0: the default).
LaunchOptions withBudget(int64_t bytes) {
  LaunchOptions o;
  o.adStackMemoryBudget = bytes;
  o.compactAdStacks = false;
  return o;
}

/// The counting kernel at every launch (a compacted heap needs its
/// per-iteration needs), compacted or not, with `bytes` of budget, in
/// groups of `group` threads (0: chosen per launch).
LaunchOptions counted(bool compact, int64_t bytes = 0, int64_t group = 32) {
  LaunchOptions o;
  o.optimisticAdStacks = false;
  o.compactAdStacks = compact;
  o.adStackMemoryBudget = bytes;
  o.adStackGroupThreads = group;
  return o;
}

/// The default path (optimistic after a kernel's first launch) in groups
/// of 32 threads, with `bytes` of budget.
LaunchOptions groupsOf32(int64_t bytes = 0) {
  LaunchOptions o;
  o.adStackGroupThreads = 32;
  o.adStackMemoryBudget = bytes;
  return o;
}

/// The interpreter's gradient (the oracle).
std::vector<double> reference() {
  SkewedGradient g;
  Interpreter interp;
  absl::StatusOr<std::vector<double>> r = g.gradient(interp, {});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<double>();
}

/// The default budget, then a budget that holds the heap of `fraction`-th
/// of those threads: the same gradient bit for bit, more waves, fewer
/// threads, a heap within the budget; both match the interpreter.
void checkWaves(Backend &backend, int64_t fraction) {
  SkewedGradient g;
  absl::StatusOr<std::vector<double>> one = g.gradient(backend, withBudget(0));
  ASSERT_TRUE(one.ok()) << one.status().message();
  std::optional<AdStackHeapUsage> full = backend.lastAdStackHeapUsage();
  ASSERT_TRUE(full);
  EXPECT_GE(full->waves, 1); // 1 on a GPU; the CPU's workers go over many groups
  EXPECT_GT(full->bytes, 0);
  EXPECT_EQ(full->checkpointInterval, 0);
  EXPECT_GE(full->budgetBytes, full->bytes);
  ASSERT_EQ(full->bytes % full->threads, 0);
  int64_t perThread = full->bytes / full->threads;
  int64_t threads = std::max<int64_t>(full->threads / fraction, 1);
  int64_t budget = perThread * threads + perThread / 2; // not a whole number of threads

  absl::StatusOr<std::vector<double>> waves = g.gradient(backend, withBudget(budget));
  ASSERT_TRUE(waves.ok()) << waves.status().message();
  std::optional<AdStackHeapUsage> part = backend.lastAdStackHeapUsage();
  ASSERT_TRUE(part);
  EXPECT_EQ(part->budgetBytes, budget);
  EXPECT_LE(part->bytes, budget);
  EXPECT_LE(part->threads, threads);
  EXPECT_EQ(part->bytes, part->threads * perThread);
  EXPECT_EQ(part->needBytes, part->bytes); // every thread has iterations
  EXPECT_GT(part->waves, full->waves);
  EXPECT_EQ(*waves, *one);
  optimistictest::expectNear(*one, reference());
}

TEST(AdStackBudgetTest, CpuWorkersRunInWaves) {
  checkWaves(cpu(1), 2);
}

TEST(AdStackBudgetTest, CpuEightLanesRunInWaves) {
  checkWaves(cpu(8), 2);
}

TEST(AdStackBudgetTest, VulkanInvocationsRunInWaves) {
  REQUIRE(vulkan(), "vulkan");
  checkWaves(*vulkan(), 8);
}

TEST(AdStackBudgetTest, CudaThreadsRunInWaves) {
  REQUIRE(cuda(), "cuda");
  checkWaves(*cuda(), 8);
}

/// Fewer threads than one group (a budget for 3 threads): the threads of
/// the group past the third have no heap rows and run nothing.
void checkBelowOneGroup(Backend &backend) {
  SkewedGradient g;
  ASSERT_TRUE(g.gradient(backend, withBudget(0)).ok());
  std::optional<AdStackHeapUsage> full = backend.lastAdStackHeapUsage();
  int64_t perThread = full->bytes / full->threads;
  absl::StatusOr<std::vector<double>> r = g.gradient(backend, withBudget(3 * perThread));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(backend.lastAdStackHeapUsage()->threads, 3);
  EXPECT_EQ(backend.lastAdStackHeapUsage()->waves, (kElements + 2) / 3);
  optimistictest::expectNear(*r, reference());
}

TEST(AdStackBudgetTest, VulkanBudgetBelowOneWorkgroup) {
  REQUIRE(vulkan(), "vulkan");
  checkBelowOneGroup(*vulkan());
}

TEST(AdStackBudgetTest, CudaBudgetBelowOneBlock) {
  REQUIRE(cuda(), "cuda");
  checkBelowOneGroup(*cuda());
}

/// A budget below one iteration's stacks: ResourceExhausted naming the
/// kernel, a stack, the need and the budget, and the way out.
void checkTooSmall(Backend &backend) {
  SkewedGradient g;
  ASSERT_TRUE(g.gradient(backend, withBudget(0)).ok());
  std::optional<AdStackHeapUsage> full = backend.lastAdStackHeapUsage();
  int64_t perThread = full->bytes / full->threads;
  absl::StatusOr<std::vector<double>> r = g.gradient(backend, withBudget(perThread - 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  std::string m(r.status().message());
  EXPECT_NE(m.find("kernel @k_grad"), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("one iteration's adstacks need {} bytes of heap", perThread)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(fmt::format("more than the adstack memory budget of {} bytes "
                               "(LaunchOptions::adStackMemoryBudget)",
                               perThread - 1)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the largest, adstack %"), std::string::npos) << m;
  EXPECT_NE(m.find("capacity 60"), std::string::npos) << m;
  EXPECT_NE(m.find("qd-run --adstack-memory-budget"), std::string::npos) << m;
  // The backend stays usable.
  absl::StatusOr<std::vector<double>> again = g.gradient(backend, {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  optimistictest::expectNear(*again, reference());
}

TEST(AdStackBudgetTest, CpuOneIterationOverTheBudgetFails) {
  checkTooSmall(cpu(1));
}

TEST(AdStackBudgetTest, VulkanOneIterationOverTheBudgetFails) {
  REQUIRE(vulkan(), "vulkan");
  checkTooSmall(*vulkan());
}

TEST(AdStackBudgetTest, CudaOneIterationOverTheBudgetFails) {
  REQUIRE(cuda(), "cuda");
  checkTooSmall(*cuda());
}

/// The default budget is half of what the device can spare; a launch
/// reports it, and the heap of a small launch fits it.
TEST(AdStackBudgetTest, TheDefaultIsAFractionOfFreeMemory) {
  EXPECT_EQ(defaultAdStackBudget(0), INT64_MAX);
  EXPECT_EQ(defaultAdStackBudget(1000), 500);
  EXPECT_EQ(defaultAdStackBudget(1), 1);
  SkewedGradient g;
  ASSERT_TRUE(g.gradient(cpu(1), {}).ok());
  std::optional<AdStackHeapUsage> u = cpu(1).lastAdStackHeapUsage();
  ASSERT_TRUE(u);
  uint64_t host = availableHostMemoryBytes();
  ASSERT_GT(host, 0u);
  // Available memory moves between the launch and this read (other processes).
  EXPECT_GT(double(u->budgetBytes), 0.3 * double(host));
  EXPECT_LT(double(u->budgetBytes), 0.7 * double(host));
  EXPECT_EQ(u->threads, cpu(1).numThreads());
}

/// The heap reports the needs of the iterations in flight: a task with
/// fewer groups of lanes than workers leaves workers without iterations.
TEST(AdStackBudgetTest, NeedsCountTheThreadsThatHaveIterations) {
  CpuBackendOptions o;
  o.threads = 4;
  o.vectorWidth = 1;
  o.chunk = 1;
  std::unique_ptr<CpuBackend> four = *CpuBackend::create(o);
  std::unique_ptr<Module> m = parseVerified(R"(
field @y : f32[3]
kernel @k() {
  parallel for %i = 0 to 3 {
    %s = adstack.alloca f32, capacity 5
    %one = const 1.0 : f32
    adstack.push %s, %one
    %t = adstack.load_top %s : f32
    store @y[%i], %t
  }
}
)");
  ASSERT_TRUE(m);
  std::unique_ptr<Program> p = *Program::create(*m);
  ASSERT_TRUE(p->launch("k", {}, *four, {}).ok());
  std::optional<AdStackHeapUsage> u = four->lastAdStackHeapUsage();
  ASSERT_TRUE(u);
  EXPECT_EQ(u->threads, 4);
  int64_t perThread = u->bytes / 4;
  EXPECT_EQ(u->needBytes, 3 * perThread);
  EXPECT_EQ(u->waves, 1);
}

/// A compacted heap: the gradient bit for bit as with the interleaved
/// layout (and the interpreter's), a heap of groups at their own largest
/// need, and under a budget smaller than that heap, fewer threads with the
/// same gradient.
void checkCompacted(Backend &backend) {
  SkewedGradient g;
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  AdStackHeapUsage interleaved = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(interleaved.groups, 0);
  absl::StatusOr<std::vector<double>> packed = g.gradient(backend, counted(true));
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  AdStackHeapUsage compact = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(*packed, *flat);
  optimistictest::expectNear(*packed, reference());
  EXPECT_EQ(compact.threads, interleaved.threads);
  EXPECT_EQ(compact.groups, (compact.threads + 31) / 32);
  // 256 elements, every 37th at 60 iterations: 7 of the 8 groups hold
  // one, so the heap is about 7/8 of the interleaved one plus the table;
  // each thread's own need is far less.
  EXPECT_LT(compact.bytes, interleaved.bytes);
  EXPECT_LT(compact.needBytes * 5, interleaved.needBytes);
  EXPECT_LE(compact.needBytes, compact.bytes);

  // Under a third of that: fewer threads, and the layout of fewer bytes
  // (the interleaved one under the same budget where compacting does not
  // save memory).
  int64_t budget = compact.bytes / 3;
  absl::StatusOr<std::vector<double>> flatWaves = g.gradient(backend, counted(false, budget));
  ASSERT_TRUE(flatWaves.ok()) << flatWaves.status().message();
  AdStackHeapUsage flatPart = *backend.lastAdStackHeapUsage();
  absl::StatusOr<std::vector<double>> waves = g.gradient(backend, counted(true, budget));
  ASSERT_TRUE(waves.ok()) << waves.status().message();
  AdStackHeapUsage part = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(*waves, *flat);
  EXPECT_LE(part.bytes, budget);
  EXPECT_LT(part.threads, compact.threads);
  EXPECT_EQ(part.threads % 32, 0);
  EXPECT_GT(part.waves, 1);
  if (part.groups > 0) {
    EXPECT_LT(part.bytes, flatPart.bytes);
  } else {
    EXPECT_EQ(part.bytes, flatPart.bytes);
    EXPECT_EQ(part.threads, flatPart.threads);
  }
}

TEST(AdStackBudgetTest, VulkanCompactedHeap) {
  REQUIRE(vulkan(), "vulkan");
  checkCompacted(*vulkan());
}

TEST(AdStackBudgetTest, CudaCompactedHeap) {
  REQUIRE(cuda(), "cuda");
  checkCompacted(*cuda());
}

/// Needs that are the same for every element (60 iterations): a compacted
/// heap would hold every thread at the largest need plus its table, for
/// one thread per iteration, so the launch takes the interleaved layout
/// (no groups) at its bytes and waves, with the same gradient.
void checkUniformNeedsRunInterleaved(Backend &backend) {
  SkewedGradient g;
  for (int i = 0; i < kElements; ++i)
    g.setIterations(i, 60);
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  AdStackHeapUsage interleaved = *backend.lastAdStackHeapUsage();
  absl::StatusOr<std::vector<double>> packed = g.gradient(backend, counted(true, 0, 0));
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.groups, 0);
  EXPECT_EQ(u.bytes, interleaved.bytes);
  EXPECT_EQ(u.threads, interleaved.threads);
  EXPECT_EQ(u.waves, interleaved.waves);
  EXPECT_EQ(*packed, *flat);
}

TEST(AdStackBudgetTest, VulkanUniformNeedsRunInterleaved) {
  REQUIRE(vulkan(), "vulkan");
  checkUniformNeedsRunInterleaved(*vulkan());
}

/// On 64 invocations the interleaved layout runs 4 waves of 64 at 60
/// entries; one compacted wave of 256 would hold 4x that.
TEST(AdStackBudgetTest, VulkanUniformNeedsOnASmallGridRunInterleaved) {
  REQUIRE(smallGridVulkan(), "vulkan");
  checkUniformNeedsRunInterleaved(*smallGridVulkan());
  AdStackHeapUsage u = *smallGridVulkan()->lastAdStackHeapUsage();
  EXPECT_EQ(u.threads, 64);
  EXPECT_EQ(u.waves, kElements / 64);
}

TEST(AdStackBudgetTest, CudaUniformNeedsRunInterleaved) {
  REQUIRE(cuda(), "cuda");
  checkUniformNeedsRunInterleaved(*cuda());
}

/// Optimistic launches (the default after a kernel's first) on a
/// compacted heap: the try kernel's layout comes from the needs the last
/// launch measured, each iteration checks its pushes against its group's
/// capacity. Every launch gives the interleaved layout's gradient of the
/// same data bit for bit; an iteration whose need outgrew its group reruns,
/// one whose group holds its new need does not.
void checkOptimisticCompacted(Backend &backend) {
  using Path = Program::MeasuredLaunch::Path;
  SkewedGradient flat, packed;
  auto step = [&](int64_t reruns, const char *what) -> AdStackHeapUsage {
    absl::StatusOr<std::vector<double>> want = flat.gradient(backend, counted(false));
    EXPECT_TRUE(want.ok()) << want.status().message();
    absl::StatusOr<std::vector<double>> got = packed.gradient(backend, groupsOf32());
    EXPECT_TRUE(got.ok()) << got.status().message();
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    EXPECT_EQ(packed.program().lastMeasuredLaunch().path, Path::Optimistic) << what;
    EXPECT_EQ(packed.program().lastMeasuredLaunch().rerunIterations, reruns) << what;
    if (want.ok() && got.ok()) {
      EXPECT_EQ(*got, *want) << what;
    }
    EXPECT_GT(u.groups, 0) << what;
    return u;
  };
  // The first launch counts, compacted.
  ASSERT_TRUE(packed.gradient(backend, groupsOf32()).ok());
  EXPECT_EQ(packed.program().lastMeasuredLaunch().path, Path::Counted);
  AdStackHeapUsage first = *backend.lastAdStackHeapUsage();
  ASSERT_GT(first.groups, 0);
  // The same needs: the counted layout, then the one the try kernel
  // measured, both the counted heap's bytes.
  EXPECT_EQ(step(0, "from the count").bytes, first.bytes);
  EXPECT_EQ(step(0, "from the last try").bytes, first.bytes);
  // Element 200 (group 6, whose elements all iterate 3 times) now needs
  // more than its group holds: it alone reruns. Element 10 (group 0, with
  // element 5's 60 iterations) grows too, within its group's capacity.
  for (SkewedGradient *g : {&flat, &packed}) {
    g->setIterations(200, 10);
    g->setIterations(10, 30);
  }
  // (The heap reported is the rerun's, laid out from the needs just
  // measured.)
  int64_t rerun = step(1, "grown").bytes;
  // The next launch's layout holds it: nothing reruns, group 6 is larger.
  int64_t grown = step(0, "after growing").bytes;
  EXPECT_EQ(grown, rerun);
  EXPECT_GT(grown, first.bytes);
  // Back to the first needs: one launch at the larger layout, then the
  // first bytes again.
  for (SkewedGradient *g : {&flat, &packed}) {
    g->setIterations(200, skewedNeed(200));
    g->setIterations(10, skewedNeed(10));
  }
  EXPECT_EQ(step(0, "shrunk").bytes, grown);
  EXPECT_EQ(step(0, "after shrinking").bytes, first.bytes);
  // Under a budget of a third of that heap: fewer threads, more waves.
  absl::StatusOr<std::vector<double>> want = flat.gradient(backend, counted(false));
  LaunchOptions tight = groupsOf32(first.bytes / 3);
  ASSERT_TRUE(flat.gradient(backend, counted(false, tight.adStackMemoryBudget)).ok());
  AdStackHeapUsage flatPart = *backend.lastAdStackHeapUsage();
  absl::StatusOr<std::vector<double>> got = packed.gradient(backend, tight);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*got, *want);
  AdStackHeapUsage part = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(packed.program().lastMeasuredLaunch().rerunIterations, 0);
  EXPECT_LE(part.bytes, tight.adStackMemoryBudget);
  EXPECT_LT(part.threads, first.threads);
  // The layout of fewer bytes under that budget.
  if (part.groups > 0) {
    EXPECT_LT(part.bytes, flatPart.bytes);
  } else {
    EXPECT_EQ(part.bytes, flatPart.bytes);
  }
}

TEST(AdStackBudgetTest, VulkanOptimisticLaunchesAreCompacted) {
  REQUIRE(vulkan(), "vulkan");
  checkOptimisticCompacted(*vulkan());
}

TEST(AdStackBudgetTest, CudaOptimisticLaunchesAreCompacted) {
  REQUIRE(cuda(), "cuda");
  checkOptimisticCompacted(*cuda());
}

/// Iteration i pushes need(i) f32 values (4 bytes an entry) in a while
/// loop (a measured stack), then pops and sums them: y[i] = need(i) *
/// (need(i) - 1) / 2.
class PushCounts {
public:
  PushCounts(int n, const std::function<int(int)> &need) : n_(n) {
    module_ = parseVerified(fmt::format(R"(
field @m : i32[{0}]
field @y : f32[{0}]
kernel @k() {{
  parallel for %i = 0 to {0} {{
    %s = adstack.alloca f32, capacity 0
    %c = alloca i32
    %acc = alloca f32
    %n = load @m[%i] : i32
    while {{
      %k = load %c : i32
      %done = cmp ge %k, %n : i32
      if %done {{
        break
      }}
      %f = cast %k : i32 to f32
      adstack.push %s, %f
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }}
    for %q = 0 to %n {{
      %t = adstack.load_top %s : f32
      %a = load %acc : f32
      %b = add %a, %t : f32
      store %acc, %b
      adstack.pop %s
    }}
    %r = load %acc : f32
    store @y[%i], %r
  }}
}}
)",
                                        n));
    program_ = *Program::create(*module_);
    for (int i = 0; i < n; ++i) {
      needs_.push_back(need(i));
      program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, needs_.back()));
    }
  }
  /// Launches @k and checks @y.
  void launch(Backend &backend, const LaunchOptions &options) {
    ASSERT_TRUE(program_->launch("k", {}, backend, options).ok());
    Buffer &y = *program_->field("y");
    ASSERT_TRUE(y.syncToHost().ok());
    for (int i = 0; i < n_; ++i)
      ASSERT_EQ(y.get(i).f, double(int64_t(needs_[i]) * (needs_[i] - 1) / 2)) << i;
  }
  /// The regions of a compacted heap on `threads` threads in groups of
  /// `lanes`: thread t runs iterations t, t + threads, ...; each group
  /// holds `lanes` rows of its largest need (at least 1 where it runs an
  /// iteration), 8-byte aligned.
  int64_t groupNeedBytes(int64_t threads, int64_t lanes = 32) const {
    int64_t bytes = 0;
    for (int64_t g = 0; g * lanes < threads; ++g) {
      int64_t most = 0;
      for (int64_t t = g * lanes; t < std::min<int64_t>(threads, g * lanes + lanes); ++t)
        for (int64_t i = t; i < n_; i += threads)
          most = std::max<int64_t>(most, std::max(needs_[i], 1));
      bytes += (lanes * most * 4 + 7) / 8 * 8;
    }
    return bytes;
  }
  /// The bytes of each thread's own need (its largest iteration's, rounded
  /// to 8 bytes), summed: the needs of the iterations in flight.
  int64_t ownNeedBytes(int64_t threads) const {
    int64_t bytes = 0;
    for (int64_t t = 0; t < std::min<int64_t>(threads, n_); ++t) {
      int64_t most = 1;
      for (int64_t i = t; i < n_; i += threads)
        most = std::max<int64_t>(most, needs_[i]);
      bytes += (most * 4 + 7) / 8 * 8;
    }
    return bytes;
  }

private:
  int n_;
  std::vector<int> needs_;
  std::unique_ptr<Module> module_;
  std::unique_ptr<Program> program_;
};

/// The table's bytes for `threads` threads in groups of `lanes` and one
/// stack: a pair of i64 per group.
int64_t tableBytes(int64_t threads, int64_t lanes = 32) {
  return (threads + lanes - 1) / lanes * 16;
}

/// Exact bytes: 12 iterations needing 0-11 entries. On 64 invocations
/// (Vulkan) group 0 holds them all at capacity 11 (32 x 11 x 4 = 1408
/// bytes), group 1 none (0 bytes); the table is 2 groups x 1 stack x 16
/// = 32 bytes. Each thread's own need, rounded to 8 bytes, sums to 296.
void checkExactBytes(Backend &backend) {
  PushCounts counts(12, [](int i) { return i; });
  counts.launch(backend, counted(true));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.groups, (u.threads + 31) / 32);
  EXPECT_EQ(u.bytes, tableBytes(u.threads) + 1408);
  EXPECT_EQ(counts.groupNeedBytes(u.threads), 1408);
  EXPECT_EQ(u.needBytes, 296);
}

TEST(AdStackBudgetTest, VulkanCompactedHeapHoldsTheSumOfNeeds) {
  REQUIRE(vulkan(), "vulkan");
  checkExactBytes(*vulkan());
  EXPECT_EQ(vulkan()->lastAdStackHeapUsage()->threads, 64);
}

TEST(AdStackBudgetTest, CudaCompactedHeapHoldsTheSumOfNeeds) {
  REQUIRE(cuda(), "cuda");
  checkExactBytes(*cuda());
}

/// Skewed needs over 4096 iterations (most need 4-6, every 613th 200): the
/// compacted heap is the table plus the sum of the groups' needs, within
/// 1.05x of that sum, far below the interleaved heap, with the same
/// results.
void checkGroupNeeds(Backend &backend) {
  PushCounts counts(4096, [](int i) { return i % 613 == 7 ? 200 : 4 + i % 3; });
  counts.launch(backend, counted(false));
  AdStackHeapUsage flat = *backend.lastAdStackHeapUsage();
  counts.launch(backend, counted(true));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  ASSERT_GT(u.groups, 0);
  EXPECT_EQ(u.threads, flat.threads);
  int64_t sum = counts.groupNeedBytes(u.threads);
  EXPECT_EQ(u.bytes, tableBytes(u.threads) + sum);
  EXPECT_LE(double(u.bytes), 1.05 * double(sum));
  EXPECT_EQ(u.needBytes, counts.ownNeedBytes(u.threads));
  EXPECT_LT(u.bytes * 5, flat.bytes);
}

TEST(AdStackBudgetTest, VulkanCompactedHeapIsTheSumOfGroupNeeds) {
  REQUIRE(vulkan(), "vulkan");
  checkGroupNeeds(*vulkan());
}

TEST(AdStackBudgetTest, CudaCompactedHeapIsTheSumOfGroupNeeds) {
  REQUIRE(cuda(), "cuda");
  checkGroupNeeds(*cuda());
}

/// Groups of 1, 2, 32 threads and the size chosen per launch give the
/// interleaved layout's gradient bit for bit; each reports its groups.
void checkGroupSizes(Backend &backend) {
  SkewedGradient g;
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  for (int64_t lanes : {1, 2, 32, 0}) {
    absl::StatusOr<std::vector<double>> packed = g.gradient(backend, counted(true, 0, lanes));
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    ASSERT_GT(u.groups, 0) << lanes;
    if (lanes) {
      EXPECT_EQ(u.groupThreads, lanes);
    }
    EXPECT_EQ(u.groups, (u.threads + u.groupThreads - 1) / u.groupThreads) << lanes;
    EXPECT_EQ(*packed, *flat) << lanes;
  }
  // Not a power of two: an error that names the option.
  absl::StatusOr<std::vector<double>> bad = g.gradient(backend, counted(true, 0, 3));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("adStackGroupThreads is 3"), std::string::npos)
      << bad.status().message();
}

TEST(AdStackBudgetTest, VulkanGroupSizesGiveTheSameGradient) {
  REQUIRE(vulkan(), "vulkan");
  checkGroupSizes(*vulkan());
}

TEST(AdStackBudgetTest, CudaGroupSizesGiveTheSameGradient) {
  REQUIRE(cuda(), "cuda");
  checkGroupSizes(*cuda());
}

/// Scattered skew (every 613th of 4096 iterations needs 200 entries, the
/// rest 4-6): groups of one thread hold exactly the sum of the needs; the
/// size chosen per launch is the largest whose regions and table are
/// within 1.05x of the fewest bytes of any size, and its heap is that.
void checkChosenGroups(Backend &backend) {
  PushCounts counts(4096, [](int i) { return i % 613 == 7 ? 200 : 4 + i % 3; });
  counts.launch(backend, counted(true, 0, 1));
  AdStackHeapUsage one = *backend.lastAdStackHeapUsage();
  ASSERT_EQ(one.groupThreads, 1);
  int64_t threads = one.threads;
  EXPECT_EQ(one.bytes, tableBytes(threads, 1) + one.needBytes);
  EXPECT_EQ(one.needBytes, counts.ownNeedBytes(threads));
  EXPECT_EQ(counts.groupNeedBytes(threads, 1), one.needBytes);

  int64_t fewest = INT64_MAX, chosen = 0;
  std::vector<int64_t> total;
  for (int64_t lanes = 1; lanes <= 32; lanes *= 2) {
    total.push_back(tableBytes(threads, lanes) + counts.groupNeedBytes(threads, lanes));
    fewest = std::min(fewest, total.back());
  }
  for (size_t k = 0; k < total.size(); ++k)
    if (double(total[k]) <= 1.05 * double(fewest))
      chosen = int64_t(1) << k;
  counts.launch(backend, counted(true, 0, 0));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.threads, threads);
  EXPECT_EQ(u.groupThreads, chosen);
  EXPECT_EQ(u.bytes, tableBytes(threads, chosen) + counts.groupNeedBytes(threads, chosen));
  EXPECT_LE(double(u.bytes), 1.05 * double(fewest));
  // Groups of 32 take far more: a deep iteration costs its group 32 rows.
  EXPECT_GT(total.back(), u.bytes * 3 / 2);
  // The next launch, with the same needs, takes the same size (from the
  // last launch's choice) and bytes.
  counts.launch(backend, counted(true, 0, 0));
  AdStackHeapUsage next = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(next.groupThreads, chosen);
  EXPECT_EQ(next.bytes, u.bytes);
}

TEST(AdStackBudgetTest, VulkanChosenGroupsHoldTheSumOfNeeds) {
  REQUIRE(vulkan(), "vulkan");
  checkChosenGroups(*vulkan());
}

TEST(AdStackBudgetTest, CudaChosenGroupsHoldTheSumOfNeeds) {
  REQUIRE(cuda(), "cuda");
  checkChosenGroups(*cuda());
}

/// The compacted heap is laid out before the waves are chosen: a task
/// of `n` iterations (more than the interleaved layout's grid, so that it
/// runs in waves) needing `need(i)` entries, one of them (7) far more
/// than the rest, whose interleaved heap for one thread per iteration exceeds the budget
/// but whose groups' needs are fewer bytes than the interleaved layout's
/// grid at the deepest need, runs in one wave, on a heap of the table
/// plus the sum of the groups' needs (within 1.05x). The budget holds the
/// interleaved layout's grid, so that the interleaved heap it would take
/// instead is the one of the waves.
void checkOneWave(Backend &backend, int n, const std::function<int(int)> &need) {
  PushCounts counts(n, need);
  counts.launch(backend, counted(false));
  AdStackHeapUsage flat = *backend.lastAdStackHeapUsage();
  ASSERT_GT(flat.waves, 1);
  int64_t oneWaveInterleaved = flat.bytes / flat.threads * n;
  int64_t sum = counts.groupNeedBytes(n);
  ASSERT_LT(tableBytes(n) + sum, flat.bytes);
  int64_t budget = std::max(tableBytes(n) + sum + sum / 10, flat.bytes);
  ASSERT_LT(budget, oneWaveInterleaved);
  counts.launch(backend, counted(true, budget));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.waves, 1);
  EXPECT_EQ(u.threads, (n + 31) / 32 * 32);
  EXPECT_EQ(u.groups, u.threads / 32);
  EXPECT_EQ(u.bytes, tableBytes(u.threads) + sum);
  EXPECT_LE(double(u.bytes), 1.05 * double(sum));
  EXPECT_LE(u.bytes, budget);
  EXPECT_EQ(u.needBytes, counts.ownNeedBytes(u.threads));
}

/// Where one wave's groups take more bytes than the interleaved layout's
/// waves (every 613th of 4096 iterations needs 200 entries, on a grid of
/// 64), the launch takes the interleaved layout and its waves.
TEST(AdStackBudgetTest, VulkanCompactedHeapLargerThanTheWavesRunsInterleaved) {
  REQUIRE(smallGridVulkan(), "vulkan");
  Backend &backend = *smallGridVulkan();
  PushCounts counts(4096, [](int i) { return i % 613 == 7 ? 200 : 4 + i % 3; });
  counts.launch(backend, counted(false));
  AdStackHeapUsage flat = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(flat.threads, 64);
  EXPECT_EQ(flat.bytes, 64 * 200 * 4);
  ASSERT_GT(tableBytes(4096) + counts.groupNeedBytes(4096), flat.bytes);
  for (int64_t lanes : {32, 0}) {
    counts.launch(backend, counted(true, 0, lanes));
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    EXPECT_EQ(u.groups, 0) << lanes;
    EXPECT_EQ(u.bytes, flat.bytes) << lanes;
    EXPECT_EQ(u.waves, flat.waves) << lanes;
  }
}

TEST(AdStackBudgetTest, VulkanCompactedHeapRunsInOneWave) {
  REQUIRE(smallGridVulkan(), "vulkan");
  checkOneWave(*smallGridVulkan(), 4096, [](int i) { return i == 7 ? 2000 : 4 + i % 3; });
  // 2 080 groups: the scan's blocks hold 64 groups, the last one 32 (sums
  // below 2^24: exact in f32).
  checkOneWave(*smallGridVulkan(), 66536, [](int i) { return i == 7 ? 5000 : 1; });
}

TEST(AdStackBudgetTest, CudaCompactedHeapRunsInOneWave) {
  REQUIRE(cuda(), "cuda");
  // More iterations than an H100's or H200's resident grid.
  checkOneWave(*cuda(), 1 << 19, [](int i) { return i == 7 ? 200 : 4 + i % 3; });
}

/// The skewed gradient with one deep element (5, 60 iterations; the rest
/// 3) on a grid of 64 invocations: the interleaved layout runs 4 waves;
/// compacted, under a budget of half its heap for one invocation per
/// element, one wave with every element on an invocation of its own, and
/// the same gradient bit for bit.
TEST(AdStackBudgetTest, VulkanCompactedGradientRunsInOneWave) {
  REQUIRE(smallGridVulkan(), "vulkan");
  Backend &backend = *smallGridVulkan();
  SkewedGradient g;
  for (int i = 0; i < kElements; ++i)
    if (i != 5)
      g.setIterations(i, 3);
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  AdStackHeapUsage interleaved = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(interleaved.threads, 64);
  EXPECT_EQ(interleaved.waves, kElements / 64);
  int64_t budget = interleaved.bytes / interleaved.threads * kElements / 2;
  absl::StatusOr<std::vector<double>> packed = g.gradient(backend, counted(true, budget));
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.waves, 1);
  EXPECT_EQ(u.threads, kElements);
  EXPECT_EQ(u.groups, kElements / 32);
  EXPECT_LE(u.bytes, budget);
  // Group 0 at 60 iterations, the other 7 at 3: far less than the
  // interleaved heap of 4 waves, which holds 64 threads at 60.
  EXPECT_LT(u.bytes, interleaved.bytes);
  EXPECT_EQ(*packed, *flat);
}

} // namespace
} // namespace qd
