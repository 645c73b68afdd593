//===- AdStackSizingMeasuredTest.cpp - Measured and default adstacks ------===//
//
// Stacks outside the sizing grammar: unused ones, overflowing bounds,
// stacks measured by the counting kernel (bounded, in stages, on copies of
// written memory), tier 3's default and declared capacities.
//
//===----------------------------------------------------------------------===//
#include "AdStackSizingHarness.h"
#include "SelfBoundedStack.h"

namespace qd {
namespace {

using namespace sizingtest;

//===----------------------------------------------------------------------===//
// Unused, overflow, tier 3, declared
//===----------------------------------------------------------------------===//

TEST(AdStackSizingTest, UnusedStackIsOne) {
  Harness h(R"(
kernel @k() {
  serial {
    %s = adstack.alloca f32, capacity 0
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Unused);
  EXPECT_EQ(s.capacity, 1);
  EXPECT_TRUE(s.exact);
  ASSERT_TRUE(h.run().ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 0);
  h.checkLaunch();
}

TEST(AdStackSizingTest, OverflowingTripProductIsMeasured) {
  Harness h(R"(
kernel @k(%go: i32) {
  serial {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    %z = const 0 : i32
    %p = cmp gt %go, %z : i32
    if %p {
      for %a = 0 to 2147483647 {
        for %b = 0 to 2147483647 {
          for %c = 0 to 2147483647 {
            adstack.push %s, %x
          }
        }
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  // Without counting kernels: the default, with a warning.
  SizingOptions noCount;
  noCount.countKernels = false;
  KernelSizing tier3 = sizeAdStacks(h.kernel(), noCount);
  ASSERT_EQ(tier3.stacks().size(), 1u);
  EXPECT_EQ(tier3.stacks()[0].tier, SizingTier::Default);
  EXPECT_EQ(tier3.stacks()[0].method, SizingMethod::Default);
  EXPECT_EQ(tier3.stacks()[0].capacity, 256);
  EXPECT_FALSE(tier3.stacks()[0].exact);
  ASSERT_EQ(tier3.warnings().size(), 1u);
  EXPECT_NE(tier3.warnings()[0].find("t.qd:4:5: warning: adstack %s in kernel @k"),
            std::string::npos)
      << tier3.warnings()[0];
  EXPECT_NE(tier3.warnings()[0].find("overflows int64"), std::string::npos);
  // With them (the default): counted at launch, exactly; the counting kernel
  // does not enter the loops when %go is 0.
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Measured);
  EXPECT_EQ(s.method, SizingMethod::Counted);
  EXPECT_TRUE(s.exact);
  EXPECT_NE(s.reason.find("overflow"), std::string::npos) << s.reason;
  ASSERT_EQ(h.sizing().warnings().size(), 1u);
  EXPECT_NE(h.sizing().warnings()[0].find("t.qd:4:5: note: adstack %s in kernel @k"),
            std::string::npos)
      << h.sizing().warnings()[0];
  ASSERT_TRUE(h.run({LaunchArg::i32(0)}, withDefault(3)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 0);
  h.checkLaunch();
}

constexpr std::string_view kWhileKernels = R"(
kernel @k(%n: i32) {
  serial {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    %one = const 1 : i32
    %cnt = alloca i32
    while {
      %c = load %cnt : i32
      %done = cmp ge %c, %n : i32
      if %done {
        break
      }
      adstack.push %s, %x
      %c1 = add %c, %one : i32
      store %cnt, %c1
    }
  }
}
kernel @balanced(%n: i32) {
  serial {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    %one = const 1 : i32
    %cnt = alloca i32
    adstack.push %s, %x
    while {
      %c = load %cnt : i32
      %done = cmp ge %c, %n : i32
      if %done {
        break
      }
      adstack.push %s, %x
      adstack.push %s, %x
      adstack.pop %s
      adstack.pop %s
      %c1 = add %c, %one : i32
      store %cnt, %c1
    }
  }
}
)";

TEST(AdStackSizingTest, WhileLoopWithPositiveNetIsMeasuredExactly) {
  Harness h(kWhileKernels);
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Measured);
  EXPECT_EQ(s.method, SizingMethod::Counted);
  EXPECT_EQ(s.countSlot, 0);
  EXPECT_NE(s.reason.find("the while loop at t.qd:8:5 may push more than it pops"),
            std::string::npos)
      << s.reason;
  ASSERT_EQ(h.sizing().warnings().size(), 1u);
  EXPECT_EQ(h.sizing().warnings()[0].rfind("t.qd:4:5: note: adstack %s in kernel @k is "
                                           "outside the sizing grammar",
                                           0),
            0u)
      << h.sizing().warnings()[0];
  ASSERT_NE(h.sizing().countKernel(), nullptr);
  EXPECT_EQ(h.sizing().numCounted(), 1);
  EXPECT_EQ(bellmanFordDepth(h.kernel(), *s.stack), std::nullopt);
  // The capacity is the depth the launch reaches, whatever the default.
  for (int n : {16, 17, 300, 0}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(n)}, withDefault(16)).ok()) << n;
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), std::max(n, 1));
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), n);
    h.checkLaunch();
  }
  // An explicit capacity still wins, and may overflow.
  LaunchOptions fixed;
  fixed.adStackCapacities[s.stack] = 16;
  absl::Status over = h.run({LaunchArg::i32(17)}, fixed);
  EXPECT_FALSE(over.ok());
  EXPECT_NE(message(over).find("adstack overflow"), std::string::npos) << message(over);
}

// A stack whose pushes depend on its own values: its counting kernel keeps
// it as a real stack with a bound (an argument), and runs again with a
// larger bound while the need exceeds it. Every launch gets the exact need,
// far beyond the tier-3 default, in a serial and in a parallel task, and a
// thread past the bound ends (its `while` would otherwise read values that
// were never pushed).
TEST(AdStackSizingTest, AStackWhosePushesDependOnItsOwnValuesIsCountedWithABound) {
  for (const char *task : {"serial", "parallel for %i = 0 to 3"}) {
    SCOPED_TRACE(task);
    Harness h(fmt::format("kernel @k(%n: i32) {{\n  {} {{{}  }}\n}}\n", task,
                          testtext::selfBoundedStack()));
    ASSERT_TRUE(h.ok());
    const AdStackSize &s = h.stack("%s");
    EXPECT_EQ(s.tier, SizingTier::Measured);
    EXPECT_TRUE(s.exact);
    EXPECT_NE(s.reason.find("its pushes depend on its own values"), std::string::npos) << s.reason;
    const Kernel *counter = h.sizing().countKernel();
    ASSERT_NE(counter, nullptr);
    ASSERT_EQ(h.sizing().countBoundArgs().size(), 1u);
    int boundArg = h.sizing().countBoundArgs()[0];
    ASSERT_GE(boundArg, 0);
    EXPECT_EQ(counter->argument(boundArg)->name(), "adstack_bound0");
    EXPECT_TRUE(verify(*counter).ok()) << printKernel(*counter);
    for (const std::string &w : h.sizing().warnings())
      EXPECT_EQ(w.find("warning:"), std::string::npos) << w;
    // (The first bound is the default capacity, 256; after a launch, twice
    // the need, at least 32.)
    struct Step {
      int n, runs;
    } steps[] = {{9, 1}, {1000, 6}, {1000, 1}, {3, 1}, {40, 2}, {0, 1}};
    for (Step step : steps) {
      SCOPED_TRACE(step.n);
      ASSERT_TRUE(h.run({LaunchArg::i32(step.n)}).ok());
      EXPECT_EQ(h.capacity(s), step.n + 1);
      EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), step.n + 1);
      EXPECT_EQ(h.program->lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Counted);
      EXPECT_EQ(h.program->lastMeasuredLaunch().countingRuns, step.runs);
    }
  }
}

// The gradient of `while` loops nested in a `while` loop: its reverse sweep
// runs the inner loops again, with trip counts read back from the outer
// loop's tape, so counting the inner tapes needs the outer tape's values.
// They are counted in stages (the counting kernel keeps the outer tape as a
// real stack, which its own counting kernel measures): every stack is
// measured exactly, and needs beyond the tier-3 default (256) launch.
// Before, the inner tapes got the default and these launches overflowed.
TEST(AdStackSizingTest, NestedWhileLoopsOfAGradientAreCountedInStages) {
  Harness h(R"(
field @x : f32[3] grad
field @m : i32[3]
field @y : f32[3] grad

kernel @k() {
  parallel for %i = 0 to 3 {
    %v = alloca f32
    %x = load @x[%i] : f32
    store %v, %x
    %m = load @m[%i] : i32
    %a = alloca i32
    while {
      %ka = load %a : i32
      %done = cmp ge %ka, %m : i32
      if %done {
        break
      }
      %b = alloca i32
      %step = const 150 : i32
      %lim = mul %ka, %step : i32
      while {
        %kb = load %b : i32
        %inner = cmp ge %kb, %lim : i32
        if %inner {
          break
        }
        %c = alloca i32
        while {
          %kc = load %c : i32
          %three = const 3 : i32
          %innermost = cmp ge %kc, %three : i32
          if %innermost {
            break
          }
          %w = load %v : f32
          %sw = sin %w : f32
          store %v, %sw
          %one3 = const 1 : i32
          %kc1 = add %kc, %one3 : i32
          store %c, %kc1
        }
        %one2 = const 1 : i32
        %kb1 = add %kb, %one2 : i32
        store %b, %kb1
      }
      %one = const 1 : i32
      %ka1 = add %ka, %one : i32
      store %a, %ka1
    }
    %r = load %v : f32
    store @y[%i], %r
  }
}
)");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(buildGradientKernel(*h.module, h.kernel()).ok());
  ASSERT_TRUE(verify(*h.module).ok());
  const KernelSizing &ks = h.sizing("k_grad");
  int measured = 0;
  for (const AdStackSize &s : ks.stacks()) {
    EXPECT_NE(s.tier, SizingTier::Default) << ks.describe(s);
    measured += s.tier == SizingTier::Measured;
  }
  EXPECT_GE(measured, 3);
  ASSERT_NE(ks.countKernel(), nullptr);
  ASSERT_TRUE(verify(*ks.countKernel()).ok()) << printKernel(*ks.countKernel());
  // Outer trip counts 0, 2 and 4: inner loops of up to 450 iterations.
  h.setI("m", {0, 2, 4});
  for (int i = 0; i < 3; ++i) {
    h.program->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.5 + 0.1 * i));
    h.program->field("y", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
  }
  absl::Status st = h.run({}, {}, "k_grad");
  ASSERT_TRUE(st.ok()) << message(st);
  h.checkLaunch("k_grad");
  int64_t deepest = 0;
  for (const AdStackSize &s : ks.stacks())
    deepest = std::max(deepest, h.observed(s));
  EXPECT_GT(deepest, 256) << "the inner tapes must outgrow the tier-3 default";
  // d/dx of sin applied 3 * 150 * (0 + 1 + 2 + 3) times to x = 0.7: the
  // product of the cosines along the way.
  double v = 0.7, d = 1;
  for (int n = 0; n < 3 * 150 * 6; ++n) {
    d *= std::cos(static_cast<float>(v));
    v = std::sin(static_cast<float>(v));
  }
  EXPECT_NEAR(h.program->field("x", Component::Grad)->get(2).f, d, 2e-3 * std::abs(d) + 1e-9);
  EXPECT_EQ(h.program->field("x", Component::Grad)->get(0).f, 1.0f);
}

TEST(AdStackSizingTest, BalancedWhileLoopIsTier1) {
  Harness h(kWhileKernels);
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s", "balanced");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 3);
  EXPECT_TRUE(h.sizing("balanced").warnings().empty());
  EXPECT_EQ(bellmanFordDepth(h.kernel("balanced"), *s.stack), 3);
  for (int n : {0, 1, 40}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(n)}, withDefault(1), "balanced").ok());
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 3);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), n > 0 ? 3 : 1);
    h.checkLaunch("balanced");
  }
}

// A bound read from a field the kernel writes: the counting kernel replays
// the write on a copy of the field, so it counts what the kernel will push,
// and the field itself is written once, by the kernel.
TEST(AdStackSizingTest, BoundFromAWrittenFieldIsMeasuredOnACopy) {
  Harness h(R"(
field @n : i32
kernel @k() {
  serial {
    %s = adstack.alloca i32, capacity 0
    %n = load @n[] : i32
    for %j = 0 to %n {
      adstack.push %s, %j
    }
    %one = const 1 : i32
    %n1 = add %n, %one : i32
    store @n[], %n1
  }
}
kernel @later() {
  serial {
    %seven = const 7 : i32
    store @n[], %seven
    %s = adstack.alloca i32, capacity 0
    %n = load @n[] : i32
    for %j = 0 to %n {
      adstack.push %s, %j
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Measured);
  EXPECT_NE(s.reason.find("the kernel writes @n"), std::string::npos) << s.reason;
  ASSERT_NE(h.sizing().countKernel(), nullptr);
  ASSERT_EQ(h.sizing().countShadowFields().size(), 1u);
  EXPECT_EQ(h.sizing().countShadowFields()[0].first->name(), "n");
  h.setI("n", {5});
  for (int64_t launch : {5, 6, 7}) {
    ASSERT_TRUE(h.run({}, withDefault(1)).ok());
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), launch);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), launch);
    // Only the kernel wrote @n: once per launch.
    EXPECT_EQ(h.program->field("n")->get(0).i, launch + 1);
    h.checkLaunch();
  }
  // The value the loop reads is the one the kernel stored before it.
  const AdStackSize &t = h.stack("%s", "later");
  EXPECT_EQ(t.tier, SizingTier::Measured);
  ASSERT_TRUE(h.run({}, withDefault(1), "later").ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(t.stack), 7);
  h.checkLaunch("later");
}

TEST(AdStackSizingTest, BoundFromALocalVariableIsMeasured) {
  Harness h(R"(
kernel @k(%n: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    %v = alloca i32
    store %v, %n
    %m = load %v : i32
    for %j = 0 to %m {
      adstack.push %s, %j
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Measured);
  EXPECT_NE(s.reason.find("loaded from a local variable"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("t.qd:7:5"), std::string::npos) << s.reason;
  ASSERT_TRUE(h.run({LaunchArg::i32(4)}, withDefault(6)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 4);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 4);
  h.checkLaunch();
}

TEST(AdStackSizingTest, BreakAndContinueShapesAreSound) {
  Harness h(R"(
kernel @brk(%k: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to 10 {
      adstack.push %s, %j
      %c = cmp ge %j, %k : i32
      if %c {
        break
      }
      adstack.pop %s
    }
    adstack.push %s, %k
  }
}
kernel @cont(%k: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to 10 {
      adstack.push %s, %j
      %c = cmp lt %j, %k : i32
      if %c {
        continue
      }
      adstack.pop %s
    }
  }
}
kernel @dyn(%n: i32, %k: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to %n {
      adstack.push %s, %j
      %c = cmp lt %j, %k : i32
      if %c {
        continue
      }
      adstack.pop %s
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &b = h.stack("%s", "brk");
  EXPECT_EQ(b.tier, SizingTier::Constant);
  EXPECT_EQ(b.method, SizingMethod::Structural);
  EXPECT_EQ(b.capacity, 2);
  EXPECT_FALSE(b.exact);
  for (int k : {0, 5, 20}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(k)}, withDefault(1), "brk").ok());
    EXPECT_EQ(h.interp.adStackMaxDepths().at(b.stack), k < 10 ? 2 : 1);
    h.checkLaunch("brk");
  }
  const AdStackSize &c = h.stack("%s", "cont");
  EXPECT_EQ(c.tier, SizingTier::Constant);
  EXPECT_EQ(c.method, SizingMethod::Structural);
  EXPECT_EQ(c.capacity, 10);
  EXPECT_FALSE(c.exact);
  for (int k : {0, 3, 10}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(k)}, withDefault(1), "cont").ok());
    EXPECT_EQ(h.interp.adStackMaxDepths().at(c.stack), k < 10 ? k + 1 : 10);
    h.checkLaunch("cont");
  }
  const AdStackSize &d = h.stack("%s", "dyn");
  EXPECT_EQ(d.tier, SizingTier::LaunchTime);
  EXPECT_EQ(d.method, SizingMethod::SizeExpr);
  EXPECT_FALSE(d.exact);
  for (auto [n, k] : std::vector<std::pair<int, int>>{{0, 0}, {7, 7}, {7, 3}, {30, 30}}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(n), LaunchArg::i32(k)}, withDefault(1), "dyn").ok());
    EXPECT_GE(h.program->lastAdStackCapacities().at(d.stack), std::min(n, k));
    EXPECT_EQ(h.program->lastAdStackCapacities().at(d.stack), std::max(n, 1));
    h.checkLaunch("dyn");
  }
}

TEST(AdStackSizingTest, DeclaredCapacityIsKept) {
  Harness h(R"(
kernel @k() {
  serial {
    %s = adstack.alloca f32, capacity 7
    %x = const 1.0 : f32
    for %j = 0 to 3 {
      adstack.push %s, %x
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Declared);
  EXPECT_EQ(s.method, SizingMethod::Declared);
  EXPECT_EQ(s.capacity, 7);
  EXPECT_FALSE(s.exact);
  ASSERT_TRUE(h.run({}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().count(s.stack), 0u);
  EXPECT_EQ(h.interp.adStackCapacities().at(s.stack), 7);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 3);
  EXPECT_EQ(s.stack->capacity(), 7);
  h.checkLaunch();
}

} // namespace
} // namespace qd
