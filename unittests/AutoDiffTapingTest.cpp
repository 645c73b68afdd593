//===- AutoDiffTapingTest.cpp - Taped and recomputed loops in gradients ---===//
//
// How the reverse sweep restores a loop's values: taped on adstacks or
// recomputed, checked against finite differences (AutoDiffHarness.h), and
// how many stacks a gradient uses.
//
//===----------------------------------------------------------------------===//
#include "AutoDiffHarness.h"

namespace qd {
namespace {

using namespace adtest;

size_t taskLevelStacks(const Kernel &k) {
  size_t n = 0;
  for (const AdStackAllocaStmt *a : stacksOf(k))
    n += a->parentStmt() && a->parentStmt()->isTask();
  return n;
}

/// Builds the gradient of @k in `text` with `options`; returns the module.
std::unique_ptr<Module> gradientModule(const std::string &text, ReverseADOptions options) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  auto g = buildGradientKernel(**m, *(*m)->findKernel("k"), options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *std::move(m) : nullptr;
}

constexpr const char *kTriangle = R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %nb = load @n[%z] : i32
    for %j = 0 to %nb {
      for %k = 0 to %j {
        %cur = load %v : f64
        %xk = load @x[%k] : f64
        %p = mul %cur, %xk : f64
        %s = sin %p : f64
        store %v, %s
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";

// Taping: the inner loop of a triangular nest pushes its local while the
// outer loop is recorded, into one stack at the task level sized by a sum
// over the outer range (exact); the outer loop needs no stack at all.
// Recomputing: each reversed outer iteration runs the inner loop again,
// with the outer value restored from a second stack.
TEST(AutoDiffTest, TapedNestedLoopUsesOneExactlySizedStack) {
  std::string text = std::string(kHeader) + kTriangle;
  auto taped = gradientModule(text, {});
  auto recomputed = gradientModule(text, {.tapeNestedLoops = false});
  ASSERT_TRUE(taped && recomputed);
  const Kernel &t = *taped->findKernel("k_grad");
  const Kernel &r = *recomputed->findKernel("k_grad");
  EXPECT_EQ(stacksOf(t).size(), 1u) << printKernel(t);
  EXPECT_EQ(taskLevelStacks(t), 1u) << printKernel(t);
  EXPECT_EQ(stacksOf(r).size(), 2u) << printKernel(r);
  EXPECT_EQ(taskLevelStacks(r), 1u) << printKernel(r);
  KernelSizing sizing = sizeAdStacks(t);
  ASSERT_EQ(sizing.stacks().size(), 1u);
  const AdStackSize &size = sizing.stacks()[0];
  EXPECT_EQ(size.tier, SizingTier::LaunchTime) << sizing.describe(size);
  EXPECT_TRUE(size.exact) << sizing.describe(size);
  EXPECT_NE(sizing.describe(size).find("sum("), std::string::npos) << sizing.describe(size);
  for (int n : {0, 1, 5}) {
    GradCase c = loopCase(text);
    c.init["n"] = {double(n), 0, 0, 0};
    SCOPED_TRACE(n);
    GradChecker g(c);
    ASSERT_EQ(g.check(), "");
    // The deepest the taped stack got: 0 + 1 + ... + (n - 1) pushes.
    ASSERT_EQ(g.lastDepths().size(), 1u);
    EXPECT_EQ(g.lastDepths().begin()->second, n * (n - 1) / 2);
    expectGradOk(c); // both modes, against finite differences
  }
}

// Code after the inner loop reads the local it writes: the reversed outer
// iterations need the inner loop's result, so it is run again (its stack
// lives in the reversed iteration), and the gradient is right.
TEST(AutoDiffTest, NestedLoopWhoseResultIsReadAfterItIsNotTaped) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 3 {
      for %k = 0 to 2 {
        %cur = load %v : f64
        %s = sin %cur : f64
        store %v, %s
      }
      %after = load %v : f64
      %sq = mul %after, %after : f64
      %h = const 0.7 : f64
      %t = add %sq, %h : f64
      store %v, %t
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  const Kernel &g = *m->findKernel("k_grad");
  EXPECT_EQ(stacksOf(g).size(), 2u) << printKernel(g);
  EXPECT_EQ(taskLevelStacks(g), 1u) << printKernel(g);
  expectGradOk(loopCase(text));
}

// Adjoints start from -0.0, so that the first accumulation folds without
// fast-math (-0.0 + x is x for every x). An adjoint that got nothing reaches
// the grad companion as +0.0 + -0.0 = +0.0: a zero gradient stays +0.0.
TEST(AutoDiffTest, UntouchedAdjointsLeaveAPositiveZeroGradient) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %a = load @x[%i] : f64
    %lim = const 10.0 : f64
    %big = cmp gt %a, %lim : f64
    if %big {
      %s = sin %a : f64
      store %v, %s
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  EXPECT_NE(printKernel(*m->findKernel("k_grad")).find("const -0.0 : f64"), std::string::npos);
  Grads g = expectGradOk(loopCase(text));
  ASSERT_EQ(g["x"].size(), 4u);
  for (double d : g["x"]) {
    EXPECT_EQ(d, 0.0);
    EXPECT_FALSE(std::signbit(d));
  }
}

// Found by the property (taped and recomputed gradients differed by 1e-10,
// inside the finite-difference tolerance): %j4 is taped in %j3, but %j3 is
// not taped in %j2 (its result is read after it), so %j4's stack is filled
// by Record(%j3) in %j2's reversed iterations, which must restore %v for
// it. %j2's plan treated %j4 as a black box and restored nothing: the
// stack got sin(x) instead of x, and the gradient was cos(sin(x)).
TEST(AutoDiffTest, LoopTapedBelowAnUntapedLoopGetsItsValuesRestored) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  serial {
    %v = alloca f64
    %c0 = const 0 : i32
    %x0 = load @x[%c0] : f64
    store %v, %x0
    for %j2 = 0 to 1 {
      for %j3 = 0 to 1 {
        for %j4 = 0 to 1 {
          %cur = load %v : f64
          %s = sin %cur : f64
          store %v, %s
        }
      }
      %after = load %v : f64
      %m1 = const -1.0 : f64
      %unused = mul %after, %m1 : f64
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  GradCase c = loopCase(text);
  Grads g = expectGradOk(c);
  ASSERT_EQ(g["x"].size(), 4u);
  EXPECT_DOUBLE_EQ(g["x"][0], std::cos(0.3));
}

// An inner loop in a while loop is not taped: its tape would be pushed a
// number of times known only when the while loop ends (no launch-time
// size), so the while loop's reversed iterations run it again.
TEST(AutoDiffTest, NestedLoopInAWhileLoopIsNotTaped) {
  std::string text = std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %cnt = alloca i32
    %x0 = load @x[%i] : f64
    store %v, %x0
    %zero = const 0 : i32
    store %cnt, %zero
    while {
      %c = load %cnt : i32
      %one = const 1 : i32
      %c1 = add %c, %one : i32
      store %cnt, %c1
      for %k = 0 to 3 {
        %cur = load %v : f64
        %s = sin %cur : f64
        store %v, %s
      }
      %lim = const 3 : i32
      %done = cmp ge %c1, %lim : i32
      if %done {
        break
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  const Kernel &g = *m->findKernel("k_grad");
  KernelSizing sizing = sizeAdStacks(g);
  for (const AdStackSize &s : sizing.stacks()) {
    if (s.stack->parentStmt() && !s.stack->parentStmt()->isTask()) {
      EXPECT_EQ(s.tier, SizingTier::Constant) << sizing.describe(s); // the inner loop's: 3
    }
  }
  EXPECT_LT(taskLevelStacks(g), stacksOf(g).size()) << printKernel(g);
  expectGradOk(loopCase(text));
}

// The outer trip count is outside the SizeExpr grammar (a float cast), so
// no launch-time expression bounds the taped inner stack; it is measured at
// launch by the counting kernel instead (tier 3 would make reverse-ad
// recompute the inner loop), and no stack is left with the default.
TEST(AutoDiffTest, NestedLoopWhoseTapeIsOutsideTheGrammarIsTapedAndMeasured) {
  std::string text = std::string(kHeader) + R"(
field @f : f64
kernel @k() {
  parallel for %i = 0 to 4 {
    %u = alloca f64
    %fv = load @f[] : f64
    %q = cast %fv : f64 to i32
    for %j = 0 to %q {
      %xj = load @x[%j] : f64
      store %u, %xj
      for %k = 0 to 3 {
        %cur = load %u : f64
        %s = sin %cur : f64
        atomic_add @y[], %s : f64
        %h = const 0.5 : f64
        %t = mul %s, %h : f64
        store %u, %t
      }
    }
  }
}
)";
  auto m = gradientModule(text, {});
  ASSERT_TRUE(m);
  const Kernel &g = *m->findKernel("k_grad");
  KernelSizing sizing = sizeAdStacks(g);
  ASSERT_FALSE(sizing.stacks().empty()) << printKernel(g);
  int measured = 0;
  for (const AdStackSize &s : sizing.stacks()) {
    EXPECT_NE(s.tier, SizingTier::Default) << sizing.describe(s) << "\n" << printKernel(g);
    measured += s.tier == SizingTier::Measured;
  }
  EXPECT_GE(measured, 1) << printKernel(g);
  EXPECT_EQ(taskLevelStacks(g), 1u) << printKernel(g);
  GradCase c = loopCase(text);
  c.init["f"] = {3.5};
  expectGradOk(c);
}

// Seed 001: sibling loops with a dynamic trip count, and a statement between
// them that the second loop uses in its body and as a nested loop's bound.
TEST(AutoDiffTest, SiblingLoopsWithStatementsBetween) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 2 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %z = const 0 : i32
    %n0 = load @n[%z] : i32
    for %j = 0 to %n0 {
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.1 : f64
      %t = add %s, %k : f64
      store %v, %t
    }
    %o = const 1 : i32
    %trip = load @n[%o] : i32
    %w = load @x[%o] : f64
    %w2 = mul %w, %w : f64
    for %j2 = 0 to %n0 {
      for %k2 = 0 to %trip {
        %cur2 = load %v : f64
        %p = mul %cur2, %w2 : f64
        %s2 = sin %p : f64
        %q = add %s2, %cur2 : f64
        store %v, %q
      }
      %cur3 = load %v : f64
      %p3 = mul %cur3, %w : f64
      %c3 = cos %p3 : f64
      store %v, %c3
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  c.init["n"] = {3, 2, 0, 0};
  expectGradOk(c);
}

TEST(AutoDiffTest, RuntimeIfWrapsLoopWithLoopCarriedValues) {
  for (double gate : {1.0, -1.0}) {
    GradCase c = loopCase(std::string(kHeader) + R"(
field @g : f64
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %u = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    store %u, %x0
    %gv = load @g[] : f64
    %z = const 0.0 : f64
    %on = cmp gt %gv, %z : f64
    %zi = const 0 : i32
    %nn = load @n[%zi] : i32
    if %on {
      for %j = 0 to %nn {
        %cur = load %v : f64
        %s = sin %cur : f64
        %uu = load %u : f64
        %m = mul %s, %uu : f64
        %t = add %m, %cur : f64
        store %v, %t
        %c = cos %uu : f64
        store %u, %c
      }
    } else {
      %cur0 = load %v : f64
      %e = exp %cur0 : f64
      store %v, %e
    }
    %after = load %v : f64
    %uu2 = load %u : f64
    %r = mul %after, %uu2 : f64
    atomic_add @y[], %r : f64
  }
}
)");
    c.init["n"] = {3, 0, 0, 0};
    c.init["g"] = {gate};
    SCOPED_TRACE(gate);
    expectGradOk(c);
  }
}

// The condition is computed inside the if body from loop-carried values and
// controls a later if (a lowered `a && b`).
TEST(AutoDiffTest, ShortCircuitLikeCondition) {
  GradCase c = loopCase(std::string(kHeader) + R"(
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %flag = alloca i1
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 6 {
      %f = const false : i1
      store %flag, %f
      %cur = load %v : f64
      %z = const 0.0 : f64
      %a = cmp gt %cur, %z : f64
      if %a {
        %cur1 = load %v : f64
        %s = sin %cur1 : f64
        %lim = const 0.2 : f64
        %b = cmp gt %s, %lim : f64
        store %flag, %b
        %h = const 0.9 : f64
        %t = mul %cur1, %h : f64
        store %v, %t
      }
      %fl = load %flag : i1
      if %fl {
        %cur2 = load %v : f64
        %sq = mul %cur2, %cur2 : f64
        %k = const 0.1 : f64
        %t2 = sub %sq, %k : f64
        store %v, %t2
      } else {
        %cur3 = load %v : f64
        %c = cos %cur3 : f64
        %t3 = mul %c, %cur3 : f64
        store %v, %t3
      }
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)");
  c.init["x"] = {0.9, -0.2, 0.45, 1.4};
  expectGradOk(c);
}

constexpr const char *kSinLoop = R"(
field @x : f64[4] grad
field @y : f64 grad
field @n : i32
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    %nn = load @n[] : i32
    for %j = 0 to %nn {
      %cur = load %v : f64
      %s = sin %cur : f64
      %k = const 0.1 : f64
      %t = add %s, %k : f64
      store %v, %t
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";

TEST(AutoDiffTest, SinLoopWithDefaultCapacityOneIsSized) {
  std::string text = kSinLoop;
  text.replace(text.find("%nn = load @n[] : i32"), 21, "%nn = const 5 : i32");
  GradCase c = loopCase(text);
  c.options.defaultAdStackCapacity = 1;
  GradChecker g(c);
  EXPECT_EQ(g.check(), "");
  ASSERT_EQ(stacksOf(g.gradKernel()).size(), 1u);
  EXPECT_EQ(g.lastDepths().at(stacksOf(g.gradKernel())[0]), 5);
}

TEST(AutoDiffTest, RangeBoundReadFromAField) {
  for (double n : {0, 1, 2, 7}) {
    GradCase c = loopCase(kSinLoop);
    c.init["n"] = {n};
    c.options.defaultAdStackCapacity = 1;
    SCOPED_TRACE(n);
    Grads g = expectGradOk(c);
    if (n == 0) {
      EXPECT_EQ(g["x"], (std::vector<double>{1, 1, 1, 1}));
    }
  }
}

//===----------------------------------------------------------------------===//
// Stack counts
//===----------------------------------------------------------------------===//

std::string loopWith(const std::string &update) {
  return R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 8 {
      %cur = load %v : f64
)" + update +
         R"(      store %v, %t
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)";
}

TEST(AutoDiffTest, LinearLoopCarriedValueNeedsNoStack) {
  GradChecker g(loopCase(loopWith("      %a = const 0.95 : f64\n      %m = mul %cur, %a : f64\n"
                                  "      %b = const 0.01 : f64\n      %t = add %m, %b : f64\n")));
  ASSERT_EQ(g.build(), "");
  EXPECT_EQ(stacksOf(g.gradKernel()).size(), 0u) << g.gradText();
  Grads out;
  EXPECT_EQ(g.check(&out), "");
  EXPECT_NEAR(out["x"][0], std::pow(0.95, 8), 1e-14);
}

TEST(AutoDiffTest, NonLinearLoopCarriedValueNeedsOneStack) {
  GradChecker g(loopCase(loopWith("      %s = sin %cur : f64\n      %b = const 0.01 : f64\n"
                                  "      %t = add %s, %b : f64\n")));
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(stacks[0]->elementType(), ScalarType::F64);
  EXPECT_EQ(g.check(), "");
}

// A linear inner loop inside a non-linear outer loop: the outer loop saves
// v once per iteration (sin needs it); the inner loop's reverse needs no
// primal value, and the value after it is recomputed by its forward run, so
// it gets no stack of its own.
TEST(AutoDiffTest, LinearInnerLoopInsideNonLinearOuterLoopNeedsNoInnerStack) {
  GradChecker g(loopCase(R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = alloca f64
    %x0 = load @x[%i] : f64
    store %v, %x0
    for %j = 0 to 3 {
      for %k = 0 to 4 {
        %a = load %v : f64
        %h = const 0.75 : f64
        %b = mul %a, %h : f64
        %c = neg %b : f64
        store %v, %c
      }
      %cur = load %v : f64
      %s = sin %cur : f64
      store %v, %s
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)"));
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(g.check(), "");
  // The outer loop's stack holds one value per outer iteration.
  EXPECT_EQ(g.lastDepths().at(stacks[0]), 3);
}

// Regression (found by the gradient benchmark's mass-spring chain): a local
// that is stored in a loop but only loaded earlier in the body (and never
// after the loop) reaches its store's reverse through the back edge; the
// reverse of the store used to be skipped because no adjoint existed yet
// when it was emitted, losing d/dp through q (6 instead of 7).
TEST(AutoDiffTest, StoreWhoseLocalIsOnlyLoadedEarlierInTheLoop) {
  GradCase c;
  c.text = R"(
field @x : f64[2] grad
field @y : f64 grad
kernel @k() {
  serial {
    %z = const 0 : i32
    %o = const 1 : i32
    %P = alloca f64
    %Q = alloca f64
    %x0 = load @x[%z] : f64
    %x1 = load @x[%o] : f64
    store %P, %x0
    store %Q, %x1
    for %t = 0 to 2 {
      %p = load %P : f64
      %q = load %Q : f64
      %pp = mul %p, %p : f64
      %qn = add %q, %pp : f64
      store %Q, %qn
      %pn = add %p, %qn : f64
      store %P, %pn
    }
    %r = load %P : f64
    atomic_add @y[], %r : f64
  }
}
)";
  c.init["x"] = {0.5, 0.25};
  c.seeds["y"] = {1.0};
  Grads g = expectGradOk(c);
  EXPECT_NEAR(g["x"][0], 7.0, 1e-12);
  EXPECT_NEAR(g["x"][1], 4.0, 1e-12);
}

// Symplectic Euler: q' = q + p*p (non-linear in p), p' = p + q'. The
// reverse of an iteration needs p at its start, and q only to recompute p'
// for the next iteration, which Rev(L) restores from p's stack anyway: one
// stack, not two (the spring-chain benchmark pushed 16 values per step where
// 8 are needed).
TEST(AutoDiffTest, LocalOnlyFeedingTheNextIterationGetsNoStack) {
  GradCase c;
  c.text = R"(
field @x : f64[2] grad
field @y : f64 grad
kernel @k() {
  serial {
    %z = const 0 : i32
    %o = const 1 : i32
    %P = alloca f64
    %Q = alloca f64
    %x0 = load @x[%z] : f64
    %x1 = load @x[%o] : f64
    store %P, %x0
    store %Q, %x1
    for %t = 0 to 5 {
      %p = load %P : f64
      %q = load %Q : f64
      %pp = mul %p, %p : f64
      %c = const 0.1 : f64
      %f = mul %pp, %c : f64
      %qn = add %q, %f : f64
      store %Q, %qn
      %pn = add %p, %qn : f64
      store %P, %pn
    }
    %r = load %P : f64
    %s = load %Q : f64
    %rs = mul %r, %s : f64
    atomic_add @y[], %rs : f64
  }
}
)";
  c.init["x"] = {0.5, 0.25};
  c.seeds["y"] = {1.0};
  GradChecker g(c);
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(stacks[0]->elementType(), ScalarType::F64);
  expectGradOk(c); // finite differences and forward mode agree
}

TEST(AutoDiffTest, IntegerLoopCarriedIndexGetsAnI32Stack) {
  GradChecker g(loopCase(R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 4 {
    %idx = alloca i32
    for %j = 0 to 6 {
      %ix = load %idx : i32
      %xv = load @x[%ix] : f64
      %s = mul %xv, %xv : f64
      atomic_add @y[], %s : f64
      %one = const 1 : i32
      %three = const 3 : i32
      %a = add %ix, %one : i32
      %b = and %a, %three : i32
      store %idx, %b
    }
  }
}
)"));
  ASSERT_EQ(g.build(), "");
  auto stacks = stacksOf(g.gradKernel());
  ASSERT_EQ(stacks.size(), 1u) << g.gradText();
  EXPECT_EQ(stacks[0]->elementType(), ScalarType::I32);
  Grads out;
  EXPECT_EQ(g.check(&out), "");
  // Each thread visits indices 0,1,2,3,0,1: x0 and x1 twice, x2 and x3 once.
  std::vector<double> x = {0.3, -0.2, 0.45, 0.1};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(out["x"][i], 4 * (i < 2 ? 2 : 1) * 2 * x[i], 1e-14);
}

} // namespace
} // namespace qd
