//===- SpirvCodegenTest.cpp - SPIR-V code generation without a device -----===//
//
// Every kernel of the corpus (every .qd file under test/ and examples/ that
// parses and verifies), with its gradient and dual kernels where autodiff
// builds them, becomes a SPIR-V module that SPIRV-Tools validates for
// Vulkan 1.1, before and after its performance passes, with and without
// bounds checks, float atomics, loop exit checks and stop checks; its
// launches are the NVPTX target's (same entries, same shared values, the
// same loops with stop checks). Also: the features a kernel needs
// are named when the device lacks them, and the launch data layout.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/spirv/SpirvCodegen.h"

#include "CodegenCorpus.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <mutex>

namespace qd {
namespace {

/// The loops with a stop check (KernelLayout::Site::stopCheck), in order.
std::vector<const Stmt *> stopSites(const KernelLayout &layout) {
  std::vector<const Stmt *> loops;
  for (const KernelLayout::ErrorSite &site : layout.sites)
    if (site.stopCheck)
      loops.push_back(site.stmt);
  std::sort(loops.begin(), loops.end());
  return loops;
}

/// "" when the SPIR-V layout's launches are the NVPTX target's (and, with
/// stop checks, its loops with a stop check).
std::string sameLaunchesAsNvptx(const Kernel &k, const KernelLayout &spirv, bool stopChecks) {
  llvm::LLVMContext context;
  KernelLayout nvptx;
  CodegenOptions options;
  options.stopChecks = stopChecks;
  auto m = emitKernel(k, context, options, nvptx, CodegenTarget::Nvptx);
  if (!m.ok())
    return "nvptx: " + std::string(m.status().message());
  if (nvptx.launches.size() != spirv.launches.size())
    return fmt::format("{} launches, nvptx has {}", spirv.launches.size(), nvptx.launches.size());
  for (size_t i = 0; i < nvptx.launches.size(); ++i)
    if (nvptx.launches[i].function != spirv.launches[i].function ||
        nvptx.launches[i].task != spirv.launches[i].task)
      return fmt::format("launch {} is {}, nvptx has {}", i, spirv.launches[i].function,
                         nvptx.launches[i].function);
  if (nvptx.numValues != spirv.numValues)
    return fmt::format("{} shared values, nvptx has {}", spirv.numValues, nvptx.numValues);
  if (nvptx.stacks.size() != spirv.stacks.size())
    return fmt::format("{} adstacks, nvptx has {}", spirv.stacks.size(), nvptx.stacks.size());
  if (stopSites(spirv) != stopSites(nvptx))
    return fmt::format("{} loops with stop checks, nvptx has {}", stopSites(spirv).size(),
                       stopSites(nvptx).size());
  return "";
}

struct Results : corpus::CompileResults {
  int modules = 0, empty = 0, tooLarge = 0;
};

constexpr int kVariants = 4;

void compileKernel(const Kernel &k, const std::string &tag, Results &r) {
  for (int variant = 0; variant < kVariants; ++variant) {
    SpirvOptions options;
    options.boundsChecked = variant != 0; // the error sites of index checks too
    options.optimize = variant != 2;      // the emitter's own output is valid too
    options.features.atomicFloat32Add = options.features.atomicFloat64Add = variant == 1;
    options.checkLoopExits = variant >= 2; // lavapipe's code, before and after the passes
    options.stopChecks = variant == 1 || variant == 2; // before and after the passes
    if (variant == 1 || variant == 2)                  // local tapes, before and after the passes
      walk(const_cast<Kernel &>(k), [&](Stmt &s) {
        if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
          options.localAdStackEntries[a] = 32;
      });
    auto emitted = emitSpirv(k, options);
    if (!emitted.ok() &&
        emitted.status().message().find("fit the 32-bit indices") != std::string::npos) {
      std::lock_guard<std::mutex> lock(r.mutex);
      ++r.tooLarge; // test/qd-run/{field-too-large,huge-field}.qd: refused, saying why
      continue;
    }
    if (!emitted.ok()) {
      r.fail(fmt::format("{} @{} (variant {}): {}", tag, k.name(), variant,
                         std::string(emitted.status().message())));
      return;
    }
    if (emitted->words.empty()) {
      if (!emitted->layout.launches.empty())
        r.fail(fmt::format("{} @{}: no module for {} launches", tag, k.name(),
                           emitted->layout.launches.size()));
      std::lock_guard<std::mutex> lock(r.mutex);
      ++r.empty;
      continue;
    }
    if (std::string bad = validateSpirv(emitted->words); !bad.empty()) {
      r.fail(fmt::format("{} @{} (variant {}): invalid SPIR-V: {}", tag, k.name(), variant, bad));
      return;
    }
    if (variant <= 1)
      if (std::string bad = sameLaunchesAsNvptx(k, emitted->layout, options.stopChecks);
          !bad.empty())
        r.fail(fmt::format("{} @{}: {}", tag, k.name(), bad));
    std::lock_guard<std::mutex> lock(r.mutex);
    ++r.modules;
  }
}

TEST(SpirvCodegenTest, CorpusKernelsAndTheirDerivativesAreValidSpirv) {
  std::vector<corpus::CorpusKernel> kernels = corpus::corpusKernels();
  ASSERT_GT(kernels.size(), 100u);
  Results r;
  corpus::compileCorpus(
      kernels, r, [&](const Kernel &k, const std::string &tag, int) { compileKernel(k, tag, r); });
  std::cout << fmt::format("[spirv] {} kernels ({} gradient/dual): {} valid modules, {} kernels "
                           "without launches, {} with fields too large for 32-bit indices\n",
                           r.kernels, r.derived, r.modules, r.empty, r.tooLarge);
  for (const std::string &f : r.failures)
    ADD_FAILURE() << f;
  EXPECT_GT(r.kernels, 150);
  EXPECT_EQ(r.modules + r.empty + r.tooLarge, kVariants * r.kernels);
  // The two kernels each of test/qd-run/field-too-large.qd and
  // huge-field.qd, in every variant.
  EXPECT_LE(r.tooLarge, 4 * kVariants);
  EXPECT_GT(r.modules, kVariants * 450);
}

std::unique_ptr<Module> parse(const char *text) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  EXPECT_TRUE(verify(**m).ok());
  return *std::move(m);
}

TEST(SpirvCodegenTest, AMissingDeviceFeatureIsNamed) {
  auto m = parse(R"(field @x : f64[4]
kernel @k(%n: i32) {
  parallel for %i = 0 to 4 {
    %v = load @x[%i] : f64
    %w = mul %v, %v : f64
    store @x[%i], %w
  }
})");
  ASSERT_TRUE(m);
  SpirvOptions o;
  o.features.float64 = false;
  auto s = emitSpirv(*m->findKernel("k"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("shaderFloat64"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("t.qd:4:"), std::string::npos) << s.status().message();
  o.features.float64 = true;
  EXPECT_TRUE(emitSpirv(*m->findKernel("k"), o).ok());
}

TEST(SpirvCodegenTest, SixtyFourBitIntegersAndAtomicsNeedTheirFeatures) {
  auto m = parse(R"(field @c : i64
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = cast %i : i32 to i64
    atomic_max @c[], %v : i64
  }
})");
  ASSERT_TRUE(m);
  SpirvOptions o;
  o.features.int64Atomics = false;
  auto s = emitSpirv(*m->findKernel("k"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("shaderBufferInt64Atomics"), std::string::npos);
  o.features.int64 = false;
  s = emitSpirv(*m->findKernel("k"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("shaderInt64"), std::string::npos);
}

// The stop word is the binding after the slots; the interval and the
// spread of first-iteration readers must be powers of two.
TEST(SpirvCodegenTest, StopChecksBindTheirWordAfterTheSlots) {
  auto m = parse(R"(field @x : f32[8]
kernel @k(%n: i32) {
  parallel for %i = 0 to 8 {
    for %j = 0 to %n {
      %v = load @x[%i] : f32
      store @x[%i], %v
    }
  }
})");
  ASSERT_TRUE(m);
  const Kernel &k = *m->findKernel("k");
  auto plain = emitSpirv(k);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->stopBinding, 0u);
  SpirvOptions o;
  o.stopChecks = true;
  auto checked = emitSpirv(k, o);
  ASSERT_TRUE(checked.ok()) << checked.status().message();
  EXPECT_EQ(checked->stopBinding, 3u); // launch data, heap, @x
  EXPECT_EQ(stopSites(checked->layout).size(), 1u);
  for (auto [interval, spread] : {std::pair(1000u, 64u), std::pair(1024u, 0u)}) {
    o.stopCheckInterval = interval;
    o.stopCheckSpread = spread;
    auto bad = emitSpirv(k, o);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << interval;
    EXPECT_NE(bad.status().message().find("must be powers of two"), std::string::npos)
        << bad.status().message();
  }
}

TEST(SpirvCodegenTest, LaunchDataFollowsTheLayout) {
  auto m = parse(R"(field @x : f32[8]
kernel @k(%n: i32, %a: ndarray<f32, 2>) {
  %m = div %n, %n : i32
  parallel for %i = 0 to %m {
    %s = adstack.alloca f32, capacity 4
    %v = load @x[%i] : f32
    adstack.push %s, %v
    %t = adstack.load_top %s : f32
    %g = adstack.load_top_adj %s : f32
    %z = const 0 : i32
    store %a[%z, %z], %g
    adstack.pop %s
  }
})");
  ASSERT_TRUE(m);
  auto s = emitSpirv(*m->findKernel("k"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  const SpirvLaunchData &d = s->data;
  EXPECT_EQ(SpirvLaunchData::kThreads, 34u); // after the 136-byte error record
  EXPECT_EQ(SpirvLaunchData::kZero, 35u);
  EXPECT_EQ(SpirvLaunchData::kGroupTable, 36u);
  EXPECT_EQ(SpirvLaunchData::kThreadOffset, 37u);
  EXPECT_EQ(SpirvLaunchData::kHeapShift, 38u);
  EXPECT_EQ(d.needed, 39u);
  EXPECT_EQ(d.capacities, 40u);
  EXPECT_EQ(d.offsets, 41u);
  EXPECT_EQ(d.scalars, 42u);
  EXPECT_EQ(d.shapes, 46u); // 2 arguments x 2 words
  EXPECT_EQ(d.values, 50u); // 2 extents x 2 words
  EXPECT_EQ(d.words, 52u);  // %m
  ASSERT_EQ(s->entryWords.size(), 1u);
  EXPECT_EQ(s->entryWords[0], 2u); // primal and adjoint
  EXPECT_EQ(s->layout.stacks[0].entryBytes, 8u);
  ASSERT_EQ(s->layout.launches.size(), 2u);
  EXPECT_EQ(s->layout.launches[1].function, "qd_task_0");
  auto text = disassembleSpirv(s->words);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("OpEntryPoint GLCompute"), std::string::npos);
  EXPECT_NE(text->find("LocalSize 64 1 1"), std::string::npos);
  EXPECT_NE(text->find("LocalSize 1 1 1"), std::string::npos);
}

// SpirvOptions::checkLoopExits gives every loop an error site after it (the
// compare-exchange loop of a float atomic add included), whose message
// names the loop: what a launch on lavapipe reports when the driver ended
// one (docs/runtime.md, "Vulkan backend").
TEST(SpirvCodegenTest, LoopExitChecksGiveEveryLoopASite) {
  auto m = parse(R"(field @x : f32[8]
field @n : i32
kernel @k(%m: i32) {
  serial {
    %z = const 0 : i32
    while {
      %v = load @n[] : i32
      %o = const 1 : i32
      %w = add %v, %o : i32
      store @n[], %w
      %done = cmp ge %w, %m : i32
      if %done {
        break
      }
    }
  }
  parallel for %i = 0 to 8 {
    for %j = 0 to %m {
      %f = cast %j : i32 to f32
      %one = const 1 : i32
      %pair = xor %i, %one : i32
      atomic_add @x[%pair], %f : f32
    }
  }
})");
  ASSERT_TRUE(m);
  const Kernel &k = *m->findKernel("k");
  SpirvOptions one; // one invocation per iteration (no cooperative task's barriers)
  one.cooperativeTaskIterations = 0;
  auto plain = emitSpirv(k, one);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  for (const KernelLayout::ErrorSite &site : plain->layout.sites)
    EXPECT_FALSE(site.loopExitCheck);
  EXPECT_EQ(disassembleSpirv(plain->words)->find("Workgroup"), std::string::npos);
  for (bool optimize : {false, true}) {
    SpirvOptions o;
    o.checkLoopExits = true;
    o.optimize = optimize;
    auto checked = emitSpirv(k, o); // validated
    ASSERT_TRUE(checked.ok()) << checked.status().message();
    EXPECT_NE(disassembleSpirv(checked->words)->find("%loop_exit_flags = OpVariable"),
              std::string::npos);
    std::vector<std::string> messages;
    for (const KernelLayout::ErrorSite &site : checked->layout.sites)
      if (site.loopExitCheck) {
        absl::Status s = loopEndedEarlyError(k, *site.stmt, taskOf(site.stmt));
        EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
        messages.push_back(std::string(s.message()));
      }
    ASSERT_EQ(messages.size(), 4u);
    auto says = [](const std::string &m, const std::string &text) {
      EXPECT_NE(m.find(text), std::string::npos) << m;
    };
    std::string lavapipe = "before the program did (Mesa's lavapipe ends the loops of an "
                           "invocation after 65535 iterations in all, and the result would have "
                           "been wrong); ";
    // In the order the code checks them: the innermost first.
    EXPECT_EQ(messages[0], "t.qd:6:5: error: the Vulkan driver ended this `while` loop " +
                               lavapipe +
                               "run the kernel on another Vulkan device or backend, or spread "
                               "the work over the iterations of a parallel task (in kernel @k, "
                               "task at t.qd:4:3: `while` loop)");
    says(messages[1], "t.qd:22:7: error: the Vulkan driver ended the compare-exchange loop of "
                      "this `atomic_add` " +
                          lavapipe);
    says(messages[1], "or give each invocation fewer loop iterations to run");
    says(messages[1], "(in kernel @k, task at t.qd:17:3: atomic_add @x[%pair], %f : f32)");
    says(messages[2], "t.qd:18:5: error: the Vulkan driver ended this `for` loop " + lavapipe);
    says(messages[2], "(in kernel @k, task at t.qd:17:3: `for` loop)");
    EXPECT_EQ(messages[3], "t.qd:17:3: error: the Vulkan driver ended this parallel task's "
                           "grid-stride loop " +
                               lavapipe +
                               "give the task more invocations (VulkanBackendOptions::maxThreads) "
                               "so that each runs fewer of its iterations, or run the kernel on "
                               "another Vulkan device or backend (in kernel @k, task at "
                               "t.qd:17:3: `parallel for` loop)");
  }
}

TEST(SpirvCodegenTest, ValidationRejectsBrokenModules) {
  std::vector<uint32_t> words = {0x07230203, 0x00010300, 0, 5, 0};
  EXPECT_NE(validateSpirv(words), ""); // no capability, no memory model
  words[0] = 0;
  EXPECT_FALSE(disassembleSpirv(words).ok());
}

// assembleSpirv (the runtimes' hand-written shaders): valid assembly
// round-trips through the disassembler; text the assembler rejects, and
// assembly that does not validate, are errors that say which.
TEST(SpirvCodegenTest, AssemblyIsAssembledAndValidated) {
  constexpr const char *kEmpty = R"(
               OpCapability Shader
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "main"
               OpExecutionMode %main LocalSize 1 1 1
       %void = OpTypeVoid
         %fn = OpTypeFunction %void
       %main = OpFunction %void None %fn
      %entry = OpLabel
               OpReturn
               OpFunctionEnd
)";
  absl::StatusOr<std::vector<uint32_t>> words = assembleSpirv(kEmpty);
  ASSERT_TRUE(words.ok()) << words.status().message();
  EXPECT_EQ((*words)[0], 0x07230203u);
  EXPECT_NE(disassembleSpirv(*words)->find("LocalSize 1 1 1"), std::string::npos);
  absl::StatusOr<std::vector<uint32_t>> garbage = assembleSpirv("OpNoSuchInstruction %x");
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("cannot assemble SPIR-V"), std::string::npos)
      << garbage.status().message();
  // Assembles, but a function without a terminator does not validate.
  std::string broken = kEmpty;
  broken.replace(broken.find("OpReturn"), 8, "");
  absl::StatusOr<std::vector<uint32_t>> invalid = assembleSpirv(broken);
  ASSERT_FALSE(invalid.ok());
  EXPECT_NE(invalid.status().message().find("is not valid"), std::string::npos)
      << invalid.status().message();
}

} // namespace
} // namespace qd
