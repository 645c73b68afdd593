//===- NvptxCodegenTest.cpp - The NVPTX target without a GPU --------------===//
//
// Every kernel of the corpus (every .qd file under test/ and examples/ that
// parses and verifies), with its gradient and dual kernels where autodiff
// builds them, compiles to PTX for sm_80 and sm_90, has a well-formed list
// of device launches, and assembles with ptxas when the CUDA toolkit is
// installed. Also: the launch structure and the values of top-level
// statements, and the errors of emitPtx.
//
//===----------------------------------------------------------------------===//
#include "CodegenCorpus.h"
#include "GpuCodegen.h"

#include "qd/abi/DeviceEntries.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/Ptx.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace qd {
namespace {

constexpr const char *kPtxas = "/usr/local/cuda/bin/ptxas";
const char *const kArchs[] = {"sm_80", "sm_90"};

std::string readFile(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Runs ptxas on `ptx`; "" on success, else its diagnostics.
std::string assemble(const std::string &ptx, const std::string &arch, const std::string &stem) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("qd-nvptx-test-{}", ::getpid());
  fs::create_directories(dir);
  fs::path in = dir / (stem + ".ptx"), out = dir / (stem + ".cubin"), err = dir / (stem + ".err");
  std::ofstream(in, std::ios::binary) << ptx;
  std::string cmd = fmt::format("{} -arch={} '{}' -o '{}' 2> '{}'", kPtxas, arch, in.string(),
                                out.string(), err.string());
  int rc = std::system(cmd.c_str());
  std::string diag = rc == 0 ? "" : fmt::format("ptxas exit {}: {}", rc, readFile(err));
  std::error_code ec;
  fs::remove(in, ec);
  fs::remove(out, ec);
  fs::remove(err, ec);
  return diag;
}

struct Results : corpus::CompileResults {
  int assembled[2] = {0, 0};
  /// Tasks run cooperatively (a literal trip count) and tasks with a
  /// cooperative form chosen at launch, in the code without bounds checks.
  int cooperative = 0, cooperativeForms = 0;
};

/// Compiles `k` for both architectures (and assembles the PTX with ptxas).
void compileKernel(const Kernel &k, const std::string &tag, bool ptxas, Results &r, int id) {
  for (int a = 0; a < 2; ++a) {
    llvm::LLVMContext context;
    KernelLayout layout;
    CodegenOptions options;
    options.boundsChecked = a == 1; // the error sites of index checks too
    auto m = emitKernel(k, context, options, layout, CodegenTarget::Nvptx);
    if (!m.ok()) {
      r.fail(fmt::format("{} @{}: codegen: {}", tag, k.name(), std::string(m.status().message())));
      return;
    }
    if (std::string bad = checkLaunches(layout, **m, llvm::CallingConv::PTX_Kernel); !bad.empty()) {
      r.fail(fmt::format("{} @{}: {}", tag, k.name(), bad));
      return;
    }
    if (a == 0) {
      std::lock_guard<std::mutex> lock(r.mutex);
      for (const KernelLayout::Task &t : layout.tasks)
        r.cooperative += t.cooperative;
      for (const KernelLayout::Launch &l : layout.launches)
        r.cooperativeForms += !l.cooperativeFunction.empty();
    }
    PtxOptions po;
    po.arch = kArchs[a];
    auto ptx = emitPtx(**m, po);
    if (!ptx.ok()) {
      r.fail(fmt::format("{} @{} ({}): {}", tag, k.name(), po.arch,
                         std::string(ptx.status().message())));
      continue;
    }
    if (!ptxas)
      continue;
    if (std::string d = assemble(*ptx, po.arch, fmt::format("k{}-{}", id, a)); !d.empty()) {
      r.fail(fmt::format("{} @{} ({}): {}", tag, k.name(), po.arch, d));
      continue;
    }
    std::lock_guard<std::mutex> lock(r.mutex);
    ++r.assembled[a];
  }
}

TEST(NvptxCodegenTest, CorpusKernelsCompileToPtxAndAssemble) {
  PtxOptions defaults;
  if (!std::filesystem::exists(libdevicePath(defaults)))
    GTEST_SKIP() << "NVIDIA's libdevice is not at '" << libdevicePath(defaults)
                 << "' (set QD_LIBDEVICE): corpus kernels with math calls cannot become PTX";
  bool ptxas = std::filesystem::exists(kPtxas);
  std::vector<corpus::CorpusKernel> kernels = corpus::corpusKernels();
  ASSERT_GT(kernels.size(), 100u);
  Results r;
  corpus::compileCorpus(kernels, r, [&](const Kernel &k, const std::string &tag, int id) {
    compileKernel(k, tag, ptxas, r, id);
  });
  std::cout << fmt::format("[nvptx] {} kernels ({} gradient/dual) compiled to PTX; assembled by "
                           "ptxas: {} for sm_80, {} for sm_90; {} cooperative tasks, {} "
                           "cooperative forms chosen at launch\n",
                           r.kernels, r.derived, r.assembled[0], r.assembled[1], r.cooperative,
                           r.cooperativeForms);
  for (const std::string &f : r.failures)
    ADD_FAILURE() << f;
  EXPECT_GT(r.kernels, 150);
  // The corpus exercises cooperative tasks (CudaBackendTest runs it on a GPU).
  EXPECT_GT(r.cooperative, 5);
  EXPECT_GT(r.cooperativeForms, 2);
  if (!ptxas)
    GTEST_SKIP() << "ptxas is not at " << kPtxas << ": the PTX was not assembled";
  EXPECT_EQ(r.assembled[0], r.kernels);
  EXPECT_EQ(r.assembled[1], r.kernels);
}

std::unique_ptr<EmittedKernel> compile(const std::string &text, const std::string &kernel) {
  return emitForTarget(text, kernel, CodegenTarget::Nvptx);
}

TEST(NvptxCodegenTest, LaunchesAlternateSerialRunsAndParallelTasks) {
  auto c = compile(kMixed, "k");
  ASSERT_TRUE(c);
  const auto &l = c->layout.launches;
  ASSERT_EQ(l.size(), 5u);
  EXPECT_EQ(l[0].function, "qd_serial_0");
  EXPECT_EQ(l[0].kind, KernelLayout::Launch::Serial);
  EXPECT_EQ(l[1].function, "qd_task_0");
  EXPECT_EQ(l[1].task, 0);
  EXPECT_EQ(l[2].function, "qd_serial_1");
  EXPECT_EQ(l[3].function, "qd_task_1");
  EXPECT_EQ(l[4].function, "qd_task_2");
  EXPECT_EQ(l[4].kind, KernelLayout::Launch::Parallel);
  EXPECT_EQ(checkLaunches(c->layout, *c->llvmModule, llvm::CallingConv::PTX_Kernel), "");
  // %nn (task 0's bound); %t and %q are recomputed where they are used.
  EXPECT_EQ(c->layout.numValues, 1u);
  ASSERT_EQ(c->layout.tasks.size(), 3u);
  EXPECT_EQ(c->layout.tasks[0].end.kind, KernelLayout::TaskBound::FieldElement);
  EXPECT_EQ(c->layout.tasks[2].end.kind, KernelLayout::TaskBound::Constant);
  EXPECT_EQ(c->llvmModule->getTargetTriple(), kNvptxTriple);
}

/// One launch, the parallel task's, and no value slots.
void expectOnlyTheTask(const EmittedKernel &c) {
  ASSERT_EQ(c.layout.launches.size(), 1u);
  EXPECT_EQ(c.layout.launches[0].function, "qd_task_0");
  EXPECT_EQ(c.layout.numValues, 0u);
}

TEST(NvptxCodegenTest, ParallelTasksOnlyNeedNoSerialLaunchOrValues) {
  auto c = compile(R"(
field @x : f32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %v = load @x[%i] : f32
    store @x[%i], %v
  }
}
)",
                   "k");
  ASSERT_TRUE(c);
  expectOnlyTheTask(*c);
}

// Top-level values made of launch inputs with arithmetic that cannot fail
// are recomputed by each entry that uses them (with the values they are
// made of): what a front-end writes before a task over an ndarray needs
// no serial entry and no value slot. A division (it may fail) and a load
// (a task may have stored to it) stay in a serial entry.
TEST(NvptxCodegenTest, TopLevelValuesOfLaunchInputsAreRecomputed) {
  auto parsed = parseModule(R"(
field @f : i32
kernel @k(%a: ndarray<f32, 2>, %s: i32) {
  %n = shape %a, 0 : i32
  %one = const 1 : i32
  %last = sub %n, %one : i32
  %w = shape %a, 1 : i32
  %unused = mul %w, %s : i32
  %half = div %s, %one : i32
  %g = load @f[] : i32
  %flag = cmp lt %last, %s : i32
  parallel for %i = 0 to %last {
    %v = load %a[%i, %half] : f32
    %c = select %flag, %g, %i : i32
    %x = cast %c : i32 to f32
    %y = add %v, %x : f32
    store %a[%i, %one], %y
  }
}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  Kernel &k = *(*parsed)->findKernel("k");
  std::set<const Stmt *> found;
  std::vector<std::string> recomputed;
  for (Stmt &s : k.body())
    if (isRecomputedTopLevel(s, found)) {
      found.insert(&s);
      recomputed.push_back(s.name());
    }
  EXPECT_EQ(recomputed, (std::vector<std::string>{"n", "one", "last", "w", "unused", "flag"}));
  DeviceEntryPlan plan = planDeviceEntries(k);
  ASSERT_EQ(plan.entries.size(), 2u); // %half and %g, then the task
  EXPECT_EQ(plan.entries[0].stmts.size(), 2u);
  EXPECT_EQ(plan.numValues, 2u);
  std::vector<std::string> task;
  for (const Stmt *s : plan.recomputes[1])
    task.push_back(s->name());
  EXPECT_EQ(task, (std::vector<std::string>{"n", "one", "last", "flag"}));
  ASSERT_EQ(plan.recomputes[0].size(), 1u); // %half's divisor
  EXPECT_EQ(plan.recomputes[0][0]->name(), "one");
  auto c = compile(R"(
kernel @k(%a: ndarray<f32, 1>) {
  %n = shape %a, 0 : i32
  parallel for %i = 0 to %n {
    %v = load %a[%i] : f32
    store %a[%i], %v
  }
}
)",
                   "k");
  ASSERT_TRUE(c);
  expectOnlyTheTask(*c);
  EXPECT_EQ(c->layout.tasks[0].end.kind, KernelLayout::TaskBound::NdarrayExtent);
}

TEST(NvptxCodegenTest, CpuLayoutHasNoLaunches) {
  auto parsed = parseModule(kMixed);
  ASSERT_TRUE(parsed.ok());
  llvm::LLVMContext context;
  KernelLayout layout;
  auto m = emitKernel(*(*parsed)->findKernel("k"), context, CodegenOptions(), layout);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(layout.launches.empty());
  EXPECT_EQ(layout.numValues, 0u);
  EXPECT_TRUE((*m)->getFunction("qd_kernel"));
}

// The GPU runtimes compile separate code for launches whose ndarray buffers
// do not overlap: there an atomic add to elements only its own iteration
// touches is a plain update, where buffers may overlap it stays atomic
// (the load of %b[0] may read %a.grad).
TEST(NvptxCodegenTest, DistinctNdarraysMakeOwnedAtomicsPlain) {
  auto parsed = parseModule(R"(
kernel @k(%a: ndarray<f32, 1> grad, %b: ndarray<f32, 1>) {
  %n = shape %a, 0 : i32
  parallel for %i = 0 to %n {
    %z = const 0 : i32
    %v = load %b[%z] : f32
    atomic_add %a.grad[%i], %v : f32
  }
}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (CodegenTarget target : {CodegenTarget::Nvptx, CodegenTarget::Amdgpu})
    for (bool distinct : {false, true}) {
      CodegenOptions options;
      options.distinctNdarrays = distinct;
      llvm::LLVMContext context;
      KernelLayout layout;
      auto m = emitKernel(*(*parsed)->findKernel("k"), context, options, layout, target);
      ASSERT_TRUE(m.ok()) << m.status();
      std::string text;
      llvm::raw_string_ostream os(text);
      (*m)->print(os, nullptr);
      EXPECT_EQ(text.find("atomicrmw fadd") == std::string::npos, distinct)
          << codegenTargetName(target) << " distinct " << distinct << "\n"
          << text;
    }
}

TEST(NvptxCodegenTest, EmitPtxRejectsAnUnknownArchitecture) {
  auto c = compile(kMixed, "k");
  ASSERT_TRUE(c);
  PtxOptions o;
  o.arch = "sm_7";
  auto ptx = emitPtx(*c->llvmModule, o);
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ptx.status().message().find("'sm_7'"), std::string::npos) << ptx.status().message();
}

TEST(NvptxCodegenTest, EmitPtxNamesAMissingLibdevice) {
  auto c = compile(kMixed, "k");
  ASSERT_TRUE(c);
  PtxOptions o;
  o.libdevice = "/nonexistent/libdevice.10.bc";
  auto ptx = emitPtx(*c->llvmModule, o);
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ptx.status().message().find("/nonexistent/libdevice.10.bc"), std::string::npos);
  EXPECT_NE(ptx.status().message().find("QD_LIBDEVICE"), std::string::npos);
}

TEST(NvptxCodegenTest, PtxHasOneEntryPerLaunch) {
  if (!std::filesystem::exists(libdevicePath(PtxOptions())))
    GTEST_SKIP() << "no libdevice at " << libdevicePath(PtxOptions());
  auto c = compile(kMixed, "k");
  ASSERT_TRUE(c);
  PtxOptions o;
  o.arch = "sm_90";
  auto ptx = emitPtx(*c->llvmModule, o);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  EXPECT_NE(ptx->find(".target sm_90"), std::string::npos);
  for (const auto &l : c->layout.launches)
    EXPECT_NE(ptx->find(".entry " + l.function + "("), std::string::npos) << l.function;
  // libdevice was linked and internalized: no call leaves the module.
  EXPECT_EQ(ptx->find(".extern"), std::string::npos);
}

TEST(NvptxCodegenTest, DeepNestsGetTheLightTierAndStillAssemble) {
  // 18 loops nested in a parallel task (past TierLimits::fullLoopDepth):
  // the light pipeline and code generation without optimisation, for the
  // kernel and its gradient. The PTX must be
  // complete (no call leaves the module) and assemble.
  if (!std::filesystem::exists(libdevicePath(PtxOptions())))
    GTEST_SKIP() << "no libdevice at " << libdevicePath(PtxOptions());
  std::string text = "field @x : f32[64] grad\nfield @y : f32[64] grad\nfield @m : i32\n\n"
                     "kernel @k() {\n  parallel for %i = 0 to 64 {\n    %v = load @x[%i] : f32\n"
                     "    %m = load @m[] : i32\n    %a = alloca f32\n    store %a, %v\n";
  std::string indent = "    ";
  for (int d = 0; d < 18; ++d) {
    text += fmt::format("{0}for %j{1} = 0 to %m {{\n{0}  %l{1} = load %a : f32\n"
                        "{0}  %s{1} = sin %l{1} : f32\n{0}  store %a, %s{1}\n",
                        indent, d);
    indent += "  ";
  }
  for (int d = 18; d-- > 0;) {
    indent.resize(indent.size() - 2);
    text += indent + "}\n";
  }
  text += "    %r = load %a : f32\n    store @y[%i], %r\n  }\n}\n";
  auto parsed = parseModule(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_TRUE(verify(**parsed).ok());
  auto grad = buildGradientKernel(**parsed, *(*parsed)->findKernel("k"));
  ASSERT_TRUE(grad.ok()) << grad.status().message();
  bool ptxas = std::filesystem::exists(kPtxas);
  Results r;
  int id = 9000;
  for (const Kernel *k : std::vector<const Kernel *>{(*parsed)->findKernel("k"), *grad}) {
    compileKernel(*k, "deep nest", ptxas, r, id++);
    llvm::LLVMContext context;
    KernelLayout layout;
    auto m = emitKernel(*k, context, CodegenOptions(), layout, CodegenTarget::Nvptx);
    ASSERT_TRUE(m.ok()) << m.status().message();
    auto ptx = emitPtx(**m, PtxOptions());
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_EQ(ptx->find(".extern"), std::string::npos) << k->name();
    EXPECT_EQ(ptx->find("__nvvm_reflect"), std::string::npos) << k->name();
    // The light tier has no inliner: libdevice's sin stays a function.
    EXPECT_NE(ptx->find(".func  (.param .b32 func_retval0) __nv_sinf"), std::string::npos)
        << k->name();
  }
  for (const auto &f : r.failures)
    ADD_FAILURE() << f;
  if (!ptxas)
    GTEST_SKIP() << "ptxas is not at " << kPtxas << ": the PTX was not assembled";
  EXPECT_EQ(r.assembled[0], 2);
  EXPECT_EQ(r.assembled[1], 2);
}

} // namespace
} // namespace qd
