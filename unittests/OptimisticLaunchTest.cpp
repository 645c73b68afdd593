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
// tests skip, saying why, without one).
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include "ProgramGen.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <iostream>
#include <vector>

namespace qd {
namespace {

std::string message(const absl::Status &s) {
  return std::string(s.message());
}

// Element i iterates m[i] times: the tape of `v` and of the counter are
// measured at launch, each needing max(m) entries.
constexpr const char *kWhile = R"(
field @x : f32[16] grad
field @m : i32[16]
field @y : f32[16] grad

kernel @k() {
  parallel for %i = 0 to 16 {
    %v = alloca f32
    %c = alloca i32
    %x = load @x[%i] : f32
    store %v, %x
    %m = load @m[%i] : i32
    while {
      %k = load %c : i32
      %done = cmp ge %k, %m : i32
      if %done {
        break
      }
      %a = load %v : f32
      %s = sin %a : f32
      %b = add %s, %x : f32
      store %v, %b
      %one = const 1 : i32
      %k1 = add %k, %one : i32
      store %c, %k1
    }
    %r = load %v : f32
    store @y[%i], %r
  }
}
)";

/// `text` as a module that verifies, or null (the failure reported).
std::unique_ptr<Module> parseVerified(const std::string &text) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  absl::Status v = verify(**m);
  EXPECT_TRUE(v.ok()) << v.message();
  return v.ok() ? *std::move(m) : nullptr;
}

std::unique_ptr<Module> parseWithGradient(const char *text) {
  std::unique_ptr<Module> m = parseVerified(text);
  if (!m)
    return nullptr;
  auto g = buildGradientKernel(*m, *m->findKernel("k"));
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(verify(*m).ok());
  return m;
}

CpuBackend &cpu(unsigned lanes) {
  static std::map<unsigned, std::unique_ptr<CpuBackend>> backends;
  std::unique_ptr<CpuBackend> &b = backends[lanes];
  if (!b) {
    CpuBackendOptions o;
    o.threads = 2;
    o.vectorWidth = lanes;
    o.vectorMath = false;
    b = *CpuBackend::create(o);
  }
  return *b;
}

/// Registered backend `name` with its defaults, or null (saying why) on a
/// machine without its device or in a build without it.
std::unique_ptr<Backend> registered(const char *name) {
  registerAllBackends();
  auto b = createBackend(name);
  if (!b.ok()) {
    std::cout << "[" << name << "] " << b.status().message() << "\n";
    return nullptr;
  }
  return *std::move(b);
}

/// The CUDA backend, or null.
Backend *cuda() {
  static std::unique_ptr<Backend> backend = registered("cuda");
  return backend.get();
}

/// The Vulkan backend (lavapipe where that is the only device), or null.
Backend *vulkan() {
  static std::unique_ptr<Backend> backend = registered("vulkan");
  return backend.get();
}

/// The CPU's 8 lanes, the interpreter and the GPU backends this machine has.
std::vector<Backend *> compiledBackends(Interpreter &interp) {
  std::vector<Backend *> out{&cpu(8), &interp};
  for (Backend *gpu : {cuda(), vulkan()})
    if (gpu)
      out.push_back(gpu);
  return out;
}

#define REQUIRE(backend, what)                                                                     \
  if (!(backend))                                                                                  \
  GTEST_SKIP() << "no " what " backend on this machine"

/// One instance of kWhile's module: sets @x and @m, seeds @y's adjoint,
/// launches @k_grad and reads @x's adjoint.
class WhileGradient {
public:
  WhileGradient() : module_(parseWithGradient(kWhile)) {
    program_ = *Program::create(*module_);
    for (int i = 0; i < 16; ++i)
      program_->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.1 * (i % 5) - 0.2));
  }
  const Kernel &grad() const { return *module_->findKernel("k_grad"); }
  Program &program() { return *program_; }

  absl::Status launch(Backend &backend, const std::vector<int> &m, const LaunchOptions &options) {
    for (int i = 0; i < 16; ++i) {
      program_->field("m")->set(i, Scalar::ofInt(ScalarType::I32, m[i]));
      program_->field("y", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
      program_->field("x", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 0.0));
    }
    return program_->launch("k_grad", {}, backend, options);
  }
  std::vector<double> xGrad() {
    std::vector<double> out;
    Buffer &b = *program_->field("x", Component::Grad);
    EXPECT_TRUE(b.syncToHost().ok());
    for (int i = 0; i < 16; ++i)
      out.push_back(b.get(i).f);
    return out;
  }
  /// The capacities the last launch recorded for the measured stacks.
  std::vector<int64_t> measuredCapacities(Backend &backend) {
    std::vector<int64_t> out;
    for (const AdStackSize &s : (*backend.adStackSizing(grad()))->stacks())
      if (s.tier == SizingTier::Measured)
        out.push_back(program_->lastAdStackCapacities().at(s.stack));
    return out;
  }

private:
  std::unique_ptr<Module> module_;
  std::unique_ptr<Program> program_;
};

/// The gradient the interpreter computes with the counting kernel.
std::vector<double> reference(const std::vector<int> &m) {
  WhileGradient ref;
  Interpreter interp;
  EXPECT_TRUE(ref.launch(interp, m, {}).ok());
  EXPECT_EQ(ref.program().lastMeasuredLaunch().path, Program::MeasuredLaunch::Path::Counted);
  return ref.xGrad();
}

LaunchOptions optimistic(int64_t initial = 0) {
  LaunchOptions o;
  o.optimisticAdStacks = true;
  o.optimisticInitialCapacity = initial;
  return o;
}

void expectNear(const std::vector<double> &got, const std::vector<double> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << "element " << i;
}

TEST(OptimisticLaunchTest, TheGradientHasATryAndARerunKernel) {
  std::unique_ptr<Module> m = parseWithGradient(kWhile);
  KernelSizing sizing = sizeAdStacks(*m->findKernel("k_grad"));
  ASSERT_EQ(sizing.numCounted(), 2);
  const OptimisticLaunch *o = sizing.optimistic();
  ASSERT_NE(o, nullptr) << sizing.optimisticRefusal();
  EXPECT_TRUE(verify(*o->tryKernel).ok()) << printKernel(*o->tryKernel);
  EXPECT_TRUE(verify(*o->rerunKernel).ok()) << printKernel(*o->rerunKernel);
  // need, failed, one capacity per measured stack.
  EXPECT_EQ(o->tryKernel->numArguments(), 4u);
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
    auto launch = [&](int most, bool optimisticOn) -> absl::Status {
      for (int i = 0; i < 64; ++i)
        p->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, std::ldexp(1.0, i % most)));
      LaunchOptions o;
      o.optimisticAdStacks = optimisticOn;
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
  }
  SizingOptions off;
  off.refineUpperBounds = false;
  EXPECT_FALSE(sizeAdStacks(k, off).stacks()[0].refined);
  EXPECT_EQ(sizeAdStacks(k, off).countKernel(), nullptr);

  // Where the kernel has no optimistic launch with it (here: the stack is
  // read before its last push), an upper bound stays the capacity, and the
  // counting kernel counts only the stack outside the grammar.
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

// A stack whose pushes depend on its own values, counted with a bound on
// every backend (docs/sizing.md, "Bounded stacks"): each launch gets the
// exact need, beyond the first bound (the default capacity 256) too, with
// as many counting runs as the bound needs to double; threads of one
// vector group or warp stop past the bound at different points.
TEST(OptimisticLaunchTest, AStackBoundedByItsOwnValuesIsCountedOnEveryBackend) {
  constexpr const char *kText = R"(
field @len : i32[64]
field @out : i32[64]

kernel @k() {
  parallel for %i = 0 to 64 {
    %n = load @len[%i] : i32
    %s = adstack.alloca i32, capacity 0
    %zero = const 0 : i32
    %one = const 1 : i32
    adstack.push %s, %zero
    while {
      %t = adstack.load_top %s : i32
      %done = cmp ge %t, %n : i32
      if %done {
        break
      }
      %t1 = add %t, %one : i32
      adstack.push %s, %t1
    }
    %top = adstack.load_top %s : i32
    store @out[%i], %top
  }
}
)";
  std::unique_ptr<Module> m = parseVerified(kText);
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
