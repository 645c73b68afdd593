//===- AdStackBudgetGroupsTest.cpp - The groups of a compacted adstack heap ===//
//
// A compacted adstack heap (docs/runtime.md, "Compacted heap") on Vulkan
// and CUDA (those this machine has; the others skip, saying so): its exact
// bytes in groups of 32, the group size chosen per launch (groups of 1-32
// threads, the same gradient bit for bit), and which launches run in one
// wave or keep the interleaved layout.
//
//===----------------------------------------------------------------------===//
#include "AdStackBudgetHarness.h"

namespace qd {
namespace {

using namespace budgettest;

/// Exact bytes: 12 iterations needing 0-11 entries. On 64 invocations
/// (Vulkan) group 0 holds them all at capacity 11 (32 x 11 x 4 = 1408
/// bytes), group 1 none (0 bytes); the table is a header of 4 words, 2
/// groups x 1 stack and the end, 7 words (28 bytes). Each thread's own
/// need, rounded to the unit (Vulkan: 4 bytes; CUDA: 8), sums to 268
/// (296).
void checkExactBytes(Backend &backend) {
  PushCounts counts(12, [](int i) { return i; });
  counts.launch(backend, counted(true));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  int64_t unit = regionUnit(backend);
  EXPECT_EQ(u.groups, (u.threads + 31) / 32);
  EXPECT_EQ(u.bytes, tableBytes(u.threads) + 1408);
  EXPECT_EQ(counts.groupNeedBytes(u.threads, 32, unit), 1408);
  EXPECT_EQ(u.needBytes, unit == 4 ? 268 : 296);
  EXPECT_EQ(u.needBytes, counts.ownNeedBytes(u.threads, unit));
}

TEST(AdStackBudgetTest, VulkanCompactedHeapHoldsTheSumOfNeeds) {
  REQUIRE(vulkan(), "vulkan");
  checkExactBytes(*vulkan());
  EXPECT_EQ(vulkan()->lastAdStackHeapUsage()->threads, 64);
  EXPECT_EQ(tableBytes(64), 28);
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
  int64_t unit = regionUnit(backend);
  int64_t sum = counts.groupNeedBytes(u.threads, u.groupThreads, unit);
  EXPECT_EQ(u.bytes, tableBytes(u.threads, u.groupThreads) + sum);
  EXPECT_LE(double(u.bytes), 1.05 * double(sum));
  EXPECT_EQ(u.needBytes, counts.ownNeedBytes(u.threads, unit));
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
  int64_t unit = regionUnit(backend);
  EXPECT_EQ(one.bytes, tableBytes(threads, 1) + one.needBytes);
  EXPECT_EQ(one.needBytes, counts.ownNeedBytes(threads, unit));
  EXPECT_EQ(counts.groupNeedBytes(threads, 1, unit), one.needBytes);

  int64_t fewest = INT64_MAX, chosen = 0;
  std::vector<int64_t> total;
  for (int64_t lanes = 1; lanes <= 32; lanes *= 2) {
    total.push_back(tableBytes(threads, lanes) + counts.groupNeedBytes(threads, lanes, unit));
    fewest = std::min(fewest, total.back());
  }
  for (size_t k = 0; k < total.size(); ++k)
    if (double(total[k]) <= 1.05 * double(fewest))
      chosen = int64_t(1) << k;
  counts.launch(backend, counted(true, 0, 0));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.threads, threads);
  EXPECT_EQ(u.groupThreads, chosen);
  EXPECT_EQ(u.bytes, tableBytes(threads, chosen) + counts.groupNeedBytes(threads, chosen, unit));
  EXPECT_LE(double(u.bytes), 1.05 * double(fewest));
  // Groups of 32 take far more: a deep iteration costs its group 32 rows.
  EXPECT_GT(total.back(), u.bytes * 3 / 2);
  // The next launch, with the same needs, takes the same size (from the
  // last launch's choice) and bytes.
  counts.launch(backend, counted(true, 0, 0));
  AdStackHeapUsage next = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(next.groupThreads, chosen);
  EXPECT_EQ(next.bytes, u.bytes);
  EXPECT_EQ(next.tableRuns, 1);
  EXPECT_EQ(next.tableColumns, 1); // one stack
}

TEST(AdStackBudgetTest, VulkanChosenGroupsHoldTheSumOfNeeds) {
  REQUIRE(vulkan(), "vulkan");
  checkChosenGroups(*vulkan());
}

TEST(AdStackBudgetTest, CudaChosenGroupsHoldTheSumOfNeeds) {
  REQUIRE(cuda(), "cuda");
  checkChosenGroups(*cuda());
}

/// The gradient of the benchmark's skewed loop (qd-bench-adstack-budget:
/// one element in 100 at 1000 iterations, the others at 3): its two
/// stacks (f32 and i32, pushed together) need the same entries in every
/// iteration, so the launch puts them in one column of the table, in
/// groups of one thread: the heap is the sum of the iterations' own needs
/// plus a table of one word per thread (and 8 more: the header of two
/// stacks, the end), within 1.05x of that sum, with the interleaved
/// layout's and the interpreter's gradient.
void checkOneColumn(Backend &backend) {
  auto deep = [](SkewedGradient &g) {
    for (int i = 0; i < kElements; ++i)
      g.setIterations(i, i % 100 == 50 ? 1000 : 3);
  };
  SkewedGradient g, oracle;
  deep(g);
  deep(oracle);
  Interpreter interp;
  absl::StatusOr<std::vector<double>> expected = oracle.gradient(interp, {});
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  for (int launch = 0; launch < 2; ++launch) {
    absl::StatusOr<std::vector<double>> packed = g.gradient(backend, counted(true, 0, 0));
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    EXPECT_EQ(*packed, *flat);
    optimistictest::expectNear(*packed, *expected);
    EXPECT_EQ(u.threads, kElements);
    EXPECT_EQ(u.groupThreads, 1);
    EXPECT_EQ(u.tableColumns, 1);
    // Words on Vulkan: exactly the table and the needs. CUDA's 8-byte
    // regions round each thread's column once where its own needs round
    // each stack (on the H200: 31 128 bytes against a table and needs of
    // 33 152).
    if (regionUnit(backend) == 4)
      EXPECT_EQ(u.bytes, tableBytes(u.threads, 1, 2, 1) + u.needBytes);
    else
      EXPECT_LE(u.bytes, tableBytes(u.threads, 1, 2, 1) + u.needBytes);
    EXPECT_EQ(tableBytes(u.threads, 1, 2, 1), (kElements + 8) * 4);
    EXPECT_LE(double(u.bytes), 1.05 * double(u.needBytes));
    // The first launch weighs the sizes (a run in groups of 32, one column
    // per stack) and lays out the chosen one; the next runs the table
    // kernel once.
    EXPECT_EQ(u.tableRuns, launch == 0 ? 2 : 1);
  }
}

/// The table kernel runs once per launch where the layout the kernel's
/// last launch of as many threads chose still applies, launches under a
/// budget (fewer threads, more waves) in between included: the skewed
/// gradient (every 37th element at 60 iterations), then under 0.9x of its
/// heap (a compacted heap on fewer threads, fewer bytes than the
/// interleaved layout's under the same budget) twice, then without a
/// budget again.
void checkOneTableRun(Backend &backend) {
  SkewedGradient g;
  absl::StatusOr<std::vector<double>> flat = g.gradient(backend, counted(false));
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  ASSERT_TRUE(g.gradient(backend, counted(true, 0, 0)).ok());
  AdStackHeapUsage one = *backend.lastAdStackHeapUsage();
  ASSERT_GT(one.groups, 0);
  int64_t budget = one.bytes * 9 / 10;
  for (int launch = 0; launch < 2; ++launch) {
    absl::StatusOr<std::vector<double>> part = g.gradient(backend, counted(true, budget, 0));
    ASSERT_TRUE(part.ok()) << part.status().message();
    EXPECT_EQ(*part, *flat);
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    ASSERT_GT(u.groups, 0);
    EXPECT_LT(u.threads, one.threads);
    EXPECT_GT(u.waves, 1);
    EXPECT_LE(u.bytes, budget);
    if (launch == 1) {
      EXPECT_EQ(u.tableRuns, 1);
    }
  }
  absl::StatusOr<std::vector<double>> again = g.gradient(backend, counted(true, 0, 0));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *flat);
  EXPECT_EQ(backend.lastAdStackHeapUsage()->tableRuns, 1);
  EXPECT_EQ(backend.lastAdStackHeapUsage()->bytes, one.bytes);
}

TEST(AdStackBudgetTest, VulkanTableKernelRunsOncePerLaunch) {
  REQUIRE(vulkan(), "vulkan");
  checkOneTableRun(*vulkan());
}

TEST(AdStackBudgetTest, CudaTableKernelRunsOncePerLaunch) {
  REQUIRE(cuda(), "cuda");
  checkOneTableRun(*cuda());
}

TEST(AdStackBudgetTest, VulkanStacksThatGoTogetherShareOneColumn) {
  REQUIRE(vulkan(), "vulkan");
  checkOneColumn(*vulkan());
}

TEST(AdStackBudgetTest, CudaStacksThatGoTogetherShareOneColumn) {
  REQUIRE(cuda(), "cuda");
  checkOneColumn(*cuda());
}

/// The counting kernel's per-iteration needs (70 000 iterations: a 1 MiB
/// buffer, zeroed on the device once the table kernel read them and reused
/// by the next launch as it is): after a launch whose deep iterations need
/// 300 entries, one whose deep iterations need 40 lays out exactly that
/// (no stale maximum), and the one after, with 300 back, that again.
void checkNeedsStartFromZero(Backend &backend) {
  auto skewed = [](int deep) { return [deep](int i) { return i % 997 == 3 ? deep : 2 + i % 2; }; };
  PushCounts counts(70000, skewed(300));
  int64_t unit = regionUnit(backend);
  std::vector<AdStackHeapUsage> used;
  for (int deep : {300, 40, 300}) {
    for (int i = 0; i < 70000; ++i)
      counts.setNeed(i, skewed(deep)(i));
    counts.launch(backend, counted(true, 0, 1));
    AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
    ASSERT_GT(u.groups, 0) << deep;
    EXPECT_EQ(u.needBytes, counts.ownNeedBytes(u.threads, unit)) << deep;
    EXPECT_EQ(u.bytes, tableBytes(u.threads, 1) + u.needBytes) << deep;
    used.push_back(u);
  }
  EXPECT_LT(used[1].needBytes, used[0].needBytes);
  EXPECT_EQ(used[2].bytes, used[0].bytes);
}

TEST(AdStackBudgetTest, VulkanCountedNeedsStartFromZero) {
  REQUIRE(vulkan(), "vulkan");
  checkNeedsStartFromZero(*vulkan());
}

TEST(AdStackBudgetTest, CudaCountedNeedsStartFromZero) {
  REQUIRE(cuda(), "cuda");
  checkNeedsStartFromZero(*cuda());
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
  int64_t unit = regionUnit(backend);
  int64_t sum = counts.groupNeedBytes(n, 32, unit);
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
  EXPECT_EQ(u.needBytes, counts.ownNeedBytes(u.threads, unit));
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

/// An f32 and an f64 stack pushed together (PushCounts::F64Twin) share one
/// column in groups of one thread: the f64 entries come first in each
/// level and the level is padded to 8 bytes on CUDA, so that every f64
/// entry is 8-byte aligned (a level of 12 bytes with the f32 first
/// misaligned them); every result exact.
void checkMixedWidthsInOneColumn(Backend &backend) {
  PushCounts counts(
      512, [](int i) { return i % 97 == 3 ? 150 : 2 + i % 4; }, PushCounts::F64Twin);
  counts.launch(backend, counted(true, 0, 1));
  AdStackHeapUsage u = *backend.lastAdStackHeapUsage();
  EXPECT_EQ(u.groupThreads, 1);
  EXPECT_EQ(u.tableColumns, 1);
}

TEST(AdStackBudgetTest, VulkanMixedWidthsShareOneColumn) {
  REQUIRE(vulkan(), "vulkan");
  checkMixedWidthsInOneColumn(*vulkan());
}

TEST(AdStackBudgetTest, CudaMixedWidthsShareOneColumn) {
  REQUIRE(cuda(), "cuda");
  checkMixedWidthsInOneColumn(*cuda());
}

} // namespace
} // namespace qd
