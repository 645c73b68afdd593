//===- ConcurrencyTest.cpp - Backends and programs shared by threads ------===//
//
// The threading contract of docs/runtime.md, exercised: host threads that
// share a CpuBackend (cold: kernels compile concurrently; warm: launches
// overlap), a Program, or an Interpreter, with adstack overflow in some
// launches. Every result is compared with a single-threaded interpreter run.
//
//===----------------------------------------------------------------------===//
#include "GpuBackendChecks.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"
#include "qd/runtime/CpuBackend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "GpuBackendChecks.h"

namespace qd {
namespace {

constexpr int kKernels = 6;
constexpr int kThreads = 4;
constexpr int kRounds = 6;
constexpr int64_t kLen = 300;

std::string gradKernel(int k) {
  return corpus::sinLoopKernel("g" + std::to_string(k));
}

struct Case {
  int n = 0;
  std::vector<float> x, ref;
};

class Concurrency : public ::testing::Test {
protected:
  void SetUp() override {
    std::string text;
    for (int k = 0; k < kKernels; ++k)
      text += gradKernel(k);
    auto m = parseModule(text, {"conc.qd", 1});
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_TRUE(verify(**m).ok());
    module = std::move(*m);
    // One case per thread, its reference from the interpreter alone.
    auto p = Program::create(*module);
    ASSERT_TRUE(p.ok());
    Interpreter interp;
    cases.resize(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      Case &c = cases[t];
      c.n = 3 + 29 * t;
      for (int64_t i = 0; i < kLen; ++i)
        c.x.push_back(0.002f * float(i) + 0.1f * float(t));
      c.ref.assign(kLen, 0.f);
      ASSERT_TRUE(launch(**p, interp, 0, c.n, c.x, c.ref).ok());
    }
  }

  static absl::Status launch(Program &p, Backend &b, int kernel, int n, std::vector<float> &x,
                             std::vector<float> &out, const LaunchOptions &options = {}) {
    return corpus::launchSinLoop(p, b, "g" + std::to_string(kernel), n, x, out, options);
  }

  /// Elements of `out` that differ from the case's reference (libmvec may
  /// differ from libm by a few ulp per operation).
  static int mismatches(const Case &c, const std::vector<float> &out) {
    int bad = 0;
    for (int64_t i = 0; i < kLen; ++i)
      bad += !(std::fabs(out[i] - c.ref[i]) <= 1e-4f * std::max(1.f, std::fabs(c.ref[i])));
    return bad;
  }

  /// Runs kRounds launches per thread, thread t with case t, cycling
  /// through the kernels. `backendOf(t)` and `programOf(t)` pick what each
  /// thread uses. With `overflowEvery` > 0, every such round launches with
  /// too small a capacity and must fail with an overflow error (the next
  /// launch must be correct). Returns the failures seen, as text.
  template <typename BackendOf, typename ProgramOf>
  std::vector<std::string> run(BackendOf backendOf, ProgramOf programOf, int overflowEvery = 0) {
    std::vector<std::vector<std::string>> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Case c = cases[t];
        for (int r = 0; r < kRounds; ++r) {
          std::vector<float> out(kLen, -1.f);
          int kernel = (t + r) % kKernels;
          bool overflow = overflowEvery > 0 && r % overflowEvery == 1;
          LaunchOptions options;
          if (overflow) {
            options.sizeAdStacks = false;
            options.defaultAdStackCapacity = 2;
          }
          absl::Status s = launch(programOf(t), backendOf(t), kernel, c.n, c.x, out, options);
          std::string where = "thread " + std::to_string(t) + " round " + std::to_string(r);
          if (overflow) {
            if (s.ok() || std::string(s.message()).find("adstack overflow") == std::string::npos)
              failures[t].push_back(where + ": expected an overflow, got: " + s.ToString());
            continue;
          }
          if (!s.ok())
            failures[t].push_back(where + ": " + std::string(s.message()));
          else if (int bad = mismatches(c, out))
            failures[t].push_back(where + ": " + std::to_string(bad) + " wrong elements");
        }
      });
    for (std::thread &th : threads)
      th.join();
    std::vector<std::string> all;
    for (auto &f : failures)
      all.insert(all.end(), f.begin(), f.end());
    return all;
  }

  std::unique_ptr<Module> module;
  std::vector<Case> cases;
};

std::string joined(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &l : lines)
    out += l + "\n";
  return out;
}

TEST_F(Concurrency, SharedCpuBackendCompilesEachKernelOnceAndLaunchesCorrectly) {
  auto cpu = CpuBackend::create();
  ASSERT_TRUE(cpu.ok());
  auto program = Program::create(*module);
  ASSERT_TRUE(program.ok());
  // Cold: the first rounds compile the kernels from several threads at once.
  auto failures =
      run([&](int) -> Backend & { return **cpu; }, [&](int) -> Program & { return **program; });
  EXPECT_TRUE(failures.empty()) << joined(failures);
  // Every kernel was compiled once (not once per thread that asked).
  for (int k = 0; k < kKernels; ++k)
    EXPECT_GT((*cpu)->compileSeconds(*module->findKernel("g" + std::to_string(k))), 0.0);
  // Warm: the same, with every kernel compiled, so launches overlap.
  failures =
      run([&](int) -> Backend & { return **cpu; }, [&](int) -> Program & { return **program; });
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST_F(Concurrency, SharedCpuBackendWithOverflowingLaunches) {
  auto cpu = CpuBackend::create();
  ASSERT_TRUE(cpu.ok());
  std::vector<std::unique_ptr<Program>> programs;
  for (int t = 0; t < kThreads; ++t)
    programs.push_back(*Program::create(*module));
  auto failures = run([&](int) -> Backend & { return **cpu; },
                      [&](int t) -> Program & { return *programs[t]; }, /*overflowEvery=*/2);
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST_F(Concurrency, SharedProgramWithABackendPerThread) {
  auto program = Program::create(*module);
  ASSERT_TRUE(program.ok());
  std::vector<std::unique_ptr<CpuBackend>> cpus;
  for (int t = 0; t < kThreads; ++t) {
    CpuBackendOptions o;
    o.threads = 1;
    cpus.push_back(*CpuBackend::create(o));
  }
  auto failures = run([&](int t) -> Backend & { return *cpus[t]; },
                      [&](int) -> Program & { return **program; });
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST_F(Concurrency, SharedInterpreter) {
  Interpreter interp;
  auto program = Program::create(*module);
  ASSERT_TRUE(program.ok());
  auto failures = run([&](int) -> Backend & { return interp; },
                      [&](int) -> Program & { return **program; }, /*overflowEvery=*/3);
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

// One CUDA backend shared by threads (docs/runtime.md): each kernel compiles
// once, launches run one at a time, results equal the reference, cold and
// warm, and a launch that overflows leaves the next one correct.
TEST_F(Concurrency, SharedCudaBackend) {
  registerAllBackends();
  auto cuda = createBackend("cuda");
  if (!cuda.ok())
    GTEST_SKIP() << "no CUDA backend (device, driver or build) here: " << cuda.status().message();
  auto program = Program::create(*module);
  ASSERT_TRUE(program.ok());
  for (const char *phase : {"cold", "warm"}) {
    auto failures =
        run([&](int) -> Backend & { return **cuda; }, [&](int) -> Program & { return **program; });
    EXPECT_TRUE(failures.empty()) << phase << ":\n" << joined(failures);
  }
  std::vector<std::unique_ptr<Program>> programs;
  for (int t = 0; t < kThreads; ++t)
    programs.push_back(*Program::create(*module));
  auto failures = run([&](int) -> Backend & { return **cuda; },
                      [&](int t) -> Program & { return *programs[t]; }, /*overflowEvery=*/2);
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(HeapSize, AHeapThatDoesNotFitIn64BitsIsAnAllocationError) {
  // 128 f64 stacks with adjoints (16 bytes an entry), 64 lanes and 64
  // workers at capacity 2^40: 2^50 bytes a stack, 2^57 a worker, 2^63 in
  // all, which wraps an int64.
  std::string text = "field @x : f64[65536]\nkernel @k() {\n  parallel for %i = 0 to 65536 {\n"
                     "    %v = load @x[%i] : f64\n";
  for (int s = 0; s < 128; ++s) {
    std::string n = std::to_string(s);
    text += "    %s" + n + " = adstack.alloca f64, capacity 0\n    adstack.push %s" + n +
            ", %v\n    %g" + n + " = adstack.load_top_adj %s" + n + " : f64\n    adstack.pop %s" +
            n + "\n";
  }
  text += "  }\n}\n";
  auto m = parseModule(text, {"big.qd", 1});
  ASSERT_TRUE(m.ok()) << m.status().message();
  CpuBackendOptions o;
  o.threads = 64;
  o.vectorWidth = 64;
  auto cpu = CpuBackend::create(o);
  ASSERT_TRUE(cpu.ok());
  auto program = Program::create(**m);
  ASSERT_TRUE(program.ok());
  LaunchOptions lo;
  lo.sizeAdStacks = false;
  lo.defaultAdStackCapacity = int64_t(1) << 40;
  absl::Status s = (*program)->launch("k", {}, **cpu, lo);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // One worker's slice alone is over any budget (and would wrap an int64
  // for all of them): the launch says so before allocating.
  EXPECT_NE(std::string(s.message()).find("more than the adstack memory budget"), std::string::npos)
      << s.message();
  // The backend stays usable.
  lo.defaultAdStackCapacity = 1;
  EXPECT_TRUE((*program)->launch("k", {}, **cpu, lo).ok());
}

} // namespace
} // namespace qd
