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

} // namespace qd::corpus
