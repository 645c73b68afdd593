//===- CpuTaskMergingTest.cpp - One compiled function per class of tasks --===//
//
// The CPU backend compiles one function for parallel tasks whose code
// differs only in integer constants (mergeEquivalentTasks): an unrolled
// loop's steps, their adstacks and their error sites. The merged code must
// compute what a function per task computes, bit for bit, report its
// errors at the same statements, and size each step's stack as its own.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/MergeTasks.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <cstring>
#include <string>
#include <vector>

namespace qd {
namespace {

/// `steps` unrolled steps: step s reads row s of @x, runs `s + 2` rounds
/// of sin over it in a loop-carried local (an adstack of s + 2 entries in
/// the gradient) and writes row s + 1; a last task sums row `steps` into
/// @loss. Every step reads @w[s, i] too: with `wRows` rows, the steps from
/// `wRows` on read out of range.
std::string stepsKernel(int steps, int wRows) {
  std::string text = fmt::format(R"(field @x : f32[{}, 8] grad
field @w : f32[{}, 8]
field @loss : f32 grad

kernel @k() {{
)",
                                 steps + 1, wRows);
  for (int s = 0; s < steps; ++s)
    text += fmt::format(R"(  parallel for %i{0} = 0 to 8 {{
    %s{0} = const {0} : i32
    %n{0} = const {1} : i32
    %v{0} = load @x[%s{0}, %i{0}] : f32
    %w{0} = load @w[%s{0}, %i{0}] : f32
    %u{0} = add %v{0}, %w{0} : f32
    %acc{0} = alloca f32
    store %acc{0}, %u{0}
    for %r{0} = 0 to {2} {{
      %a{0} = load %acc{0} : f32
      %b{0} = sin %a{0} : f32
      store %acc{0}, %b{0}
    }}
    %o{0} = load %acc{0} : f32
    store @x[%n{0}, %i{0}], %o{0}
  }}
)",
                        s, s + 1, s + 2);
  text += fmt::format(R"(  parallel for %j = 0 to 8 {{
    %last = const {} : i32
    %y = load @x[%last, %j] : f32
    atomic_add @loss[], %y : f32
  }}
}}
)",
                      steps);
  return text;
}

/// A module of stepsKernel with its gradient @k_grad.
std::unique_ptr<Module> stepsModule(int steps, int wRows) {
  auto m = parseModule(stepsKernel(steps, wRows), {"steps.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  auto g = buildGradientKernel(**m, *(*m)->findKernel("k"));
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(verify(**m).ok());
  return *std::move(m);
}

/// @x, @x.grad and @loss after @k then @k_grad on `backend`, as bits.
std::vector<uint64_t> runSteps(Module &m, Backend &backend, int steps) {
  auto program = Program::create(m);
  EXPECT_TRUE(program.ok());
  Buffer *x = (*program)->field("x");
  for (int64_t i = 0; i < 8; ++i)
    x->set(i, Scalar::ofFloat(ScalarType::F32, 0.1 * double(i) - 0.3));
  (*program)->field("loss", Component::Grad)->set(0, Scalar::ofFloat(ScalarType::F32, 1));
  for (const char *k : {"k", "k_grad"}) {
    absl::Status s = (*program)->launch(k, {}, backend);
    EXPECT_TRUE(s.ok()) << k << ": " << s.message();
  }
  std::vector<uint64_t> bits;
  for (const Buffer *b :
       {(*program)->field("x"), (*program)->field("x", Component::Grad), (*program)->field("loss")})
    for (int64_t i = 0; i < b->numElements(); ++i) {
      float f = static_cast<float>(b->get(i).f);
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      bits.push_back(u);
    }
  EXPECT_EQ(bits.size(), size_t(2 * 8 * (steps + 1) + 1));
  return bits;
}

std::unique_ptr<CpuBackend> cpu(bool merge, unsigned vectorWidth) {
  CpuBackendOptions o;
  o.threads = 1;
  o.vectorWidth = vectorWidth;
  o.mergeTasks = merge;
  auto b = CpuBackend::create(o);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return *std::move(b);
}

TEST(CpuTaskMergingTest, StepsShareOneFunctionAndComputeTheSameBits) {
  constexpr int kSteps = 5;
  std::unique_ptr<Module> m = stepsModule(kSteps, kSteps);
  Interpreter interp;
  std::vector<uint64_t> ref = runSteps(*m, interp, kSteps);
  for (unsigned width : {1u, 0u}) {
    std::unique_ptr<CpuBackend> merged = cpu(true, width), apart = cpu(false, width);
    std::vector<uint64_t> a = runSteps(*m, *merged, kSteps), b = runSteps(*m, *apart, kSteps);
    EXPECT_EQ(a, b) << "width " << width;
    if (width == 1) {
      EXPECT_EQ(a, ref) << "one worker, scalar code: the interpreter's order";
    }
    // The primal: the five steps and the loss task, two functions; the
    // steps' constants (rows, trip counts) are parameters.
    auto k = merged->taskFunctions(*m->findKernel("k"));
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->tasks, size_t(kSteps + 1));
    EXPECT_EQ(k->functions, 2u);
    EXPECT_GE(k->parameters, 2u);
    auto unmerged = apart->taskFunctions(*m->findKernel("k"));
    ASSERT_TRUE(unmerged.has_value());
    EXPECT_EQ(unmerged->functions, unmerged->tasks);
    // The gradient: each step's tasks, whose stacks (ids, capacities
    // s + 2) differ, share functions too.
    auto g = merged->taskFunctions(*m->findKernel("k_grad"));
    ASSERT_TRUE(g.has_value());
    EXPECT_GE(g->tasks, size_t(kSteps + 1));
    EXPECT_LE(g->functions, g->tasks - (kSteps - 1)) << g->tasks << " tasks";
  }
}

TEST(CpuTaskMergingTest, ErrorsOfAMergedTaskNameItsOwnStatement) {
  // @w has 3 rows: step 3 is the first to read out of range. With bounds
  // checks, the merged function raises step 3's error site.
  std::unique_ptr<Module> m = stepsModule(5, 3);
  LaunchOptions checked;
  checked.boundsChecked = true;
  std::vector<std::string> messages;
  for (bool merge : {true, false}) {
    std::unique_ptr<CpuBackend> b = cpu(merge, 0);
    auto program = Program::create(*m);
    ASSERT_TRUE(program.ok());
    absl::Status s = (*program)->launch("k", {}, *b, checked);
    ASSERT_FALSE(s.ok());
    messages.emplace_back(s.message());
    if (merge) {
      EXPECT_EQ(b->taskFunctions(*m->findKernel("k"))->functions, 2u);
    }
  }
  EXPECT_EQ(messages[0], messages[1]);
  // Step 3's load of @w is on line 6 + 16 * 3 + 4 of the text.
  EXPECT_NE(messages[0].find(fmt::format("steps.qd:{}:", 6 + 16 * 3 + 4)), std::string::npos)
      << messages[0];
}

/// The CPU module of `kernel`, its tasks merged as the emitter finishes
/// them (`online`, CodegenOptions::taskMerger) or after the whole module
/// (mergeEquivalentTasks), printed.
std::string mergedModule(const Kernel &kernel, bool online, TaskMergeStats &stats) {
  llvm::LLVMContext context;
  CodegenOptions opts;
  opts.vectorWidth = 8;
  TaskMerger merger;
  if (online)
    opts.taskMerger = &merger;
  KernelLayout layout;
  auto module = emitKernel(kernel, context, opts, layout);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok())
    return "";
  stats = online ? merger.finish() : mergeEquivalentTasks(**module);
  std::string text;
  llvm::raw_string_ostream os(text);
  (*module)->print(os, nullptr);
  return text;
}

TEST(CpuTaskMergingTest, MergingWhileEmittingGivesTheModuleOfMergingAfterwards) {
  constexpr int kSteps = 6;
  std::unique_ptr<Module> m = stepsModule(kSteps, kSteps);
  for (const char *name : {"k", "k_grad"}) {
    TaskMergeStats online, after;
    std::string a = mergedModule(*m->findKernel(name), true, online);
    std::string b = mergedModule(*m->findKernel(name), false, after);
    EXPECT_EQ(a, b) << name;
    EXPECT_EQ(online.tasks, after.tasks) << name;
    EXPECT_EQ(online.functions, after.functions) << name;
    EXPECT_EQ(online.parameters, after.parameters) << name;
    EXPECT_LT(online.functions, online.tasks) << name;
    EXPECT_NE(a.find("task.param"), std::string::npos) << name;
  }
}

/// A module whose @qd_kernel calls qd_rt_parallel_for once for each task
/// body of `bodies`, each with its own function and capture buffer; a body
/// may use %p (a pointer into the task's data), %i (the iteration, i64)
/// and %v (a <4 x i32>).
std::string tasksModule(const std::vector<std::string> &bodies) {
  std::string text = "declare void @qd_rt_parallel_for(ptr, ptr, ptr, i64, i64, i64, i64)\n"
                     "declare i32 @llvm.smax.i32(i32, i32)\n"
                     "declare void @ext(i32)\n";
  std::string calls;
  for (size_t t = 0; t < bodies.size(); ++t) {
    text += fmt::format("define void @task{}(ptr %ctx, ptr %cap, i64 %i, i64 %e, ptr %s) {{\n"
                        "entry:\n  %p = load ptr, ptr %cap\n"
                        "  %v = load <4 x i32>, ptr %p\n{}\n  ret void\n}}\n",
                        t, bodies[t]);
    calls += fmt::format("  %cap{0} = alloca [1 x i64]\n", t);
  }
  for (size_t t = 0; t < bodies.size(); ++t)
    calls += fmt::format("  call void @qd_rt_parallel_for(ptr %ctx, ptr @task{0}, ptr %cap{0}, "
                         "i64 0, i64 8, i64 1, i64 0)\n",
                         t);
  return text + "define void @qd_kernel(ptr %ctx) {\nentry:\n" + calls + "  ret void\n}\n";
}

/// Tasks that differ in an integer constant where a run-time value may
/// stand share a function; tasks that differ in anything else (a
/// predicate, an atomic operation, an alignment, a shuffle mask, a callee,
/// an intrinsic's immediate, a floating-point constant, a flag) keep their
/// own. Each case is the first body against the second.
TEST(CpuTaskMergingTest, OnlyIntegerOperandsMayDiffer) {
  struct Case {
    const char *what, *a, *b;
    bool merged;
  };
  const Case cases[] = {
      {"an add's constant", "%x = add i64 %i, 3\n  store i64 %x, ptr %p",
       "%x = add i64 %i, 5\n  store i64 %x, ptr %p", true},
      {"a splat", "%x = add <4 x i32> %v, splat (i32 1)\n  store <4 x i32> %x, ptr %p",
       "%x = add <4 x i32> %v, splat (i32 7)\n  store <4 x i32> %x, ptr %p", true},
      {"a stored constant", "store i32 1, ptr %p", "store i32 2, ptr %p", true},
      {"a predicate", "%c = icmp slt i64 %i, 4\n  store i1 %c, ptr %p",
       "%c = icmp sle i64 %i, 4\n  store i1 %c, ptr %p", false},
      {"an atomic operation", "%o = atomicrmw add ptr %p, i32 1 monotonic",
       "%o = atomicrmw max ptr %p, i32 1 monotonic", false},
      {"an alignment", "store i32 1, ptr %p, align 4", "store i32 1, ptr %p, align 8", false},
      {"a volatile store", "store i32 1, ptr %p", "store volatile i32 1, ptr %p", false},
      {"a shuffle mask",
       "%x = shufflevector <4 x i32> %v, <4 x i32> %v, <4 x i32> <i32 0, i32 1, i32 2, i32 3>\n"
       "  store <4 x i32> %x, ptr %p",
       "%x = shufflevector <4 x i32> %v, <4 x i32> %v, <4 x i32> <i32 3, i32 2, i32 1, i32 0>\n"
       "  store <4 x i32> %x, ptr %p",
       false},
      {"an element index", "%x = extractelement <4 x i32> %v, i32 0\n  store i32 %x, ptr %p",
       "%x = extractelement <4 x i32> %v, i32 1\n  store i32 %x, ptr %p", false},
      {"a call's argument", "call void @ext(i32 1)", "call void @ext(i32 2)", true},
      {"a callee", "%x = call i32 @llvm.smax.i32(i32 1, i32 2)\n  call void @ext(i32 %x)",
       "call void @ext(i32 2)", false},
      {"a tail call", "call void @ext(i32 1)", "tail call void @ext(i32 1)", false},
      {"a float constant", "store float 1.0, ptr %p", "store float 2.0, ptr %p", false},
      {"a wrap flag", "%x = add nsw i64 %i, 3\n  store i64 %x, ptr %p",
       "%x = add i64 %i, 3\n  store i64 %x, ptr %p", false},
      {"an operand's order", "%x = sub i64 %i, %e\n  store i64 %x, ptr %p",
       "%x = sub i64 %e, %i\n  store i64 %x, ptr %p", false},
      {"a GEP's element type", "%q = getelementptr i32, ptr %p, i64 %i\n  store i32 1, ptr %q",
       "%q = getelementptr i64, ptr %p, i64 %i\n  store i32 1, ptr %q", false},
      {"a GEP's index", "%q = getelementptr i32, ptr %p, i64 2\n  store i32 1, ptr %q",
       "%q = getelementptr i32, ptr %p, i64 6\n  store i32 1, ptr %q", true},
  };
  for (const Case &c : cases) {
    llvm::LLVMContext context;
    llvm::SMDiagnostic diag;
    std::unique_ptr<llvm::Module> m =
        llvm::parseAssemblyString(tasksModule({c.a, c.b, c.a}), diag, context);
    ASSERT_TRUE(m) << c.what << ": " << diag.getMessage().str();
    TaskMergeStats stats = mergeEquivalentTasks(*m);
    EXPECT_EQ(stats.tasks, 3u) << c.what;
    EXPECT_EQ(stats.functions, c.merged ? 1u : 2u) << c.what;
    std::string errors;
    llvm::raw_string_ostream os(errors);
    EXPECT_FALSE(llvm::verifyModule(*m, &os)) << c.what << ": " << errors;
  }
}

} // namespace
} // namespace qd
