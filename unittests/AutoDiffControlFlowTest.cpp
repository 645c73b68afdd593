//===- AutoDiffControlFlowTest.cpp - Gradients through control flow -------===//
//
// Gradients of kernels with loops (dynamic bounds, while, break, continue)
// and ifs against finite differences (AutoDiffHarness.h), and the cost of
// reverse-mode autodiff on deep nests.
//
//===----------------------------------------------------------------------===//
#include "AutoDiffHarness.h"

namespace qd {
namespace {

using namespace adtest;

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

TEST(AutoDiffTest, NestedDynamicBoundsFromFieldsArgsAndShapes) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k(%m: i32, %a: ndarray<f64, 1> grad) {
  parallel for %i = 0 to 2 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %nb = load @n[%z] : i32
    for %j = 0 to %nb {
      %len = shape %a, 0 : i32
      for %k = 0 to %len {
        for %l = 0 to %m {
          %cur = load %v : f64
          %av = load %a[%k] : f64
          %p = mul %cur, %av : f64
          %s = sin %p : f64
          %h = const 0.5 : f64
          %q = mul %s, %h : f64
          %t = add %q, %cur : f64
          store %v, %t
        }
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  c.args = {ArgSpec::i32(2), ArgSpec::ndarray({{3}, {0.5, -0.25, 0.75}, {}})};
  c.init["n"] = {2, 0, 0, 0};
  expectGradOk(c);
}

TEST(AutoDiffTest, WhileWithBreakOnData) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %cnt = alloca i32
    %x0 = load @x[%i] : f64
    store %v, %x0
    while {
      %c = load %cnt : i32
      %one = const 1 : i32
      %c1 = add %c, %one : i32
      store %cnt, %c1
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.3 : f64
      %t = add %s, %k : f64
      store %v, %t
      %lim = const 0.9 : f64
      %big = cmp gt %t, %lim : f64
      %ten = const 10 : i32
      %many = cmp ge %c1, %ten : i32
      %stop = or %big, %many : i1
      if %stop {
        break
      }
    }
    %r = load %v : f64
    %cf = load %cnt : i32
    %cff = cast %cf : i32 to f64
    %rr = mul %r, %cff : f64
    atomic_add @y[], %rr : f64
  }
}
)");
  expectGradOk(c);
}

TEST(AutoDiffTest, IfElseOnLoopCarriedValue) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 6 {
      %cur = load %v : f64
      %z = const 0.0 : f64
      %pos = cmp gt %cur, %z : f64
      if %pos {
        %s = sin %cur : f64
        %k = const -0.4 : f64
        %t = add %s, %k : f64
        store %v, %t
      } else {
        %c = cos %cur : f64
        %t2 = mul %c, %cur : f64
        %k2 = const 0.35 : f64
        %t3 = add %t2, %k2 : f64
        store %v, %t3
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  expectGradOk(c);
}

TEST(AutoDiffTest, ContinueInsideLoops) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 7 {
      %one = const 1 : i32
      %par = and %j, %one : i32
      %odd = cast %par : i32 to i1
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.2 : f64
      %t = add %s, %k : f64
      store %v, %t
      if %odd {
        continue
      }
      %cur2 = load %v : f64
      %sq = mul %cur2, %cur2 : f64
      %t2 = add %sq, %k : f64
      store %v, %t2
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  expectGradOk(c);
}

TEST(AutoDiffTest, LoopCarriedIntegerIndexesAField) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %idx = alloca i32
    store %idx, %i
    for %j = 0 to 5 {
      %cur = load %v : f64
      %ix = load %idx : i32
      %xv = load @x[%ix] : f64
      %p = mul %cur, %xv : f64
      %s = sin %p : f64
      %t = add %s, %xv : f64
      store %v, %t
      %three = const 3 : i32
      %four = const 4 : i32
      %n1 = add %ix, %three : i32
      %n2 = rem %n1, %four : i32
      store %idx, %n2
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  GradChecker g(c);
  ASSERT_EQ(g.build(), "");
  bool hasI32Stack = false;
  for (const AdStackAllocaStmt *s : stacksOf(g.gradKernel()))
    hasI32Stack |= s->elementType() == ScalarType::I32;
  EXPECT_TRUE(hasI32Stack) << g.gradText();
  EXPECT_EQ(g.check(), "");
}

// Counted loops replay index last - k from a non-zero dynamic begin.
TEST(AutoDiffTest, BreakingLoopWithDynamicBegin) {
  for (double lo : {0, 1, 2}) {
    GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 2 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %lo = load @n[%z] : i32
    %o = const 1 : i32
    %hi = load @n[%o] : i32
    for %j = %lo to %hi {
      %cur = load %v : f64
      %xj = load @x[%j] : f64
      %p = mul %cur, %xj : f64
      %s = sin %p : f64
      %t = add %s, %xj : f64
      store %v, %t
      %lim = const 0.9 : f64
      %big = cmp gt %t, %lim : f64
      if %big {
        break
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
    c.init["n"] = {lo, 4, 0, 0};
    SCOPED_TRACE(lo);
    expectGradOk(c);
  }
}

TEST(AutoDiffTest, TriangularLoops) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 4 {
      for %k = 0 to %j {
        %cur = load %v : f64
        %xk = load @x[%k] : f64
        %p = mul %cur, %xk : f64
        %s = sin %p : f64
        %t = add %s, %cur : f64
        %h = const 0.5 : f64
        %t2 = mul %t, %h : f64
        store %v, %t2
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  expectGradOk(c);
}

/// Stacks whose alloca sits directly in a task body (not in a reversed
/// loop's iteration).

//===----------------------------------------------------------------------===//
// Cost
//===----------------------------------------------------------------------===//

/// The nesting series of qd-bench-compile: `depth` nested loops with a
/// run-time trip count, each loading, `sin`ing and storing one local (its
/// gradient has a stack per level, pushed inside that many loops).
ReverseADWork reverseWork(int depth) {
  auto m = parseModule(testgen::nestedLoopsKernel(depth));
  EXPECT_TRUE(m.ok()) << m.status();
  ReverseADWork work;
  if (!m.ok())
    return work;
  ReverseADOptions options;
  options.work = &work;
  auto grad = buildGradientKernel(**m, *(*m)->findKernel("k"), options);
  EXPECT_TRUE(grad.ok()) << grad.status();
  if (grad.ok()) {
    EXPECT_TRUE(verify(**grad).ok());
  }
  return work;
}

// Deep nests once made reverse-ad quadratic in their depth: the planner
// walked every loop's body to plan and tape it, and every forward value
// from outside a loop was looked up through all the frames in between.
// Every level of the nest adds the same work now (docs/performance.md).
TEST(AutoDiffTest, ReverseAdWorkGrowsLinearlyWithNestingDepth) {
  ReverseADWork w50 = reverseWork(50), w100 = reverseWork(100), w200 = reverseWork(200);
  EXPECT_EQ(w200.plannerVisits - w100.plannerVisits, 2 * (w100.plannerVisits - w50.plannerVisits));
  EXPECT_EQ(w200.frameProbes - w100.frameProbes, 2 * (w100.frameProbes - w50.frameProbes));
  // Per level: its 4 statements in the walk, 4 in its plan, 1 search;
  // 11 forward values, each found in the first frame looked into.
  EXPECT_EQ(w200.plannerVisits - w100.plannerVisits, 9u * 100);
  EXPECT_EQ(w200.frameProbes - w100.frameProbes, 11u * 100);
}

} // namespace
} // namespace qd
