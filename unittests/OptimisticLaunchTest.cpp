//===- OptimisticLaunchTest.cpp - Measured adstacks without counting first ===//
//
// The optimistic launch of stacks measured at launch (docs/sizing.md,
// "Measured at launch"): gradients of data-dependent while loops launched
// with LaunchOptions::optimisticAdStacks, on the interpreter and on the CPU
// backend's scalar and 8-lane code, give the gradients of the counting
// path (the interpreter's, counted) and capacities equal to the exact need,
// when the needs stay, grow (the iterations that do not fit run again;
// some lanes of a group and not others) and shrink; a kernel outside the
// static condition keeps counting; errors stay errors. The same on the CUDA
// and Vulkan backends where this machine has them (lavapipe in CI; the GPU
// tests skip, saying why, without one). Refined upper bounds, bounded
// stacks and random gradients are in OptimisticLaunchBoundsTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "OptimisticLaunchHarness.h"

#include <cmath>

namespace qd {
namespace {

using namespace optimistictest;
using optimistictest::cuda; // the backend, not the namespace qd::cuda

TEST(OptimisticLaunchTest, TheGradientHasATryAndARerunKernel) {
  std::unique_ptr<Module> m = parseWithGradient(whileKernel(16).c_str());
  KernelSizing sizing = sizeAdStacks(*m->findKernel("k_grad"));
  ASSERT_EQ(sizing.numCounted(), 2);
  const OptimisticLaunch *o = sizing.optimistic();
  ASSERT_NE(o, nullptr) << sizing.optimisticRefusal();
  EXPECT_TRUE(verify(*o->tryKernel).ok()) << printKernel(*o->tryKernel);
  EXPECT_TRUE(verify(*o->rerunKernel).ok()) << printKernel(*o->rerunKernel);
  // need, failed, one capacity per measured stack, rows and their mode.
  EXPECT_EQ(o->tryKernel->numArguments(), 6u);
  EXPECT_EQ(o->rerunKernel->numArguments(), 1u);
  ASSERT_EQ(o->stacks.size(), 2u);
  for (const OptimisticLaunch::Copies &c : o->stacks) {
    EXPECT_NE(c.inTry, nullptr);
    EXPECT_NE(c.inRerun, nullptr);
  }
  // Switched off, there is none (and no reason).
  SizingOptions off;
  off.optimisticLaunch = false;
  KernelSizing without = sizeAdStacks(*m->findKernel("k_grad"), off);
  EXPECT_EQ(without.optimistic(), nullptr);
  EXPECT_EQ(without.optimisticRefusal(), "");
}

// The same sequence of launches on each backend: counting first, the same
// needs, needs that grow for two lanes of the first group of 8, needs that
// grow for all, needs that shrink.
void runSequence(Backend &backend) {
  WhileGradient g;
  std::vector<int> base(16, 3), two = base, all(16, 6), less(16, 2);
  two[2] = 9;
  two[5] = 7;
  using Path = Program::MeasuredLaunch::Path;
  // First launch: counts.
  ASSERT_TRUE(g.launch(backend, base, optimistic()).ok());
  EXPECT_EQ(g.program().lastMeasuredLaunch().path, Path::Counted);
  EXPECT_EQ(g.measuredCapacities(backend), (std::vector<int64_t>{3, 3}));
  expectNear(g.xGrad(), reference(base));
  // The same needs: one launch, nothing rerun.
  ASSERT_TRUE(g.launch(backend, base, optimistic()).ok());
  EXPECT_EQ(g.program().lastMeasuredLaunch().path, Path::Optimistic);
  EXPECT_EQ(g.program().lastMeasuredLaunch().rerunIterations, 0);
  EXPECT_EQ(g.measuredCapacities(backend), (std::vector<int64_t>{3, 3}));
  expectNear(g.xGrad(), reference(base));
  // Two iterations need more: they alone run again.
  ASSERT_TRUE(g.launch(backend, two, optimistic()).ok());
  EXPECT_EQ(g.program().lastMeasuredLaunch().path, Path::Optimistic);
  EXPECT_EQ(g.program().lastMeasuredLaunch().rerunIterations, 2);
  EXPECT_EQ(g.measuredCapacities(backend), (std::vector<int64_t>{9, 9}));
  expectNear(g.xGrad(), reference(two));
  // Less than the capacity everywhere: nothing reruns, and the capacity
  // follows the need down.
  ASSERT_TRUE(g.launch(backend, less, optimistic()).ok());
  EXPECT_EQ(g.program().lastMeasuredLaunch().rerunIterations, 0);
  EXPECT_EQ(g.measuredCapacities(backend), (std::vector<int64_t>{2, 2}));
  expectNear(g.xGrad(), reference(less));
  // Every iteration needs more.
  ASSERT_TRUE(g.launch(backend, all, optimistic()).ok());
  EXPECT_EQ(g.program().lastMeasuredLaunch().rerunIterations, 16);
  EXPECT_EQ(g.measuredCapacities(backend), (std::vector<int64_t>{6, 6}));
  expectNear(g.xGrad(), reference(all));
  // Counting again (the option off) agrees.
  LaunchOptions count;
  count.optimisticAdStacks = false;
  ASSERT_TRUE(g.launch(backend, two, count).ok());
  EXPECT_EQ(g.program().lastMeasuredLaunch().path, Path::Counted);
  EXPECT_EQ(g.measuredCapacities(backend), (std::vector<int64_t>{9, 9}));
  expectNear(g.xGrad(), reference(two));
}

TEST(OptimisticLaunchTest, InterpreterFollowsTheNeeds) {
  Interpreter interp;
  runSequence(interp);
}

TEST(OptimisticLaunchTest, CpuScalarFollowsTheNeeds) {
  runSequence(cpu(1));
}

TEST(OptimisticLaunchTest, CpuEightLanesFollowTheNeeds) {
  CpuBackend &b = cpu(8);
  runSequence(b);
  WhileGradient g;
  auto layout = b.layout(*(*b.adStackSizing(g.grad()))->optimistic()->tryKernel);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ((*layout)->tasks.at(0).lanes, 8u) << (*layout)->tasks.at(0).whyScalar;
}

TEST(OptimisticLaunchTest, CudaFollowsTheNeeds) {
  REQUIRE(cuda(), "CUDA");
  runSequence(*cuda());
}

TEST(OptimisticLaunchTest, VulkanFollowsTheNeeds) {
  REQUIRE(vulkan(), "Vulkan");
  runSequence(*vulkan());
}

TEST(OptimisticLaunchTest, AnInitialCapacityReplacesTheFirstCount) {
  std::vector<int> m(16, 4);
  m[11] = 1;
  m[12] = 0;
  for (Backend *b : {static_cast<Backend *>(&cpu(8)), cuda(), vulkan()}) {
    if (!b)
      continue;
    SCOPED_TRACE(std::string(b->name()));
    WhileGradient g;
    // Capacity 1 at the first launch: every iteration that needs more reruns.
    ASSERT_TRUE(g.launch(*b, m, optimistic(1)).ok());
    EXPECT_EQ(g.program().lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Optimistic);
    EXPECT_EQ(g.program().lastMeasuredLaunch().rerunIterations, 14);
    EXPECT_EQ(g.measuredCapacities(*b), (std::vector<int64_t>{4, 4}));
    expectNear(g.xGrad(), reference(m));
  }
}

// An overflowed iteration that would fail after its split fails in its
// rerun: the launch reports the same error as without the optimisation,
// and the next launch is sound.
TEST(OptimisticLaunchTest, ErrorsOfRerunIterationsAreReported) {
  constexpr const char *kDivides = R"(
field @m : i32[8]
field @d : i32[8]
field @q : i32[8]
field @y : f32[8]

kernel @k() {
  parallel for %i = 0 to 8 {
    %s = adstack.alloca f32, capacity 0
    %v = alloca f32
    %c = alloca i32
    %half = const 0.5 : f32
    store %v, %half
    %m = load @m[%i] : i32
    while {
      %k = load %c : i32
      %done = cmp ge %k, %m : i32
      if %done {
        break
      }
      %a = load %v : f32
      adstack.push %s, %a
      %sa = sin %a : f32
      store %v, %sa
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }
    for %j = 0 to %m {
      %t = adstack.load_top %s : f32
      atomic_add @y[%i], %t : f32
      adstack.pop %s
    }
    %dd = load @d[%i] : i32
    %q = div %m, %dd : i32
    store @q[%i], %q
  }
}
)";
  std::unique_ptr<Module> m = parseVerified(kDivides);
  ASSERT_TRUE(m);
  Interpreter interp;
  for (Backend *backend : compiledBackends(interp)) {
    Backend &b = *backend;
    SCOPED_TRACE(std::string(b.name()));
    std::unique_ptr<Program> p = *Program::create(*m);
    const KernelSizing &sizing = **b.adStackSizing(*m->findKernel("k"));
    ASSERT_NE(sizing.optimistic(), nullptr) << sizing.optimisticRefusal();
    for (int i = 0; i < 8; ++i) {
      p->field("m")->set(i, Scalar::ofInt(ScalarType::I32, i == 6 ? 5 : 2));
      p->field("d")->set(i, Scalar::ofInt(ScalarType::I32, i == 6 ? 0 : 1));
    }
    LaunchOptions o = optimistic(2);
    o.boundsChecked = true;
    absl::Status s = p->launch("k", {}, b, o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(message(s).find("integer division by zero"), std::string::npos) << message(s);
    // Without the failing element the next launch runs, and iteration 6
    // (flagged by the failed launch) is not rerun by mistake.
    p->field("d")->set(6, Scalar::ofInt(ScalarType::I32, 1));
    p->field("m")->set(6, Scalar::ofInt(ScalarType::I32, 2));
    for (int i = 0; i < 8; ++i)
      p->field("y")->set(i, Scalar::ofFloat(ScalarType::F32, 0));
    ASSERT_TRUE(p->launch("k", {}, b, o).ok());
    EXPECT_EQ(p->lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Optimistic);
    EXPECT_EQ(p->lastMeasuredLaunch().rerunIterations, 0);
    ASSERT_TRUE(p->field("y")->syncToHost().ok());
    for (int i = 0; i < 8; ++i) {
      EXPECT_NEAR(p->field("y")->get(i).f, 0.5 + std::sin(0.5), 1e-6) << i;
      EXPECT_EQ(p->field("q")->get(i).i, 2) << i;
    }
  }
}

// The last push may be a statement of the task body itself: the split
// comes after it (regression: the split went into the `if` the push moves
// to, so that an iteration that overflowed went on). A bound loaded outside
// the task from memory the task writes refuses the optimistic launch (the
// rerun kernel would load it again).
TEST(OptimisticLaunchTest, ATopLevelPushIsFollowedByTheSplit) {
  constexpr const char *kText = R"(
field @x : f32[4]
field @y : f32[4]
field @n : i32[4]
field @cnt : i32[1]

kernel @k() {
  parallel for %i = 0 to 4 {
    %s = adstack.alloca f32, capacity 0
    %c = alloca i32
    %b = load @n[%i] : i32
    while {
      %k = load %c : i32
      %done = cmp ge %k, %b : i32
      if %done {
        break
      }
      %a = load @x[%i] : f32
      adstack.push %s, %a
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }
    %a2 = load @x[%i] : f32
    adstack.push %s, %a2
    %b1 = const 1 : i32
    %b2 = add %b, %b1 : i32
    for %j2 = 0 to %b2 {
      %t = adstack.load_top %s : f32
      atomic_add @y[%i], %t : f32
      adstack.pop %s
    }
  }
}

kernel @readsAtTheTop(%m: i32) {
  %z = const 0 : i32
  %c = load @cnt[%z] : i32
  parallel for %i = 0 to 4 {
    %s = adstack.alloca f32, capacity 0
    for %j = 0 to %c {
      %a = load @x[%i] : f32
      adstack.push %s, %a
    }
    store @cnt[%z], %m
  }
}
)";
  std::unique_ptr<Module> m = parseVerified(kText);
  ASSERT_TRUE(m);
  KernelSizing refused = sizeAdStacks(*m->findKernel("readsAtTheTop"));
  ASSERT_EQ(refused.numCounted(), 1);
  EXPECT_EQ(refused.optimistic(), nullptr);
  EXPECT_NE(refused.optimisticRefusal().find(
                "the load '%c = load @cnt[%z] : i32' at t.qd:38:3, outside the tasks"),
            std::string::npos)
      << refused.optimisticRefusal();
  Interpreter interp;
  for (Backend *backend : compiledBackends(interp)) {
    Backend &b = *backend;
    SCOPED_TRACE(std::string(b.name()));
    std::unique_ptr<Program> p = *Program::create(*m);
    for (int i = 0; i < 4; ++i) {
      p->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 1.0 + i));
      p->field("n")->set(i, Scalar::ofInt(ScalarType::I32, i));
    }
    // Capacity 2: iterations 2 and 3 need 3 and 4 entries.
    ASSERT_TRUE(p->launch("k", {}, b, optimistic(2)).ok());
    EXPECT_EQ(p->lastMeasuredLaunch().rerunIterations, 2);
    ASSERT_TRUE(p->field("y")->syncToHost().ok());
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(p->field("y")->get(i).f, (1.0 + i) * (i + 1)) << i;
  }
}

/// A kernel whose task pushes %s in a while loop until %v reaches 3, with
/// `first` before the loop, `inLoop` after the push, `after` after it, and
/// `more` after the task.
std::string whileKernel(const std::string &name, const std::string &first,
                        const std::string &inLoop, const std::string &after,
                        const std::string &more = "") {
  return fmt::format(R"(
kernel @{}() {{
  parallel for %i = 0 to 4 {{
    %s = adstack.alloca f32, capacity 0
    %v = alloca f32
    %w = alloca f32
    %a = load @x[%i] : f32
{}    store %v, %a
    while {{
      %c = load %v : f32
      %lim = const 3.0 : f32
      %done = cmp ge %c, %lim : f32
      if %done {{
        break
      }}
      adstack.push %s, %c
{}      %one = const 1.0 : f32
      %nv = add %c, %one : f32
      store %v, %nv
    }}
{}  }}
{}}}
)",
                     name, first, inLoop, after, more);
}

// Kernels outside the static condition keep the counting kernel, and say
// why; launched with the option on, they count.
TEST(OptimisticLaunchTest, KernelsOutsideTheConditionCount) {
  struct Case {
    const char *kernel;
    const char *why;
  };
  std::string text = "field @x : f32[4]\nfield @y : f32[4]\n";
  text += whileKernel("writesFirst", "    store @y[%i], %a\n", "", "");
  text += whileKernel("readsWhilePushing", "",
                      "      %t = adstack.load_top %s : f32\n      store %w, %t\n",
                      "    %r = load %w : f32\n    store @y[%i], %r\n");
  text +=
      whileKernel("readsWhatItWrites", "", "", "    %r = load %v : f32\n    store @x[%i], %r\n");
  text += whileKernel("notLast", "", "", "",
                      "  parallel for %j = 0 to 4 {\n    %b = load @x[%j] : f32\n"
                      "    store @y[%j], %b\n  }\n");
  std::unique_ptr<Module> m = parseVerified(text);
  ASSERT_TRUE(m);
  for (Case c : {Case{"writesFirst", "the write 'store @y[%i], %a' at t.qd:10:5 comes before"},
                 Case{"readsWhilePushing", "reads or pops a measured adstack before its last push"},
                 Case{"readsWhatItWrites", "reads memory the task writes"},
                 Case{"notLast", "is not the kernel's last task"}}) {
    SCOPED_TRACE(c.kernel);
    KernelSizing sizing = sizeAdStacks(*m->findKernel(c.kernel));
    ASSERT_EQ(sizing.numCounted(), 1);
    EXPECT_EQ(sizing.optimistic(), nullptr);
    EXPECT_NE(sizing.optimisticRefusal().find(c.why), std::string::npos)
        << sizing.optimisticRefusal();
    EXPECT_NE(sizing.optimisticRefusal().find(std::string("kernel @") + c.kernel),
              std::string::npos);
  }
  // The same kernel with the store after the loop has one.
  auto fine = parseModule("field @x : f32[4]\nfield @y : f32[4]\n" +
                              whileKernel("k", "", "", "    store @y[%i], %a\n"),
                          {"t.qd", 1});
  ASSERT_TRUE(fine.ok()) << fine.status().message();
  EXPECT_NE(sizeAdStacks(*(*fine)->findKernel("k")).optimistic(), nullptr);

  std::unique_ptr<Program> p = *Program::create(*m);
  for (int i = 0; i < 4; ++i)
    p->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.5 * i - 1));
  ASSERT_TRUE(p->launch("writesFirst", {}, cpu(8), optimistic()).ok());
  ASSERT_TRUE(p->launch("writesFirst", {}, cpu(8), optimistic()).ok());
  EXPECT_EQ(p->lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Counted);
  EXPECT_EQ(p->lastAdStackCapacities().at(
                (*cpu(8).adStackSizing(*m->findKernel("writesFirst")))->stacks()[0].stack),
            4);
}

} // namespace
} // namespace qd
