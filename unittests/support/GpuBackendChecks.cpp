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

std::string sinLoopKernel(const std::string &name) {
  return "kernel @" + name + R"((%n: i32, %x: ndarray<f32, 1>, %out: ndarray<f32, 1>) {
  %len = shape %x, 0 : i32
  parallel for %i = 0 to %len {
    %s = adstack.alloca f32, capacity 0
    %xi = load %x[%i] : f32
    %v = alloca f32
    store %v, %xi
    for %j = 0 to %n {
      %a = load %v : f32
      adstack.push %s, %a
      %sn = sin %a : f32
      %c = const 0.1 : f32
      %b = add %sn, %c : f32
      store %v, %b
    }
    %g = alloca f32
    %one = const 1.0 : f32
    store %g, %one
    for %j2 = 0 to %n {
      %t = adstack.load_top %s : f32
      %cs = cos %t : f32
      %g0 = load %g : f32
      %g1 = mul %g0, %cs : f32
      store %g, %g1
      adstack.pop %s
    }
    %gf = load %g : f32
    store %out[%i], %gf
  }
}
)";
}

void expectCorpusMatchesTheInterpreter(Backend &backend, const std::string &tag) {
  CorpusStats stats;
  int chunkIndex = 0;
  for (const auto &path : corpusFiles()) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::string rel = std::filesystem::relative(path, QD_SOURCE_DIR).string();
    for (const SourceChunk &chunk : splitSourceChunks(text.str())) {
      ++chunkIndex;
      auto parsed = parseModule(chunk.text, {rel, chunk.firstLine});
      if (!parsed.ok() || !verify(**parsed).ok())
        continue;
      std::unique_ptr<Module> module = *std::move(parsed);
      std::vector<Kernel *> all;
      for (auto &k : module->kernels())
        all.push_back(k.get());
      for (Kernel *k : std::vector<Kernel *>(all)) {
        if (module->findKernel(k->name() + "_grad") || module->findKernel(k->name() + "_dual"))
          continue;
        if (auto g = buildGradientKernel(*module, *k); g.ok())
          all.push_back(*g), ++stats.derived;
        if (auto d = buildDualKernel(*module, *k); d.ok())
          all.push_back(*d), ++stats.derived;
      }
      if (!verify(*module).ok())
        continue;
      for (Kernel *k : all) {
        if (hasEndlessWhile(*k) || hasHugeLoop(*k)) {
          ++stats.skippedEndless;
          continue;
        }
        ++stats.kernels;
        uint64_t seed = uint64_t(chunkIndex) * 7919 + std::hash<std::string>()(k->name());
        auto ref = makeInstance(*module, *k, seed, 0);
        auto dev = makeInstance(*module, *k, seed, 0);
        if (!ref || !dev)
          continue;
        LaunchOptions opts;
        opts.boundsChecked = true;
        bool timedOut = false;
        absl::Status si =
            interpretWithTimeout(*ref->program, k->name(), ref->args, opts, 2, timedOut);
        if (timedOut) {
          ++stats.timedOut;
          break;
        }
        ++stats.launches;
        std::string where = fmt::format("{}:{} kernel @{}", rel, chunk.firstLine, k->name());
        absl::Status sg = dev->program->launch(k->name(), dev->args, backend, opts);
        if (!si.ok()) {
          if (sg.ok())
            stats.failures.push_back(where + ": the interpreter failed (" + message(si) +
                                     ") but the GPU succeeded");
          else
            ++stats.bothErrored;
          continue;
        }
        if (!sg.ok()) {
          stats.failures.push_back(where + ": the GPU failed: " + message(sg));
          continue;
        }
        // Parallel tasks run in any order on the GPU: float sums round
        // differently, and order-dependent kernels are not compared.
        if (hasParallelTask(*k) && mayRace(*k)) {
          ++stats.racy;
          continue;
        }
        if (std::string d = compareInstances(*module, *ref, *dev, /*exact=*/false); !d.empty())
          stats.failures.push_back(where + ": " + d);
      }
    }
  }
  std::cout << fmt::format("[{} corpus] {} kernels ({} gradient/dual), {} launches, {} where "
                           "both failed, {} skipped (endless/huge), {} order-dependent (not "
                           "compared), {} failures\n",
                           tag, stats.kernels, stats.derived, stats.launches, stats.bothErrored,
                           stats.skippedEndless, stats.racy, stats.failures.size());
  EXPECT_GT(stats.kernels, 150);
  for (const auto &f : stats.failures)
    ADD_FAILURE() << f;
}

SinLoop::SinLoop() {
  module = *parseModule(sinLoopKernel("g"), {"sin.qd", 1});
  program = *Program::create(*module);
}

absl::Status launchSinLoop(Program &program, Backend &b, const std::string &kernel, int n,
                           std::vector<float> &x, std::vector<float> &out,
                           const LaunchOptions &options) {
  auto bx = Buffer::borrow(ScalarType::F32, {int64_t(x.size())}, x.data());
  auto bo = Buffer::borrow(ScalarType::F32, {int64_t(out.size())}, out.data());
  NdarrayArg ax{&*bx}, ao{&*bo};
  std::vector<LaunchArg> args{LaunchArg::i32(n), LaunchArg::ndarray(&ax), LaunchArg::ndarray(&ao)};
  return program.launch(kernel, args, b, options);
}

absl::Status SinLoop::run(Backend &b, int n, std::vector<float> &x, std::vector<float> &out,
                          const LaunchOptions &options) {
  return launchSinLoop(*program, b, "g", n, x, out, options);
}

void expectTheHeapFollowsTheBounds(Backend &backend,
                                   const std::function<int64_t(const Kernel &)> &gridThreads,
                                   const std::function<int64_t()> &lastHeapBytes) {
  SinLoop k;
  Interpreter interp;
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.001f * float(i);
  int64_t threads = gridThreads(*k.module->findKernel("g"));
  for (int n : {1, 20, 50, 512}) {
    std::vector<float> ref(x.size()), out(x.size(), -1.f);
    ASSERT_TRUE(k.run(interp, n, x, ref).ok());
    absl::Status s = k.run(backend, n, x, out);
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(out[i], ref[i], 1e-4 * std::max(1.f, std::fabs(ref[i])))
          << "n=" << n << " i=" << i;
    // The heap holds the grid's threads, not the elements: n entries of 4
    // bytes (rounded up to 8) per thread.
    EXPECT_EQ(lastHeapBytes(), threads * ((4 * n + 7) / 8 * 8)) << n;
  }
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
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 9, x, ref).ok());
  ASSERT_TRUE(k.run(backend, 9, x, out).ok());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
}

} // namespace qd::corpus
