//===- VulkanBackendTest.cpp - The Vulkan backend against the interpreter -===//
//
// Kernels against the interpreter, the heap, and loops the driver ends
// (VulkanBackendHarness.h says where it runs and what every test asserts).
//
//===----------------------------------------------------------------------===//
#include "CooperativeKernels.h"
#include "UniformSums.h"
#include "VulkanBackendHarness.h"

namespace qd {
namespace {

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

// Where the device has subgroup arithmetic, adds to one element are summed
// over the subgroup first (spirv-subgroup-sum.qd); the sums are the
// interpreter's either way.
TEST_F(VulkanBackendTest, UniformAtomicAddsMatchTheInterpreter) {
  REQUIRE_DEVICE();
  std::cout << "[vulkan] subgroup arithmetic: "
            << (gpu()->deviceInfo().features.subgroupArithmetic ? "yes" : "no") << "\n";
  expectUniformSumsMatch(*gpu());
  auto m = parseModule(kUniformSums);
  ASSERT_TRUE(m.ok());
  auto code = gpu()->spirv(*(*m)->findKernel("sums"));
  ASSERT_TRUE(code.ok()) << code.status().message();
  bool sums = gpu()->deviceInfo().features.subgroupArithmetic;
  EXPECT_EQ(disassembleSpirv((*code)->words)->find("OpGroupNonUniformFAdd") != std::string::npos,
            sums);
  // subgroupSums = false: one add per invocation, the same sums.
  VulkanBackendOptions o = validated();
  o.subgroupSums = false;
  auto plain = VulkanBackend::create(o);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  auto plainCode = (*plain)->spirv(*(*m)->findKernel("sums"));
  ASSERT_TRUE(plainCode.ok());
  EXPECT_EQ(disassembleSpirv((*plainCode)->words)->find("OpGroupNonUniform"), std::string::npos);
  expectUniformSumsMatch(**plain);
  expectValidatedAndClean(**plain, "the backend without subgroup sums");
}

// A task of few iterations around a long loop runs a workgroup per
// iteration that shares the loop (docs/runtime.md, "Cooperative tasks"),
// its gradient too: with a literal and a run-time trip count (on both sides
// of the threshold), workgroups of 256 and of 100 invocations, and an add
// to the task's own element inside the shared loop, the results are the
// interpreter's. Loop exit checks are off: they refuse the cooperative
// form (their error sites would leave a workgroup waiting at a barrier).
TEST_F(VulkanBackendTest, CooperativeTasksMatchTheInterpreter) {
  REQUIRE_DEVICE();
  const std::string ownAdd = R"(      %wv = load %w[%u, %j] : f32
      %xv = load %x[%j] : f32
      %t = mul %wv, %xv : f32
      atomic_add %h[%u], %t : f32
)";
  for (unsigned group : {256u, 100u}) {
    VulkanBackendOptions o = validated();
    o.loopExitChecks = VulkanLoopExitChecks::Off;
    o.cooperativeGroupSize = group;
    auto backend = VulkanBackend::create(o);
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    struct Case {
      std::string text;
      std::vector<int64_t> units;
      bool cooperativeAnyway; // also where buffers may overlap (what spirv() compiles)
    };
    for (const Case &c :
         {Case{hiddenKernel("8"), {8}, true}, Case{hiddenKernel("%units"), {3, 4097}, true},
          Case{hiddenKernel("8", ownAdd, ""), {8}, false},
          Case{hiddenKernel("8", positiveTermsOnly()), {8}, true}}) {
      auto m = parseModule(c.text, {"coop.qd", 1});
      ASSERT_TRUE(m.ok()) << m.status().message();
      ASSERT_TRUE(buildGradientKernel(**m, *(*m)->findKernel("hidden")).ok());
      auto code = (*backend)->spirv(*(*m)->findKernel("hidden"));
      ASSERT_TRUE(code.ok()) << code.status().message();
      EXPECT_EQ(disassembleSpirv((*code)->words)->find("OpControlBarrier") != std::string::npos,
                c.cooperativeAnyway);
      for (int64_t units : c.units)
        for (int64_t n : {1, 129, 1000}) {
          SCOPED_TRACE(
              fmt::format("groups of {}, {} units, {} inputs:\n{}", group, units, n, c.text));
          Interpreter interp;
          std::vector<float> want = runHidden(**m, interp, n, units);
          std::vector<float> got = runHidden(**m, **backend, n, units);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i])) << i;
        }
    }
    expectValidatedAndClean(**backend, fmt::format("the backend with groups of {}", group));
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
  // invocations would fit, cut to whole workgroups of 64: 320; 512 -> 2048
  // bytes, 32 (less than one workgroup); 1 -> 8 bytes: 8192 would fit, and
  // the 1000 elements take 1024 (whole workgroups).
  for (auto [n, grid] : {std::pair{50, 320}, std::pair{512, 32}, std::pair{1, 1024}}) {
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

} // namespace
} // namespace qd
