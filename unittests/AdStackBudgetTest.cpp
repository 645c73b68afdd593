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
#include "AdStackBudgetHarness.h"
#include "SelfBoundedStack.h"

namespace qd {
namespace {

using namespace budgettest;

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
  EXPECT_TRUE(isOverBudget(r.status()));
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

/// A stack whose pushes depend on its own values is counted with a bound
/// (first the default capacity, 256 entries): a budget below that bound's
/// heap but above the need lowers the bound (256 -> 64 -> 16 entries of
/// 4 bytes) instead of failing, and the launch gets the exact need; a need
/// beyond the budget fails as one iteration over it, at one entry more than
/// the largest bound that fits and that the need exceeds.
TEST(AdStackBudgetTest, CpuACountingBoundGoesDownToFitTheBudget) {
  std::string text = "field @out : i32\nkernel @k(%n: i32) {\n  serial {" +
                     testtext::selfBoundedStack("@out[]") + "  }\n}\n";
  std::unique_ptr<Module> m = *parseModule(text, {"bound.qd", 1});
  std::unique_ptr<Program> p = *Program::create(*m);
  LaunchOptions o = withBudget(200);
  o.optimisticAdStacks = false;
  auto n = [](int32_t v) { return std::vector<LaunchArg>{LaunchArg::i32(v)}; };
  ASSERT_TRUE(p->launch("k", n(9), cpu(1), o).ok());
  EXPECT_EQ(p->lastMeasuredLaunch().countingRuns, 3);
  ASSERT_TRUE(p->field("out")->syncToHost().ok());
  EXPECT_EQ(p->field("out")->get(0).i, 9);
  EXPECT_LE(cpu(1).lastAdStackHeapUsage()->bytes, 200);
  absl::Status over = p->launch("k", n(100), cpu(1), o);
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(isOverBudget(over)) << over.message();
  // (A bound of 50 entries of 4 bytes fills the 200 bytes; the need exceeds it.)
  EXPECT_NE(std::string(over.message()).find("capacity 51,"), std::string::npos) << over.message();
  ASSERT_TRUE(p->launch("k", n(100), cpu(1), withBudget(0)).ok());
  ASSERT_TRUE(p->field("out")->syncToHost().ok());
  EXPECT_EQ(p->field("out")->get(0).i, 100);
}

} // namespace
} // namespace qd
