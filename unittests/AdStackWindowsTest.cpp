//===- AdStackWindowsTest.cpp - A compacted heap in windows of threads ----===//
//
// Over its budget, a compacted adstack heap (docs/runtime.md, "Windows")
// runs the threads of one wave in windows, a dispatch each, and holds only
// one window's regions at a time: the heap is the table plus the largest
// window's regions, every thread still runs only its own iterations, and
// the results are those of one dispatch bit for bit. A kernel with more
// than its parallel entry (a serial entry would run once per window) halves
// its grid instead. Vulkan and CUDA (those this machine has; the others
// skip, saying so).
//
//===----------------------------------------------------------------------===//
#include "AdStackBudgetHarness.h"

namespace qd {
namespace {

using namespace budgettest;

constexpr int kIterations = 4096;

/// Most iterations need 4-6 entries; every 613th needs 200.
int skewed(int i) {
  return i % 613 == 7 ? 200 : 4 + i % 3;
}

/// The regions of the largest of four windows of 1 024 threads in groups
/// of one thread.
int64_t largestQuarter(const PushCounts &counts, int64_t unit) {
  int64_t most = 0;
  for (int64_t w = 0; w < 4; ++w)
    most = std::max(most, counts.windowNeedBytes(w * 1024, w * 1024 + 1024, unit));
  return most;
}

/// Groups of one thread: one wave holds the table plus every thread's own
/// need. Under a budget of the table plus a little more than the largest
/// quarter's regions, the launch runs four windows of 1 024 threads, its
/// heap the table plus that quarter's regions exactly; each iteration's
/// result is exact (PushCounts::launch).
void checkFourWindows(Backend &backend) {
  PushCounts counts(kIterations, skewed);
  counts.launch(backend, counted(true, 0, 1));
  AdStackHeapUsage one = *backend.lastAdStackHeapUsage();
  const int64_t unit = regionUnit(backend);
  const int64_t table = tableBytes(kIterations, 1);
  ASSERT_EQ(one.waves, 1);
  ASSERT_EQ(one.threads, kIterations);
  ASSERT_EQ(one.bytes, table + counts.windowNeedBytes(0, kIterations, unit));
  int64_t most = largestQuarter(counts, unit);
  int64_t budget = table + most + most / 20;
  // Two windows of half the threads would not fit.
  ASSERT_GT(counts.windowNeedBytes(0, 2048, unit), most + most / 20);
  counts.launch(backend, counted(true, budget, 1));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.waves, 4);
  EXPECT_EQ(u.threads, 1024);
  EXPECT_EQ(u.groups, kIterations); // the table covers every window
  EXPECT_EQ(u.groupThreads, 1);
  EXPECT_EQ(u.bytes, table + most);
  EXPECT_LE(u.bytes, budget);
  EXPECT_EQ(u.needBytes, one.needBytes);
  // Without the budget again: one dispatch.
  counts.launch(backend, counted(true, 0, 1));
  EXPECT_EQ(backend.lastAdStackHeapUsage()->waves, 1);
  EXPECT_EQ(backend.lastAdStackHeapUsage()->bytes, one.bytes);
}

TEST(AdStackWindowsTest, VulkanCompactedHeapRunsInWindows) {
  REQUIRE(vulkan(), "vulkan");
  checkFourWindows(*vulkan());
}

TEST(AdStackWindowsTest, CudaCompactedHeapRunsInWindows) {
  REQUIRE(cuda(), "cuda");
  checkFourWindows(*cuda());
}

/// The skewed gradient (every 37th element at 60 iterations) under two
/// thirds of its compacted heap's regions: windows of its threads, the gradient of
/// the interleaved layout and of one wave bit for bit, and the
/// interpreter's; groups of 32 chosen per window as for one wave.
void checkGradientWindows(Backend &backend) {
  SkewedGradient g;
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  absl::StatusOr<std::vector<double>> whole = g.gradient(backend, counted(true, 0, 1));
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  AdStackHeapUsage one = *backend.lastAdStackHeapUsage();
  ASSERT_EQ(one.waves, 1);
  int64_t table = tableBytes(one.threads, 1, 2, one.tableColumns);
  // (Two windows of 128 threads: 4 of the 7 deep elements in the first.)
  int64_t budget = table + (one.bytes - table) * 2 / 3;
  absl::StatusOr<std::vector<double>> windows = g.gradient(backend, counted(true, budget, 1));
  ASSERT_TRUE(windows.ok()) << windows.status().message();
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_GT(u.waves, 1);
  EXPECT_LT(u.threads, one.threads);
  EXPECT_EQ(u.groups, one.groups);
  EXPECT_LE(u.bytes, budget);
  EXPECT_EQ(*windows, *whole);
  EXPECT_EQ(*windows, *flat);
  optimistictest::expectNear(*windows, reference());
}

TEST(AdStackWindowsTest, VulkanGradientInWindows) {
  REQUIRE(vulkan(), "vulkan");
  checkGradientWindows(*vulkan());
}

TEST(AdStackWindowsTest, CudaGradientInWindows) {
  REQUIRE(cuda(), "cuda");
  checkGradientWindows(*cuda());
}

/// Optimistic launches (the default after the first, counted, one) in
/// windows, under two thirds of the compacted heap's regions, in groups of
/// `group` threads: with the needs the count saw, and after element 200
/// grows from 3 to 10 iterations (beyond its group's capacity: it reruns)
/// and element 10 from 3 to 30 (within a group of 32's capacity, which
/// element 5's 60 set; beyond a group of one's), the gradient of the
/// interleaved layout bit for bit. Groups of 32 on CUDA would not run in
/// windows: a window is whole blocks of 128 threads, and with 7 of 8 groups
/// deep the interleaved layout of one block per wave is no larger.
void checkOptimisticWindows(Backend &backend, int64_t group) {
  using Path = Program::MeasuredLaunch::Path;
  SkewedGradient flat, packed;
  LaunchOptions open = groupsOf32();
  open.adStackGroupThreads = group;
  ASSERT_TRUE(packed.gradient(backend, open).ok());
  ASSERT_EQ(packed.program().lastMeasuredLaunch().path, Path::Counted);
  AdStackHeapUsage first = *backend.lastAdStackHeapUsage();
  ASSERT_GT(first.groups, 0);
  int64_t table = tableBytes(first.threads, first.groupThreads, 2, first.tableColumns);
  LaunchOptions tight = open;
  tight.adStackMemoryBudget = table + (first.bytes - table) * 2 / 3;
  const int reruns = group == 1 ? 2 : 1; // element 10 too in a group of its own
  for (int grown = 0; grown < 2; ++grown) {
    if (grown)
      for (SkewedGradient *g : {&flat, &packed}) {
        g->setIterations(200, 10);
        g->setIterations(10, 30);
      }
    absl::StatusOr<std::vector<double>> want = flat.gradient(backend, counted(false));
    absl::StatusOr<std::vector<double>> got = packed.gradient(backend, tight);
    ASSERT_TRUE(want.ok() && got.ok()) << grown;
    EXPECT_EQ(*got, *want) << grown;
    EXPECT_EQ(packed.program().lastMeasuredLaunch().path, Path::Optimistic) << grown;
    EXPECT_EQ(packed.program().lastMeasuredLaunch().rerunIterations, grown * reruns) << grown;
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    EXPECT_LE(u.bytes, tight.adStackMemoryBudget) << grown;
    EXPECT_GT(u.waves, 1) << grown;
    EXPECT_EQ(u.groups, first.groups) << grown; // windows: the table of one wave
  }
}

TEST(AdStackWindowsTest, VulkanOptimisticLaunchesInWindows) {
  REQUIRE(vulkan(), "vulkan");
  checkOptimisticWindows(*vulkan(), 32);
}

TEST(AdStackWindowsTest, CudaOptimisticLaunchesInWindows) {
  REQUIRE(cuda(), "cuda");
  checkOptimisticWindows(*cuda(), 1);
}

/// A kernel whose task follows a serial entry is not run in windows (the
/// entry would run once per window): under the same budget as
/// checkFourWindows, its grid halves (fewer threads, each group of its
/// own), with exact results.
void checkSerialEntryHalves(Backend &backend) {
  PushCounts counts(kIterations, skewed, PushCounts::SerialFirst);
  counts.launch(backend, counted(true, 0, 1));
  AdStackHeapUsage one = *backend.lastAdStackHeapUsage();
  ASSERT_EQ(one.waves, 1);
  const int64_t unit = regionUnit(backend);
  int64_t most = largestQuarter(counts, unit);
  int64_t budget = tableBytes(kIterations, 1) + most + most / 20;
  counts.launch(backend, counted(true, budget, 1));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_GT(u.waves, 1);
  EXPECT_LT(u.threads, kIterations);
  EXPECT_LE(u.bytes, budget);
  // Halved: the table covers the threads that run, not a whole wave.
  if (u.groups > 0) {
    EXPECT_EQ(u.groups, u.threads);
  }
}

TEST(AdStackWindowsTest, VulkanSerialEntryHalvesTheGrid) {
  REQUIRE(vulkan(), "vulkan");
  checkSerialEntryHalves(*vulkan());
}

TEST(AdStackWindowsTest, CudaSerialEntryHalvesTheGrid) {
  REQUIRE(cuda(), "cuda");
  checkSerialEntryHalves(*cuda());
}

/// Random gradients (GenConfig::autodiff, maxTasks 1, tasks of up to
/// `threads` iterations, drawn until the counted gradient compacts its heap) on
/// `backend`: in one wave, then under three quarters and under half of that
/// heap (windows, a halved grid, or the interleaved layout, whichever the
/// launch takes), every schedule gives the interpreter's results within
/// `rtol`.
void checkRandomSchedules(Backend &backend, double rtol, int threads) {
  testgen::GenConfig config = testgen::GenConfig::autodiff();
  config.maxTasks = 1;
  config.threads = threads;
  for (int tries = 0; tries < 60; ++tries) {
    testgen::GenProgram p = *testgen::genProgram(config);
    auto m = parseModule(testgen::print(p).text, {"random.qd", 1});
    if (!m.ok())
      testgen::fail(p, "does not parse: " + std::string(m.status().message()));
    std::unique_ptr<Module> module = *std::move(m);
    if (auto g = buildGradientKernel(*module, *module->findKernel("k")); !g.ok())
      testgen::fail(p, "no gradient: " + std::string(g.status().message()));
    LaunchOptions options = testgen::defaultLaunchOptions();
    options.optimisticAdStacks = false;
    options.compactAdStacks = true;
    options.adStackGroupThreads = 1;
    if (std::string d = testgen::runAgainstInterpreter(p, *module, true, backend, rtol, options);
        !d.empty())
      testgen::fail(p, "one wave: " + d);
    AdStackHeapUsage one = *backend.lastAdStackHeapUsage();
    if (one.groups == 0)
      continue;
    for (int64_t quarters : {3, 2}) {
      options.adStackMemoryBudget = one.bytes * quarters / 4;
      if (std::string d = testgen::runAgainstInterpreter(p, *module, true, backend, rtol, options);
          !d.empty())
        testgen::fail(p, fmt::format("under {} bytes: {}", options.adStackMemoryBudget, d));
      AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
      RC_ASSERT(u.bytes <= options.adStackMemoryBudget);
      RC_CLASSIFY(u.groups == one.groups && u.waves > 1, "windows");
      RC_CLASSIFY(u.groups > 0 && u.groups < one.groups, "halved");
      RC_CLASSIFY(u.groups == 0, "interleaved");
    }
    return;
  }
}

TEST(AdStackWindowsTest, RandomSchedulesOnVulkanMatchTheInterpreter) {
  REQUIRE(vulkan(), "Vulkan");
  testgen::checkProperty([] { checkRandomSchedules(*vulkan(), 1e-4, 300); }, 12);
}

/// CUDA with every stack in the heap and no cooperative tasks: a task of a
/// few thousand iterations (below the cooperative threshold, 4 096) runs a
/// thread per iteration, so that its heap may run in windows (of whole
/// blocks of 128 threads).
Backend *cudaThreadPerIteration() {
  static std::unique_ptr<Backend> backend = [] {
    BackendOptions o;
    o.set("local-tape-bytes", "0");
    o.set("cooperative-tasks", "0");
    return optimistictest::registered("cuda", o);
  }();
  return backend.get();
}

TEST(AdStackWindowsTest, RandomSchedulesOnCudaMatchTheInterpreter) {
  REQUIRE(cudaThreadPerIteration(), "CUDA");
  testgen::checkProperty([] { checkRandomSchedules(*cudaThreadPerIteration(), 1e-4, 1200); }, 30);
}

} // namespace
} // namespace qd
