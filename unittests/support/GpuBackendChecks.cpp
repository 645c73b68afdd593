//===- GpuBackendChecks.cpp - What every GPU backend must do --------------===//
#include "GpuBackendChecks.h"

#include "Corpus.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

namespace qd::corpus {

void expectCorpusMatchesTheInterpreter(Backend &backend, const std::string &tag) {
  CorpusStats stats = runCorpus(backend, "the GPU");
  std::cout << fmt::format("[{} corpus] {} kernels ({} gradient/dual), {} launches, {} where "
                           "both failed, {} skipped (endless/huge), {} order-dependent (not "
                           "compared), {} failures\n",
                           tag, stats.kernels, stats.derived, stats.launches, stats.bothErrored,
                           stats.skippedEndless, stats.racy, stats.failures.size());
  EXPECT_GT(stats.kernels, 150);
  for (const auto &f : stats.failures)
    ADD_FAILURE() << f;
}

namespace {
/// 5000 elements of x = 0.001 i, the sin loop run with bound `n` on
/// `backend` and on the interpreter: the results agree.
void expectSinLoopMatches(SinLoop &k, Backend &backend, int n) {
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.001f * float(i);
  std::vector<float> ref(x.size()), out(x.size(), -1.f);
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, n, x, ref).ok());
  absl::Status s = k.run(backend, n, x, out);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-4 * std::max(1.f, std::fabs(ref[i]))) << "n=" << n << " i=" << i;
}
} // namespace

void expectTheHeapFollowsTheBounds(Backend &backend,
                                   const std::function<int64_t(const Kernel &)> &gridThreads,
                                   const std::function<int64_t()> &lastThreads,
                                   const std::function<int64_t()> &lastHeapBytes) {
  SinLoop k;
  int64_t grid = gridThreads(*k.module->findKernel("g"));
  for (int n : {1, 20, 50, 512}) {
    expectSinLoopMatches(k, backend, n);
    // The threads that ran, at most the grid and no more blocks (1024
    // threads at most) than the 5000 elements need.
    int64_t threads = lastThreads();
    EXPECT_LE(threads, grid) << n;
    EXPECT_GE(threads, std::min<int64_t>(grid, 5000)) << n;
    EXPECT_LT(threads, 5000 + 1024) << n;
    // The heap holds those threads, not the elements: n entries of 4 bytes
    // (rounded up to 8) per thread.
    EXPECT_EQ(lastHeapBytes(), threads * ((4 * n + 7) / 8 * 8)) << n;
  }
}

void expectLocalTapesWhereStacksFit(Backend &backend,
                                    const std::function<int64_t()> &lastHeapBytes) {
  SinLoop k;
  // 4-byte entries: up to 512 run from local arrays, 513 and more from the
  // heap.
  for (int n : {1, 20, 50, 512, 513, 3000, 20, 512}) {
    expectSinLoopMatches(k, backend, n);
    if (n <= 512)
      EXPECT_EQ(lastHeapBytes(), 0) << n;
    else
      EXPECT_GT(lastHeapBytes(), 0) << n;
  }
  std::vector<float> x(100, 0.5f), out(x.size(), -1.f);
  LaunchOptions small;
  small.sizeAdStacks = false;
  small.defaultAdStackCapacity = 3;
  absl::Status s = k.run(backend, 40, x, out, small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s.message();
  EXPECT_NE(std::string(s.message()).find("has capacity 3 and this launch needed 40"),
            std::string::npos)
      << s.message();
  expectSinLoopMatches(k, backend, 40);
}

void expectOverflowIsAnErrorAndTheNextLaunchWorks(Backend &backend) {
  SinLoop k;
  std::vector<float> x(1000, 0.5f), out(1000, -1.f), ref(1000);
  LaunchOptions small;
  small.sizeAdStacks = false;
  small.defaultAdStackCapacity = 2;
  absl::Status s = k.run(backend, 9, x, out, small);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(s.message()).find("has capacity 2 and this launch needed 9"),
            std::string::npos)
      << s.message();
  // The same error as the CPU backend's, through the shared decoding.
  EXPECT_NE(std::string(s.message()).find("sin.qd:3:"), std::string::npos) << s.message();
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 9, x, ref).ok());
  ASSERT_TRUE(k.run(backend, 9, x, out).ok());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
}

const char *const kLoopFreeStencil = R"(kernel @s(%p: ndarray<f32, 2>, %o: ndarray<f32, 2>) {
  %rows = shape %p, 0 : i32
  %cols = shape %p, 1 : i32
  parallel for (%i, %j) = (0, 0) to (%rows, %cols) {
    %one = const 1 : i32
    %zero = const 0 : i32
    %im = sub %i, %one : i32
    %up = max %im, %zero : i32
    %a = load %p[%i, %j] : f32
    %b = load %p[%up, %j] : f32
    %two = const 2.0 : f32
    %c = mul %a, %two : f32
    %d = add %c, %b : f32
    store %o[%i, %j], %d
  }
}
)";

int64_t expectLoopFreeStencilMatchesTheHost(Backend &backend, int64_t rows, int64_t cols,
                                            const std::function<int64_t()> &lastThreads) {
  auto module = parseModule(kLoopFreeStencil, {"stencil.qd", 1});
  EXPECT_TRUE(module.ok()) << module.status().message();
  if (!module.ok())
    return -1;
  auto program = *Program::create(**module);
  auto p = *Buffer::create(ScalarType::F32, {rows, cols});
  auto o = *Buffer::create(ScalarType::F32, {rows, cols});
  // Multiples of 1/4 below 256: every sum exact in f32.
  for (int64_t e = 0; e < rows * cols; ++e)
    p.set(e, Scalar::ofFloat(ScalarType::F32, double(e % 977) * 0.25));
  NdarrayArg ap{&p}, ao{&o};
  std::vector<LaunchArg> args{LaunchArg::ndarray(&ap), LaunchArg::ndarray(&ao)};
  absl::Status s = program->launch("s", args, backend);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok())
    return -1;
  int64_t threads = lastThreads();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double want = 2 * p.get(i * cols + j).f + p.get(std::max<int64_t>(i - 1, 0) * cols + j).f;
      if (o.get(i * cols + j).f != want) {
        ADD_FAILURE() << "o[" << i << ", " << j << "] = " << o.get(i * cols + j).f << ", not "
                      << want;
        return threads;
      }
    }
  return threads;
}

} // namespace qd::corpus
