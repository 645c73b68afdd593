//===- AdStackSizingTest.cpp - Adstack sizing tier 1 ----------------------===//
//
// Every case sizes a kernel's adstacks (tier, method, capacity or launch-time
// expression, exactness) and runs it through Program::launch on the
// interpreter, checking that the capacity each stack got is never below the
// depth the interpreter observed (soundness) and equals max(observed, 1)
// when the sizing claims to be exact (tightness). This file: tier 1
// (structural and Bellman-Ford); the other tiers, measured stacks and the
// random kernels are in AdStackSizing{LaunchTime,Measured,Random}Test.cpp.
//
//===----------------------------------------------------------------------===//
#include "AdStackSizingHarness.h"

namespace qd {
namespace {

using namespace sizingtest;

//===----------------------------------------------------------------------===//
// Tier 1: structural and Bellman-Ford
//===----------------------------------------------------------------------===//

TEST(AdStackSizingTest, StraightLineDepthIsExact) {
  Harness h(R"(
kernel @k() {
  serial {
    %s = adstack.alloca f32, capacity 0
    %t = adstack.alloca i32, capacity 0
    %x = const 1.0 : f32
    %c = const 7 : i32
    adstack.push %s, %x
    adstack.push %s, %x
    adstack.pop %s
    adstack.push %s, %x
    adstack.push %s, %x
    adstack.pop %s
    adstack.pop %s
    adstack.push %t, %c
    adstack.pop %t
    adstack.push %t, %c
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 3);
  EXPECT_TRUE(s.exact);
  const AdStackSize &t = h.stack("%t");
  EXPECT_EQ(t.method, SizingMethod::Structural);
  EXPECT_EQ(t.capacity, 1);
  EXPECT_TRUE(t.exact);
  EXPECT_TRUE(h.sizing().warnings().empty());

  ASSERT_TRUE(h.run().ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 3);
  EXPECT_EQ(h.program->lastAdStackCapacities().at(t.stack), 1);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 3);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(t.stack), 1);
  h.checkLaunch();
}

TEST(AdStackSizingTest, BalancedConstantLoopIsOne) {
  Harness h(R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    for %j = 0 to 100 {
      adstack.push %s, %x
      %t = adstack.load_top %s : f32
      adstack.pop %s
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 1);
  EXPECT_TRUE(s.exact);
  ASSERT_TRUE(h.run().ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 1);
  h.checkLaunch();
}

TEST(AdStackSizingTest, BalancedDynamicLoopIsOneByBellmanFord) {
  Harness h(R"(
kernel @k(%n: i32) {
  parallel for %i = 0 to 4 {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    for %j = 0 to %n {
      adstack.push %s, %x
      adstack.pop %s
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::BellmanFord);
  EXPECT_EQ(s.capacity, 1);
  // Exact: no stack gets less than 1, whatever %n is (0 runs need none).
  EXPECT_TRUE(s.exact);
  EXPECT_EQ(bellmanFordDepth(h.kernel(), *s.stack), 1);
  KernelSizing bf = sizeAdStacks(h.kernel(), onlyTier1(false, true));
  EXPECT_EQ(bf.stacks()[0].method, SizingMethod::BellmanFord);
  EXPECT_EQ(bf.stacks()[0].capacity, 1);
  for (int n : {0, 1, 37}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(n)}).ok());
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), n > 0 ? 1 : 0);
    h.checkLaunch();
  }
}

TEST(AdStackSizingTest, PushOnlyLoopIsTripCount) {
  Harness h(R"(
kernel @k() {
  serial {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    for %j = 0 to 100 {
      adstack.push %s, %x
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 100);
  EXPECT_TRUE(s.exact);
  EXPECT_EQ(bellmanFordDepth(h.kernel(), *s.stack), std::nullopt); // a positive cycle
  ASSERT_TRUE(h.run({}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 100);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 100);
  h.checkLaunch();
}

TEST(AdStackSizingTest, NestedConstantLoopsMultiply) {
  Harness h(R"(
kernel @k() {
  parallel for %i = 0 to 3 {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    adstack.push %s, %x
    for %j = 2 to 6 {
      for %l = 0 to 5 {
        adstack.push %s, %x
        adstack.push %s, %x
        adstack.pop %s
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 1 + 4 * 5 * 1 + 1); // the last iteration peaks one above its net
  EXPECT_TRUE(s.exact);
  ASSERT_TRUE(h.run().ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 22);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 22);
  h.checkLaunch();
}

TEST(AdStackSizingTest, ExclusiveIfArmsTakeTheMaxNotTheSum) {
  Harness h(R"(
field @x : f32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %s = adstack.alloca f32, capacity 0
    %v = load @x[%i] : f32
    %z = const 0.0 : f32
    %p = cmp gt %v, %z : f32
    if %p {
      adstack.push %s, %v
      adstack.push %s, %v
      adstack.push %s, %v
    } else {
      for %j = 0 to 2 {
        adstack.push %s, %v
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 3);
  // The arms differ, so the maximum is reported as an upper bound.
  EXPECT_FALSE(s.exact);
  // Only the else arm runs: depth 2 within capacity 3.
  ASSERT_TRUE(h.run().ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 3);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 2);
  h.checkLaunch();
  // Positive data on one lane takes the then arm there: depth 3.
  Buffer *x = h.program->field("x");
  x->set(5, Scalar::ofFloat(ScalarType::F32, 1.0));
  ASSERT_TRUE(h.run().ok());
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 3);
  h.checkLaunch();
}

TEST(AdStackSizingTest, EqualIfArmsAreExact) {
  Harness h(R"(
kernel @k(%c: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    %z = const 0 : i32
    %p = cmp gt %c, %z : i32
    if %p {
      adstack.push %s, %c
      adstack.push %s, %c
    } else {
      adstack.push %s, %z
      adstack.push %s, %z
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 2);
  EXPECT_TRUE(s.exact);
  for (int c : {-1, 1}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(c)}).ok());
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 2);
    h.checkLaunch();
  }
}

// The motivating case of the structural pre-pass: a bounded inner range must
// not fall back to the default capacity.
TEST(AdStackSizingTest, BoundedInnerLoopIgnoresTheDefault) {
  Harness h(R"(
field @x : f32[16] grad
field @y : f32 grad
kernel @k() {
  parallel for %i = 0 to 16 {
    %s = adstack.alloca f32, capacity 0
    %v = alloca f32
    %x0 = load @x[%i] : f32
    store %v, %x0
    %c = const 0.1 : f32
    for %j = 0 to 5 {
      %a = load %v : f32
      adstack.push %s, %a
      %b = sin %a : f32
      %d = add %b, %c : f32
      store %v, %d
    }
    %r = load %v : f32
    atomic_add @y[], %r : f32
    for %j2 = 0 to 5 {
      %t = adstack.load_top %s : f32
      %g = cos %t : f32
      atomic_add @x.grad[%i], %g : f32
      adstack.pop %s
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Structural);
  EXPECT_EQ(s.capacity, 5);
  EXPECT_TRUE(s.exact);
  absl::Status st = h.run({}, withDefault(1));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 5);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 5);
  h.checkLaunch();
}

//===----------------------------------------------------------------------===//
// The two tier-1 analyses agree
//===----------------------------------------------------------------------===//

TEST(AdStackSizingTest, StructuralAndBellmanFordAgree) {
  Harness h(R"(
kernel @line(%k: i32) {
  serial {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    adstack.push %s, %x
    adstack.push %s, %x
    adstack.pop %s
    adstack.push %s, %x
    adstack.push %s, %x
    adstack.pop %s
    adstack.pop %s
  }
}
kernel @loop(%k: i32) {
  serial {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    adstack.push %s, %x
    for %j = 0 to 100 {
      adstack.push %s, %x
      adstack.push %s, %x
      adstack.pop %s
      adstack.pop %s
    }
  }
}
kernel @arms(%c: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    %z = const 0 : i32
    %p = cmp gt %c, %z : i32
    if %p {
      adstack.push %s, %c
      adstack.push %s, %c
      adstack.push %s, %c
      adstack.pop %s
    } else {
      adstack.push %s, %c
    }
    adstack.push %s, %c
  }
}
kernel @brk(%k: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    while {
      adstack.push %s, %k
      adstack.push %s, %k
      %c = cmp gt %k, %k : i32
      if %c {
        break
      }
      adstack.pop %s
      adstack.pop %s
      break
    }
  }
}
kernel @push(%k: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to 12 {
      adstack.push %s, %k
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  struct Expect {
    const char *kernel;
    int64_t depth;
    std::optional<int64_t> bellmanFord;
  };
  for (Expect e : {Expect{"line", 3, 3}, Expect{"loop", 3, 3}, Expect{"arms", 3, 3},
                   Expect{"brk", 2, 2}, Expect{"push", 12, std::nullopt}}) {
    SCOPED_TRACE(e.kernel);
    const Kernel &k = h.kernel(e.kernel);
    KernelSizing both = sizeAdStacks(k);
    KernelSizing structural = sizeAdStacks(k, onlyTier1(true, false));
    KernelSizing bf = sizeAdStacks(k, onlyTier1(false, true));
    ASSERT_EQ(both.stacks().size(), 1u);
    const AdStackSize &s0 = both.stacks()[0], &s1 = structural.stacks()[0], &s2 = bf.stacks()[0];
    EXPECT_EQ(s0.method, SizingMethod::Structural);
    EXPECT_EQ(s0.capacity, e.depth);
    EXPECT_EQ(s1.method, SizingMethod::Structural);
    EXPECT_EQ(s1.capacity, e.depth);
    EXPECT_EQ(bellmanFordDepth(k, *s0.stack), e.bellmanFord);
    if (e.bellmanFord) {
      EXPECT_EQ(s2.method, SizingMethod::BellmanFord);
      EXPECT_EQ(s2.capacity, *e.bellmanFord);
      EXPECT_EQ(s2.capacity, s1.capacity);
    } else {
      // Without the structural tier, the constant loop is a closed SizeExpr.
      EXPECT_EQ(s2.method, SizingMethod::Evaluated);
      EXPECT_EQ(s2.capacity, e.depth);
    }
    ASSERT_TRUE(h.run({LaunchArg::i32(1)}, {}, e.kernel).ok());
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s0.stack), e.depth);
    h.checkLaunch(e.kernel);
  }
  // Switching both tier-1 analyses off leaves the balanced loop to tier 2,
  // which folds it at compile time.
  KernelSizing none = sizeAdStacks(h.kernel("loop"), onlyTier1(false, false));
  EXPECT_EQ(none.stacks()[0].method, SizingMethod::Evaluated);
  EXPECT_EQ(none.stacks()[0].capacity, 3);
}

} // namespace
} // namespace qd
