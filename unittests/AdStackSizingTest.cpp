//===- AdStackSizingTest.cpp - Adstack sizing tiers against the interpreter ===//
//
// Every case sizes a kernel's adstacks (tier, method, capacity or launch-time
// expression, exactness) and runs it through Program::launch on the
// interpreter, checking that the capacity each stack got is never below the
// depth the interpreter observed (soundness) and equals max(observed, 1)
// when the sizing claims to be exact (tightness). A RapidCheck property does
// the same over random kernels.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/analysis/NetPushPaths.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include "ProgramGen.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace qd {
namespace {

std::string message(const absl::Status &s) {
  return std::string(s.message());
}

/// Parses and verifies a module, instantiates it and launches kernels on the
/// interpreter through Program::launch (which sizes the adstacks).
class Harness {
public:
  explicit Harness(std::string_view text) : text_(text) {
    auto m = parseModule(text, {"t.qd", 1});
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok())
      return;
    module = *std::move(m);
    absl::Status v = verify(*module);
    EXPECT_TRUE(v.ok()) << v.message();
    auto p = Program::create(*module);
    EXPECT_TRUE(p.ok()) << p.status().message();
    if (p.ok())
      program = *std::move(p);
  }

  bool ok() const { return module && program; }

  const Kernel &kernel(std::string_view name = "k") const {
    Kernel *k = module->findKernel(name);
    EXPECT_NE(k, nullptr) << "no kernel @" << name;
    return *k;
  }
  const KernelSizing &sizing(std::string_view name = "k") {
    return **interp.adStackSizing(kernel(name));
  }
  /// The sizing of the stack printed as `%name`.
  const AdStackSize &stack(std::string_view name, std::string_view kernelName = "k") {
    for (const AdStackSize &s : sizing(kernelName).stacks())
      if (s.name == name)
        return s;
    ADD_FAILURE() << "no adstack " << name;
    static AdStackSize none;
    return none;
  }

  absl::Status run(std::vector<LaunchArg> args = {}, const LaunchOptions &options = {},
                   std::string_view name = "k") {
    return program->launch(name, args, interp, options);
  }

  /// The capacity the last launch gave `s` (the sized one, or the declared).
  int64_t capacity(const AdStackSize &s) const {
    auto it = program->lastAdStackCapacities().find(s.stack);
    if (it != program->lastAdStackCapacities().end())
      return it->second;
    return interp.adStackCapacities().at(s.stack);
  }
  /// The depth the interpreter observed in the last launch (-1: the
  /// alloca never executed).
  int64_t observed(const AdStackSize &s) const {
    auto it = interp.adStackMaxDepths().find(s.stack);
    return it == interp.adStackMaxDepths().end() ? -1 : it->second;
  }

  /// Soundness and tightness of every stack of the last launch of `name`.
  void checkLaunch(std::string_view name = "k") {
    const KernelSizing &ks = sizing(name);
    for (const AdStackSize &s : ks.stacks()) {
      int64_t depth = observed(s);
      if (depth < 0)
        continue;
      int64_t cap = capacity(s);
      EXPECT_EQ(interp.adStackCapacities().at(s.stack), cap) << ks.describe(s);
      EXPECT_GE(cap, depth) << "unsound: " << ks.describe(s) << "\n" << text_;
      if (s.exact) {
        EXPECT_EQ(cap, std::max<int64_t>(depth, 1)) << "not tight: " << ks.describe(s);
      }
    }
  }

  void setI(std::string_view field, std::vector<int64_t> values) {
    Buffer *b = program->field(field);
    for (size_t i = 0; i < values.size(); ++i)
      b->set(static_cast<int64_t>(i), Scalar::ofInt(b->elementType(), values[i]));
  }

  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;
  Interpreter interp;

private:
  std::string text_;
};

LaunchOptions withDefault(int64_t capacity) {
  LaunchOptions o;
  o.defaultAdStackCapacity = capacity;
  return o;
}

SizingOptions onlyTier1(bool structural, bool bellmanFord) {
  SizingOptions o;
  o.structural = structural;
  o.bellmanFord = bellmanFord;
  return o;
}

/// An owned i32 ndarray argument.
struct IntArray {
  Buffer buffer;
  NdarrayArg arg;
  IntArray(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
    auto b = Buffer::create(ScalarType::I32, std::move(shape));
    EXPECT_TRUE(b.ok());
    buffer = *std::move(b);
    EXPECT_EQ(buffer.numElements(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i)
      buffer.set(static_cast<int64_t>(i), Scalar::ofInt(ScalarType::I32, values[i]));
    arg.primal = &buffer;
  }
  IntArray(const IntArray &) = delete;
  LaunchArg launchArg() const { return LaunchArg::ndarray(&arg); }
};

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
  EXPECT_FALSE(s.exact);
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
// Tier 2: launch-time expressions
//===----------------------------------------------------------------------===//

TEST(AdStackSizingTest, FieldBoundIsEvaluatedPerLaunch) {
  Harness h(R"(
field @n : i32
field @x : f32[16]
field @y : f32
kernel @k() {
  %n = load @n[] : i32
  parallel for %i = 0 to 16 {
    %s = adstack.alloca f32, capacity 0
    %v = load @x[%i] : f32
    for %j = 0 to %n {
      adstack.push %s, %v
    }
    for %j2 = 0 to %n {
      %t = adstack.load_top %s : f32
      atomic_add @y[], %t : f32
      adstack.pop %s
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  ASSERT_TRUE(s.expr);
  EXPECT_EQ(printSizeExpr(*s.expr, h.sizing().names()), "max(@n[], 0)");
  EXPECT_TRUE(s.exact);
  for (int n : {1, 20, 50, 512}) {
    h.setI("n", {n});
    absl::Status st = h.run({}, withDefault(2));
    ASSERT_TRUE(st.ok()) << "n = " << n << ": " << st.message();
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), n);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), n);
    h.checkLaunch();
  }
  // n = 0 still gets a capacity of 1.
  h.setI("n", {0});
  ASSERT_TRUE(h.run({}, withDefault(2)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 0);
}

TEST(AdStackSizingTest, ScalarArgumentBound) {
  Harness h(R"(
kernel @k(%n: i32) {
  parallel for %i = 0 to 2 {
    %s = adstack.alloca f32, capacity 0
    %x = const 1.0 : f32
    adstack.push %s, %x
    for %j = 0 to %n {
      adstack.push %s, %x
      adstack.push %s, %x
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  ASSERT_TRUE(s.expr);
  EXPECT_EQ(printSizeExpr(*s.expr, h.sizing().names()), "max(2 * max(%n, 0) + 1, 1)");
  EXPECT_TRUE(s.exact);
  for (int n : {-3, 0, 1, 9}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(n)}, withDefault(1)).ok());
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1 + 2 * std::max(n, 0));
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 1 + 2 * std::max(n, 0));
    h.checkLaunch();
  }
}

TEST(AdStackSizingTest, NdarrayShapeBound) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 2>) {
  %rows = shape %a, 1 : i32
  serial {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to %rows {
      adstack.push %s, %j
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  ASSERT_TRUE(s.expr);
  EXPECT_EQ(printSizeExpr(*s.expr, h.sizing().names()), "shape(%a, 1)");
  EXPECT_TRUE(s.exact);
  IntArray a({2, 7}, std::vector<int64_t>(14, 0));
  ASSERT_TRUE(h.run({a.launchArg()}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 7);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 7);
  h.checkLaunch();
}

TEST(AdStackSizingTest, TriangularLoopWithConstantOuterIsEvaluated) {
  Harness h(R"(
kernel @k() {
  parallel for %i = 0 to 10 {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to %i {
      adstack.push %s, %j
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::Constant);
  EXPECT_EQ(s.method, SizingMethod::Evaluated);
  EXPECT_EQ(s.capacity, 9);
  EXPECT_TRUE(s.exact);
  ASSERT_TRUE(h.run({}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 9);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 9);
  h.checkLaunch();
}

TEST(AdStackSizingTest, TriangularLoopWithArgumentOuterIsLaunchTime) {
  Harness h(R"(
kernel @k(%n: i32) {
  parallel for %i = 0 to %n {
    %s = adstack.alloca i32, capacity 0
    for %j = 0 to %i {
      adstack.push %s, %j
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  ASSERT_TRUE(s.expr);
  EXPECT_EQ(printSizeExpr(*s.expr, h.sizing().names()), "max(%i in [0, %n): max(%i, 0))");
  EXPECT_TRUE(s.exact);
  for (int n : {0, 1, 2, 33}) {
    ASSERT_TRUE(h.run({LaunchArg::i32(n)}, withDefault(1)).ok());
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), std::max(n - 1, 1));
    if (n > 0) {
      EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), n - 1);
    } else {
      EXPECT_EQ(h.interp.adStackMaxDepths().count(s.stack), 0u);
    }
    h.checkLaunch();
  }
}

TEST(AdStackSizingTest, NdarrayReadAtTheOuterIndex) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>) {
  %m = shape %a, 0 : i32
  parallel for %i = 0 to %m {
    %s = adstack.alloca i32, capacity 0
    %c = load %a[%i] : i32
    for %j = 0 to %c {
      adstack.push %s, %j
    }
    for %j2 = 0 to %c {
      adstack.pop %s
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  ASSERT_TRUE(s.expr);
  EXPECT_EQ(printSizeExpr(*s.expr, h.sizing().names()),
            "max(%i in [0, shape(%a, 0)): max(%a[%i], 0))");
  EXPECT_TRUE(s.exact);
  IntArray a({6}, {3, 0, 11, -4, 7, 2});
  ASSERT_TRUE(h.run({a.launchArg()}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 11);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 11);
  h.checkLaunch();
  IntArray neg({2}, {-1, -9});
  ASSERT_TRUE(h.run({neg.launchArg()}, withDefault(5)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 1);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 0);
}

TEST(AdStackSizingTest, TwoBoundRangeFromTwoNdarrays) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>, %b: ndarray<i32, 1>) {
  %m = shape %a, 0 : i32
  parallel for %i = 0 to %m {
    %s = adstack.alloca i32, capacity 0
    %lo = load %a[%i] : i32
    %hi = load %b[%i] : i32
    for %j = %lo to %hi {
      adstack.push %s, %j
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  ASSERT_TRUE(s.expr);
  EXPECT_EQ(printSizeExpr(*s.expr, h.sizing().names()),
            "max(%i in [0, shape(%a, 0)): max(%b[%i] - %a[%i], 0))");
  EXPECT_TRUE(s.exact);
  IntArray a({4}, {2, 10, 5, 0});
  IntArray b({4}, {9, 3, 17, 4});
  ASSERT_TRUE(h.run({a.launchArg(), b.launchArg()}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 12);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 12);
  h.checkLaunch();
}

TEST(AdStackSizingTest, MultiDimensionalNdarrayRead) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 2>) {
  %r = shape %a, 0 : i32
  %c = shape %a, 1 : i32
  parallel for %i = 0 to %r {
    for %j = 0 to %c {
      %s = adstack.alloca i32, capacity 0
      %n = load %a[%i, %j] : i32
      for %l = 0 to %n {
        adstack.push %s, %l
      }
    }
    %t = adstack.alloca i32, capacity 0
    for %j2 = 0 to %c {
      %n2 = load %a[%i, %j2] : i32
      for %l2 = 0 to %n2 {
        adstack.push %t, %l2
      }
      for %l3 = 0 to %n2 {
        adstack.pop %t
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  EXPECT_TRUE(s.exact);
  // Balanced per column: a sound bound; the body's net is symbolic, so it is
  // reported as an upper bound.
  const AdStackSize &t = h.stack("%t");
  EXPECT_EQ(t.tier, SizingTier::LaunchTime);
  IntArray a({3, 4}, {1, 2, 3, 4, 5, 6, 13, 8, 0, 0, 0, 1});
  ASSERT_TRUE(h.run({a.launchArg()}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 13);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 13);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(t.stack), 13);
  EXPECT_GE(h.program->lastAdStackCapacities().at(t.stack), 13);
  h.checkLaunch();
}

// %b is shorter than %a; the kernel only reads %b[i] where i < shape(%b).
// The evaluator must not read past %b, and the iterations that take the
// other arm still count.
TEST(AdStackSizingTest, NdarraysOfDifferentLengthsWithGuardedRead) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>, %b: ndarray<i32, 1>) {
  %ma = shape %a, 0 : i32
  %mb = shape %b, 0 : i32
  parallel for %i = 0 to %ma {
    %s = adstack.alloca i32, capacity 0
    %in = cmp lt %i, %mb : i32
    if %in {
      %nb = load %b[%i] : i32
      for %j = 0 to %nb {
        adstack.push %s, %j
      }
    }
    %t = adstack.alloca i32, capacity 0
    if %in {
      %nb2 = load %b[%i] : i32
      for %j2 = 0 to %nb2 {
        adstack.push %t, %j2
      }
    } else {
      %na = load %a[%i] : i32
      for %j3 = 0 to %na {
        adstack.push %t, %j3
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  const AdStackSize &t = h.stack("%t");
  EXPECT_EQ(t.tier, SizingTier::LaunchTime);
  EXPECT_EQ(t.method, SizingMethod::SizeExpr);
  // The then arm only: the legal iterations give 6.
  {
    IntArray a({5}, {1, 2, 3, 9, 9});
    IntArray b({2}, {4, 6});
    absl::Status st = h.run({a.launchArg(), b.launchArg()}, withDefault(1));
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 6);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 6);
    // The else arm runs for i >= 2 and pushes a[i] = 9.
    EXPECT_EQ(h.interp.adStackMaxDepths().at(t.stack), 9);
    EXPECT_EQ(h.program->lastAdStackCapacities().at(t.stack), 9);
    h.checkLaunch();
  }
  // %b longer than %a: every read is legal.
  {
    IntArray a({2}, {1, 5});
    IntArray b({4}, {3, 2, 50, 50});
    ASSERT_TRUE(h.run({a.launchArg(), b.launchArg()}, withDefault(1)).ok());
    EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 3);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 3);
    // The arms differ: the else arm's a[i] = 5 counts although no lane
    // takes it (an upper bound, reported as such).
    EXPECT_FALSE(t.exact);
    EXPECT_EQ(h.program->lastAdStackCapacities().at(t.stack), 5);
    EXPECT_EQ(h.interp.adStackMaxDepths().at(t.stack), 3);
    h.checkLaunch();
  }
}

// A read outside every loop, in an if arm no launch takes: the launch must
// not fail on the read the kernel never performs.
TEST(AdStackSizingTest, UntakenArmReadingOutOfRangeDoesNotFailTheLaunch) {
  Harness h(R"(
kernel @k(%b: ndarray<i32, 1>, %c: i32) {
  serial {
    %s = adstack.alloca i32, capacity 0
    %z = const 0 : i32
    %five = const 5 : i32
    %p = cmp gt %c, %z : i32
    if %p {
      %n = load %b[%five] : i32
      for %j = 0 to %n {
        adstack.push %s, %j
      }
    } else {
      adstack.push %s, %c
      adstack.push %s, %c
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  IntArray shortB({3}, {1, 2, 3});
  absl::Status st = h.run({shortB.launchArg(), LaunchArg::i32(0)}, withDefault(1));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 2);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 2);
  h.checkLaunch();
  IntArray longB({6}, {0, 0, 0, 0, 0, 9});
  ASSERT_TRUE(h.run({longB.launchArg(), LaunchArg::i32(1)}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 9);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 9);
  h.checkLaunch();
}

// Found by the random-kernel property: every iteration of %j skips the
// guarded read, and the empty else arm (net 0) was folded into the then arm
// (max(x, 0) = x for x >= 0). Evaluating the out-of-range read as unknown
// then dropped every iteration, and the bound lost the push outside the if
// (capacity 1, depth 3).
TEST(AdStackSizingTest, GuardedReadPastTheEndInEveryIteration) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>) {
  parallel for %i = 0 to 1 {
    %s = adstack.alloca i32, capacity 0
    %sa = shape %a, 0 : i32
    %e = const 4 : i32
    for %j = %sa to %e {
      adstack.push %s, %j
      %ok = cmp lt %j, %sa : i32
      if %ok {
        %r = load %a[%j] : i32
        for %l = 0 to %r {
          adstack.push %s, %l
        }
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  IntArray a({1}, {5});
  absl::Status st = h.run({a.launchArg()}, withDefault(1));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 3);
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 3);
  h.checkLaunch();
}

/// For kernels whose stack %s pushes a[%i] entries only where the alloca is
/// reached, which it is not for the element holding the maximum: with
/// a = [2, 0] the bound says 2, nothing is pushed, so it must not claim to
/// be exact.
void expectUnreachedMaximumIsNotExact(Harness &h) {
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_FALSE(s.exact);
  IntArray a({2}, {2, 0});
  ASSERT_TRUE(h.run({a.launchArg()}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 2);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 0);
  h.checkLaunch();
}

// Found by the random-kernel property: the alloca only runs in the else arm
// of an if on the parallel index, so the maximum over every index is not
// reached and the bound must not claim to be exact.
TEST(AdStackSizingTest, AllocaUnderAnIfIsNotExactOverTheEnclosingLoop) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>) {
  %m = shape %a, 0 : i32
  parallel for %i = 0 to %m {
    %one = const 1 : i32
    %p = cmp lt %i, %one : i32
    if %p {
    } else {
      %s = adstack.alloca i32, capacity 0
      %r = load %a[%i] : i32
      for %j = 0 to %r {
        adstack.push %s, %j
      }
    }
  }
}
)");
  expectUnreachedMaximumIsNotExact(h);
}

// Found by the random-kernel property: the alloca sits in a loop
// `for %j0 = 0 to %i` that runs 0 times for %i = 0, the element whose a[%i]
// gives the maximum, so the bound is not reached and must not claim to be
// exact (the same as an if between the alloca and the task).
TEST(AdStackSizingTest, AllocaInALoopThatMayNotRunIsNotExact) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>) {
  %sa = shape %a, 0 : i32
  parallel for %i = 0 to %sa {
    for %j0 = 0 to %i {
      %s = adstack.alloca i32, capacity 0
      %r = load %a[%i] : i32
      for %j = 0 to %r {
        adstack.push %s, %j
      }
    }
  }
}
)");
  expectUnreachedMaximumIsNotExact(h);
}

// The shape a front-end emits: a task over an ndarray's extent, a loop
// whose trip count the kernel does not know, around an alloca whose depth
// (a constant, or an argument) does not depend on either. Every iteration
// that runs the alloca reaches the depth, and a launch that runs none needs
// no stack: exact, so no launch measures it (an upper bound would be
// refined by the optimistic launch, whose per-iteration bookkeeping made
// the CPU gradient of such a kernel 1.2-1.35x slower than over fields).
TEST(AdStackSizingTest, ALoopThatMayNotRunKeepsADepthThatDoesNotDependOnItExact) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>, %n: i32) {
  %sa = shape %a, 0 : i32
  parallel for %i = 0 to %sa {
    %r = load %a[%i] : i32
    for %j0 = 0 to %r {
      %s = adstack.alloca i32, capacity 0
      for %j = 0 to %n {
        adstack.push %s, %j
      }
      %c = adstack.alloca i32, capacity 0
      %four = const 4 : i32
      for %k = 0 to %four {
        adstack.push %c, %k
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s"), &c = h.stack("%c");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_TRUE(s.exact) << h.sizing().describe(s);
  EXPECT_FALSE(s.measuredAtLaunch());
  EXPECT_EQ(c.tier, SizingTier::Constant);
  EXPECT_EQ(c.capacity, 4);
  EXPECT_TRUE(c.exact) << h.sizing().describe(c);
  EXPECT_FALSE(c.measuredAtLaunch());
  for (const std::vector<int64_t> &a : {std::vector<int64_t>{0, 2, 0}, {0, 0, 0}}) {
    IntArray arr({3}, a);
    ASSERT_TRUE(h.run({arr.launchArg(), LaunchArg::i32(5)}).ok());
    EXPECT_EQ(h.capacity(s), 5);
    EXPECT_EQ(h.observed(s), a[1] ? 5 : -1);
    h.checkLaunch();
  }
}

// i ranges over %a and k over %b with no pairing between them: the bound is
// the maximum over all pairs.
TEST(AdStackSizingTest, IndependentLoopsOverTwoNdarrays) {
  Harness h(R"(
kernel @k(%a: ndarray<i32, 1>, %b: ndarray<i32, 1>) {
  %ma = shape %a, 0 : i32
  %mb = shape %b, 0 : i32
  parallel for %i = 0 to %ma {
    for %k = 0 to %mb {
      %s = adstack.alloca i32, capacity 0
      %lo = load %b[%k] : i32
      %hi = load %a[%i] : i32
      for %j = %lo to %hi {
        adstack.push %s, %j
      }
    }
  }
}
)");
  ASSERT_TRUE(h.ok());
  const AdStackSize &s = h.stack("%s");
  EXPECT_EQ(s.tier, SizingTier::LaunchTime);
  EXPECT_EQ(s.method, SizingMethod::SizeExpr);
  EXPECT_TRUE(s.exact);
  IntArray a({3}, {4, 10, 7});
  IntArray b({4}, {6, 3, 9, 8});
  // The largest pair is a[1] - b[1] = 7 (not any a[i] - b[i]).
  ASSERT_TRUE(h.run({a.launchArg(), b.launchArg()}, withDefault(1)).ok());
  EXPECT_EQ(h.program->lastAdStackCapacities().at(s.stack), 7);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(s.stack), 7);
  h.checkLaunch();
}

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
    Harness h(fmt::format(R"(
kernel @k(%n: i32) {{
  {} {{
    %s = adstack.alloca i32, capacity 0
    %zero = const 0 : i32
    %one = const 1 : i32
    adstack.push %s, %zero
    while {{
      %t = adstack.load_top %s : i32
      %done = cmp ge %t, %n : i32
      if %done {{
        break
      }}
      %t1 = add %t, %one : i32
      adstack.push %s, %t1
    }}
  }}
}}
)",
                          task));
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

//===----------------------------------------------------------------------===//
// Random kernels (unittests/support/ProgramGen.h)
//===----------------------------------------------------------------------===//

/// Parses a generated program (RapidCheck fails the case if it does not).
std::unique_ptr<Module> parseGenerated(const testgen::GenProgram &p,
                                       const testgen::Printed &printed) {
  auto m = parseModule(printed.text, {"random.qd", 1});
  if (!m.ok())
    testgen::fail(p, "does not parse: " + message(m.status()));
  return *std::move(m);
}

/// The gradient of a generated program's @k (added to `m`).
const Kernel &generatedGradient(const testgen::GenProgram &p, Module &m) {
  auto g = buildGradientKernel(m, *m.findKernel("k"));
  if (!g.ok())
    testgen::fail(p, "no gradient: " + message(g.status()));
  return **g;
}

/// testgen::checkOptimisticLaunch on the interpreter (RapidCheck fails the
/// case on a difference); returns how many iterations ran twice.
int64_t checkOptimisticAgainstCounting(const testgen::GenProgram &p, const Module &module,
                                       const std::string &kernel) {
  Interpreter counting, optimistic;
  int64_t reruns = 0;
  if (std::string d =
          testgen::checkOptimisticLaunch(p, module, kernel, counting, optimistic, 1e-9, &reruns);
      !d.empty())
    testgen::fail(p, d);
  return reruns;
}

// Random kernels with adstacks (pushes and pops in loops and arms, stacks
// allocated inside loops, balanced while bodies) under loops of every bound
// kind: constants, %n, @cnt reads in the task and at launch, ndarray shapes,
// ndarray reads at enclosing indices (guarded or not), enclosing indices,
// the loop-carried integer local, a bound the kernel itself writes (tier 3).
// Every stack's capacity is at least the depth the interpreter observed,
// and equals max(depth, 1) when the sizing claims to be exact; the two
// tier-1 analyses agree where both resolve a stack; a kernel with an
// optimistic launch gives the counting kernel's results and capacities
// with it (checkOptimisticAgainstCounting).
QD_PROPERTY(AdStackSizingTest, RandomKernelsAreSoundAndTight, 300) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::sizing());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> module = parseGenerated(p, printed);
  if (absl::Status v = verify(*module); !v.ok())
    testgen::fail(p, "does not verify: " + message(v));
  auto in = testgen::instantiate(p, *module);
  if (!in.ok())
    testgen::fail(p, "instantiate: " + message(in.status()));
  Program &program = *(*in)->program;
  Interpreter interp;
  absl::Status st = program.launch("k", (*in)->args, interp, withDefault(int64_t(1) << 20));
  if (!st.ok())
    testgen::fail(p, "launch failed: " + message(st));

  const Kernel &k = *module->findKernel("k");
  const KernelSizing &ks = **interp.adStackSizing(k);
  if (const Kernel *counter = ks.countKernel())
    if (absl::Status v = verify(*counter); !v.ok())
      testgen::fail(p, "the counting kernel does not verify: " + message(v) + "\n" +
                           printKernel(*counter));
  KernelSizing structural = sizeAdStacks(k, onlyTier1(true, false));
  KernelSizing bf = sizeAdStacks(k, onlyTier1(false, true));
  bool exact = false, measured = false, tier3 = false;
  for (size_t i = 0; i < ks.stacks().size(); ++i) {
    const AdStackSize &s = ks.stacks()[i];
    measured |= s.tier == SizingTier::Measured;
    tier3 |= s.tier == SizingTier::Default;
    // Tier-1 analyses agree when both resolve the stack.
    const AdStackSize &s1 = structural.stacks()[i], &s2 = bf.stacks()[i];
    if (s1.method == SizingMethod::Structural && s2.method == SizingMethod::BellmanFord &&
        s1.exact && s2.capacity < s1.capacity)
      testgen::fail(p, "Bellman-Ford is below the exact structural bound: " +
                           structural.describe(s1) + " vs " + bf.describe(s2));
    auto it = interp.adStackMaxDepths().find(s.stack);
    if (it == interp.adStackMaxDepths().end())
      continue; // never executed
    int64_t depth = it->second;
    int64_t cap = interp.adStackCapacities().at(s.stack);
    if (program.lastAdStackCapacities().at(s.stack) != cap)
      testgen::fail(p, "the launch used another capacity than the sizing: " + ks.describe(s));
    if (cap < depth)
      testgen::fail(p, fmt::format("unsound: observed depth {}, capacity {}: {}", depth, cap,
                                   ks.describe(s)));
    if (s.exact && cap != std::max<int64_t>(depth, 1))
      testgen::fail(p, fmt::format("not tight: observed depth {}, capacity {}: {}", depth, cap,
                                   ks.describe(s)));
    exact |= s.exact;
  }
  RC_CLASSIFY(exact, "an exact stack");
  RC_CLASSIFY(measured, "a stack measured by the counting kernel (exact)");
  if (ks.optimistic())
    RC_CLASSIFY(checkOptimisticAgainstCounting(p, *module, "k") > 0,
                "an optimistic launch, iterations rerun");
  RC_CLASSIFY(ks.optimistic(), "an optimistic launch");
  RC_CLASSIFY(tier3, "a tier-3 stack");
  RC_CLASSIFY(printed.hasNdarrayBound, "ndarray-read bound");
  RC_CLASSIFY(printed.writesBoundData, "writes a bound");
  RC_CLASSIFY(printed.hasWhile, "while");
}

// Random gradients (GenConfig::autodiff: while loops, nested loops,
// several tasks) whose tapes are measured at launch, counted and launched
// optimistically (checkOptimisticAgainstCounting).
QD_PROPERTY(AdStackSizingTest, RandomGradientsLaunchOptimistically, 150) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> module = parseGenerated(p, printed);
  KernelSizing ks = sizeAdStacks(generatedGradient(p, *module));
  RC_CLASSIFY(ks.numCounted() > 0, "a measured stack");
  RC_CLASSIFY(ks.optimistic(), "an optimistic launch");
  int64_t reruns = checkOptimisticAgainstCounting(p, *module, "k_grad");
  RC_CLASSIFY(reruns > 0, "iterations rerun");
}

// Random gradients (GenConfig::autodiff: while loops nested in loops,
// several tasks) launched on the interpreter after their kernel: no launch
// overflows, every stack that ran is sized soundly, and exactly where the
// sizing says so (counting in stages included), and no stack is left to
// the tier-3 default: one whose count reads its own values (or seems to: a
// local restored from a tape inside a nested loop of the reverse sweep looks
// like a dependence of the forward loops) is counted with a bound. The
// shares are printed (1000 cases: 19% counted in stages, 0.8% bounded).
QD_PROPERTY(AdStackSizingTest, RandomGradientsNeverOverflow, 200) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> module = parseGenerated(p, printed);
  const Kernel &grad = generatedGradient(p, *module);
  auto in = testgen::instantiate(p, *module);
  if (!in.ok())
    testgen::fail(p, "instantiate: " + message(in.status()));
  Program &program = *(*in)->program;
  Interpreter interp;
  LaunchOptions o = testgen::defaultLaunchOptions();
  if (!program.launch("k", (*in)->args, interp, o).ok())
    return; // the kernel fails before its gradient runs
  testgen::seedOutputAdjoints(*module, **in);
  absl::Status st = program.launch("k_grad", (*in)->args, interp, o);
  const KernelSizing &ks = **interp.adStackSizing(grad);
  bool measured = false, staged = false;
  for (const AdStackSize &s : ks.stacks()) {
    measured |= s.tier == SizingTier::Measured;
    if (s.tier == SizingTier::Default)
      testgen::fail(p, "a tier-3 stack in a gradient: " + ks.describe(s));
  }
  const std::vector<int> &bounds = ks.countBoundArgs();
  bool bounded = std::any_of(bounds.begin(), bounds.end(), [](int a) { return a >= 0; });
  if (const Kernel *counter = ks.countKernel()) {
    if (absl::Status v = verify(*counter); !v.ok())
      testgen::fail(p, "the counting kernel does not verify: " + message(v) + "\n" +
                           printKernel(*counter));
    staged = (*interp.adStackSizing(*counter))->countKernel() != nullptr;
  }
  if (!st.ok()) {
    if (message(st).find("adstack overflow") != std::string::npos)
      testgen::fail(p, "the gradient overflowed: " + message(st));
    return; // the gradient fails as its kernel would (bounds, division)
  }
  for (const AdStackSize &s : ks.stacks()) {
    auto it = interp.adStackMaxDepths().find(s.stack);
    if (it == interp.adStackMaxDepths().end())
      continue;
    int64_t cap = interp.adStackCapacities().at(s.stack);
    if (cap < it->second || (s.exact && cap != std::max<int64_t>(it->second, 1)))
      testgen::fail(
          p, fmt::format("observed depth {}, capacity {}: {}", it->second, cap, ks.describe(s)));
  }
  RC_CLASSIFY(measured, "a measured stack");
  RC_CLASSIFY(staged, "counted in stages");
  RC_CLASSIFY(bounded, "counted with a bound (its count reads its own values)");
}

//===----------------------------------------------------------------------===//
// The CFG tier's two algorithms (NetPushPaths.h)
//===----------------------------------------------------------------------===//

/// A graph from adjacency lists (every edge u -> v, v != source).
NetPushGraph netGraph(const std::vector<std::vector<unsigned>> &succs, std::vector<int64_t> net,
                      std::vector<int64_t> peak, unsigned source = 0) {
  NetPushGraph g;
  for (const auto &row : succs) {
    g.succ.insert(g.succ.end(), row.begin(), row.end());
    g.succBegin.push_back(static_cast<unsigned>(g.succ.size()));
  }
  g.net = std::move(net);
  g.peak = std::move(peak);
  g.source = source;
  return g;
}

/// Textbook Bellman-Ford from the source, maximising: after n - 1 rounds
/// of relaxing every edge, an edge that still relaxes lies on (or after) a
/// positive cycle the source reaches.
std::optional<int64_t> plainBellmanFord(const NetPushGraph &g) {
  const unsigned n = g.numNodes();
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> d(n, kUnset);
  d[g.source] = 0;
  for (unsigned round = 0; round < n; ++round) {
    bool changed = false;
    for (unsigned u = 0; u < n; ++u)
      if (d[u] != kUnset)
        for (unsigned v : g.succs(u))
          if (d[u] + g.net[u] > d[v]) {
            d[v] = d[u] + g.net[u];
            changed = true;
          }
    if (!changed)
      break;
    if (round + 1 == n)
      return std::nullopt;
  }
  int64_t best = 0;
  for (unsigned u = 0; u < n; ++u)
    if (d[u] != kUnset)
      best = std::max(best, d[u] + g.peak[u]);
  return best;
}

std::string showGraph(const NetPushGraph &g) {
  std::string out = fmt::format("source {}\n", g.source);
  for (unsigned u = 0; u < g.numNodes(); ++u) {
    out += fmt::format("  {} (net {}, peak {}) ->", u, g.net[u], g.peak[u]);
    for (unsigned v : g.succs(u))
      out += fmt::format(" {}", v);
    out += "\n";
  }
  return out;
}

// A loop entered at both of its nodes (not reducible): the back edge b -> a
// relaxes although a does not dominate b, so the structured algorithm falls
// back to Bellman-Ford. With nets (a, b) = (-1, 1) the cycle is balanced;
// with (-1, 2) it pushes one more per round.
TEST(AdStackSizingTest, IrreducibleLoopFallsBackToBellmanFord) {
  const std::vector<std::vector<unsigned>> succs = {{1, 2}, {2}, {1}}; // src, a, b
  NetPushGraph balanced = netGraph(succs, {5, -1, 1}, {5, 0, 1});
  bool fellBack = false;
  EXPECT_EQ(longestNetPath(balanced, NetPathAlgorithm::Structured, &fellBack), 6); // src b a: 5+1
  EXPECT_TRUE(fellBack);
  EXPECT_EQ(longestNetPath(balanced, NetPathAlgorithm::BellmanFord), 6);
  EXPECT_EQ(plainBellmanFord(balanced), 6);
  NetPushGraph growing = netGraph(succs, {5, -1, 2}, {5, 0, 2});
  EXPECT_EQ(longestNetPath(growing, NetPathAlgorithm::Structured, &fellBack), std::nullopt);
  EXPECT_TRUE(fellBack);
  EXPECT_EQ(longestNetPath(growing, NetPathAlgorithm::BellmanFord), std::nullopt);
  // The same loop entered at its header only: decided without falling back.
  NetPushGraph reducible = netGraph({{1}, {2}, {1}}, {5, -1, 2}, {5, 0, 2});
  EXPECT_EQ(longestNetPath(reducible, NetPathAlgorithm::Structured, &fellBack), std::nullopt);
  EXPECT_FALSE(fellBack);
  reducible.net[2] = reducible.peak[2] = 1;
  EXPECT_EQ(longestNetPath(reducible, NetPathAlgorithm::Structured, &fellBack), 5);
  EXPECT_FALSE(fellBack);
}

// Random graphs of up to 9 nodes (self loops, loops with several entries,
// unreachable parts): both algorithms give the textbook Bellman-Ford's
// answer.
QD_PROPERTY(AdStackSizingTest, NetPathAlgorithmsAgreeOnRandomGraphs, 2000) {
  const unsigned n = *rc::gen::inRange(1u, 10u);
  const int density = *rc::gen::inRange(5, 60); // percent of the possible edges
  std::vector<std::vector<unsigned>> succs(n);
  std::vector<int64_t> net(n), peak(n);
  for (unsigned u = 0; u < n; ++u) {
    for (unsigned v = 1; v < n; ++v) // nothing enters the source (node 0)
      if (*rc::gen::inRange(0, 100) < density)
        succs[u].push_back(v);
    net[u] = *rc::gen::weightedElement<int64_t>({{4, 0}, {2, 1}, {2, -1}, {1, 2}, {1, -2}});
    peak[u] = std::max<int64_t>(net[u], 0) + *rc::gen::inRange<int64_t>(0, 2);
  }
  NetPushGraph g = netGraph(succs, net, peak);
  std::optional<int64_t> reference = plainBellmanFord(g);
  bool fellBack = false;
  std::optional<int64_t> structured = longestNetPath(g, NetPathAlgorithm::Structured, &fellBack);
  std::optional<int64_t> bellmanFord = longestNetPath(g, NetPathAlgorithm::BellmanFord);
  auto show = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : "unbounded"; };
  if (structured != reference || bellmanFord != reference)
    RC_FAIL(fmt::format("reference {}, structured {}, Boost Bellman-Ford {}\n{}", show(reference),
                        show(structured), show(bellmanFord), showGraph(g)));
  RC_CLASSIFY(!reference, "a positive cycle");
  RC_CLASSIFY(fellBack, "fell back (not reducible)");
}

/// Every adstack of `k`: the CFG tier by both algorithms must agree, and
/// the structured one must not fall back (qd's CFGs are reducible).
/// Returns whether some stack had a positive cycle.
bool checkCfgPaths(const testgen::GenProgram &p, const Kernel &k) {
  bool positive = false;
  walk(const_cast<Kernel &>(k), [&](Stmt &s) {
    auto *a = dyn_cast<AdStackAllocaStmt>(&s);
    if (!a)
      return;
    bool fellBack = false;
    std::optional<int64_t> structured =
        bellmanFordDepth(k, *a, NetPathAlgorithm::Structured, &fellBack);
    std::optional<int64_t> reference = bellmanFordDepth(k, *a, NetPathAlgorithm::BellmanFord);
    auto show = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : "unbounded"; };
    if (structured != reference)
      testgen::fail(p, fmt::format("@{}: adstack at {}: structured {}, Bellman-Ford {}", k.name(),
                                   a->loc().str(), show(structured), show(reference)));
    if (fellBack)
      testgen::fail(
          p, fmt::format("@{}: adstack at {}: the CFG is not reducible", k.name(), a->loc().str()));
    positive |= !reference;
    if (pushingCycleIsCertain(k, *a) && reference)
      testgen::fail(p, fmt::format("@{}: adstack at {}: tier 1b skipped it, but its longest path "
                                   "is {}",
                                   k.name(), a->loc().str(), *reference));
  });
  return positive;
}

// Random kernels with adstacks (GenConfig::sizing: pushes and pops in
// loops and arms, while loops, break and continue, up to 3 levels; and the
// same 6 levels deep) and random gradients (their tapes): the structured
// longest path gives Bellman-Ford's answer for every stack, without
// falling back; and where tier 1b skips the CFG, the longest path is
// unbounded indeed.
QD_PROPERTY(AdStackSizingTest, CfgPathsMatchBellmanFordOnRandomKernels, 1000) {
  testgen::GenConfig config = testgen::GenConfig::sizing();
  if (*rc::gen::arbitrary<bool>())
    config.maxDepth = 6;
  testgen::GenProgram p = *testgen::genProgram(config);
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed);
  bool positive = checkCfgPaths(p, *m->findKernel("k"));
  RC_CLASSIFY(positive, "a positive cycle");
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasJump, "break/continue");
  RC_CLASSIFY(config.maxDepth == 6, "6 levels");
}

QD_PROPERTY(AdStackSizingTest, CfgPathsMatchBellmanFordOnRandomGradients, 300) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed);
  bool positive = checkCfgPaths(p, generatedGradient(p, *m));
  RC_CLASSIFY(positive, "a positive cycle");
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasJump, "break/continue");
}

// A gradient's tapes push in loops that pop nothing, and tier 1b used to
// build a graph of the whole task for every one of them before finding the
// positive cycle: quadratic in the depth of a nest. It now skips them.
TEST(AdStackSizingTest, LongestPathWorkGrowsLinearlyWithNestingDepth) {
  auto work = [](int depth) {
    auto m = parseModule(testgen::nestedLoopsKernel(depth));
    EXPECT_TRUE(m.ok()) << m.status();
    SizingWork w;
    if (!m.ok())
      return w;
    auto grad = buildGradientKernel(**m, *(*m)->findKernel("k"));
    EXPECT_TRUE(grad.ok()) << grad.status();
    if (!grad.ok())
      return w;
    SizingOptions options;
    options.work = &w;
    KernelSizing sizing = sizeAdStacks(**grad, options);
    // Every tape is sized by its launch-time product of trip counts.
    for (const AdStackSize &s : sizing.stacks())
      EXPECT_EQ(s.tier, SizingTier::LaunchTime) << s.name;
    return w;
  };
  SizingWork w25 = work(25), w50 = work(50), w100 = work(100);
  EXPECT_LE(w100.pathNodes - w50.pathNodes, 2 * (w50.pathNodes - w25.pathNodes) + 8);
  EXPECT_LT(w100.pathNodes, 100);
  // The tape of each level's value, and of its copy in the adjoint loop.
  EXPECT_EQ(w100.pathSkips - w50.pathSkips, 2 * (w50.pathSkips - w25.pathSkips));
  EXPECT_GE(w100.pathSkips, 100);
}

} // namespace
} // namespace qd
