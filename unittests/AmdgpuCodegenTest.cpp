//===- AmdgpuCodegenTest.cpp - The AMDGPU target without a GPU ------------===//
//
// Every kernel of the corpus (every .qd file under test/ and examples/ that
// parses and verifies), with its gradient and dual kernels where autodiff
// builds them, compiles to a code object for gfx90a, gfx942 and gfx1100,
// has a well-formed list of device launches, and the code object's metadata
// lists exactly those launches, each with a kernel descriptor, the
// architecture's wave size and one global-buffer argument (the launch
// context). Also: the errors of the code object path.
//
//===----------------------------------------------------------------------===//
#include "CodegenCorpus.h"
#include "GpuCodegen.h"

#include "qd/codegen/llvm/Hsaco.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <filesystem>
#include <set>

namespace qd {
namespace {

constexpr size_t kArchCount = 3;

struct Results : corpus::CompileResults {
  int linked[kArchCount] = {0, 0, 0};
};

/// "" when the code object's kernels are exactly `layout`'s launches (and
/// their tasks' cooperative forms), each
/// with a descriptor, `arch`'s wave size and the context as its one
/// argument.
std::string checkCodeObject(const std::string &hsaco, const KernelLayout &layout,
                            const AmdgpuArch &arch) {
  auto kernels = readHsacoKernels(hsaco);
  if (!kernels.ok())
    return std::string(kernels.status().message());
  std::set<std::string> expected, seen;
  for (const KernelLayout::Launch &l : layout.launches) {
    expected.insert(l.function);
    if (!l.cooperativeFunction.empty())
      expected.insert(l.cooperativeFunction);
  }
  for (const HsacoKernelInfo &k : *kernels) {
    seen.insert(k.name);
    if (!k.hasDescriptor)
      return fmt::format("kernel '{}' has no descriptor symbol '{}.kd'", k.name, k.name);
    if (k.wavefrontSize != int64_t(arch.waveSize))
      return fmt::format("kernel '{}' has wave size {}, not {}", k.name, k.wavefrontSize,
                         arch.waveSize);
    if (k.args.size() != 1 || k.args[0].first != "global_buffer" || k.args[0].second != "global" ||
        k.kernargBytes != 8)
      return fmt::format("kernel '{}' does not take the launch context as its one argument",
                         k.name);
    // A kernel optimised to nothing (no effects) uses no register at all.
    if (k.vgprCount < 0 || k.sgprCount < 0 || k.privateSegmentBytes < 0)
      return fmt::format("kernel '{}' reports no register or scratch use", k.name);
  }
  if (seen != expected)
    return fmt::format("the code object has {} kernels for {} launches", seen.size(),
                       expected.size());
  return "";
}

/// Compiles `k` (bounds-checked on one architecture: the error sites of
/// index checks too) to a code object for every architecture.
void compileKernel(const Kernel &k, const std::string &tag, Results &r) {
  for (size_t a = 0; a < kArchCount; ++a) {
    const AmdgpuArch &arch = amdgpuArchs()[a];
    llvm::LLVMContext context;
    KernelLayout layout;
    CodegenOptions options;
    options.boundsChecked = a == 1;
    auto m = emitKernel(k, context, options, layout, CodegenTarget::Amdgpu);
    if (!m.ok()) {
      r.fail(fmt::format("{} @{}: codegen: {}", tag, k.name(), std::string(m.status().message())));
      return;
    }
    if (std::string bad = checkLaunches(layout, **m, llvm::CallingConv::AMDGPU_KERNEL);
        !bad.empty()) {
      r.fail(fmt::format("{} @{}: {}", tag, k.name(), bad));
      return;
    }
    HsacoOptions ho;
    ho.arch = std::string(arch.name);
    auto hsaco = emitHsaco(**m, ho);
    if (!hsaco.ok()) {
      r.fail(fmt::format("{} @{} ({}): {}", tag, k.name(), ho.arch,
                         std::string(hsaco.status().message())));
      continue;
    }
    if (std::string bad = checkCodeObject(*hsaco, layout, arch); !bad.empty()) {
      r.fail(fmt::format("{} @{} ({}): {}", tag, k.name(), ho.arch, bad));
      continue;
    }
    std::lock_guard<std::mutex> lock(r.mutex);
    ++r.linked[a];
  }
}

bool toolsPresent(std::string &why) {
  HsacoOptions defaults;
  if (!std::filesystem::exists(ocmlPath(defaults))) {
    why = "the ROCm device libraries are not at '" + ocmlPath(defaults) +
          "' (install rocm-device-libs or set QD_ROCM_DEVICE_LIBS)";
    return false;
  }
  if (auto lld = ldLldPath(defaults); !lld.ok()) {
    why = std::string(lld.status().message());
    return false;
  }
  return true;
}

TEST(AmdgpuCodegenTest, CorpusKernelsCompileToCodeObjects) {
  std::string why;
  if (!toolsPresent(why))
    GTEST_SKIP() << why;
  ASSERT_EQ(amdgpuArchs().size(), kArchCount);
  std::vector<corpus::CorpusKernel> kernels = corpus::corpusKernels();
  ASSERT_GT(kernels.size(), 100u);
  Results r;
  corpus::compileCorpus(
      kernels, r, [&](const Kernel &k, const std::string &tag, int) { compileKernel(k, tag, r); });
  std::cout << fmt::format("[amdgpu] {} kernels ({} gradient/dual) linked into code objects: {} "
                           "for gfx90a, {} for gfx942, {} for gfx1100\n",
                           r.kernels, r.derived, r.linked[0], r.linked[1], r.linked[2]);
  for (const std::string &f : r.failures)
    ADD_FAILURE() << f;
  EXPECT_GT(r.kernels, 150);
  EXPECT_GT(r.derived, 50);
  for (size_t a = 0; a < kArchCount; ++a)
    EXPECT_EQ(r.linked[a], r.kernels) << amdgpuArchs()[a].name;
}

std::unique_ptr<EmittedKernel> emit(const std::string &text, const std::string &kernel) {
  return emitForTarget(text, kernel, CodegenTarget::Amdgpu);
}

TEST(AmdgpuCodegenTest, EntriesAreAmdgpuKernelsTakingAGlobalContext) {
  auto e = emit(kMixed, "k");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->layout.launches.size(), 5u);
  EXPECT_EQ(e->layout.launches[0].function, "qd_serial_0");
  EXPECT_EQ(e->layout.launches[1].function, "qd_task_0");
  EXPECT_EQ(e->layout.launches[2].function, "qd_serial_1");
  EXPECT_EQ(checkLaunches(e->layout, *e->llvmModule, llvm::CallingConv::AMDGPU_KERNEL), "");
  EXPECT_EQ(e->llvmModule->getTargetTriple(), kAmdgpuTriple);
  const llvm::Function *task = e->llvmModule->getFunction("qd_task_0");
  ASSERT_TRUE(task);
  EXPECT_EQ(task->getArg(0)->getType()->getPointerAddressSpace(), 1u);
  EXPECT_TRUE(e->llvmModule->getFunction("__ocml_exp_f32"));
  // %nn (task 0's bound) goes through ctx->values; %t and %q, arithmetic
  // of arguments, are recomputed where they are used.
  EXPECT_EQ(e->layout.numValues, 1u);
}

TEST(AmdgpuCodegenTest, CodeObjectsFollowTheArchitecture) {
  std::string why;
  if (!toolsPresent(why))
    GTEST_SKIP() << why;
  for (const AmdgpuArch &arch : amdgpuArchs()) {
    auto e = emit(kMixed, "k");
    ASSERT_TRUE(e);
    HsacoOptions o;
    o.arch = std::string(arch.name);
    o.maxBlockSize = 128;
    auto hsaco = emitHsaco(*e->llvmModule, o);
    ASSERT_TRUE(hsaco.ok()) << hsaco.status().message();
    EXPECT_EQ(checkCodeObject(*hsaco, e->layout, arch), "") << arch.name;
    auto kernels = readHsacoKernels(*hsaco);
    ASSERT_TRUE(kernels.ok());
    for (const HsacoKernelInfo &k : *kernels)
      EXPECT_EQ(k.maxFlatWorkgroupSize, 128) << k.name;
    // ocml was linked and internalized: nothing is left to resolve.
    EXPECT_FALSE(e->llvmModule->getFunction("__ocml_exp_f32") &&
                 e->llvmModule->getFunction("__ocml_exp_f32")->isDeclaration());
    // The control constants ocml reads are the architecture's.
    for (const llvm::GlobalVariable &g : e->llvmModule->globals())
      EXPECT_FALSE(g.isDeclaration()) << g.getName().str();
  }
}

TEST(AmdgpuCodegenTest, AssemblyNamesTheArchitecture) {
  std::string why;
  if (!toolsPresent(why))
    GTEST_SKIP() << why;
  auto e = emit(kMixed, "k");
  ASSERT_TRUE(e);
  HsacoOptions o;
  o.arch = "gfx1100";
  auto isa = emitAmdgpuAssembly(*e->llvmModule, o);
  ASSERT_TRUE(isa.ok()) << isa.status().message();
  EXPECT_NE(isa->find(".amdgcn_target \"amdgcn-amd-amdhsa--gfx1100\""), std::string::npos);
  EXPECT_NE(isa->find(".amdhsa_kernel qd_task_0"), std::string::npos);
  EXPECT_NE(isa->find(".amdhsa_wavefront_size32 1"), std::string::npos);
}

TEST(AmdgpuCodegenTest, UnknownArchitectureIsRejected) {
  auto e = emit(kMixed, "k");
  ASSERT_TRUE(e);
  HsacoOptions o;
  o.arch = "gfx803";
  auto hsaco = emitHsaco(*e->llvmModule, o);
  ASSERT_FALSE(hsaco.ok());
  EXPECT_EQ(hsaco.status().code(), absl::StatusCode::kInvalidArgument);
  std::string m(hsaco.status().message());
  EXPECT_NE(m.find("'gfx803'"), std::string::npos) << m;
  EXPECT_NE(m.find("gfx942"), std::string::npos) << m;
}

TEST(AmdgpuCodegenTest, MissingDeviceLibrariesAreNamed) {
  auto e = emit(kMixed, "k");
  ASSERT_TRUE(e);
  HsacoOptions o;
  o.deviceLibs = "/nonexistent/bitcode";
  auto hsaco = emitHsaco(*e->llvmModule, o);
  ASSERT_FALSE(hsaco.ok());
  EXPECT_EQ(hsaco.status().code(), absl::StatusCode::kNotFound);
  std::string m(hsaco.status().message());
  EXPECT_NE(m.find("/nonexistent/bitcode/ocml.bc"), std::string::npos) << m;
  EXPECT_NE(m.find("QD_ROCM_DEVICE_LIBS"), std::string::npos) << m;
}

TEST(AmdgpuCodegenTest, AMissingLinkerIsNamed) {
  HsacoOptions o;
  o.ldLld = "/nonexistent/ld.lld";
  auto linked = linkHsaco("not an object", o);
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("/nonexistent/ld.lld"), std::string::npos)
      << linked.status().message();
}

TEST(AmdgpuCodegenTest, ReadingSomethingElseIsAnError) {
  auto k = readHsacoKernels("not an ELF file");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
}

} // namespace
} // namespace qd
