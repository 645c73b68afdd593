//===- CheckpointTest.cpp - Checkpointed loops of reverse-ad --------------===//
//
// reverse-ad{checkpoint} (ReverseADOptions::checkpointLoops): for several
// loop shapes and intervals k, the gradient is bit for bit the fully taped
// gradient's on the interpreter and the CPU backend, every stack's capacity
// is exactly what the launch pushes (the interpreter stops a launch that
// overflows), and Program::launch chooses k from the memory budget
// (chooseCheckpointInterval).
//
//===----------------------------------------------------------------------===//
#include "qd/abi/KernelLayout.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Checkpointing.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/Checkpointing.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace qd {
namespace {

/// Per thread i of 4: v = x[i], c = 0, then `trip` times
///   v = sin(v) * v + w[c % 4]; c = c + 1
/// (an f32 and an i32 loop-carried local, both stored), then y[i] = v.
/// `trip` is the text of the loop's end bound, `inner` extra statements of
/// the body (a nested loop).
std::string loopKernel(const std::string &prelude, const std::string &trip,
                       const std::string &inner = "") {
  return fmt::format(R"(field @x : f32[4] grad
field @w : f32[4] grad
field @y : f32[4] grad
field @n : i32
field @m : i32[4]

kernel @k() {{
  parallel for %i = 0 to 4 {{
    %xi = load @x[%i] : f32
    %v = alloca f32
    store %v, %xi
    %c = alloca i32
    %four = const 4 : i32
    %one = const 1 : i32
{}
    for %j = 0 to {} {{
      %a = load %v : f32
      %s = sin %a : f32
      %p = mul %s, %a : f32
      %ci = load %c : i32
      %wi = rem %ci, %four : i32
      %ww = load @w[%wi] : f32
      %b = add %p, %ww : f32
      store %v, %b
      %cn = add %ci, %one : i32
      store %c, %cn
{}
    }}
    %r = load %v : f32
    store @y[%i], %r
  }}
}}
)",
                     prelude, trip, inner);
}

/// A loop nested in the body: three times v = sin(v) * 0.5 + v (taped
/// inside the checkpointed loop by default: 3 entries per iteration).
const char *kTapedLoop = R"(      for %q = 0 to 3 {
        %va = load %v : f32
        %vs = sin %va : f32
        %h = const 0.5 : f32
        %vh = mul %vs, %h : f32
        %vb = add %vh, %va : f32
        store %v, %vb
      }
)";

/// The same on u = v, then v = u: a load after the loop keeps it from
/// being taped; the reverse frames of the checkpointed loop record it.
const char *kInnerLoop = R"(      %u = alloca f32
      %v0 = load %v : f32
      store %u, %v0
      for %q = 0 to 3 {
        %ua = load %u : f32
        %us = sin %ua : f32
        %h = const 0.5 : f32
        %uh = mul %us, %h : f32
        %ub = add %uh, %ua : f32
        store %u, %ub
      }
      %u1 = load %u : f32
      store %v, %u1
)";

struct Shape {
  const char *name;
  std::string text;
  /// The trip count of each thread's loop.
  std::vector<int32_t> trips;
  /// Entries an iteration pushes on the largest segment stack.
  int64_t segmentPerIteration = 1;
};

std::vector<Shape> shapes() {
  std::string runtime = "    %n = load @n[] : i32";
  std::string perThread = "    %n = load @m[%i] : i32";
  return {
      {"runtime", loopKernel(runtime, "%n"), {9, 9, 9, 9}},
      {"constant", loopKernel("", "7"), {7, 7, 7, 7}},
      {"nested_taped", loopKernel(runtime, "%n", kTapedLoop), {6, 6, 6, 6}, 3},
      {"nested_recorded", loopKernel(runtime, "%n", kInnerLoop), {6, 6, 6, 6}},
      {"per_thread", loopKernel(perThread, "%n"), {0, 1, 5, 9}},
      {"zero", loopKernel(runtime, "%n"), {0, 0, 0, 0}},
      {"one", loopKernel(runtime, "%n"), {1, 1, 1, 1}},
  };
}

std::unique_ptr<Module> gradientModule(const std::string &text, const ReverseADOptions &o) {
  auto m = parseModule(text, {"checkpoint.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  auto g = buildGradientKernel(**m, *(*m)->findKernel("k"), o);
  EXPECT_TRUE(g.ok()) << g.status().message();
  absl::Status v = verify(**m);
  EXPECT_TRUE(v.ok()) << v.message();
  return *std::move(m);
}

/// The bits of @x.grad and @w.grad after @k and @k_grad.
std::vector<uint64_t> gradientBits(Program &p, Backend &backend, const Shape &shape,
                                   const LaunchOptions &options) {
  for (int i = 0; i < 4; ++i) {
    p.field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.3 * i - 0.4));
    p.field("w")->set(i, Scalar::ofFloat(ScalarType::F32, 0.05 * i + 0.1));
    p.field("m")->set(i, Scalar::ofInt(ScalarType::I32, shape.trips[i]));
    p.field("y", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0 + 0.25 * i));
    p.field("x", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 0));
    p.field("w", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 0));
  }
  p.field("n")->set(0, Scalar::ofInt(ScalarType::I32, shape.trips[0]));
  for (const char *k : {"k", "k_grad"}) {
    absl::Status s = p.launch(k, {}, backend, options);
    EXPECT_TRUE(s.ok()) << shape.name << " @" << k << ": " << s.message();
  }
  std::vector<uint64_t> bits;
  for (const char *f : {"x", "w"})
    for (int i = 0; i < 4; ++i) {
      double d = p.field(f, Component::Grad)->get(i).f;
      uint64_t u;
      std::memcpy(&u, &d, sizeof u);
      bits.push_back(u);
    }
  return bits;
}

std::unique_ptr<Backend> cpuBackend() {
  CpuBackendOptions o;
  o.threads = 1; // one order of the atomic adds
  auto b = CpuBackend::create(o);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? std::unique_ptr<Backend>(std::move(*b)) : nullptr;
}

/// Capacity of the stacks named `hint` in the last launch (the largest).
int64_t capacityOf(const Program &p, std::string_view hint) {
  int64_t cap = -1;
  for (const auto &[stack, c] : p.lastAdStackCapacities())
    if (hasNameHint(stack->name(), hint))
      cap = std::max(cap, c);
  return cap;
}

/// What the launch pushes with interval k, per thread's trip count `n`:
/// stored states (ceil(n / k) where k < n), segment entries (min(k, n) per
/// pushed value of an iteration), fully taped entries (n where k >= n).
struct Depths {
  int64_t states = 0, segment = 0, full = 0;
};
Depths expectedDepths(const std::vector<int32_t> &trips, int64_t k) {
  Depths d;
  for (int64_t n : trips) {
    if (k < n) {
      d.states = std::max(d.states, (n + k - 1) / k);
      d.segment = std::max(d.segment, std::min(k, n));
    } else {
      d.full = std::max(d.full, n);
    }
  }
  return d;
}

class CheckpointTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CheckpointTest, GradientIsBitForBitTheFullyTapedOneForEveryInterval) {
  const Shape &shape = GetParam();
  auto full = gradientModule(shape.text, {});
  ReverseADOptions o;
  o.checkpointLoops = true;
  auto checkpointed = gradientModule(shape.text, o);
  ASSERT_TRUE(checkpointed->findField(checkpointIntervalField("k_grad")));
  Interpreter interp;
  std::unique_ptr<Backend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  int32_t most = *std::max_element(shape.trips.begin(), shape.trips.end());
  for (Backend *backend : {static_cast<Backend *>(&interp), cpu.get()}) {
    auto fp = Program::create(*full);
    ASSERT_TRUE(fp.ok());
    std::vector<uint64_t> expected = gradientBits(**fp, *backend, shape, {});
    auto cp = Program::create(*checkpointed);
    ASSERT_TRUE(cp.ok());
    // 0: the default (fully taped, no budget); 4: a non-divisor of 9.
    for (int64_t k : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(most),
                      int64_t(most) + 1}) {
      LaunchOptions options;
      options.checkpointInterval = k;
      EXPECT_EQ(gradientBits(**cp, *backend, shape, options), expected)
          << shape.name << " on " << backend->name() << " with k = " << k;
      if (backend != &interp) {
        // The backend reports the interval of its last launch (@k_grad's).
        ASSERT_TRUE(backend->lastAdStackHeapUsage());
        EXPECT_EQ(backend->lastAdStackHeapUsage()->checkpointInterval, k) << "k = " << k;
        continue;
      }
      // The interpreter stops a launch that pushes past a capacity, so the
      // capacities are sound; they are also exact.
      Depths d = expectedDepths(shape.trips, k > 0 ? k : INT32_MAX);
      EXPECT_EQ((*cp)->lastCheckpointInterval(), k) << "k = " << k;
      EXPECT_EQ(capacityOf(**cp, kCheckpointStackName), std::max<int64_t>(d.states, 1))
          << shape.name << " k = " << k;
      EXPECT_EQ(capacityOf(**cp, kSegmentStackName),
                std::max<int64_t>(d.segment * shape.segmentPerIteration, 1))
          << shape.name << " k = " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CheckpointTest, CheckpointTest, ::testing::ValuesIn(shapes()),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(CheckpointChoiceTest, FullTapeWhenItFitsOrWithoutBudget) {
  CheckpointCosts c{10000, 16, 8, 100};
  EXPECT_EQ(chooseCheckpointInterval(c, 0), 10000);
  EXPECT_EQ(chooseCheckpointInterval(c, 100 + 16 * 10000), 10000);
  EXPECT_EQ(chooseCheckpointInterval(CheckpointCosts{1, 16, 8, 0}, 1), 1);
}

TEST(CheckpointChoiceTest, LeastMemoryWhenNothingFits) {
  CheckpointCosts c{10000, 16, 8, 100};
  int64_t k = chooseCheckpointInterval(c, 1);
  // The minimum of 16 k + 8 ceil(10000 / k) lies near sqrt(10000 * 8 / 16).
  EXPECT_GE(k, 60);
  EXPECT_LE(k, 80);
  for (int64_t j = 1; j < 10000; ++j)
    ASSERT_LE(checkpointedBytes(c, k), checkpointedBytes(c, j)) << j;
}

/// Brute force over every k of a small loop: the choice is n when the full
/// tape fits, else the largest k that fits, else one of least memory.
RC_GTEST_PROP(CheckpointChoiceTest, ChoiceMatchesBruteForce, ()) {
  CheckpointCosts c{*rc::gen::inRange<int64_t>(1, 400), *rc::gen::inRange<int64_t>(0, 64),
                    *rc::gen::inRange<int64_t>(0, 64), *rc::gen::inRange<int64_t>(0, 256)};
  int64_t budget = *rc::gen::inRange<int64_t>(0, 30000);
  int64_t k = chooseCheckpointInterval(c, budget);
  int64_t n = c.tripCount;
  RC_ASSERT(k >= 1);
  RC_ASSERT(k <= n);
  if (budget <= 0 || checkpointedBytes(c, n) <= budget) {
    RC_ASSERT(k == n);
    return;
  }
  int64_t least = checkpointedBytes(c, 1), largestFit = 0;
  for (int64_t j = 1; j < n; ++j) {
    least = std::min(least, checkpointedBytes(c, j));
    if (checkpointedBytes(c, j) <= budget)
      largestFit = j;
  }
  if (largestFit > 0)
    RC_ASSERT(k == largestFit);
  else
    RC_ASSERT(checkpointedBytes(c, k) == least);
}

/// The launch's choice with the device's parallelism: fully taped where
/// every iteration in flight fits taped or half of them do, else the
/// largest k at which all fit checkpointed, else one iteration's choice
/// (fully taped in waves when one taped iteration fits). The costs at
/// k = 1 are asked for only when checkpointing is considered.
RC_GTEST_PROP(CheckpointChoiceTest, TheLaunchKeepsTheDeviceBusy, ()) {
  CheckpointCosts c{*rc::gen::inRange<int64_t>(2, 400), *rc::gen::inRange<int64_t>(1, 64),
                    *rc::gen::inRange<int64_t>(1, 64), *rc::gen::inRange<int64_t>(0, 256)};
  const int64_t n = c.tripCount, full = checkpointedBytes(c, n);
  const int64_t p = *rc::gen::inRange<int64_t>(1, 300);
  const int64_t budget = *rc::gen::inRange<int64_t>(1, 300 * 30000);
  int asked = 0;
  int64_t k = chooseLaunchCheckpointInterval(full, budget, p, [&] {
    ++asked;
    return c;
  });
  const int64_t kFull = std::numeric_limits<int32_t>::max();
  const int64_t taped = budget / full;
  if (taped >= p || taped * kCheckpointParallelismRatio >= p) {
    RC_ASSERT(k == kFull);
    RC_ASSERT(asked == 0);
    return;
  }
  int64_t allFit = 0; // the largest k < n at which p iterations fit
  for (int64_t j = 1; j < n; ++j)
    if (p > 1 && checkpointedBytes(c, j) <= budget / p)
      allFit = j;
  if (allFit > 0)
    RC_ASSERT(k == allFit);
  else if (taped >= 1)
    RC_ASSERT(k == kFull);
  else
    RC_ASSERT(k == chooseCheckpointInterval(c, budget) || k == kFull);
}

TEST(CheckpointChoiceTest, AGpuGridUnderOneGibCheckpointsInsteadOfRunningWaves) {
  // The long-loop benchmark's iteration on an H200 (10^4 steps of 12
  // bytes; a resident grid of 270 336 threads): one full tape, 120 KB,
  // fits 1 GiB 8 738 times, so the launch used to run 119 waves of fully
  // taped threads; now every thread is resident with a segment of k steps.
  CheckpointCosts c{10000, 12, 12, 0};
  const int64_t budget = int64_t(1) << 30, grid = 270336;
  int64_t k =
      chooseLaunchCheckpointInterval(checkpointedBytes(c, 10000), budget, grid, [&] { return c; });
  EXPECT_LE(checkpointedBytes(c, k) * grid, budget);
  EXPECT_GT(checkpointedBytes(c, k + 1) * grid, budget);
  EXPECT_GT(k, 100);
  EXPECT_LT(k, 400);
  // One iteration at a time (the interpreter): fully taped, as before.
  EXPECT_EQ(
      chooseLaunchCheckpointInterval(checkpointedBytes(c, 10000), budget, 1, [&] { return c; }),
      std::numeric_limits<int32_t>::max());
}

/// Random trip counts and intervals on the interpreter: always the fully
/// taped gradient.
RC_GTEST_PROP(CheckpointTest, RandomIntervalsGiveTheFullyTapedGradient, ()) {
  Shape shape{"random", loopKernel("    %n = load @m[%i] : i32", "%n"), {}};
  for (int i = 0; i < 4; ++i)
    shape.trips.push_back(*rc::gen::inRange<int32_t>(0, 24));
  int64_t k = *rc::gen::inRange<int64_t>(1, 30);
  ReverseADOptions o;
  auto full = gradientModule(shape.text, o);
  o.checkpointLoops = true;
  auto checkpointed = gradientModule(shape.text, o);
  Interpreter interp;
  auto fp = Program::create(*full);
  auto cp = Program::create(*checkpointed);
  RC_ASSERT(fp.ok() && cp.ok());
  LaunchOptions options;
  options.checkpointInterval = k;
  RC_ASSERT(gradientBits(**cp, interp, shape, options) == gradientBits(**fp, interp, shape, {}));
}

TEST(CheckpointBudgetTest, LaunchChoosesAnIntervalThatFitsTheBudget) {
  Shape shape = shapes()[0];
  shape.trips = {64, 64, 64, 64};
  ReverseADOptions o;
  o.checkpointLoops = true;
  auto m = gradientModule(shape.text, o);
  Interpreter interp;
  auto p = Program::create(*m);
  ASSERT_TRUE(p.ok());
  LaunchOptions options;
  options.adStackMemoryBudget = 1 << 20; // the full tape fits
  std::vector<uint64_t> full = gradientBits(**p, interp, shape, options);
  EXPECT_EQ((*p)->lastCheckpointInterval(), 0);
  // 64 iterations tape an f32 and an i32 each: 512 bytes. 200 bytes fit
  // the states of 8 segments (f32 + i32) and a segment of 8 iterations
  // (2 x 32 bytes), with the other stacks.
  options.adStackMemoryBudget = 200;
  EXPECT_EQ(gradientBits(**p, interp, shape, options), full);
  int64_t k = (*p)->lastCheckpointInterval();
  EXPECT_GT(k, 1);
  EXPECT_LT(k, 64);
  int64_t bytes = 0;
  for (const auto &[stack, cap] : (*p)->lastAdStackCapacities())
    bytes += adStackBytes(*stack, cap);
  EXPECT_LE(bytes, 200);
  // Nothing fits 1 byte: the least memory.
  options.adStackMemoryBudget = 1;
  EXPECT_EQ(gradientBits(**p, interp, shape, options), full);
  EXPECT_GE((*p)->lastCheckpointInterval(), 2);
  EXPECT_LE((*p)->lastCheckpointInterval(), 16);
}

/// The runtime shape's kernel with 64 iterations per loop, its fully taped
/// and its checkpointed gradient, and the fully taped gradient's bits on
/// `backend`.
struct SixtyFour {
  Shape shape = shapes()[0];
  std::unique_ptr<Module> full, checkpointed;
  std::vector<uint64_t> expected;
  explicit SixtyFour(Backend &backend) {
    shape.trips = {64, 64, 64, 64};
    ReverseADOptions o;
    full = gradientModule(shape.text, o);
    o.checkpointLoops = true;
    checkpointed = gradientModule(shape.text, o);
    auto reference = Program::create(*full);
    EXPECT_TRUE(reference.ok());
    if (reference.ok())
      expected = gradientBits(**reference, backend, shape, {});
  }
};

/// A budget that holds one fully taped iteration but not two, on four
/// workers and four iterations, checkpoints instead (Backend::adStackParallelism:
/// chooseLaunchCheckpointInterval), so that every worker runs; one worker
/// alone tapes fully under the same budget. Both give the fully taped
/// gradient (bit for bit, but for sums four workers add into in any order).
TEST(CheckpointBudgetTest, AllWorkersRunCheckpointedRatherThanOneTaped) {
  CpuBackendOptions four;
  four.threads = 4;
  four.vectorWidth = 1; // a worker per iteration of the 4
  CpuBackendOptions one = four;
  one.threads = 1;
  auto many = CpuBackend::create(four);
  auto single = CpuBackend::create(one);
  ASSERT_TRUE(many.ok() && single.ok());
  SixtyFour g(**single);
  const Shape &shape = g.shape;
  const std::vector<uint64_t> &expected = g.expected;
  // 64 iterations taping an f32 and an i32: 512 bytes and a bit an
  // iteration; 700 bytes hold one fully taped, not two.
  LaunchOptions options;
  options.adStackMemoryBudget = 700;
  auto cp = Program::create(*g.checkpointed);
  ASSERT_TRUE(cp.ok());
  EXPECT_EQ(gradientBits(**cp, **single, shape, options), expected);
  EXPECT_EQ((*cp)->lastCheckpointInterval(), 0);
  // @x.grad (the first four) is each iteration's own element: the same
  // bits. Every iteration adds into every element of @w.grad, and four
  // workers reach them in whatever order they run: the sums may round
  // differently (ulps), as they may for the fully taped gradient on four
  // workers.
  std::vector<uint64_t> got = gradientBits(**cp, **many, shape, options);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (i < 4) {
      EXPECT_EQ(got[i], expected[i]) << i;
      continue;
    }
    double a, b;
    std::memcpy(&a, &got[i], sizeof a);
    std::memcpy(&b, &expected[i], sizeof b);
    EXPECT_NEAR(a, b, 1e-6 * std::fabs(b)) << i;
  }
  int64_t k = (*cp)->lastCheckpointInterval();
  EXPECT_GT(k, 1);
  EXPECT_LT(k, 64);
  std::optional<AdStackHeapUsage> u = (*many)->lastAdStackHeapUsage();
  ASSERT_TRUE(u);
  EXPECT_EQ(u->threads, 4);
  EXPECT_EQ(u->waves, 1);
  EXPECT_LE(u->bytes, options.adStackMemoryBudget);
}

/// With the default budget (LaunchOptions::adStackMemoryBudget = 0), a
/// launch whose one iteration's full tape does not fit what the host can
/// spare checkpoints instead of failing: on a CPU backend told the host has
/// 3200 bytes (CpuBackendOptions::availableMemoryBytes: a default budget of
/// 1600 bytes, over the worker's lanes for one iteration), the fully taped
/// gradient fails (a worker's lanes tape 512 bytes each), the checkpointed
/// one runs with an interval chosen from the default budget, within it,
/// and gives the fully taped gradient.
TEST(CheckpointBudgetTest, TheDefaultBudgetCheckpointsWhatDoesNotFit) {
  CpuBackendOptions roomy;
  roomy.threads = 1;
  roomy.vectorWidth = 8;
  CpuBackendOptions tight = roomy;
  tight.availableMemoryBytes = 3200;
  auto big = CpuBackend::create(roomy);
  auto small = CpuBackend::create(tight);
  ASSERT_TRUE(big.ok() && small.ok());
  SixtyFour g(**big);
  const Shape &shape = g.shape;
  const std::vector<uint64_t> &expected = g.expected;
  const std::unique_ptr<Module> &full = g.full, &checkpointed = g.checkpointed;
  // 64 iterations tape an f32 and an i32 each: 512 bytes per lane, over
  // the budget for the worker's lanes.
  auto taped = Program::create(*full);
  ASSERT_TRUE(taped.ok());
  (*taped)->field("n")->set(0, Scalar::ofInt(ScalarType::I32, 64));
  ASSERT_TRUE((*taped)->launch("k", {}, **small, {}).ok());
  absl::Status s = (*taped)->launch("k_grad", {}, **small, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s.message();
  EXPECT_NE(s.message().find("one iteration's adstacks need"), std::string::npos) << s.message();

  auto cp = Program::create(*checkpointed);
  ASSERT_TRUE(cp.ok());
  EXPECT_EQ(gradientBits(**cp, **small, shape, {}), expected);
  int64_t k = (*cp)->lastCheckpointInterval();
  EXPECT_GT(k, 1);
  EXPECT_LT(k, 64);
  std::optional<AdStackHeapUsage> u = (*small)->lastAdStackHeapUsage();
  ASSERT_TRUE(u);
  EXPECT_EQ(u->checkpointInterval, k);
  EXPECT_EQ(u->budgetBytes, 1600);
  EXPECT_LE(u->bytes, 1600);
  // With the host's memory the loops stay fully taped.
  EXPECT_EQ(gradientBits(**cp, **big, shape, {}), expected);
  EXPECT_EQ((*cp)->lastCheckpointInterval(), 0);
}

/// Launches of one gradient from several threads, each with its own
/// interval and its own ndarrays: the interval is a module field, so the
/// launches take turns from setting it to their end (Program::launch);
/// each gets the fully taped gradient of its data, bit for bit.
TEST(CheckpointBudgetTest, ConcurrentLaunchesWithDifferentIntervalsGetTheirOwnGradients) {
  constexpr int kN = 64;
  const char *text = R"(
kernel @k(%x: ndarray<f32, 1> grad, %y: ndarray<f32, 1> grad, %n: i32) {
  %len = shape %x, 0 : i32
  parallel for %i = 0 to %len {
    %xi = load %x[%i] : f32
    %v = alloca f32
    store %v, %xi
    for %j = 0 to %n {
      %a = load %v : f32
      %s = sin %a : f32
      %p = mul %s, %a : f32
      %c = const 0.25 : f32
      %b = add %p, %c : f32
      store %v, %b
    }
    %r = load %v : f32
    store %y[%i], %r
  }
}
)";
  ReverseADOptions o;
  o.checkpointLoops = true;
  auto checkpointed = gradientModule(text, o);
  auto full = gradientModule(text, {});
  std::unique_ptr<Backend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  struct Lane {
    std::vector<Buffer> x, y; // primal, grad
    int64_t k;
    int32_t n;
  };
  auto makeLane = [&](int64_t k, int32_t n, double scale) {
    Lane l{{}, {}, k, n};
    for (int c = 0; c < 2; ++c) {
      l.x.push_back(*Buffer::create(ScalarType::F32, {kN}));
      l.y.push_back(*Buffer::create(ScalarType::F32, {kN}));
    }
    for (int i = 0; i < kN; ++i)
      l.x[0].set(i, Scalar::ofFloat(ScalarType::F32, scale * (i % 9) - 0.3));
    return l;
  };
  // x.grad after @k_grad with y.grad = 1, as bits.
  auto gradient = [](Program &p, Backend &b, Lane &l, const LaunchOptions &options) {
    l.y[1].fill(Scalar::ofFloat(ScalarType::F32, 1.0));
    l.x[1].fill(Scalar::ofFloat(ScalarType::F32, 0.0));
    NdarrayArg x{&l.x[0], &l.x[1]}, y{&l.y[0], &l.y[1]};
    const LaunchArg args[] = {LaunchArg::ndarray(&x), LaunchArg::ndarray(&y), LaunchArg::i32(l.n)};
    absl::Status s = p.launch("k_grad", args, b, options);
    EXPECT_TRUE(s.ok()) << s.message();
    std::vector<uint32_t> bits(kN);
    std::memcpy(bits.data(), l.x[1].data(), kN * 4);
    return bits;
  };
  std::vector<Lane> lanes;
  lanes.push_back(makeLane(2, 24, 0.11));
  lanes.push_back(makeLane(5, 17, 0.07));
  lanes.push_back(makeLane(3, 30, 0.05));
  std::vector<std::vector<uint32_t>> expected;
  auto fp = Program::create(*full);
  ASSERT_TRUE(fp.ok());
  for (Lane &l : lanes)
    expected.push_back(gradient(**fp, *cpu, l, {}));
  auto cp = Program::create(*checkpointed);
  ASSERT_TRUE(cp.ok());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < lanes.size(); ++t)
    threads.emplace_back([&, t] {
      LaunchOptions options;
      options.checkpointInterval = lanes[t].k;
      for (int round = 0; round < 40; ++round)
        wrong += gradient(**cp, *cpu, lanes[t], options) != expected[t];
    });
  for (std::thread &th : threads)
    th.join();
  EXPECT_EQ(wrong.load(), 0);
}

} // namespace
} // namespace qd
