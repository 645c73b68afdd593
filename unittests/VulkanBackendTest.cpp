//===- VulkanBackendTest.cpp - The Vulkan backend against the interpreter -===//
//
// Runs wherever the Vulkan loader finds a device: Mesa's lavapipe (a CPU
// driver) in CI, a GPU's driver elsewhere (QD_VULKAN_DEVICE picks one by
// index or name; by default the first discrete GPU, else device 0).
// Without a loader or a device every test that needs one skips, saying
// why. Every backend runs with the Khronos validation layer required, and
// every test asserts that it reported nothing (a device without the layer
// fails, naming the package). Floats are compared with the corpus
// tolerances (1e-5 relative for f32, 1e-12 for f64) and the random
// programs with 1e-4 (as on CUDA): docs/runtime.md ("Vulkan") gives the
// accuracy of the math functions.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/VulkanBackend.h"

#include "Corpus.h"
#include "GpuBackendChecks.h"
#include "ProgramGen.h"
#include "RunawayKernels.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <numbers>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace qd {
namespace {

using namespace corpus;

using Validation = VulkanBackendOptions::Validation;

/// Whether the validation layer may be missing: QD_VULKAN_TEST_VALIDATION=
/// if-installed, for a GPU machine without Debian's vulkan-validationlayers
/// (docs/testing.md). CI never sets it.
bool validationOptional() {
  const char *v = std::getenv("QD_VULKAN_TEST_VALIDATION");
  return v && std::string_view(v) == "if-installed";
}

/// `o` with the validation layer required: every backend of these tests
/// runs under it, and a test fails on any warning or error it reports.
VulkanBackendOptions validated(VulkanBackendOptions o = {}) {
  o.validation = validationOptional() ? Validation::IfInstalled : Validation::Required;
  return o;
}

/// What the validation layer reported on `b` since the last call, as one
/// text ("" if nothing), and clears it.
std::string takeValidationMessages(VulkanBackend &b) {
  size_t n = b.validationMessageCount();
  if (n == 0)
    return "";
  std::vector<std::string> kept = b.validationMessages();
  b.clearValidationMessages();
  std::string text = fmt::format("the validation layer reported {} message(s):", n);
  for (const std::string &m : kept)
    text += "\n  " + m;
  if (kept.size() < n)
    text += fmt::format("\n  ... and {} more", n - kept.size());
  return text;
}

/// `b` runs under the validation layer, which reported nothing.
void expectValidatedAndClean(VulkanBackend &b, const std::string &which) {
  EXPECT_TRUE(b.validationActive() || validationOptional()) << which;
  EXPECT_EQ(takeValidationMessages(b), "") << which;
}

/// The backend most tests share, created with validation required.
struct Shared {
  std::unique_ptr<VulkanBackend> backend;
  std::string why;    // without a backend: why not
  bool fails = false; // a device without the validation layer: a failure, not a skip
};

const Shared &shared() {
  static Shared s = [] {
    Shared s;
    auto b = VulkanBackend::create(validated());
    if (!b.ok()) {
      s.why = message(b.status());
      // The device works without the layer: this suite's claim (no
      // validation messages) cannot be checked, which must not pass.
      s.fails = VulkanBackend::create().ok();
      std::cout << "[vulkan] " << s.why << "\n";
      return s;
    }
    const VulkanDeviceInfo &i = (*b)->deviceInfo();
    std::cout << fmt::format("[vulkan] device {}: {} (Vulkan {}.{}; int64 {}, float64 {}, int64 "
                             "atomics {}, float32 atomic add {}; validation layer on)\n",
                             i.index, i.name, i.apiVersion >> 22, (i.apiVersion >> 12) & 0x3ff,
                             i.features.int64, i.features.float64, i.features.int64Atomics,
                             i.features.atomicFloat32Add);
    s.backend = *std::move(b);
    return s;
  }();
  return s;
}

VulkanBackend *gpu() {
  return shared().backend.get();
}

#define REQUIRE_DEVICE()                                                                           \
  do {                                                                                             \
    if (shared().fails)                                                                            \
      FAIL() << shared().why;                                                                      \
    if (!gpu())                                                                                    \
      GTEST_SKIP() << "no Vulkan loader or device on this machine: " << shared().why;              \
  } while (0)

/// A backend with a small grid (one workgroup), so the property's large
/// tier-3 default capacity fits one storage buffer (lavapipe's
/// maxStorageBufferRange is 128 MiB). Null until the first smallGrid().
VulkanBackend *smallGridMade = nullptr;

VulkanBackend *smallGrid() {
  // A function's static, destroyed at exit before what was constructed
  // before it: the validation layer's own statics, which a backend's
  // destruction still calls into.
  static std::unique_ptr<VulkanBackend> backend = [] {
    VulkanBackendOptions o;
    o.maxThreads = 64;
    o.invocationPerIteration = false; // grid-stride loops of many iterations
    auto b = VulkanBackend::create(validated(o));
    return b.ok() ? *std::move(b) : nullptr;
  }();
  smallGridMade = backend.get();
  return backend.get();
}

/// After every test, nothing it did on the shared backends drew a warning
/// or an error from the validation layer (tests check the backends they
/// create themselves).
class VulkanBackendTest : public ::testing::Test {
protected:
  void TearDown() override {
    if (gpu())
      expectValidatedAndClean(*gpu(), "the shared backend");
    if (smallGridMade)
      expectValidatedAndClean(*smallGridMade, "the small-grid backend");
  }
};

/// The messages a VulkanBackendOptions::onValidationMessage received.
struct Received {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages;
  }
};

VulkanBackendOptions receivingInto(std::shared_ptr<Received> into) {
  VulkanBackendOptions o = validated();
  o.onValidationMessage = [into](const std::string &m) {
    std::lock_guard<std::mutex> lock(into->mutex);
    into->messages.push_back(m);
  };
  return o;
}

TEST_F(VulkanBackendTest, AnUnknownDeviceIsAClearError) {
  VulkanBackendOptions o;
  o.device = "no-such-device-qd";
  auto b = VulkanBackend::create(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string m(b.status().message());
  EXPECT_EQ(m.rfind("vulkan: ", 0), 0u) << m;
  if (gpu()) { // a loader and a device: the selection is what fails
    EXPECT_NE(m.find("no Vulkan device matches 'no-such-device-qd'"), std::string::npos) << m;
  }
  o.device = "999";
  EXPECT_FALSE(VulkanBackend::create(o).ok());
  o.device = "";
  o.workgroupSize = 0;
  EXPECT_EQ(VulkanBackend::create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(VulkanBackendTest, TheDeviceTypeIsReported) {
  REQUIRE_DEVICE();
  const VulkanDeviceInfo &i = gpu()->deviceInfo();
  EXPECT_FALSE(i.cpu && i.discrete) << i.name;
  if (i.name.find("llvmpipe") != std::string::npos) { // lavapipe
    EXPECT_TRUE(i.cpu) << i.name;
  }
}

/// The error of a loop the driver ended (SpirvOptions::checkLoopExits).
bool endedByTheDriver(const absl::Status &s) {
  return s.code() == absl::StatusCode::kResourceExhausted &&
         message(s).find("error: the Vulkan driver ended") != std::string::npos;
}

TEST_F(VulkanBackendTest, CorpusKernelsMatchTheInterpreter) {
  REQUIRE_DEVICE();
  CorpusRun run;
  int missingFeature = 0, loopLimit = 0;
  run.refused = [&](const absl::Status &s) {
    // A feature this device lacks, named; or a loop lavapipe ended (its
    // 65535 iterations per invocation), reported as such.
    if (s.code() == absl::StatusCode::kFailedPrecondition &&
        message(s).find("does not support them (feature") != std::string::npos)
      return ++missingFeature, true;
    if (endedByTheDriver(s) && gpu()->deviceInfo().endsLongLoops)
      return ++loopLimit, true;
    return false;
  };
  run.sameErrorSite = true;
  run.afterLaunch = [] { return takeValidationMessages(*gpu()); };
  CorpusStats stats = runCorpus(*gpu(), "Vulkan", run);
  std::cout << fmt::format("[vulkan corpus] {} kernels ({} gradient/dual), {} launches, {} where "
                           "both failed ({} at the same statement), {} skipped (endless/huge), "
                           "{} order-dependent (not compared), {} needing a missing feature, {} "
                           "ended by the driver's loop limit, {} failures\n",
                           stats.kernels, stats.derived, stats.launches, stats.bothErrored,
                           stats.sameLocation, stats.skippedEndless, stats.racy, missingFeature,
                           loopLimit, stats.failures.size());
  EXPECT_EQ(stats.refused, missingFeature + loopLimit);
  EXPECT_GT(stats.kernels, 150);
  EXPECT_GT(stats.sameLocation, 0);
  for (const auto &f : stats.failures)
    ADD_FAILURE() << f;
}

TEST_F(VulkanBackendTest, BoundsThatGrowBetweenLaunchesResizeTheHeap) {
  REQUIRE_DEVICE();
  VulkanBackendOptions o;
  o.localTapeBytes = 0; // every stack in the heap
  auto heapOnly = VulkanBackend::create(validated(o));
  ASSERT_TRUE(heapOnly.ok()) << heapOnly.status().message();
  VulkanBackend &b = **heapOnly;
  expectTheHeapFollowsTheBounds(
      b, [&](const Kernel &) { return b.gridThreads(); }, [&] { return b.lastLaunchThreads(); },
      [&] { return b.lastAdStackHeapBytes(); });
  expectValidatedAndClean(b, "the heap-only backend");
}

TEST_F(VulkanBackendTest, StacksThatFitRunFromLocalTapesAndTheRestFromTheHeap) {
  REQUIRE_DEVICE();
  expectLocalTapesWhereStacksFit(*gpu(), [] { return gpu()->lastAdStackHeapBytes(); });
}

// A heap the whole grid's stacks would overflow (one storage buffer holds
// at most maxStorageBufferRange bytes, 128 MiB on lavapipe; here a 64 KiB
// cap) runs the launch on fewer invocations, with the same results; only
// an invocation whose own stacks do not fit is an error.
TEST_F(VulkanBackendTest, AHeapTooLargeForOneBufferRunsOnFewerInvocations) {
  REQUIRE_DEVICE();
  VulkanBackendOptions o;
  o.maxHeapBytes = 64 * 1024;
  o.localTapeBytes = 0; // the heap, which is what is cut
  auto capped = VulkanBackend::create(validated(o));
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  SinLoop k;
  Interpreter interp;
  // (Few elements: lavapipe ends an invocation's loops after 65535
  // iterations in all; see docs/runtime.md.)
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.002f * float(i);
  // n entries of 4 bytes (8 at least) per invocation: 50 -> 200 bytes, 327
  // invocations (not whole workgroups); 512 -> 2048 bytes, 32 (less than one
  // workgroup); 1 -> 8 bytes: 8192 would fit, and the 1000 elements take
  // 1024 (whole workgroups).
  for (auto [n, grid] : {std::pair{50, 327}, std::pair{512, 32}, std::pair{1, 1024}}) {
    std::vector<float> ref(x.size()), out(x.size(), -1.f);
    ASSERT_TRUE(k.run(interp, n, x, ref).ok());
    absl::Status s = k.run(**capped, n, x, out);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ((*capped)->lastLaunchThreads(), grid) << n;
    EXPECT_LE((*capped)->lastAdStackHeapBytes(), 64 * 1024) << n;
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(out[i], ref[i], 1e-5 * std::max(1.f, std::fabs(ref[i])))
          << "n=" << n << " i=" << i;
  }
  o.maxHeapBytes = 1000;
  auto tiny = VulkanBackend::create(validated(o));
  ASSERT_TRUE(tiny.ok());
  std::vector<float> out(x.size());
  absl::Status s = k.run(**tiny, 512, x, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(s.message()).find("the adstacks of one thread need 2048 bytes of heap"),
            std::string::npos)
      << s.message();
  // The next launch that fits works.
  std::vector<float> ref(x.size());
  ASSERT_TRUE(k.run(interp, 20, x, ref).ok());
  ASSERT_TRUE(k.run(**tiny, 20, x, out).ok());
  EXPECT_NEAR(out[100], ref[100], 1e-5);
  expectValidatedAndClean(**capped, "the 64 KiB heap");
  expectValidatedAndClean(**tiny, "the 1000-byte heap");
}

/// The repro of lavapipe's loop limit: one invocation incrementing @s[0]
/// `n` times (the loop at loop.qd:5:5, in the task at loop.qd:3:3).
std::string serialLoop(int n) {
  return fmt::format(R"(field @s : i32[1]
kernel @main() {{
  serial {{
    %z = const 0 : i32
    for %i = 0 to {} {{
      %v = load @s[%z] : i32
      %one = const 1 : i32
      %w = add %v, %one : i32
      store @s[%z], %w
    }}
  }}
}}
)",
                     n);
}

/// Launches serialLoop(n) on `b` from @s = 0: the status and @s[0].
std::pair<absl::Status, int64_t> runSerialLoop(Backend &b, int n) {
  auto module = parseModule(serialLoop(n), {"loop.qd", 1});
  EXPECT_TRUE(module.ok()) << module.status().message();
  auto program = *Program::create(**module);
  absl::Status s = program->launch("main", {}, b);
  return {s, program->field("s")->get(0).i};
}

/// A VulkanBackend with `checks` (nullptr, having failed the test, if
/// none could be made).
std::unique_ptr<VulkanBackend> withLoopChecks(VulkanLoopExitChecks checks, int64_t maxThreads = 0) {
  VulkanBackendOptions o;
  o.loopExitChecks = checks;
  if (maxThreads) {
    o.maxThreads = maxThreads;
    o.invocationPerIteration = false;
  }
  auto b = VulkanBackend::create(o);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? *std::move(b) : nullptr;
}

#define REQUIRE_LAVAPIPE()                                                                         \
  REQUIRE_DEVICE();                                                                                \
  if (!gpu()->deviceInfo().endsLongLoops)                                                          \
  GTEST_SKIP() << "the device (" << gpu()->deviceInfo().name << ") does not end long loops"

// Mesa's lavapipe ends the loops of an invocation after 65535 iterations
// in all and carries on after the loop: without the checks the repro's
// 100000 increments leave 65535, with them (lavapipe's default) the launch
// fails naming the loop, and the next launch works.
TEST_F(VulkanBackendTest, LoopsLavapipeEndsEarlyAreErrorsNamingTheLoop) {
  REQUIRE_LAVAPIPE();
  const VulkanDeviceInfo &info = gpu()->deviceInfo();
  EXPECT_TRUE(info.checkLoopExits); // VulkanLoopExitChecks::Auto
  EXPECT_EQ(info.driverId, 13u);    // VK_DRIVER_ID_MESA_LLVMPIPE
  EXPECT_NE(info.name.find("llvmpipe"), std::string::npos) << info.name;

  auto [s, value] = runSerialLoop(*gpu(), 100000);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s.message();
  EXPECT_EQ(message(s),
            "loop.qd:5:5: error: the Vulkan driver ended this `for` loop before the program did "
            "(Mesa's lavapipe ends the loops of an invocation after 65535 iterations in all, and "
            "the result would have been wrong); run the kernel on another Vulkan device or "
            "backend, or spread the work over the iterations of a parallel task (in kernel "
            "@main, task at loop.qd:3:3: `for` loop)");
  // A loop that fits runs to its end, on the same backend.
  auto [ok, sixty] = runSerialLoop(*gpu(), 60000);
  EXPECT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(sixty, 60000);
  // 65534 iterations and the pass that finds the end: the most one loop
  // may run.
  auto [edge, most] = runSerialLoop(*gpu(), 65534);
  EXPECT_TRUE(edge.ok()) << edge.message();
  EXPECT_EQ(most, 65534);

  // Without the checks the driver's answer is wrong, silently: what the
  // checks catch.
  auto off = withLoopChecks(VulkanLoopExitChecks::Off);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->deviceInfo().checkLoopExits);
  auto [unchecked, wrong] = runSerialLoop(*off, 100000);
  EXPECT_TRUE(unchecked.ok()) << unchecked.message();
  EXPECT_EQ(wrong, 65535);
  auto on = withLoopChecks(VulkanLoopExitChecks::On);
  ASSERT_TRUE(on);
  EXPECT_TRUE(on->deviceInfo().checkLoopExits);
  EXPECT_TRUE(endedByTheDriver(runSerialLoop(*on, 100000).first));
}

// lavapipe's count is cumulative: every loop an invocation runs (each
// iteration, plus the pass that finds a `for`'s end) draws on the same
// 65535, and the invocations of one SIMD vector (8 on AVX2) share it. The
// error names the loop that was ended.
TEST_F(VulkanBackendTest, LavapipeCountsTheIterationsOfEveryLoopOfAnInvocation) {
  REQUIRE_LAVAPIPE();
  // `for %<i> = 0 to %<n>`, adding one to @s[%<at>] (five lines, column 5).
  auto loop = [](const std::string &i, const std::string &n, const std::string &at) {
    return fmt::format(R"(    for %{0} = 0 to %{1} {{
      %v{0} = load @s[%{2}] : i32
      %w{0} = add %v{0}, %o : i32
      store @s[%{2}], %w{0}
    }}
)",
                       i, n, at);
  };
  auto module = *parseModule(fmt::format(R"(field @s : i32[16]
kernel @seq(%n: i32) {{
  serial {{
    %z = const 0 : i32
    %o = const 1 : i32
{}{}  }}
}}
kernel @lanes(%n: i32) {{
  parallel for %t = 0 to 16 {{
    %z = const 0 : i32
    %o = const 1 : i32
    %two = const 2 : i32
    %r = rem %t, %two : i32
    %even = cmp eq %r, %z : i32
    %na = select %even, %n, %z : i32
    %nb = select %even, %z, %n : i32
{}{}  }}
}}
)",
                                         loop("i", "n", "z"), loop("j", "n", "o"),
                                         loop("a", "na", "t"), loop("b", "nb", "t")),
                             {"count.qd", 1});
  auto off = withLoopChecks(VulkanLoopExitChecks::Off);
  ASSERT_TRUE(off);
  std::vector<LaunchArg> forty{LaunchArg::i32(40000)};
  // Two loops of 40000: the second gets 65535 - 40001.
  auto program = *Program::create(*module);
  ASSERT_TRUE(program->launch("seq", forty, *off).ok());
  EXPECT_EQ(program->field("s")->get(0).i, 40000);
  EXPECT_EQ(program->field("s")->get(1).i, 25534);
  // Even invocations run the first loop, odd ones the second: each runs
  // 40000 iterations, but its vector's count is spent by its neighbours'.
  program = *Program::create(*module);
  ASSERT_TRUE(program->launch("lanes", forty, *off).ok());
  EXPECT_EQ(program->field("s")->get(0).i, 40000);
  EXPECT_EQ(program->field("s")->get(1).i, 25534);
  // With the checks: the second loop, in both.
  for (const char *kernel : {"seq", "lanes"}) {
    program = *Program::create(*module);
    absl::Status s = program->launch(kernel, forty, *gpu());
    EXPECT_TRUE(endedByTheDriver(s)) << kernel << ": " << s.message();
    std::string at = kernel == std::string("seq") ? "count.qd:11:5:" : "count.qd:32:5:";
    EXPECT_EQ(message(s).rfind(at, 0), 0u) << message(s);
    std::vector<LaunchArg> fits{LaunchArg::i32(30000)};
    ASSERT_TRUE(program->launch(kernel, fits, *gpu()).ok()) << kernel;
  }
}

// Loops with constant bounds stop too when they can run long
// (StopCheckPlan): on lavapipe a task of 2^31 - 1 iterations (32768 passes
// of each of the default 65536 invocations, which lavapipe allows; its
// loops of more iterations end at the driver's limit), on a GPU (where that
// task takes milliseconds) a serial loop of 2^31 - 1 iterations; each
// within twice the timeout once compiled (by a first launch whose cancel
// flag is already set). A band of more than 2^32 - 1 points is an error
// (its constant extents or those given at launch).
TEST_F(VulkanBackendTest, LongLoopsWithConstantBoundsStop) {
  REQUIRE_DEVICE();
  using namespace std::chrono_literals;
  auto module = *parseModule(kLongConstantLoops, {"long.qd", 1});
  auto program = *Program::create(*module);
  // On a GPU the task ends within the timeout. lavapipe's threads share
  // the host's cores with the test runner: up to 3 s there (its task takes
  // far longer when nothing stops it).
  if (gpu()->deviceInfo().endsLongLoops)
    expectLongLoopStops(*program, *gpu(), "task",
                        std::max<std::chrono::milliseconds>(kLongLoopStopBound, 3s));
  else
    expectLongLoopStops(*program, *gpu(), "serial");
  // A band of more points than the shader counts (32 bits) is an error,
  // 65536 x 65536 = 2^32 included.
  LaunchArg n = LaunchArg::i32(INT32_MAX), first = LaunchArg::i32(65536);
  for (auto [kernel, arg] : {std::pair<const char *, LaunchArg *>{"band", nullptr},
                             {"band_n", &n},
                             {"band_n", &first}}) {
    std::span<const LaunchArg> args;
    if (arg)
      args = std::span(arg, 1);
    absl::Status s = program->launch(kernel, args, *gpu(), {});
    EXPECT_NE(message(s).find("error: the band has more than 2^32 - 1 points, the most a Vulkan "
                              "launch counts; split it"),
              std::string::npos)
        << kernel << ": " << message(s);
  }
  program->field("count")->set(0, Scalar::ofInt(ScalarType::I32, 0));
  LaunchOptions o;
  o.timeout = 60s;
  absl::Status s = program->launch("nest", {}, *gpu(), o);
  ASSERT_TRUE(s.ok()) << message(s);
  EXPECT_EQ(program->field("count")->get(0).i, 64 * 128 * 256);
}

// A parallel task on a grid of 64 invocations: 64 x 70000 iterations are
// 70000 passes of each invocation's grid-stride loop, which lavapipe ends;
// the error names the task and says to give it more invocations, which
// (the default grid of 65536: 69 passes each) runs it to its end.
TEST_F(VulkanBackendTest, AParallelTaskWithTooManyIterationsPerInvocationIsAnError) {
  REQUIRE_LAVAPIPE();
  auto module = *parseModule(R"(field @c : i32[64]
kernel @k(%n: i32) {
  parallel for %i = 0 to %n {
    %sixty4 = const 64 : i32
    %b = rem %i, %sixty4 : i32
    %one = const 1 : i32
    atomic_add @c[%b], %one : i32
  }
}
)",
                             {"grid.qd", 1});
  std::vector<LaunchArg> args{LaunchArg::i32(64 * 70000)};
  auto small = withLoopChecks(VulkanLoopExitChecks::Auto, 64);
  ASSERT_TRUE(small);
  auto program = *Program::create(*module);
  absl::Status s = program->launch("k", args, *small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s.message();
  EXPECT_EQ(message(s).rfind("grid.qd:3:3: error: the Vulkan driver ended this parallel task's "
                             "grid-stride loop before the program did",
                             0),
            0u)
      << message(s);
  EXPECT_NE(message(s).find("give the task more invocations (VulkanBackendOptions::maxThreads)"),
            std::string::npos);
  EXPECT_NE(message(s).find("(in kernel @k, task at grid.qd:3:3: `parallel for` loop)"),
            std::string::npos)
      << message(s);
  // Without the checks iterations are lost, silently: invocation t, which
  // runs the iterations i = t mod 64, stops after 65535.
  auto off = withLoopChecks(VulkanLoopExitChecks::Off, 64);
  ASSERT_TRUE(off);
  program = *Program::create(*module);
  ASSERT_TRUE(program->launch("k", args, *off).ok());
  EXPECT_EQ(program->field("c")->get(5).i, 65535);
  // More invocations: the task runs to its end.
  program = *Program::create(*module);
  s = program->launch("k", args, *gpu());
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t i = 0; i < 64; ++i)
    ASSERT_EQ(program->field("c")->get(i).i, 70000) << i;
  // An inner loop that the task's invocations each run 70000 times.
  auto inner = *parseModule(R"(field @c : i32[64]
kernel @k(%n: i32) {
  parallel for %i = 0 to 64 {
    %one = const 1 : i32
    for %j = 0 to %n {
      atomic_add @c[%i], %one : i32
    }
  }
}
)",
                            {"inner.qd", 1});
  program = *Program::create(*inner);
  std::vector<LaunchArg> many{LaunchArg::i32(70000)};
  s = program->launch("k", many, *gpu());
  EXPECT_TRUE(endedByTheDriver(s)) << s.message();
  EXPECT_EQ(message(s).rfind("inner.qd:5:5: error: the Vulkan driver ended this `for` loop", 0), 0u)
      << message(s);
  EXPECT_NE(message(s).find("or give each invocation fewer loop iterations to run"),
            std::string::npos);
}

/// A field incremented per element on the device, and a read-only field.
constexpr const char *kResident = R"(field @f : f32[4096]
field @w : f32[4096]
field @b : i1[4096]
kernel @inc() {
  parallel for %i = 0 to 4096 {
    %a = load @f[%i] : f32
    %c = load @w[%i] : f32
    %d = add %a, %c : f32
    store @f[%i], %d
    %t = load @b[%i] : i1
    %nt = not %t : i1
    store @b[%i], %nt
  }
}
)";

TEST_F(VulkanBackendTest, FieldsStayOnTheDeviceUntilTheHostReadsThem) {
  REQUIRE_DEVICE();
  auto module = *parseModule(kResident, {"resident.qd", 1});
  auto program = *Program::create(*module);
  Buffer &f = *program->field("f");
  Buffer &w = *program->field("w");
  Buffer &b = *program->field("b");
  w.fill(Scalar::ofFloat(ScalarType::F32, 1.0));
  b.set(7, Scalar::ofInt(ScalarType::I1, 1));
  for (int i = 0; i < 3; ++i) {
    absl::Status s = program->launch("inc", {}, *gpu());
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_FALSE(f.hostIsCurrent()) << "launch " << i;
    EXPECT_TRUE(w.hostIsCurrent()) << "launch " << i;
  }
  EXPECT_EQ(f.get(17).f, 3.0);
  EXPECT_TRUE(f.hostIsCurrent());
  EXPECT_EQ(b.get(7).i, 0); // flipped three times; 32-bit booleans on the device
  EXPECT_EQ(b.get(8).i, 1);
  f.set(17, Scalar::ofFloat(ScalarType::F32, 100.0));
  w.set(5, Scalar::ofFloat(ScalarType::F32, 10.0));
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
  EXPECT_EQ(f.get(17).f, 101.0);
  EXPECT_EQ(f.get(5).f, 13.0);
  EXPECT_EQ(f.get(4095).f, 4.0);
  Interpreter interp;
  ASSERT_TRUE(program->launch("inc", {}, interp).ok());
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
  EXPECT_EQ(f.get(17).f, 103.0);
  EXPECT_EQ(f.get(5).f, 33.0);
}

// A launch without heap whose iterations are known runs one invocation per
// iteration; one with heap, or with invocationPerIteration off, keeps T.
TEST_F(VulkanBackendTest, ALaunchWithoutHeapRunsOneInvocationPerIteration) {
  REQUIRE_DEVICE();
  SinLoop k;
  constexpr int kPeriod = 5000;
  std::vector<float> x(3 * gpu()->gridThreads() + 100), local(x.size()), fixedGrid(x.size()),
      heap(x.size());
  std::vector<float> xp(kPeriod), ref(kPeriod);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.001f * float(i % kPeriod);
  std::copy(x.begin(), x.begin() + kPeriod, xp.begin());
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 6, xp, ref).ok());
  ASSERT_TRUE(k.run(*gpu(), 6, x, local).ok());
  EXPECT_EQ(gpu()->lastAdStackHeapBytes(), 0) << "a local tape";
  EXPECT_EQ(gpu()->lastLaunchThreads(), (int64_t(x.size()) + 63) / 64 * 64);
  VulkanBackendOptions o = validated();
  o.invocationPerIteration = false;
  auto fixed = VulkanBackend::create(o);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  ASSERT_TRUE(k.run(**fixed, 6, x, fixedGrid).ok());
  EXPECT_EQ((*fixed)->lastLaunchThreads(), (*fixed)->gridThreads());
  expectValidatedAndClean(**fixed, "the fixed-grid backend");
  o = validated();
  o.localTapeBytes = 0;
  auto heapOnly = VulkanBackend::create(o);
  ASSERT_TRUE(heapOnly.ok()) << heapOnly.status().message();
  ASSERT_TRUE(k.run(**heapOnly, 6, x, heap).ok());
  EXPECT_GT((*heapOnly)->lastAdStackHeapBytes(), 0);
  EXPECT_EQ((*heapOnly)->lastLaunchThreads(), (*heapOnly)->gridThreads());
  expectValidatedAndClean(**heapOnly, "the heap backend");
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(local[i], ref[i % kPeriod], 1e-4) << i;
    ASSERT_EQ(local[i], fixedGrid[i]) << i;
    ASSERT_EQ(local[i], heap[i]) << i;
  }
}

TEST_F(VulkanBackendTest, KernelTimesComeFromTimestampQueries) {
  REQUIRE_DEVICE();
  if (gpu()->deviceInfo().timestampValidBits == 0) {
    absl::Status s = gpu()->timeKernels(true);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s.message();
    GTEST_SKIP() << "the device has no timestamps on its compute queue";
  }
  auto module = *parseModule(kResident, {"resident.qd", 1});
  auto program = *Program::create(*module);
  program->field("w")->fill(Scalar::ofFloat(ScalarType::F32, 1.0));
  ASSERT_TRUE(gpu()->timeKernels(false).ok());
  EXPECT_EQ(gpu()->lastKernelMs().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(gpu()->timeKernels(true).ok());
  absl::StatusOr<double> none = gpu()->lastKernelMs();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no launch"), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
    double wallMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    absl::StatusOr<double> ms = gpu()->lastKernelMs();
    ASSERT_TRUE(ms.ok()) << ms.status().message();
    EXPECT_GT(*ms, 0.0);
    EXPECT_LT(*ms, wallMs);
  }
  EXPECT_EQ(program->field("f")->get(9).f, 3.0);
  ASSERT_TRUE(gpu()->timeKernels(false).ok());
  EXPECT_FALSE(gpu()->lastKernelMs().ok());
}

TEST_F(VulkanBackendTest, AProgramOutlivesItsBackend) {
  REQUIRE_DEVICE();
  auto received = std::make_shared<Received>();
  {
    auto module = *parseModule(kResident, {"resident.qd", 1});
    auto program = *Program::create(*module);
    program->field("w")->fill(Scalar::ofFloat(ScalarType::F32, 2.0));
    {
      auto local = VulkanBackend::create(receivingInto(received));
      ASSERT_TRUE(local.ok()) << local.status().message();
      ASSERT_TRUE((*local)->validationActive() || validationOptional());
      ASSERT_TRUE(program->launch("inc", {}, **local).ok());
    } // the backend is gone; @f's device copy is not
    EXPECT_EQ(program->field("f")->get(9).f, 2.0);
    ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
    EXPECT_EQ(program->field("f")->get(9).f, 4.0);
  } // the program is gone, and with it the first backend's device and instance
  // Nothing, the destruction of the device and the instance included (where
  // the layer reports objects not destroyed), drew a message.
  EXPECT_EQ(received->get(), std::vector<std::string>{});
}

/// A raw misuse of the backend's device (a buffer without usage flags)
/// reaches validationMessages() and onValidationMessage; the suite's zero
/// counts mean something.
TEST_F(VulkanBackendTest, TheValidationLayersMessagesAreCollected) {
  REQUIRE_DEVICE();
  auto received = std::make_shared<Received>();
  auto backend = VulkanBackend::create(receivingInto(received));
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  VulkanBackend &b = **backend;
  if (!b.validationActive() && validationOptional())
    GTEST_SKIP() << "no validation layer here (QD_VULKAN_TEST_VALIDATION=if-installed)";
  ASSERT_TRUE(b.validationActive());
  EXPECT_EQ(b.validationMessageCount(), 0u);
  VulkanBackend::NativeHandles h = b.nativeHandles();
  auto getInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(h.getInstanceProcAddr);
  auto instance = static_cast<VkInstance>(h.instance);
  auto device = static_cast<VkDevice>(h.device);
  auto getDeviceProcAddr = reinterpret_cast<PFN_vkGetDeviceProcAddr>(
      getInstanceProcAddr(instance, "vkGetDeviceProcAddr"));
  ASSERT_NE(getDeviceProcAddr, nullptr);
  auto createBuffer =
      reinterpret_cast<PFN_vkCreateBuffer>(getDeviceProcAddr(device, "vkCreateBuffer"));
  auto destroyBuffer =
      reinterpret_cast<PFN_vkDestroyBuffer>(getDeviceProcAddr(device, "vkDestroyBuffer"));
  ASSERT_NE(createBuffer, nullptr);
  ASSERT_NE(destroyBuffer, nullptr);
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = 64;
  info.usage = 0; // must not be 0
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  if (createBuffer(device, &info, nullptr, &buffer) == VK_SUCCESS)
    destroyBuffer(device, buffer, nullptr);
  std::vector<std::string> messages = b.validationMessages();
  ASSERT_EQ(b.validationMessageCount(), messages.size());
  ASSERT_GE(messages.size(), 1u);
  EXPECT_EQ(messages[0].rfind("error [validation] ", 0), 0u) << messages[0];
  EXPECT_NE(messages[0].find("VUID-VkBufferCreateInfo-usage-requiredbitmask"), std::string::npos)
      << messages[0];
  EXPECT_EQ(received->get(), messages);
  // The shared backend, another instance, heard nothing.
  EXPECT_EQ(gpu()->validationMessageCount(), 0u);
  b.clearValidationMessages();
  EXPECT_EQ(b.validationMessageCount(), 0u);
  EXPECT_EQ(b.validationMessages(), std::vector<std::string>{});
  // The backend's own work draws none.
  SinLoop k;
  std::vector<float> x(256, 0.5f), out(256);
  ASSERT_TRUE(k.run(b, 10, x, out).ok());
  expectValidatedAndClean(b, "after the misuse");
}

/// Sets an environment variable for the scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

/// Without the layer (the loader told to look for explicit layers in an
/// empty folder), Required is an error naming the package, and IfInstalled
/// runs without it and says so.
TEST_F(VulkanBackendTest, AMissingValidationLayerIsAClearError) {
  REQUIRE_DEVICE();
  std::filesystem::path empty =
      std::filesystem::temp_directory_path() / fmt::format("qd-no-layers-{}", getpid());
  std::filesystem::create_directories(empty);
  {
    ScopedEnv layers("VK_LAYER_PATH", empty.string());
    ScopedEnv added("VK_ADD_LAYER_PATH", "");
    VulkanBackendOptions req;
    req.validation = Validation::Required;
    auto required = VulkanBackend::create(req);
    ASSERT_FALSE(required.ok());
    EXPECT_EQ(required.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(message(required.status()),
              "vulkan: the Vulkan validation layer (VK_LAYER_KHRONOS_validation) is not "
              "installed; install it (Debian: vulkan-validationlayers, which "
              "scripts/install-deps.sh installs), or set VulkanBackendOptions::validation to "
              "IfInstalled or Off");
    VulkanBackendOptions o;
    o.validation = Validation::IfInstalled;
    auto optional = VulkanBackend::create(o);
    ASSERT_TRUE(optional.ok()) << optional.status().message();
    EXPECT_FALSE((*optional)->validationActive());
    EXPECT_EQ((*optional)->validationMessageCount(), 0u);
    SinLoop k;
    std::vector<float> x(64, 0.25f), out(64);
    ASSERT_TRUE(k.run(**optional, 3, x, out).ok());
  }
  std::filesystem::remove_all(empty);
  // With the layer where it is, IfInstalled turns it on.
  VulkanBackendOptions o;
  o.validation = Validation::IfInstalled;
  auto on = VulkanBackend::create(o);
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_TRUE((*on)->validationActive() || validationOptional());
  auto off = VulkanBackend::create();
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->validationActive());
}

/// Float atomic adds, with the device's atomics and with the
/// compare-exchange loop: sums of halves, exact in any order.
TEST_F(VulkanBackendTest, FloatAtomicAddsWithAndWithoutDeviceAtomics) {
  REQUIRE_DEVICE();
  auto module = *parseModule(R"(field @y : f32[4]
field @z : f64[4]
field @w : i1[4]
kernel @k() {
  parallel for %i = 0 to 4000 {
    %four = const 4 : i32
    %b = rem %i, %four : i32
    %f = cast %i : i32 to f32
    %h = const 0.5 : f32
    %v = mul %f, %h : f32
    atomic_add @y[%b], %v : f32
    %d = cast %i : i32 to f64
    atomic_add @z[%b], %d : f64
    %t = const true : i1
    atomic_add @w[%b], %t : i1
  }
}
)",
                             {"atomics.qd", 1});
  auto ref = *Program::create(*module);
  Interpreter interp;
  ASSERT_TRUE(ref->launch("k", {}, interp).ok());
  for (bool deviceAtomics : {true, false}) {
    VulkanBackendOptions o;
    o.floatAtomics = deviceAtomics;
    o.maxThreads = 1024; // many iterations per invocation, many invocations per element
    o.invocationPerIteration = false;
    auto backend = VulkanBackend::create(validated(o));
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    if (!(*backend)->deviceInfo().features.float64 ||
        !(*backend)->deviceInfo().features.int64Atomics)
      GTEST_SKIP() << "the device lacks 64-bit floats or atomics";
    auto text = disassembleSpirv((*(*backend)->spirv(*module->findKernel("k")))->words);
    ASSERT_TRUE(text.ok());
    bool native = deviceAtomics && (*backend)->deviceInfo().features.atomicFloat32Add;
    EXPECT_EQ(text->find("OpAtomicFAddEXT") != std::string::npos, native);
    auto program = *Program::create(*module);
    absl::Status s = program->launch("k", {}, **backend);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(compareFields(*module, *ref, *program, /*exact=*/true), "") << deviceAtomics;
    EXPECT_EQ(program->field("y")->get(1).f, 0.5 * (1000.0 * 1 + 4.0 * 999 * 1000 / 2));
    expectValidatedAndClean(**backend, fmt::format("float atomics {}", deviceAtomics));
  }
}

/// The math functions against libm, in ulp of the result, over arguments
/// where the reductions are accurate (docs/runtime.md, "Vulkan").
/// How far `got` is from `want` (a value of type `t`), in ulp of `want`.
double ulpError(ScalarType t, double want, double got) {
  if (std::isnan(want))
    return std::isnan(got) ? 0.0 : INFINITY;
  if (std::isinf(want) || want == 0)
    return want == got ? 0.0 : INFINITY;
  // A subnormal result may be flushed to zero (the device's denormal
  // mode: NVIDIA's driver flushes f32).
  double smallest = t == ScalarType::F32 ? double(std::numeric_limits<float>::min())
                                         : std::numeric_limits<double>::min();
  if (std::fabs(want) < smallest && got == 0)
    return 0.0;
  double unit = t == ScalarType::F32
                    ? std::nextafter(float(std::fabs(want)), INFINITY) - std::fabs(float(want))
                    : std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
  return std::fabs(want - got) / unit;
}

TEST_F(VulkanBackendTest, MathFunctionsAreAccurate) {
  REQUIRE_DEVICE();
  const char *fns[] = {"sin", "cos", "tan", "exp", "log", "tanh", "sqrt"};
  for (ScalarType t : {ScalarType::F32, ScalarType::F64}) {
    if (t == ScalarType::F64 && !gpu()->deviceInfo().features.float64)
      continue;
    std::string ty(toString(t));
    std::string text = fmt::format("field @x : {0}[2048]\nfield @p : {0}[2048]\n", ty);
    for (const char *fn : fns)
      text += fmt::format("field @{1} : {0}[2048]\n", ty, fn);
    text += fmt::format("field @pow : {0}[2048]\nfield @atan2 : {0}[2048]\n", ty);
    text += "kernel @k() {\n  parallel for %i = 0 to 2048 {\n";
    text += fmt::format("    %x = load @x[%i] : {0}\n    %p = load @p[%i] : {0}\n", ty);
    for (const char *fn : fns)
      text += fmt::format("    %{1} = {1} %x : {0}\n    store @{1}[%i], %{1}\n", ty, fn);
    text += fmt::format("    %pw = pow %x, %p : {0}\n    store @pow[%i], %pw\n", ty);
    text += fmt::format("    %at = atan2 %p, %x : {0}\n    store @atan2[%i], %at\n", ty);
    text += "  }\n}\n";
    auto module = parseModule(text, {"math.qd", 1});
    ASSERT_TRUE(module.ok()) << module.status().message();
    auto program = *Program::create(**module);
    Buffer &x = *program->field("x"), &p = *program->field("p");
    for (int64_t i = 0; i < 2048; ++i) {
      // Magnitudes from 1e-3 to 1e3, both signs, and exponents in [-4, 4].
      double mag = std::pow(10.0, -3 + 6 * double(i) / 2047);
      x.set(i, Scalar::ofFloat(t, (i % 2 ? -1 : 1) * mag));
      p.set(i, Scalar::ofFloat(t, -4 + 8 * double((i * 7919) % 2048) / 2047));
    }
    absl::Status s = program->launch("k", {}, *gpu());
    ASSERT_TRUE(s.ok()) << s.message();
    auto check = [&](const char *name, auto libm, double maxUlp) {
      Buffer &out = *program->field(name);
      double worst = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < 2048; ++i) {
        double xv = x.get(i).f, pv = p.get(i).f;
        double want =
            t == ScalarType::F32 ? double(float(libm(xv, pv, true))) : libm(xv, pv, false);
        double e = ulpError(t, want, out.get(i).f);
        if (e > worst)
          worst = e, at = i;
      }
      std::cout << fmt::format("[vulkan math] {} {}: {} ulp at most\n", ty, name, worst);
      EXPECT_LE(worst, maxUlp) << ty << " " << name << " at x = " << x.get(at).f
                               << ", p = " << p.get(at).f << ": " << out.get(at).f;
    };
#define QD_LIBM(expr)                                                                              \
  [](double x, double p, bool single) {                                                            \
    (void)p;                                                                                       \
    return single ? double([](float x, float p) { return expr; }(float(x), float(p)))              \
                  : [](double x, double p) { return expr; }(x, p);                                 \
  }
    check("sin", QD_LIBM(std::sin(x)), 4);
    check("cos", QD_LIBM(std::cos(x)), 4);
    check("tan", QD_LIBM(std::tan(x)), 8);
    check("sqrt", QD_LIBM(std::sqrt(x)), 4);
    check("tanh", QD_LIBM(std::tanh(x)), 8);
    check("log", QD_LIBM(std::log(x)), 4);
    check("exp", QD_LIBM(std::exp(x)), 4);
    check("pow", QD_LIBM(std::pow(x, p)), 64);
    check("atan2", QD_LIBM(std::atan2(p, x)), 8);
#undef QD_LIBM
  }
}

// f32 sin and cos within 1 ulp of the correctly rounded result (glibc's
// double sin and cos rounded to f32) on two dense sweeps: 4096 evenly
// spaced arguments, and multiples of pi/4 (the odd ones are where the
// quadrant changes) with the three floats either side: every one on
// [-pi, pi], every 198th on [-1e4, 1e4]. On [-pi, pi] the error is in ulp
// of the result (and +-inf and NaN give NaN). On [-1e4, 1e4] a result near
// a zero of sin or cos carries the reduction's absolute error (about
// |x| 2^-48), so there a result below 1/2 is measured in ulp of the results
// just below 1 (2^-24).
TEST_F(VulkanBackendTest, MathSinAndCosOfF32SweepsAreWithinOneUlp) {
  REQUIRE_DEVICE();
  std::vector<float> xs;
  std::vector<bool> wide; // on the [-1e4, 1e4] sweep
  for (double limit : {std::numbers::pi, 1e4}) {
    auto add = [&](float v) {
      xs.push_back(v);
      wide.push_back(limit > 4);
    };
    for (int i = 0; i < 4096; ++i)
      add(float(-limit + 2 * limit * i / 4095));
    if (limit < 4)
      for (float v : {INFINITY, -INFINITY, NAN, 0.0f, -0.0f}) // NaN results; signed zeros
        add(v);
    int kMax = int(limit / (std::numbers::pi / 4));
    for (int k = -kMax; k <= kMax; k += std::max(1, kMax / 64)) {
      float v = float(k * std::numbers::pi / 4), below = v, above = v;
      add(v);
      for (int n = 0; n < 3; ++n) {
        add(below = std::nextafter(below, -INFINITY));
        add(above = std::nextafter(above, INFINITY));
      }
    }
  }
  size_t n = xs.size();
  std::string text = fmt::format("field @x : f32[{0}]\nfield @sin : f32[{0}]\n"
                                 "field @cos : f32[{0}]\n",
                                 n);
  text += fmt::format("kernel @k() {{\n  parallel for %i = 0 to {} {{\n"
                      "    %x = load @x[%i] : f32\n"
                      "    %s = sin %x : f32\n    store @sin[%i], %s\n"
                      "    %c = cos %x : f32\n    store @cos[%i], %c\n  }}\n}}\n",
                      n);
  auto module = parseModule(text, {"sweep.qd", 1});
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto program = *Program::create(**module);
  Buffer &x = *program->field("x");
  for (size_t i = 0; i < n; ++i)
    x.set(int64_t(i), Scalar::ofFloat(ScalarType::F32, xs[i]));
  absl::Status s = program->launch("k", {}, *gpu());
  ASSERT_TRUE(s.ok()) << s.message();
  auto check = [&](const char *name, double (*libm)(double)) {
    Buffer &out = *program->field(name);
    double worst[2] = {0, 0};
    size_t at[2] = {0, 0};
    for (size_t i = 0; i < n; ++i) {
      double want = float(libm(double(xs[i]))), got = out.get(int64_t(i)).f;
      double e = ulpError(ScalarType::F32, want, got);
      if (wide[i] && std::fabs(want) < 0.5)
        e = std::fabs(got - want) * 0x1p24;
      if (e > worst[wide[i]])
        worst[wide[i]] = e, at[wide[i]] = i;
    }
    for (int w : {0, 1}) {
      std::cout << fmt::format("[vulkan math] f32 {} on {}: {} ulp at most\n", name,
                               w ? "[-1e4, 1e4]" : "[-pi, pi]", worst[w]);
      EXPECT_LE(worst[w], 1) << fmt::format("{} at x = {}: {}", name, xs[at[w]],
                                            out.get(int64_t(at[w])).f);
    }
  };
  check("sin", [](double v) { return std::sin(v); });
  check("cos", [](double v) { return std::cos(v); });
  for (size_t i = 0; i < n; ++i) {
    if (xs[i] == 0) { // sin(-0) = -0, sin(+0) = +0
      EXPECT_EQ(std::signbit(program->field("sin")->get(int64_t(i)).f), std::signbit(xs[i]))
          << "sin(" << xs[i] << ")";
    }
  }
}

// Random kernels and their gradients (GenConfig::cpu; see CpuBackendTest)
// on the device against the interpreter: integers exactly, floats within
// 1e-4 relative (parallel float atomics sum in another order).
void randomKernelsOnVulkan() {
  bool stacks = *rc::gen::inRange(0, 4) == 0;
  testgen::GenConfig config = testgen::GenConfig::cpu(stacks);
  if (*rc::gen::inRange(0, 4) == 0)
    config.threads = 300; // more iterations than the grid's invocations
  testgen::GenProgram p = *testgen::genProgram(config);
  testgen::Printed printed = testgen::print(p);
  auto parsed = parseModule(printed.text, {"gen.qd", 1});
  if (!parsed.ok())
    testgen::fail(p, "does not parse: " + message(parsed.status()));
  std::unique_ptr<Module> m = *std::move(parsed);
  bool withGrad = !printed.hasStacks;
  if (withGrad && !buildGradientKernel(*m, *m->findKernel("k")).ok())
    testgen::fail(p, "no gradient");
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasStacks, "adstacks");
  std::string d = testgen::runAgainstInterpreter(p, *m, withGrad, *smallGrid(), 1e-4);
  if (!d.empty())
    testgen::fail(p, "vulkan: " + d);
  if (std::string v = takeValidationMessages(*smallGrid()); !v.empty())
    testgen::fail(p, "vulkan: " + v);
}

TEST_F(VulkanBackendTest, RandomKernelsAndGradientsMatchTheInterpreter) {
  REQUIRE_DEVICE();
  testgen::checkProperty(&randomKernelsOnVulkan, 25);
}

} // namespace
} // namespace qd
