//===- CooperativeTaskTest.cpp - Groups of threads sharing a serial loop --===//
//
// The plan (qd/analysis/CooperativeTask.h) on forward and gradient kernels
// and on what it must refuse; the GPU code it leads to (barriers, the
// group-shared sums, one group per iteration in the layout); and, on a
// machine with an NVIDIA GPU, the CUDA results against the interpreter for
// loops shorter and longer than a group, groups of a size that is not a
// power of two, and the gradient. Without a GPU the CUDA tests skip.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/CooperativeTask.h"

#include "CooperativeKernels.h"
#include "UniformSums.h"

#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Casting.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/CudaBackend.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <cmath>
#include <iostream>

namespace qd {
namespace {

struct Parsed {
  std::unique_ptr<Module> module;
  const ForStmt *task = nullptr;
};

Parsed parse(const std::string &text, const char *kernel = "hidden") {
  auto m = parseModule(text, {"coop.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message() << "\n" << text;
  if (!m.ok())
    return {};
  EXPECT_TRUE(verify(**m).ok());
  Parsed p{*std::move(m)};
  for (Stmt &s : p.module->findKernel(kernel)->body())
    if (auto *f = dyn_cast<ForStmt>(&s); f && f->isParallel())
      p.task = f;
  return p;
}

CooperativeTaskPlan plan(const ForStmt &task, NdarrayAliasing aliasing = NdarrayAliasing::MayAlias,
                         int64_t mostScattering = kDefaultCooperativeScatteringIterations) {
  CooperativeTaskOptions o;
  o.mostTaskIterations = 4096;
  o.mostScatteringIterations = mostScattering;
  o.aliasing = aliasing;
  return planCooperativeTask(task, o);
}

void expectOneLoopSummingS(const CooperativeTaskPlan &c) {
  ASSERT_TRUE(c.cooperative()) << c.refused;
  ASSERT_EQ(c.loops.size(), 1u);
  ASSERT_EQ(c.loops[0].sums.size(), 1u);
  EXPECT_EQ(c.loops[0].sums[0]->name(), "s");
}

TEST(CooperativeTaskTest, AHiddenLayerSharesItsSumLoop) {
  Parsed p = parse(hiddenKernel());
  ASSERT_TRUE(p.task);
  CooperativeTaskPlan c = plan(*p.task);
  expectOneLoopSummingS(c);
  ASSERT_EQ(c.guarded.size(), 1u);
  EXPECT_EQ(c.mostIterations, 4096);
  // %h may share a buffer with %x or %b, which the task reads: fenced.
  EXPECT_EQ(c.fenced, c.guarded);
  CooperativeTaskPlan d = plan(*p.task, NdarrayAliasing::Distinct);
  ASSERT_TRUE(d.cooperative());
  EXPECT_TRUE(d.fenced.empty());
  // Off: never cooperative.
  EXPECT_FALSE(planCooperativeTask(*p.task, {}).cooperative());
}

TEST(CooperativeTaskTest, TheGradientSharesItsLoopWhereNdarraysAreDistinct) {
  Parsed p = parse(hiddenKernel());
  ASSERT_TRUE(p.task);
  auto grad = buildGradientKernel(*p.module, *p.module->findKernel("hidden"));
  ASSERT_TRUE(grad.ok()) << grad.status().message();
  const ForStmt *task = nullptr;
  for (Stmt &s : (*grad)->body())
    if (auto *f = dyn_cast<ForStmt>(&s); f && f->isParallel())
      task = f;
  ASSERT_TRUE(task);
  CooperativeTaskPlan d = plan(*task, NdarrayAliasing::Distinct);
  ASSERT_TRUE(d.cooperative()) << d.refused;
  // Both the loop that replays the forward sum and the reverse loop are
  // shared; each adds into the replayed sum, and the sum's adjoint, which
  // every reverse iteration reads and puts back, is not a sum.
  ASSERT_EQ(d.loops.size(), 2u);
  // The reverse loop adds into %x.grad[%j]: it scatters, so the bound is
  // the one for scattering tasks, by default that of every task.
  EXPECT_EQ(d.mostIterations, kDefaultCooperativeTaskIterations);
  EXPECT_EQ(plan(*task, NdarrayAliasing::Distinct, 64).mostIterations, 64);
  for (const CooperativeTaskPlan::SharedLoop &l : d.loops)
    EXPECT_EQ(l.sums.size(), 1u);
  // Where %x.grad may be %x, the reverse loop reads what it adds into, so
  // it cannot be shared, and neither is the forward replay.
  CooperativeTaskPlan m = plan(*task);
  EXPECT_FALSE(m.cooperative());
  EXPECT_NE(m.refused.find("which it updates atomically"), std::string::npos) << m.refused;
}

TEST(CooperativeTaskTest, WhatTheLoopCarriesKeepsTheTaskOneIterationPerThread) {
  struct Case {
    std::string text, why;
  };
  const std::string scale = R"(      %xv = load %x[%j] : f32
      %old = load %s : f32
      %new = mul %old, %xv : f32
      store %s, %new
)";
  const std::string store = R"(      %xv = load %x[%j] : f32
      store %b[%j], %xv
)";
  const std::string early = R"(      %xv = load %x[%j] : f32
      %old = load %s : f32
      %new = add %old, %xv : f32
      store %s, %new
      break
)";
  const std::string twice = R"(      %xv = load %x[%j] : f32
      %old = load %s : f32
      %new = add %old, %xv : f32
      store %s, %new
      %sq = mul %new, %new : f32
      %again = load %s : f32
      %more = add %again, %sq : f32
      store %s, %more
)";
  const std::string guarded = R"(    %zero = const 0.0 : f32
    %c = cmp gt %y, %zero : f32
    if %c {
      store %h[%u], %y
    }
)";
  const std::string secondLoop = R"(    for %k = 0 to %n {
      %xk = load %x[%k] : f32
      %sk = load %s : f32
      %pk = mul %sk, %xk : f32
      store %s, %pk
    }
    store %h[%u], %y
)";
  std::vector<Case> cases = {
      {hiddenKernel("8", scale), "local %s carries a value"},
      {hiddenKernel("8", store), "stores to global memory"},
      {hiddenKernel("8", early), "may leave early"},
      {hiddenKernel("8", twice), "local %s carries a value"},
      {hiddenKernel("100000"), "100000 iterations, more than 4096"},
      {hiddenKernel("8", "", guarded), "under control flow outside the loop"},
      // The first loop could be shared, the second not: neither is.
      {hiddenKernel("8", "", secondLoop), "local %s carries a value"},
  };
  for (const Case &c : cases) {
    Parsed p = parse(c.text);
    ASSERT_TRUE(p.task);
    CooperativeTaskPlan r = plan(*p.task);
    EXPECT_FALSE(r.cooperative()) << c.text;
    EXPECT_NE(r.refused.find(c.why), std::string::npos) << r.refused << "\n" << c.text;
  }
}

/// A contact test: each task iteration sums what passes a test of data
/// over every element (billiards' collisions); `body` goes inside the
/// test's `if`, `cond` computes %c.
std::string contactKernel(const std::string &cond, const std::string &body) {
  return fmt::format(R"(
kernel @hidden(%x: ndarray<f32, 1> grad, %h: ndarray<f32, 1> grad, %n: i32) {{
  parallel for %u = 0 to 8 {{
    %s = alloca f32
    %z = const 0.0 : f32
    store %s, %z
    %xu = load %x[%u] : f32
    for %j = 0 to %n {{
      %xj = load %x[%j] : f32
      %d = sub %xj, %xu : f32
      %r = const 0.5 : f32
{}      if %c {{
{}      }}
    }}
    %y = load %s : f32
    store %h[%u], %y
  }}
}}
)",
                     cond, body);
}

TEST(CooperativeTaskTest, ASumUnderATestOfDataIsStillASum) {
  const std::string test = "      %c = cmp lt %d, %r : f32\n";
  const std::string add = R"(        %old = load %s : f32
        %new = add %old, %d : f32
        store %s, %new
)";
  // Nested tests, and an add in each arm of an if-else.
  const std::string nested = R"(        %q = cmp gt %d, %z : f32
        if %q {
          %old = load %s : f32
          %new = add %old, %d : f32
          store %s, %new
        } else {
          %o2 = load %s : f32
          %n2 = sub %o2, %r : f32
          store %s, %n2
        }
)";
  for (const std::string &body : {add, nested}) {
    Parsed p = parse(contactKernel(test, body));
    ASSERT_TRUE(p.task);
    expectOneLoopSummingS(plan(*p.task));
  }

  struct Case {
    std::string cond, body, why;
  };
  const std::string bySum = R"(      %cur = load %s : f32
      %c = cmp lt %cur, %r : f32
)";
  const std::string scale = R"(        %old = load %s : f32
        %new = mul %old, %d : f32
        store %s, %new
)";
  const std::string reset = "        store %s, %d\n";
  const std::string leave = add + "        continue\n";
  std::vector<Case> cases = {
      // The test reads the partial sum: an iteration depends on the last.
      {bySum, add, "local %s carries a value"},
      {test, scale, "local %s under control flow"},
      {test, reset, "local %s under control flow"},
      // Leaving the iteration from inside the test: the old rule.
      {test, leave, "under control flow"},
  };
  for (const Case &c : cases) {
    Parsed r = parse(contactKernel(c.cond, c.body));
    ASSERT_TRUE(r.task);
    CooperativeTaskPlan d = plan(*r.task);
    EXPECT_FALSE(d.cooperative()) << c.body;
    EXPECT_NE(d.refused.find(c.why), std::string::npos) << d.refused << "\n" << c.body;
  }
}

// Each local declared outside the loop takes a bit of the symbolic
// evaluation; past 60 of them the plan refuses rather than lose track.
TEST(CooperativeTaskTest, ALoopReadingTooManyOuterLocalsIsRefused) {
  std::string decls, reads;
  for (int k = 0; k < 70; ++k) {
    decls += fmt::format("    %l{} = alloca f32\n", k);
    reads += fmt::format("      %r{0} = load %l{0} : f32\n      %q{0} = mul %r{0}, %xv : f32\n"
                         "      %o{0} = load %s : f32\n      %n{0} = add %o{0}, %q{0} : f32\n"
                         "      store %s, %n{0}\n",
                         k);
  }
  std::string text = hiddenKernel("8", "      %xv = load %x[%j] : f32\n" + reads);
  text.replace(text.find("    %s = alloca f32\n"), 0, decls);
  Parsed p = parse(text);
  ASSERT_TRUE(p.task);
  CooperativeTaskPlan c = plan(*p.task);
  EXPECT_FALSE(c.cooperative());
  EXPECT_NE(c.refused.find("too many locals"), std::string::npos) << c.refused;
}

TEST(CooperativeTaskTest, AReadOnlyOrRestoredLocalIsNotASum) {
  // %a is read by every iteration and put back as it was (the adjoint
  // pattern of a reverse loop: load, store -0.0, add back).
  const std::string restored = R"(      %xv = load %x[%j] : f32
      %av = load %a : f32
      %nz = const -0.0 : f32
      store %a, %nz
      %t = mul %av, %xv : f32
      %old = load %s : f32
      %new = add %old, %t : f32
      store %s, %new
      %again = load %a : f32
      %back = add %again, %av : f32
      store %a, %back
)";
  std::string text = hiddenKernel("8", restored);
  text.replace(text.find("    %s = alloca f32\n"), 0, "    %a = alloca f32\n");
  Parsed p = parse(text);
  ASSERT_TRUE(p.task);
  CooperativeTaskPlan c = plan(*p.task);
  expectOneLoopSummingS(c);
}

std::string emitted(const Kernel &k, CodegenTarget target, KernelLayout &layout,
                    int64_t most = 4096, bool distinctNdarrays = false) {
  CodegenOptions o;
  o.cooperativeTaskIterations = most;
  o.distinctNdarrays = distinctNdarrays;
  llvm::LLVMContext context;
  auto m = emitKernel(k, context, o, layout, target);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return "";
  std::string text;
  llvm::raw_string_ostream os(text);
  (*m)->print(os, nullptr);
  return text;
}

TEST(CooperativeTaskTest, GpuCodeRunsAGroupPerIteration) {
  Parsed p = parse(hiddenKernel());
  ASSERT_TRUE(p.task);
  const Kernel &k = *p.module->findKernel("hidden");
  struct Target {
    CodegenTarget target;
    const char *barrier;
  };
  for (Target t : {Target{CodegenTarget::Nvptx, "@llvm.nvvm.barrier0"},
                   Target{CodegenTarget::Amdgpu, "@llvm.amdgcn.s.barrier"}}) {
    KernelLayout layout;
    std::string ir = emitted(k, t.target, layout);
    ASSERT_EQ(layout.tasks.size(), 1u);
    EXPECT_TRUE(layout.tasks[0].cooperative);
    EXPECT_NE(ir.find(t.barrier), std::string::npos) << ir;
    EXPECT_NE(ir.find("@qd_cooperative_scratch = internal addrspace(3) global [1024 x i64]"),
              std::string::npos)
        << ir;
    EXPECT_NE(ir.find("leader"), std::string::npos);
    KernelLayout off;
    std::string plain = emitted(k, t.target, off, 0);
    EXPECT_FALSE(off.tasks[0].cooperative);
    EXPECT_EQ(plain.find(t.barrier), std::string::npos);
  }
}

CudaBackend *gpu(unsigned blockSize) {
  static std::map<unsigned, std::unique_ptr<CudaBackend>> backends;
  auto &b = backends[blockSize];
  if (!b) {
    CudaBackendOptions o;
    o.blockSize = blockSize;
    auto made = CudaBackend::create(o);
    if (!made.ok()) {
      std::cout << "[cuda] " << made.status().message() << "\n";
      return nullptr;
    }
    b = *std::move(made);
  }
  return b.get();
}

TEST(CooperativeTaskTest, CudaMatchesTheInterpreter) {
  if (!gpu(128))
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  // The sum, and a sum under a test of data.
  for (const std::string &text : {hiddenKernel(), hiddenKernel("8", positiveTermsOnly())}) {
    Parsed p = parse(text);
    ASSERT_TRUE(p.task);
    ASSERT_TRUE(buildGradientKernel(*p.module, *p.module->findKernel("hidden")).ok());
    auto ptx = gpu(128)->ptx(*p.module->findKernel("hidden"));
    ASSERT_TRUE(ptx.ok());
    EXPECT_NE(ptx->find("bar.sync"), std::string::npos);
    // Loops without iterations, shorter than a group, longer than several;
    // groups of 128, of 100 (not a power of two) and of 1.
    for (int64_t n : {1, 5, 100, 129, 4099})
      for (unsigned block : {128u, 100u, 1u}) {
        SCOPED_TRACE(fmt::format("{} inputs, groups of {}:\n{}", n, block, text));
        Interpreter interp;
        std::vector<float> want = runHidden(*p.module, interp, n);
        std::vector<float> got = runHidden(*p.module, *gpu(block), n);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << i;
      }
  }
}

// An add to the task's own element inside the shared loop (a private
// atomic in one-thread-per-iteration code) comes from every thread of the
// group at once: it stays atomic, and the sums are the interpreter's.
TEST(CooperativeTaskTest, AddsToTheTasksOwnElementInTheSharedLoopStayAtomic) {
  Parsed p = parse(hiddenKernel("8", R"(      %wv = load %w[%u, %j] : f32
      %xv = load %x[%j] : f32
      %t = mul %wv, %xv : f32
      atomic_add %h[%u], %t : f32
)",
                                ""));
  ASSERT_TRUE(p.task);
  // %x is read in the loop: with overlapping buffers it may be %h.
  CooperativeTaskPlan c = plan(*p.task, NdarrayAliasing::Distinct);
  ASSERT_TRUE(c.cooperative()) << c.refused;
  for (CodegenTarget target : {CodegenTarget::Nvptx, CodegenTarget::Amdgpu}) {
    KernelLayout layout;
    std::string ir = emitted(*p.module->findKernel("hidden"), target, layout, 4096, true);
    EXPECT_NE(ir.find("atomicrmw fadd"), std::string::npos) << ir;
  }
  ASSERT_TRUE(buildGradientKernel(*p.module, *p.module->findKernel("hidden")).ok());
  if (!gpu(128))
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  for (int64_t n : {5, 4099}) {
    SCOPED_TRACE(fmt::format("{} inputs", n));
    Interpreter interp;
    std::vector<float> want = runHidden(*p.module, interp, n);
    std::vector<float> got = runHidden(*p.module, *gpu(128), n);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i])) << i;
  }
}

// A task whose trip count is known only at launch has both forms; the
// runtime runs the cooperative one up to 4096 iterations
// (CodegenOptions::cooperativeTaskIterations) and one iteration per thread
// past that.
TEST(CooperativeTaskTest, ARunTimeTripCountChoosesTheFormAtLaunch) {
  Parsed p = parse(hiddenKernel("%units"));
  ASSERT_TRUE(p.task);
  for (CodegenTarget target : {CodegenTarget::Nvptx, CodegenTarget::Amdgpu}) {
    KernelLayout layout;
    std::string ir = emitted(*p.module->findKernel("hidden"), target, layout);
    ASSERT_EQ(layout.tasks.size(), 1u);
    EXPECT_FALSE(layout.tasks[0].cooperative);
    // The task computes the extents it reads itself: no serial entry.
    ASSERT_EQ(layout.launches.size(), 1u);
    EXPECT_EQ(layout.launches[0].cooperativeFunction, "qd_task_0_coop");
    EXPECT_EQ(layout.launches[0].cooperativeIterations, 4096);
    // The shared loop's bounds, for the runtime to see whether it is long
    // enough to share at launch (0 to the extent of %x).
    const std::vector<KernelLayout::TaskBound> &loop = layout.launches[0].cooperativeLoops;
    ASSERT_EQ(loop.size(), 2u);
    EXPECT_EQ(loop[0].kind, KernelLayout::TaskBound::Constant);
    EXPECT_EQ(loop[1].kind, KernelLayout::TaskBound::NdarrayExtent);
    EXPECT_EQ(layout.launches[0].cooperativeLeastLoopIterations, 64);
    EXPECT_NE(ir.find("void @qd_task_0_coop("), std::string::npos) << ir;
  }
  if (!gpu(128))
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  ASSERT_TRUE(buildGradientKernel(*p.module, *p.module->findKernel("hidden")).ok());
  for (int64_t units : {3, 4096, 4097})
    for (int64_t n : {7, 300}) {
      SCOPED_TRACE(fmt::format("{} units, {} inputs", units, n));
      Interpreter interp;
      std::vector<float> want = runHidden(*p.module, interp, n, units);
      std::vector<float> got = runHidden(*p.module, *gpu(128), n, units);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << i;
    }
}

} // namespace
} // namespace qd

namespace qd {
namespace {

// Atomic adds to one element from every thread (a loss, a count) are summed
// over each warp first on NVPTX; adds to elements that differ between
// threads, or from a partial warp, stay one per thread.
TEST(CooperativeTaskTest, UniformAtomicAddsMatchTheInterpreter) {
  if (!gpu(128))
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  auto m = parseModule(kUniformSums);
  ASSERT_TRUE(m.ok());
  auto ptx = gpu(128)->ptx(*(*m)->findKernel("sums"));
  ASSERT_TRUE(ptx.ok());
  EXPECT_NE(ptx->find("shfl.sync.bfly"), std::string::npos);
  expectUniformSumsMatch(*gpu(128));
}

} // namespace
} // namespace qd
