//===- HipBackendTest.cpp - The AMDGPU backend ----------------------------===//
//
// Without an AMD GPU (this project's machines, CI), creating the backend
// must fail with a clear FailedPrecondition error and never crash, and the
// device tests skip, saying why. What needs no GPU runs everywhere: the
// options are checked before HIP is opened, and the launch-time reduction
// kernels compile to code objects for every architecture. On a machine with
// an AMD GPU and ROCm, the device tests run the checks every GPU backend
// must pass (GpuBackendChecks.h) and HIP's own calls.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/HipBackend.h"

#include "GpuBackendChecks.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace qd {
namespace {

using namespace corpus;

/// Why there is no AMDGPU backend here ("" when there is one).
const std::string &noGpuReason() {
  static const std::string why = [] {
    auto b = HipBackend::create();
    return b.ok() ? std::string() : std::string(b.status().message());
  }();
  return why;
}

HipBackend *gpu() {
  static std::unique_ptr<HipBackend> backend = [] {
    auto b = HipBackend::create();
    if (!b.ok()) {
      std::cout << "[amdgpu] " << b.status().message() << "\n";
      return std::unique_ptr<HipBackend>();
    }
    std::cout << fmt::format("[amdgpu] {} ({}, {} compute units)\n", (*b)->deviceInfo().name,
                             (*b)->arch(), (*b)->deviceInfo().multiprocessors);
    return *std::move(b);
  }();
  return backend.get();
}

#define REQUIRE_AMD_GPU()                                                                          \
  if (!gpu())                                                                                      \
  GTEST_SKIP() << "no AMD GPU to run on (" << noGpuReason()                                        \
               << "); the code objects are checked by AmdgpuCodegenTest"

TEST(HipBackendTest, WithoutAnAmdGpuCreationIsAClearError) {
  if (gpu())
    GTEST_SKIP() << "this machine has an AMD GPU";
  auto b = HipBackend::create();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string m(b.status().message());
  EXPECT_EQ(m.rfind("hip: ", 0), 0u) << m;
  // Either HIP is missing, or it is there and finds no GPU: both say what
  // to do instead.
  EXPECT_NE(m.find("use the cpu backend"), std::string::npos) << m;
  // A second attempt gives the same answer (HIP is opened once).
  auto again = HipBackend::create();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), b.status().message());
}

TEST(HipBackendTest, InstalledHipWithoutAGpuSaysSo) {
  if (gpu())
    GTEST_SKIP() << "this machine has an AMD GPU";
  if (!std::filesystem::exists("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5") &&
      !std::filesystem::exists("/opt/rocm/lib/libamdhip64.so"))
    GTEST_SKIP() << "HIP is not installed here";
  auto d = hip::Device::open();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(d.status().message()).find("no AMD GPU"), std::string::npos)
      << d.status().message();
}

TEST(HipBackendTest, AMissingLibraryIsAClearError) {
  auto d = hip::Device::open(0, "/nonexistent/libamdhip64.so");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string m(d.status().message());
  EXPECT_NE(m.find("cannot load HIP's library '/nonexistent/libamdhip64.so'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("QD_LIBAMDHIP64"), std::string::npos) << m;
}

TEST(HipBackendTest, ALibraryThatIsNotHipIsAClearError) {
  // libm loads, but has none of HIP's entry points.
  auto d = hip::Device::open(0, "libm.so.6");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      std::string(d.status().message()).find("hip: HIP's library 'libm.so.6' lacks 'hipInit'"),
      std::string::npos)
      << d.status().message();
}

TEST(HipBackendTest, TheArchitectureIsFoundInDeviceProperties) {
  // A hipDeviceProp_t-like block: a marketing name, numbers, the target id.
  std::vector<char> props(1024, 0);
  std::string name = "AMD Instinct MI210", id = "gfx90a:sramecc+:xnack-";
  std::copy(name.begin(), name.end(), props.begin());
  int32_t numbers[4] = {104, 0x67, 9, 0};
  std::memcpy(props.data() + 256, numbers, sizeof(numbers));
  std::copy(id.begin(), id.end(), props.begin() + 400);
  EXPECT_EQ(hip::findProcessorName(props.data(), props.size()), "gfx90a");
  std::string rdna = "gfx1100";
  std::copy(rdna.begin(), rdna.end(), props.begin() + 400);
  props[400 + rdna.size()] = 0;
  EXPECT_EQ(hip::findProcessorName(props.data(), props.size()), "gfx1100");
  // "gfx" inside another string, or alone, is not a target id.
  std::vector<char> none(64, 0);
  std::string inside = "xgfx90a", bare = "gfx";
  std::copy(inside.begin(), inside.end(), none.begin());
  std::copy(bare.begin(), bare.end(), none.begin() + 20);
  EXPECT_EQ(hip::findProcessorName(none.data(), none.size()), "");
}

TEST(HipBackendTest, BadOptionsAreRejectedBeforeHipIsOpened) {
  for (unsigned block : {0u, 2048u}) {
    HipBackendOptions o;
    o.blockSize = block;
    auto b = HipBackend::create(o);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << block;
    EXPECT_NE(std::string(b.status().message()).find(fmt::format("block size {}", block)),
              std::string::npos)
        << b.status().message();
  }
  HipBackendOptions o;
  o.arch = "gfx803";
  auto b = HipBackend::create(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(b.status().message()).find("'gfx803'"), std::string::npos);
}

TEST(HipBackendTest, ReductionKernelsCompileForEveryArchitecture) {
  if (!std::filesystem::exists(ocmlPath(HsacoOptions())) || !ldLldPath(HsacoOptions()).ok())
    GTEST_SKIP() << "no ROCm device libraries or ld.lld here";
  for (const AmdgpuArch &arch : amdgpuArchs()) {
    auto code = HipBackend::reductionCodeObject(std::string(arch.name));
    ASSERT_TRUE(code.ok()) << arch.name << ": " << code.status().message();
    auto kernels = readHsacoKernels(*code);
    ASSERT_TRUE(kernels.ok()) << kernels.status().message();
    ASSERT_EQ(kernels->size(), 3u) << arch.name;
    for (const HsacoKernelInfo &k : *kernels) {
      EXPECT_EQ(k.name.rfind("qd_max_", 0), 0u) << k.name;
      EXPECT_TRUE(k.hasDescriptor) << k.name;
      // (data, begin, end, out): 8 bytes each, as the launch packs them.
      EXPECT_EQ(k.kernargBytes, 32) << k.name;
      ASSERT_EQ(k.args.size(), 4u) << k.name;
      EXPECT_EQ(k.args[0].first, "global_buffer");
      EXPECT_EQ(k.args[1].first, "by_value");
      EXPECT_EQ(k.args[3].first, "global_buffer");
      EXPECT_EQ(k.wavefrontSize, int64_t(arch.waveSize)) << arch.name;
      EXPECT_EQ(k.maxFlatWorkgroupSize, 256) << k.name;
    }
  }
}

TEST(HipBackendTest, CorpusKernelsMatchTheInterpreter) {
  REQUIRE_AMD_GPU();
  expectCorpusMatchesTheInterpreter(*gpu(), "amdgpu");
}

TEST(HipBackendTest, BoundsThatGrowBetweenLaunchesResizeTheHeap) {
  REQUIRE_AMD_GPU();
  expectTheHeapFollowsTheBounds(
      *gpu(), [](const Kernel &k) { return *gpu()->gridThreads(k); },
      [] { return gpu()->lastLaunchThreads(); }, [] { return gpu()->lastAdStackHeapBytes(); });
}

TEST(HipBackendTest, ReportsWhatItIs) {
  REQUIRE_AMD_GPU();
  EXPECT_FALSE(gpu()->deviceInfo().name.empty());
  EXPECT_GT(gpu()->deviceInfo().multiprocessors, 0);
  EXPECT_TRUE(findAmdgpuArch(gpu()->arch()).ok()) << gpu()->arch();
  EXPECT_EQ(unsigned(gpu()->deviceInfo().waveSize), findAmdgpuArch(gpu()->arch())->waveSize);
}

} // namespace
} // namespace qd
