//===- RunawayLaunchTest.cpp - Timeouts, cancellation and loop limits -----===//
//
// A launch that never ends (an infinite `while`, loops with huge dynamic
// trip counts) stops with an error naming the loop when its timeout passes
// or its cancel flag is set, on every backend (the interpreter, the CPU
// backend's scalar, multi-threaded and vector code, and the CUDA backend
// where a GPU exists; VulkanBackendTest has the Vulkan cases), and the next launch runs normally.
// The interpreter also has a deterministic loop iteration limit.
//
//===----------------------------------------------------------------------===//
#include "support/RunawayKernels.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/LaunchWatchdog.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

namespace qd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// @spin: each iteration counts up to %n + %i (never reached for negative
// %n), taking a `continue` on odd counts so that both back edges of the
// loop are exercised; lanes leave the loop at different times.
// @nested: two loops of %n iterations (2^62 for the largest i32).
constexpr const char *kSource = R"(field @x : f32[64]
field @sum : i32

kernel @spin(%n: i32) {
  parallel for %i = 0 to 64 {
    %zero = const 0 : i32
    %c = alloca i32
    store %c, %zero
    while {
      %v = load %c : i32
      %one = const 1 : i32
      %w = add %v, %one : i32
      store %c, %w
      %t = add %n, %i : i32
      %done = cmp eq %w, %t : i32
      if %done {
        break
      }
      %two = const 2 : i32
      %r = rem %w, %two : i32
      %odd = cmp ne %r, %zero : i32
      if %odd {
        continue
      }
    }
    %f = load %c : i32
    %g = cast %f : i32 to f32
    store @x[%i], %g
  }
}

kernel @nested(%n: i32) {
  serial {
    for %i = 0 to %n {
      for %j = 0 to %n {
        %one = const 1 : i32
        atomic_add @sum[], %one : i32
      }
    }
  }
}

)";

struct BackendCase {
  std::string name;
  std::unique_ptr<Backend> backend;
};

/// Every backend this machine can run.
std::vector<BackendCase> &backends() {
  static std::vector<BackendCase> all = [] {
    std::vector<BackendCase> v;
    v.push_back({"interp", std::make_unique<Interpreter>()});
    auto cpu = [&](std::string name, unsigned threads, int64_t chunk, unsigned width) {
      CpuBackendOptions o;
      o.threads = threads;
      o.chunk = chunk;
      o.vectorWidth = width;
      v.push_back({std::move(name), *CpuBackend::create(o)});
    };
    cpu("cpu serial", 1, 0, 1);
    cpu("cpu 2 threads", 2, 1, 1);
    cpu("cpu 8 lanes", 1, 0, 8);
    registerAllBackends();
    if (auto cuda = createBackend("cuda"); cuda.ok())
      v.push_back({"cuda", *std::move(cuda)});
    else
      std::cout << "[runaway] no CUDA backend: " << cuda.status().message() << "\n";

    return v;
  }();
  return all;
}

std::unique_ptr<Module> parse() {
  auto m = parseModule(std::string(kSource) + kShortLoopsKernel, {"runaway.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(verify(**m).ok());
  return *std::move(m);
}

absl::Status launch(Program &p, Backend &b, const char *kernel, int32_t n,
                    const LaunchOptions &options) {
  LaunchArg arg = LaunchArg::i32(n);
  return p.launch(kernel, std::span(&arg, 1), b, options);
}

/// @spin with a finite count: @x[i] = 5 + i.
void expectFiniteSpinWorks(Program &p, Backend &b, const LaunchOptions &options) {
  ASSERT_TRUE(launch(p, b, "spin", 5, options).ok());
  for (int i = 0; i < 64; ++i)
    ASSERT_EQ(p.field("x")->get(i).f, 5 + i) << "element " << i;
}

TEST(RunawayLaunchTest, ATimeoutStopsAnInfiniteLoopNamingItAndTheNextLaunchWorks) {
  auto m = parse();
  for (BackendCase &c : backends()) {
    SCOPED_TRACE(c.name);
    auto p = *Program::create(*m);
    LaunchOptions o;
    o.timeout = 100ms;
    auto start = Clock::now();
    absl::Status s = launch(*p, *c.backend, "spin", -1000, o);
    auto took = Clock::now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("runaway.qd:9:5: error: the launch ran past its timeout of 100 ms "
                               "and was stopped in this loop"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find("task at runaway.qd:5:3: `while` loop"), std::string::npos) << s;
    EXPECT_GE(took, 100ms);
    EXPECT_LT(took, 20s); // compiles included
    // Nothing is left behind: the same backend and program run normally,
    // with and without a timeout.
    expectFiniteSpinWorks(*p, *c.backend, {});
    expectFiniteSpinWorks(*p, *c.backend, o);
  }
}

TEST(RunawayLaunchTest, NestedLoopsWithHugeDynamicTripCountsStop) {
  auto m = parse();
  for (BackendCase &c : backends()) {
    SCOPED_TRACE(c.name);
    auto p = *Program::create(*m);
    LaunchOptions o;
    o.timeout = 50ms;
    absl::Status s = launch(*p, *c.backend, "nested", INT32_MAX, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    // Whichever loop a thread was in when it noticed.
    EXPECT_TRUE(s.message().find("runaway.qd:35:7: error: the launch ran past") == 0 ||
                s.message().find("runaway.qd:34:5: error: the launch ran past") == 0)
        << s;
    EXPECT_NE(s.message().find("`for` loop"), std::string::npos) << s;
    // Loops of a bounded size finish and count every iteration (the code
    // with stop checks; a timeout far above what 90000 iterations take,
    // even on the interpreter under ASan).
    p->field("sum")->set(0, Scalar::ofInt(ScalarType::I32, 0));
    o.timeout = 60s;
    ASSERT_TRUE(launch(*p, *c.backend, "nested", 300, o).ok());
    EXPECT_EQ(p->field("sum")->get(0).i, 300 * 300);
  }
}

// Many threads, each running fewer back edges than the interval between two
// stop checks of one thread (a GPU launch runs a thread per task iteration):
// their counts start staggered, so some of them check and the launch stops.
TEST(RunawayLaunchTest, ManyShortLoopsStopToo) {
  auto m = parse();
  for (BackendCase &c : backends()) {
    SCOPED_TRACE(c.name);
    auto p = *Program::create(*m);
    auto run = [&](int32_t tasks, int32_t count, const LaunchOptions &o) {
      LaunchArg args[] = {LaunchArg::i32(tasks), LaunchArg::i32(count)};
      return p->launch("short", args, *c.backend, o);
    };
    LaunchOptions o;
    o.timeout = 100ms;
    auto start = Clock::now();
    // 2^31 - 1 loops of 30000 iterations: hours on any backend.
    absl::Status s = run(INT32_MAX, 30000, o);
    auto took = Clock::now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_TRUE(s.message().find("runaway.qd:49:5: error: the launch ran past its timeout") == 0 ||
                s.message().find("runaway.qd:45:3: error: the launch ran past its timeout") == 0)
        << s;
    EXPECT_LT(took, 20s);
    o.timeout = 60s;
    ASSERT_TRUE(run(1000, 5, o).ok());
    for (int i = 0; i < 64; ++i)
      ASSERT_EQ(p->field("x")->get(i).f, 5) << "element " << i;
  }
}

// Loops whose bounds are constants stop too when they can run long: a task
// of 2^31 - 1 iterations (not on a GPU, where it ends within the timeout),
// a band of about 2^62 points (constant extents or given at launch) and a
// serial loop of 2^31 - 1 iterations, all within twice the timeout (the
// code was compiled by a first, cancelled launch);
// a nest of short constant loops that runs long only as a whole stops as
// well, and counts every iteration when it may finish.
TEST(RunawayLaunchTest, LongLoopsWithConstantBoundsStop) {
  auto m = parseModule(kLongConstantLoops, {"long.qd", 1});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(verify(**m).ok());
  for (BackendCase &c : backends()) {
    SCOPED_TRACE(c.name);
    auto p = *Program::create(**m);
    // 2^31 - 1 atomic adds are a second of work on a CPU, milliseconds on
    // a GPU: there only the band and the serial loop run long.
    for (const char *kernel : {"task", "band", "band_n", "serial"})
      if (c.name != "cuda" || std::string_view(kernel) != "task")
        expectLongLoopStops(*p, *c.backend, kernel);
    p->field("count")->set(0, Scalar::ofInt(ScalarType::I32, 0));
    LaunchOptions o;
    o.timeout = 60s;
    ASSERT_TRUE(p->launch("nest", {}, *c.backend, o).ok());
    EXPECT_EQ(p->field("count")->get(0).i, 64 * 128 * 256);
  }
}

TEST(RunawayLaunchTest, TheCancelFlagStopsALaunchFromAnotherThread) {
  auto m = parse();
  for (BackendCase &c : backends()) {
    SCOPED_TRACE(c.name);
    auto p = *Program::create(*m);
    std::atomic<bool> cancel{false};
    LaunchOptions o;
    o.cancel = &cancel;
    std::thread canceller([&] {
      std::this_thread::sleep_for(50ms);
      cancel.store(true);
    });
    absl::Status s = launch(*p, *c.backend, "spin", -1000, o);
    canceller.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_EQ(s.message().find("runaway.qd:9:5: error: the launch was cancelled "
                               "(LaunchOptions::cancel) while in this loop"),
              0u)
        << s;
    // A flag that is already set stops a launch at its first check.
    s = launch(*p, *c.backend, "spin", -1000, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    cancel.store(false);
    expectFiniteSpinWorks(*p, *c.backend, o);
  }
}

TEST(RunawayLaunchTest, TheInterpreterCountsLoopIterationsExactly) {
  auto m = parse();
  auto p = *Program::create(*m);
  Interpreter interp;
  LaunchOptions o;
  // 64 task iterations and 5 + i while iterations for each i.
  int64_t all = 64;
  for (int i = 0; i < 64; ++i)
    all += 5 + i;
  o.maxLoopIterations = all;
  expectFiniteSpinWorks(*p, interp, o);
  o.maxLoopIterations = all - 1;
  absl::Status s = launch(*p, interp, "spin", 5, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message().find(fmt::format("runaway.qd:9:5: error: the launch ran its limit of {} "
                                         "loop iterations and was stopped in this loop",
                                         all - 1)),
            0u)
      << s;
}

TEST(RunawayLaunchTest, CompiledBackendsRefuseALoopIterationLimit) {
  auto m = parse();
  for (BackendCase &c : backends()) {
    if (c.name == "interp")
      continue;
    SCOPED_TRACE(c.name);
    auto p = *Program::create(*m);
    LaunchOptions o;
    o.maxLoopIterations = 1000;
    absl::Status s = launch(*p, *c.backend, "spin", 5, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("LaunchOptions::maxLoopIterations"), std::string::npos) << s;
  }
}

TEST(RunawayLaunchTest, TheWatchdogStopsOnceAndOnlyWhenAsked) {
  int calls = 0;
  {
    LaunchWatchdog none({}, [&](StopReason) { ++calls; });
    std::this_thread::sleep_for(5ms);
    EXPECT_EQ(none.reason(), StopReason::None);
  }
  EXPECT_EQ(calls, 0);
  LaunchOptions o;
  o.timeout = 1ms;
  {
    LaunchWatchdog dog(o, [&](StopReason why) {
      ++calls;
      EXPECT_EQ(why, StopReason::Timeout);
    });
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(dog.reason(), StopReason::Timeout);
  }
  EXPECT_EQ(calls, 1);
  // A timeout too long for the clock never fires (and does not overflow).
  o.timeout = std::chrono::nanoseconds::max();
  {
    LaunchWatchdog dog(o, [&](StopReason) { ++calls; });
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(calls, 1);
}

} // namespace
} // namespace qd
