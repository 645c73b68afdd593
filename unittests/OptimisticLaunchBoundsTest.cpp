//===- OptimisticLaunchBoundsTest.cpp - Optimistic bounded stacks ---------===//
//
// The optimistic launch of stacks with a static bound (an upper bound it
// refines at launch) or counted with a bound of their own, on every backend
// this machine has, and random gradients against the interpreter
// (OptimisticLaunchHarness.h).
//
//===----------------------------------------------------------------------===//
#include "OptimisticLaunchHarness.h"
#include "SelfBoundedStack.h"

#include <cmath>

namespace qd {
namespace {

using namespace optimistictest;
using optimistictest::cuda; // the backend, not the namespace qd::cuda

// Where the kernel has no optimistic launch with it (here: the stack is
// read before its last push), an upper bound stays the capacity, and the
// counting kernel counts only the stack outside the grammar.
void expectUpperBoundKeptWithoutOptimisticLaunch() {
  std::unique_ptr<Module> mixed = parseVerified(R"(
field @x : f32[8]
kernel @k(%n: i32) {
  parallel for %i = 0 to 8 {
    %w = adstack.alloca i32, capacity 0
    %c = alloca i32
    %one = const 1 : i32
    while {
      %cv = load %c : i32
      %done = cmp ge %cv, %n : i32
      if %done {
        break
      }
      adstack.push %w, %cv
      %cv1 = add %cv, %one : i32
      store %c, %cv1
    }
    %s = adstack.alloca f32, capacity 0
    for %j = 0 to 100 {
      %a = load @x[%i] : f32
      adstack.push %s, %a
      %t = adstack.load_top %s : f32
      %small = cmp lt %t, %a : f32
      if %small {
        break
      }
    }
  }
}
)");
  ASSERT_TRUE(mixed);
  KernelSizing ms = sizeAdStacks(*mixed->findKernel("k"));
  ASSERT_EQ(ms.stacks().size(), 2u);
  EXPECT_EQ(ms.stacks()[0].tier, SizingTier::Measured) << ms.describe(ms.stacks()[0]);
  EXPECT_EQ(ms.stacks()[1].tier, SizingTier::Constant) << ms.describe(ms.stacks()[1]);
  EXPECT_FALSE(ms.stacks()[1].refined) << ms.describe(ms.stacks()[1]);
  EXPECT_EQ(ms.numCounted(), 1);
}

// A stack whose static bound is only an upper bound (a loop that may leave
// early: 100 iterations at most, here 1 to 30) is refined by the optimistic
// launch: the first launch runs at the bound and measures the need, the
// next ones at the need, growing by reruns. Without the optimistic launch
// it keeps its bound, and no counting kernel runs for it.
TEST(OptimisticLaunchTest, AnUpperBoundIsRefinedByTheOptimisticLaunch) {
  constexpr const char *kText = R"(
field @x : f32[64]
field @y : f32[64]

kernel @k() {
  parallel for %i = 0 to 64 {
    %s = adstack.alloca f32, capacity 0
    %v = alloca f32
    %a = load @x[%i] : f32
    store %v, %a
    for %j = 0 to 100 {
      %cur = load %v : f32
      adstack.push %s, %cur
      %h = const 0.5 : f32
      %n = mul %cur, %h : f32
      store %v, %n
      %lim = const 1.0 : f32
      %small = cmp lt %n, %lim : f32
      if %small {
        break
      }
    }
    %top = adstack.load_top %s : f32
    store @y[%i], %top
  }
}
)";
  std::unique_ptr<Module> m = parseVerified(kText);
  ASSERT_TRUE(m);
  const Kernel &k = *m->findKernel("k");
  Interpreter interp;
  for (Backend *backend : compiledBackends(interp)) {
    SCOPED_TRACE(std::string(backend->name()));
    const KernelSizing &sizing = **backend->adStackSizing(k);
    const AdStackSize &s = sizing.stacks()[0];
    EXPECT_EQ(s.tier, SizingTier::Constant);
    EXPECT_EQ(s.capacity, 100);
    EXPECT_FALSE(s.exact);
    EXPECT_TRUE(s.refined);
    EXPECT_TRUE(s.measuredAtLaunch());
    ASSERT_NE(sizing.optimistic(), nullptr) << sizing.optimisticRefusal();
    EXPECT_NE(sizing.describe(s).find("refined at launch [count-kernel] = need[0]"),
              std::string::npos)
        << sizing.describe(s);
    std::unique_ptr<Program> p = *Program::create(*m);
    // x = 2^e pushes e + 1 entries (the push before the halving that
    // drops below 1).
    auto launch = [&](int most, bool optimisticOn, int64_t refineAbove = 0) -> absl::Status {
      for (int i = 0; i < 64; ++i)
        p->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, std::ldexp(1.0, i % most)));
      LaunchOptions o;
      o.optimisticAdStacks = optimisticOn;
      o.refineAdStacksAboveBytes = refineAbove;
      absl::Status st = p->launch("k", {}, *backend, o);
      Buffer &y = *p->field("y");
      EXPECT_TRUE(y.syncToHost().ok());
      for (int i = 0; i < 64; ++i)
        EXPECT_EQ(y.get(i).f, 1.0) << i; // the last push: the value that halves below 1
      return st;
    };
    using Path = Program::MeasuredLaunch::Path;
    struct Step {
      int most;
      bool optimisticOn;
      Path path;
      int64_t capacity; // recorded: the need where measured
      bool reruns;
    } steps[] = {
        {20, true, Path::Optimistic, 20, false}, // at the bound 100
        {20, true, Path::Optimistic, 20, false}, // at 20
        {30, true, Path::Optimistic, 30, true},  // grows
        {10, true, Path::Optimistic, 10, false}, // at 30, then follows
        {30, false, Path::None, 100, false},     // the bound, no counting
    };
    for (const Step &step : steps) {
      SCOPED_TRACE(step.most);
      ASSERT_TRUE(launch(step.most, step.optimisticOn).ok());
      EXPECT_EQ(p->lastMeasuredLaunch().path, step.path);
      EXPECT_EQ(p->lastAdStackCapacities().at(s.stack), step.capacity);
      EXPECT_EQ(p->lastMeasuredLaunch().rerunIterations > 0, step.reruns);
    }
    // By default a bound this small (100 entries of 8 bytes, value and
    // adjoint, for 64 iterations: 51 200 bytes) is not worth a wait for the
    // device's counts: the launch runs at it, unmeasured; one byte below
    // that, it measures again.
    ASSERT_TRUE(launch(20, true, LaunchOptions().refineAdStacksAboveBytes).ok());
    EXPECT_EQ(p->lastMeasuredLaunch().path, Path::None);
    EXPECT_EQ(p->lastAdStackCapacities().at(s.stack), 100);
    ASSERT_TRUE(launch(20, true, 51200).ok());
    EXPECT_EQ(p->lastMeasuredLaunch().path, Path::None);
    ASSERT_TRUE(launch(20, true, 51199).ok());
    EXPECT_EQ(p->lastMeasuredLaunch().path, Path::Optimistic);
    EXPECT_EQ(p->lastAdStackCapacities().at(s.stack), 20);
  }
  SizingOptions off;
  off.refineUpperBounds = false;
  EXPECT_FALSE(sizeAdStacks(k, off).stacks()[0].refined);
  EXPECT_EQ(sizeAdStacks(k, off).countKernel(), nullptr);
  expectUpperBoundKeptWithoutOptimisticLaunch();
}

// A stack whose pushes depend on its own values, counted with a bound on
// every backend (docs/sizing.md, "Bounded stacks"): each launch gets the
// exact need, beyond the first bound (the default capacity 256) too, with
// as many counting runs as the bound needs to double; threads of one
// vector group or warp stop past the bound at different points.
TEST(OptimisticLaunchTest, AStackBoundedByItsOwnValuesIsCountedOnEveryBackend) {
  const std::string text = "field @len : i32[64]\nfield @out : i32[64]\nkernel @k() {\n"
                           "  parallel for %i = 0 to 64 {\n    %n = load @len[%i] : i32" +
                           testtext::selfBoundedStack("@out[%i]") + "  }\n}\n";
  std::unique_ptr<Module> m = parseVerified(text);
  ASSERT_TRUE(m);
  Interpreter interp;
  for (Backend *backend : compiledBackends(interp)) {
    SCOPED_TRACE(std::string(backend->name()));
    std::unique_ptr<Program> p = *Program::create(*m);
    const AdStackSize &s = (*backend->adStackSizing(*m->findKernel("k")))->stacks()[0];
    ASSERT_EQ(s.tier, SizingTier::Measured);
    struct Step {
      int most, runs;
    } steps[] = {{9, 1}, {1000, 6}, {1000, 1}, {3, 1}, {40, 2}};
    for (Step step : steps) {
      SCOPED_TRACE(step.most);
      for (int i = 0; i < 64; ++i)
        p->field("len")->set(i, Scalar::ofInt(ScalarType::I32, (i * 37) % (step.most + 1)));
      p->field("len")->set(17, Scalar::ofInt(ScalarType::I32, step.most));
      ASSERT_TRUE(p->launch("k", {}, *backend).ok());
      EXPECT_EQ(p->lastAdStackCapacities().at(s.stack), step.most + 1);
      EXPECT_EQ(p->lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Counted);
      EXPECT_EQ(p->lastMeasuredLaunch().countingRuns, step.runs);
      Buffer &out = *p->field("out");
      ASSERT_TRUE(out.syncToHost().ok());
      for (int i = 0; i < 64; ++i)
        ASSERT_EQ(out.get(i).i, i == 17 ? step.most : (i * 37) % (step.most + 1)) << i;
    }
  }
}

// Random gradients (GenConfig::autodiff, tasks of up to 21 iterations)
// launched optimistically on `backend`, the first launch at capacity 1,
// against the interpreter counting: the same gradients (within `rtol`) and
// capacities (testgen::checkOptimisticLaunch). On the CPU's 8 lanes, lanes
// of a group overflow and others do not.
void checkRandomGradients(Backend &backend, double rtol) {
  testgen::GenConfig config = testgen::GenConfig::autodiff();
  config.threads = 20;
  // About a quarter of the gradients have an optimistic launch (the
  // interpreter's property covers the counting fallback): draw until one.
  for (int tries = 0; tries < 40; ++tries) {
    testgen::GenProgram p = *testgen::genProgram(config);
    auto m = parseModule(testgen::print(p).text, {"random.qd", 1});
    if (!m.ok())
      testgen::fail(p, "does not parse: " + message(m.status()));
    std::unique_ptr<Module> module = *std::move(m);
    if (auto g = buildGradientKernel(*module, *module->findKernel("k")); !g.ok())
      testgen::fail(p, "no gradient: " + message(g.status()));
    if (!sizeAdStacks(*module->findKernel("k_grad")).optimistic())
      continue;
    Interpreter interp;
    int64_t reruns = 0;
    if (std::string d =
            testgen::checkOptimisticLaunch(p, *module, "k_grad", interp, backend, rtol, &reruns);
        !d.empty())
      testgen::fail(p, d);
    RC_CLASSIFY(reruns > 0, "iterations rerun");
    return;
  }
}

QD_PROPERTY(OptimisticLaunchTest, RandomGradientsOnEightLanesMatchTheInterpreter, 40) {
  checkRandomGradients(cpu(8), 1e-9);
}

// On a GPU the math library differs from the host's (libdevice; qd's own
// SPIR-V functions): agreement within the GPU suites' tolerance.
TEST(OptimisticLaunchTest, RandomGradientsOnCudaMatchTheInterpreter) {
  REQUIRE(cuda(), "CUDA");
  testgen::checkProperty([] { checkRandomGradients(*cuda(), 1e-4); }, 30);
}

TEST(OptimisticLaunchTest, RandomGradientsOnVulkanMatchTheInterpreter) {
  REQUIRE(vulkan(), "Vulkan");
  testgen::checkProperty([] { checkRandomGradients(*vulkan(), 1e-4); }, 12);
}

} // namespace
} // namespace qd
