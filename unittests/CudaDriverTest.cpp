//===- CudaDriverTest.cpp - The CUDA driver layer ---------------------------===//
//
// Without a driver (CI), opening the device must fail with a clear error and
// the device tests skip, saying why. On a GPU machine they load PTX, move
// data and launch.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/CudaDriver.h"

#include "qd/runtime/CudaBackend.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace qd::cuda {
namespace {

// y[i] += 1 for i < n: a hand-written PTX kernel, so the driver layer is
// tested apart from qd's code generator.
constexpr const char *kAddOne = R"(.version 7.0
.target sm_80
.address_size 64

.visible .entry add_one(.param .u64 p, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.s32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.s32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  add.f32 %f2, %f1, 0f3F800000;
  st.global.f32 [%rd4], %f2;
DONE:
  ret;
}
)";

TEST(CudaDriver, AMissingDriverIsAClearError) {
  auto d = Device::open(0, "/nonexistent/libcuda.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string m(d.status().message());
  EXPECT_NE(m.find("cannot load the NVIDIA driver library '/nonexistent/libcuda.so.1'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("use the cpu backend"), std::string::npos) << m;
}

TEST(CudaDriver, HandWrittenPtxAssemblesWithPtxas) {
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas))
    GTEST_SKIP() << "no CUDA toolkit at /usr/local/cuda: ptxas is not checked";
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::filesystem::path ptx = dir / "qd-cuda-driver-test.ptx";
  std::filesystem::path cubin = dir / "qd-cuda-driver-test.cubin";
  std::ofstream(ptx) << kAddOne;
  std::string cmd = std::string(ptxas) + " -arch=sm_80 " + ptx.string() + " -o " + cubin.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// The reduction kernels launch-time sizing runs on the GPU (max of integer
// ranges) are hand-written PTX: every target qd supports assembles them.
TEST(CudaDriver, ReductionPtxAssemblesWithPtxas) {
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas))
    GTEST_SKIP() << "no CUDA toolkit at /usr/local/cuda: ptxas is not checked";
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::filesystem::path ptx = dir / "qd-cuda-reduction-test.ptx";
  std::filesystem::path cubin = dir / "qd-cuda-reduction-test.cubin";
  std::string text = CudaBackend::reductionPtx();
  for (const char *name : {"qd_max_u8", "qd_max_i32", "qd_max_i64"})
    EXPECT_NE(text.find(std::string(".entry ") + name), std::string::npos) << name;
  std::ofstream(ptx) << text;
  for (const char *arch : {"sm_75", "sm_80", "sm_90"}) {
    std::string cmd =
        std::string(ptxas) + " -arch=" + arch + " " + ptx.string() + " -o " + cubin.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

class CudaDevice : public ::testing::Test {
protected:
  void SetUp() override {
    auto d = Device::open();
    if (!d.ok())
      GTEST_SKIP() << "no CUDA device: " << d.status().message();
    device = std::move(*d);
  }
  std::unique_ptr<Device> device;
};

TEST_F(CudaDevice, ReportsWhatItIs) {
  EXPECT_FALSE(device->info().name.empty());
  EXPECT_GE(device->info().computeMajor, 5);
  EXPECT_GT(device->info().multiprocessors, 0);
  EXPECT_EQ(device->smArch().rfind("sm_", 0), 0u);
  std::printf("device 0: %s, %s, %d SMs\n", device->info().name.c_str(), device->smArch().c_str(),
              device->info().multiprocessors);
}

TEST_F(CudaDevice, LoadsPtxCopiesAndLaunches) {
  auto module = Module::load(*device, kAddOne);
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto fn = (*module)->function("add_one");
  ASSERT_TRUE(fn.ok()) << fn.status().message();
  constexpr unsigned n = 1000;
  std::vector<float> host(n);
  for (unsigned i = 0; i < n; ++i)
    host[i] = float(i);
  auto buf = DeviceBuffer::allocate(*device, n * sizeof(float));
  ASSERT_TRUE(buf.ok()) << buf.status().message();
  ASSERT_TRUE(device->copyToDevice(buf->get(), host.data(), n * sizeof(float)).ok());
  CUdeviceptr p = buf->get();
  unsigned count = n;
  void *params[] = {&p, &count};
  ASSERT_TRUE(device
                  ->check(device->api().cuLaunchKernel(*fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0,
                                                       nullptr, params, nullptr),
                          "cuLaunchKernel")
                  .ok());
  std::vector<float> back(n, -1.f);
  ASSERT_TRUE(device->copyToHost(back.data(), buf->get(), n * sizeof(float)).ok());
  for (unsigned i = 0; i < n; ++i)
    ASSERT_EQ(back[i], float(i) + 1.f) << i;
}

TEST_F(CudaDevice, BadPtxIsAnErrorWithTheJitLog) {
  auto module = Module::load(*device, ".version 7.0\n.target sm_80\n.address_size 64\nnonsense\n");
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(module.status().message()).find("cuModuleLoadDataEx"), std::string::npos)
      << module.status().message();
}

TEST_F(CudaDevice, AnAllocationTooLargeIsAnError) {
  auto buf = DeviceBuffer::allocate(*device, size_t(1) << 60);
  ASSERT_FALSE(buf.ok());
  EXPECT_EQ(buf.status().code(), absl::StatusCode::kResourceExhausted);
  // The device stays usable.
  EXPECT_TRUE(DeviceBuffer::allocate(*device, 1024).ok());
}

TEST_F(CudaDevice, ANonexistentOrdinalIsAClearError) {
  auto d = Device::open(1000);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("there is no CUDA device 1000"),
            std::string::npos)
      << d.status().message();
}

} // namespace
} // namespace qd::cuda
