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
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

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

/// "" when `layout`'s launches are well formed for `m`: every parallel task
/// once, in order, named qd_task_<n>; serial entries numbered in order and
/// never adjacent; every entry a PTX kernel of `m` and every PTX kernel an
/// entry.
std::string checkLaunches(const KernelLayout &layout, const llvm::Module &m) {
  int nextTask = 0, nextSerial = 0;
  bool lastSerial = false;
  for (const KernelLayout::Launch &l : layout.launches) {
    const llvm::Function *f = m.getFunction(l.function);
    if (!f || f->getCallingConv() != llvm::CallingConv::PTX_Kernel)
      return fmt::format("launch '{}' is not a PTX kernel of the module", l.function);
    if (l.kind == KernelLayout::Launch::Parallel) {
      if (l.task != nextTask || l.function != fmt::format("qd_task_{}", nextTask))
        return fmt::format("parallel launch '{}' (task {}) out of order; expected task {}",
                           l.function, l.task, nextTask);
      ++nextTask;
      lastSerial = false;
    } else {
      if (lastSerial)
        return fmt::format("serial launch '{}' follows another serial launch", l.function);
      if (l.task != -1 || l.function != fmt::format("qd_serial_{}", nextSerial++))
        return fmt::format("serial launch '{}' misnamed", l.function);
      lastSerial = true;
    }
  }
  if (nextTask != static_cast<int>(layout.tasks.size()))
    return fmt::format("{} parallel launches for {} tasks", nextTask, layout.tasks.size());
  size_t kernels = 0;
  for (const llvm::Function &f : m)
    kernels += f.getCallingConv() == llvm::CallingConv::PTX_Kernel;
  if (kernels != layout.launches.size())
    return fmt::format("{} PTX kernels for {} launches", kernels, layout.launches.size());
  for (const KernelLayout::Task &t : layout.tasks)
    if (t.lanes != 1)
      return "a task with SIMD lanes";
  return "";
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

struct CorpusKernel {
  std::string tag, source, name;
};

/// The kernels of the corpus: the source chunk holding each and its name
/// (derived kernels are rebuilt from the chunk by the worker that uses them).
std::vector<CorpusKernel> corpusKernels() {
  std::vector<std::filesystem::path> files;
  for (const char *dir : {"test", "examples"})
    for (auto &e :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(QD_SOURCE_DIR) / dir))
      if (e.is_regular_file() && e.path().extension() == ".qd")
        files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<CorpusKernel> kernels;
  for (const auto &path : files) {
    std::string rel = std::filesystem::relative(path, QD_SOURCE_DIR).string();
    for (const SourceChunk &chunk : splitSourceChunks(readFile(path))) {
      auto parsed = parseModule(chunk.text, {rel, chunk.firstLine});
      if (!parsed.ok() || !verify(**parsed).ok())
        continue;
      for (auto &k : (*parsed)->kernels())
        kernels.push_back({fmt::format("{}:{}", rel, chunk.firstLine), chunk.text, k->name()});
    }
  }
  return kernels;
}

struct Results {
  std::mutex mutex;
  std::vector<std::string> failures;
  int kernels = 0, derived = 0;
  int assembled[2] = {0, 0};
  void fail(std::string what) {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(std::move(what));
  }
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
    if (std::string bad = checkLaunches(layout, **m); !bad.empty()) {
      r.fail(fmt::format("{} @{}: {}", tag, k.name(), bad));
      return;
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
  std::vector<CorpusKernel> kernels = corpusKernels();
  ASSERT_GT(kernels.size(), 100u);
  Results r;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < kernels.size();) {
      const CorpusKernel &ck = kernels[i];
      auto module = parseModule(ck.source, {ck.tag, 1});
      if (!module.ok())
        continue;
      Kernel *k = (*module)->findKernel(ck.name);
      std::vector<Kernel *> all = {k};
      if (!(*module)->findKernel(ck.name + "_grad") && !(*module)->findKernel(ck.name + "_dual")) {
        if (auto g = buildGradientKernel(**module, *k); g.ok())
          all.push_back(*g);
        if (auto d = buildDualKernel(**module, *k); d.ok())
          all.push_back(*d);
      }
      if (absl::Status v = verify(**module); !v.ok()) {
        r.fail(fmt::format("{} @{}: derived kernels do not verify: {}", ck.tag, ck.name,
                           std::string(v.message())));
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(r.mutex);
        r.kernels += static_cast<int>(all.size());
        r.derived += static_cast<int>(all.size()) - 1;
      }
      for (size_t j = 0; j < all.size(); ++j)
        compileKernel(*all[j], ck.tag, ptxas, r, static_cast<int>(i * 4 + j));
    }
  };
  unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back(worker);
  for (std::thread &t : threads)
    t.join();
  std::cout << fmt::format("[nvptx] {} kernels ({} gradient/dual) compiled to PTX; assembled by "
                           "ptxas: {} for sm_80, {} for sm_90\n",
                           r.kernels, r.derived, r.assembled[0], r.assembled[1]);
  for (const std::string &f : r.failures)
    ADD_FAILURE() << f;
  EXPECT_GT(r.kernels, 150);
  if (!ptxas)
    GTEST_SKIP() << "ptxas is not at " << kPtxas << ": the PTX was not assembled";
  EXPECT_EQ(r.assembled[0], r.kernels);
  EXPECT_EQ(r.assembled[1], r.kernels);
}

struct Compiled {
  std::unique_ptr<Module> module;
  llvm::LLVMContext context;
  KernelLayout layout;
  std::unique_ptr<llvm::Module> llvmModule;
};

std::unique_ptr<Compiled> compile(const std::string &text, const std::string &kernel) {
  auto c = std::make_unique<Compiled>();
  auto parsed = parseModule(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  if (!parsed.ok())
    return nullptr;
  c->module = std::move(*parsed);
  EXPECT_TRUE(verify(*c->module).ok());
  auto m = emitKernel(*c->module->findKernel(kernel), c->context, CodegenOptions(), c->layout,
                      CodegenTarget::Nvptx);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  c->llvmModule = std::move(*m);
  return c;
}

constexpr const char *kMixed = R"(
field @x : f32[64]
field @n : i32

kernel @k(%m: i32, %s: f32) {
  %c = const 2.5 : f32
  %t = mul %s, %c : f32
  %nn = load @n[] : i32
  parallel for %i = 0 to %nn {
    %v = load @x[%i] : f32
    %w = mul %v, %t : f32
    store @x[%i], %w
  }
  %q = add %m, %m : i32
  serial {
    %z = const 0 : i32
    store @x[%z], %t
  }
  parallel for %j = 0 to %q {
    %u = load @x[%j] : f32
    %e = exp %u : f32
    store @x[%j], %e
  }
  parallel for %l = 0 to 4 {
    %r = load @x[%l] : f32
    store @x[%l], %r
  }
}
)";

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
  EXPECT_EQ(checkLaunches(c->layout, *c->llvmModule), "");
  // %t (used by task 0 and serial 1), %nn (task 0's bound), %q (task 1's).
  EXPECT_EQ(c->layout.numValues, 3u);
  ASSERT_EQ(c->layout.tasks.size(), 3u);
  EXPECT_EQ(c->layout.tasks[0].end.kind, KernelLayout::TaskBound::FieldElement);
  EXPECT_EQ(c->layout.tasks[2].end.kind, KernelLayout::TaskBound::Constant);
  EXPECT_EQ(c->llvmModule->getTargetTriple(), kNvptxTriple);
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
  ASSERT_EQ(c->layout.launches.size(), 1u);
  EXPECT_EQ(c->layout.launches[0].function, "qd_task_0");
  EXPECT_EQ(c->layout.numValues, 0u);
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

} // namespace
} // namespace qd
