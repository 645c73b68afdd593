//===- CudaBackendTest.cpp - The CUDA backend against the interpreter -----===//
//
// Runs on a machine with an NVIDIA GPU and driver; everywhere else every test
// skips, saying why (CI has no GPU: the PTX of every corpus kernel is
// checked with ptxas by NvptxCodegenTest instead).
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/CudaBackend.h"

#include "Corpus.h"
#include "GpuBackendChecks.h"
#include "ProgramGen.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

namespace qd {
namespace {

using namespace corpus;

CudaBackend *gpu() {
  static std::unique_ptr<CudaBackend> backend = [] {
    auto b = CudaBackend::create();
    if (!b.ok()) {
      std::cout << "[cuda] " << b.status().message() << "\n";
      return std::unique_ptr<CudaBackend>();
    }
    std::cout << fmt::format("[cuda] {} ({}, {} SMs)\n", (*b)->deviceInfo().name, (*b)->arch(),
                             (*b)->deviceInfo().multiprocessors);
    return *std::move(b);
  }();
  return backend.get();
}

#define REQUIRE_GPU()                                                                              \
  if (!gpu())                                                                                      \
  GTEST_SKIP() << "no CUDA device or driver on this machine"

TEST(CudaBackendTest, WithoutADriverCreationIsAClearError) {
  if (gpu())
    GTEST_SKIP() << "this machine has a GPU";
  auto b = CudaBackend::create();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(b.status().message()).find("cuda: "), std::string::npos);
}

TEST(CudaBackendTest, CorpusKernelsMatchTheInterpreter) {
  REQUIRE_GPU();
  expectCorpusMatchesTheInterpreter(*gpu(), "cuda");
}

/// A backend with the default options changed by `change` (null without a
/// GPU).
template <typename Change> std::unique_ptr<CudaBackend> backendWith(Change change) {
  CudaBackendOptions options;
  change(options);
  auto b = CudaBackend::create(options);
  return b.ok() ? *std::move(b) : nullptr;
}

/// A backend that keeps every adstack in the heap (no local tapes).
CudaBackend *heapOnly() {
  static std::unique_ptr<CudaBackend> backend =
      backendWith([](CudaBackendOptions &o) { o.localTapeBytes = 0; });
  return backend.get();
}

TEST(CudaBackendTest, BoundsThatGrowBetweenLaunchesResizeTheHeap) {
  REQUIRE_GPU();
  expectTheHeapFollowsTheBounds(
      *heapOnly(), [](const Kernel &k) { return *heapOnly()->gridThreads(k); },
      [] { return heapOnly()->lastLaunchThreads(); },
      [] { return heapOnly()->lastAdStackHeapBytes(); });
}

TEST(CudaBackendTest, StacksThatFitRunFromLocalTapesAndTheRestFromTheHeap) {
  REQUIRE_GPU();
  expectLocalTapesWhereStacksFit(*gpu(), [] { return gpu()->lastAdStackHeapBytes(); });
}

TEST(CudaBackendTest, ABudgetOfLocalTapeBytesPerSmShrinksTheGrid) {
  REQUIRE_GPU();
  // n = 400: one stack of 512 f32 entries (2 KiB) per thread, a local tape.
  // 512 KiB per SM allows 2 blocks of 128 per SM; without a budget (the
  // default) the grid is the occupancy's.
  CudaBackendOptions budget;
  budget.localTapeBytesPerSm = 512 * 1024;
  auto narrow = CudaBackend::create(budget);
  ASSERT_TRUE(narrow.ok()) << narrow.status().message();
  SinLoop k;
  const Kernel &g = *k.module->findKernel("g");
  // More elements than the narrow grid's threads (a launch runs no more
  // whole blocks than its elements need); the inputs repeat every 5000
  // elements, whose gradients the interpreter computes.
  int64_t sms = (*narrow)->deviceInfo().multiprocessors;
  constexpr int kPeriod = 5000;
  std::vector<float> x(2 * 128 * sms + kPeriod), a(x.size(), -1.f), b(x.size(), -2.f);
  std::vector<float> xp(kPeriod), ref(kPeriod);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.001f * float(i % kPeriod);
  std::copy(x.begin(), x.begin() + kPeriod, xp.begin());
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 400, xp, ref).ok());
  ASSERT_TRUE(k.run(**narrow, 400, x, a).ok());
  EXPECT_EQ((*narrow)->lastAdStackHeapBytes(), 0) << "a local tape";
  EXPECT_EQ((*narrow)->lastLaunchThreads(), 2 * 128 * sms);
  ASSERT_TRUE(k.run(*gpu(), 400, x, b).ok());
  int64_t blocksNeeded = (int64_t(x.size()) + 127) / 128 * 128;
  EXPECT_EQ(gpu()->lastLaunchThreads(), std::min(*gpu()->gridThreads(g), blocksNeeded));
  EXPECT_GT(gpu()->lastLaunchThreads(), (*narrow)->lastLaunchThreads());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(a[i], ref[i % kPeriod], 1e-4) << i;
    ASSERT_EQ(a[i], b[i]) << i;
  }
}

// A launch without heap whose iterations are known runs one thread per
// iteration, past the resident grid; one with heap keeps the resident grid.
TEST(CudaBackendTest, ALaunchWithoutHeapRunsOneThreadPerIteration) {
  REQUIRE_GPU();
  SinLoop k;
  const Kernel &g = *k.module->findKernel("g");
  int64_t resident = *gpu()->gridThreads(g);
  constexpr int kPeriod = 5000;
  std::vector<float> x(resident + 1000), local(x.size()), heap(x.size());
  std::vector<float> xp(kPeriod), ref(kPeriod);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.001f * float(i % kPeriod);
  std::copy(x.begin(), x.begin() + kPeriod, xp.begin());
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 24, xp, ref).ok());
  ASSERT_TRUE(k.run(*gpu(), 24, x, local).ok());
  EXPECT_EQ(gpu()->lastAdStackHeapBytes(), 0) << "a local tape";
  EXPECT_EQ(gpu()->lastLaunchThreads(), (int64_t(x.size()) + 127) / 128 * 128);
  CudaBackendOptions heapOnly;
  heapOnly.localTapeBytes = 0;
  auto h = CudaBackend::create(heapOnly);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_TRUE(k.run(**h, 24, x, heap).ok());
  EXPECT_GT((*h)->lastAdStackHeapBytes(), 0);
  EXPECT_EQ((*h)->lastLaunchThreads(), *(*h)->gridThreads(g));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(local[i], ref[i % kPeriod], 1e-4) << i;
    ASSERT_EQ(local[i], heap[i]) << i;
  }
}

TEST(CudaBackendTest, MoreThan256KiBOfAdstackPerThread) {
  REQUIRE_GPU();
  SinLoop k;
  std::vector<float> x(256, 0.25f), out(256, -1.f), ref(256);
  Interpreter interp;
  int n = 70000; // 280 KB of f32 entries per thread
  ASSERT_TRUE(k.run(interp, n, x, ref).ok());
  absl::Status s = k.run(*gpu(), n, x, out);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-4) << i;
}

TEST(CudaBackendTest, ARegisterCapGivesTheSameResultsOnAtLeastAsManyThreads) {
  REQUIRE_GPU();
  SinLoop k;
  CudaBackendOptions capped;
  capped.maxRegisters = 24;
  auto tight = CudaBackend::create(capped);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  const Kernel &g = *k.module->findKernel("g");
  // Fewer registers per thread: at least as many resident threads.
  EXPECT_GE(*(*tight)->gridThreads(g), *gpu()->gridThreads(g));
  std::vector<float> x(3000), ref(x.size()), out(x.size(), -1.f);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.002f * float(i);
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 40, x, ref).ok());
  absl::Status s = k.run(**tight, 40, x, out);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-4 * std::max(1.f, std::fabs(ref[i]))) << i;
}

/// A backend with a small grid, so the property's large tier-3 default
/// capacity fits in GPU memory.
CudaBackend *smallGrid() {
  static std::unique_ptr<CudaBackend> backend =
      backendWith([](CudaBackendOptions &o) { o.maxThreads = 256; });
  return backend.get();
}

/// A field incremented per element on the GPU, and a read-only field.
constexpr const char *kResident = R"(field @f : f32[4096]
field @w : f32[4096]
kernel @inc() {
  parallel for %i = 0 to 4096 {
    %a = load @f[%i] : f32
    %b = load @w[%i] : f32
    %c = add %a, %b : f32
    store @f[%i], %c
  }
}
)";

TEST(CudaBackendTest, FieldsStayOnTheDeviceUntilTheHostReadsThem) {
  REQUIRE_GPU();
  auto module = *parseModule(kResident, {"resident.qd", 1});
  auto program = *Program::create(*module);
  Buffer &f = *program->field("f");
  Buffer &w = *program->field("w");
  w.fill(Scalar::ofFloat(ScalarType::F32, 1.0));
  for (int i = 0; i < 3; ++i) {
    absl::Status s = program->launch("inc", {}, *gpu());
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_FALSE(f.hostIsCurrent()) << "launch " << i; // written on the device, not copied back
    EXPECT_TRUE(w.hostIsCurrent()) << "launch " << i;  // only read: both sides equal
  }
  EXPECT_EQ(f.get(17).f, 3.0); // the first host read copies it back
  EXPECT_TRUE(f.hostIsCurrent());
  // A host write goes to the device before the next launch.
  f.set(17, Scalar::ofFloat(ScalarType::F32, 100.0));
  w.set(5, Scalar::ofFloat(ScalarType::F32, 10.0));
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
  EXPECT_EQ(f.get(17).f, 101.0);
  EXPECT_EQ(f.get(5).f, 13.0);
  EXPECT_EQ(f.get(4095).f, 4.0);
  // The interpreter sees the device's contents, and the GPU sees its.
  Interpreter interp;
  ASSERT_TRUE(program->launch("inc", {}, interp).ok());
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
  EXPECT_EQ(f.get(17).f, 103.0);
  EXPECT_EQ(f.get(5).f, 33.0);
}

const char *kDivides = R"(field @d : i32[256]
field @q : i32[256]

kernel @divide() {
  parallel for %i = 0 to 256 {
    %ten = const 10 : i32
    %di = load @d[%i] : i32
    %v = div %ten, %di : i32
    store @q[%i], %v
  }
}
)";

// Launches that repeat one another skip the launch block's copy; one that
// fails leaves an error record on the device, which the next launch must
// not report again.
TEST(CudaBackendTest, RepeatedLaunchesSkipTheLaunchBlockAndErrorsDoNotLinger) {
  REQUIRE_GPU();
  auto module = *parseModule(kDivides, {"divides.qd", 1});
  auto program = *Program::create(*module);
  Buffer &d = *program->field("d");
  Buffer &q = *program->field("q");
  d.fill(Scalar::ofInt(ScalarType::I32, 2));
  ASSERT_TRUE(program->launch("divide", {}, *gpu()).ok());
  int64_t skipped = gpu()->skippedLaunchUploads();
  ASSERT_TRUE(program->launch("divide", {}, *gpu()).ok());
  EXPECT_EQ(gpu()->skippedLaunchUploads(), skipped + 1);
  EXPECT_EQ(q.get(7).i, 5);
  for (int round = 0; round < 2; ++round) {
    d.set(9, Scalar::ofInt(ScalarType::I32, 0));
    absl::Status s = program->launch("divide", {}, *gpu());
    ASSERT_FALSE(s.ok()) << "round " << round;
    EXPECT_NE(std::string(s.message()).find("division by zero"), std::string::npos) << s.message();
    d.set(9, Scalar::ofInt(ScalarType::I32, 5));
    s = program->launch("divide", {}, *gpu());
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.message();
    EXPECT_EQ(q.get(9).i, 2);
  }
}

TEST(CudaBackendTest, KernelTimesComeFromTheGpu) {
  REQUIRE_GPU();
  auto module = *parseModule(kDivides, {"divides.qd", 1});
  auto program = *Program::create(*module);
  program->field("d")->fill(Scalar::ofInt(ScalarType::I32, 3));
  ASSERT_TRUE(gpu()->timeKernels(false).ok());
  EXPECT_EQ(gpu()->lastKernelMs().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(gpu()->timeKernels(true).ok());
  absl::StatusOr<double> none = gpu()->lastKernelMs();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no launch"), std::string::npos);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(program->launch("divide", {}, *gpu()).ok());
  double wallMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  absl::StatusOr<double> ms = gpu()->lastKernelMs();
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_GT(*ms, 0.0);
  EXPECT_LT(*ms, wallMs);
  // A launch whose kernel raised an error ran its kernels: timed too.
  program->field("d")->set(0, Scalar::ofInt(ScalarType::I32, 0));
  ASSERT_FALSE(program->launch("divide", {}, *gpu()).ok());
  EXPECT_TRUE(gpu()->lastKernelMs().ok());
  ASSERT_TRUE(gpu()->timeKernels(false).ok());
  EXPECT_FALSE(gpu()->lastKernelMs().ok());
}

// A launch without heap whose tasks have no loop runs on at most
// CudaBackendOptions::gridWaves resident grids, each thread several
// iterations; gridWaves = 0 gives each iteration a thread. Its ndarrays
// fit 32-bit offsets (CodegenOptions::narrowNdarrayOffsets), which the
// second backend computes them in (CudaBackendOptions::
// narrowNdarrayOffsets): the same values either way, those of the host.
TEST(CudaBackendTest, ALoopFreeLaunchRunsSeveralIterationsToAThread) {
  REQUIRE_GPU();
  auto module = *parseModule(kLoopFreeStencil, {"stencil.qd", 1});
  int64_t resident = *gpu()->gridThreads(*module->findKernel("s"));
  const int64_t cols = 1024, rows = 16 * resident / cols + 3;
  CudaBackendOptions perIteration;
  perIteration.gridWaves = 0;
  perIteration.narrowNdarrayOffsets = true;
  auto one = CudaBackend::create(perIteration);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(expectLoopFreeStencilMatchesTheHost(*gpu(), rows, cols,
                                                [] { return gpu()->lastLaunchThreads(); }),
            4 * resident);
  EXPECT_EQ(expectLoopFreeStencilMatchesTheHost(**one, rows, cols,
                                                [&] { return (*one)->lastLaunchThreads(); }),
            rows * cols);
}

TEST(CudaBackendTest, ABorrowedDeviceArrayIsUsedInPlace) {
  REQUIRE_GPU();
  // Device memory a framework would own, allocated outside the backend.
  auto device = *cuda::Device::open(0);
  constexpr int64_t n = 3000;
  auto x = *cuda::DeviceBuffer::allocate(*device, n * 4);
  auto out = *cuda::DeviceBuffer::allocate(*device, n * 4);
  std::vector<float> hx(n);
  for (int64_t i = 0; i < n; ++i)
    hx[i] = 0.0005f * float(i);
  ASSERT_TRUE(device->copyToDevice(x.get(), hx.data(), n * 4).ok());
  auto bx = gpu()->borrowDeviceArray(ScalarType::F32, {n}, x.get());
  auto bo = gpu()->borrowDeviceArray(ScalarType::F32, {n}, out.get());
  ASSERT_TRUE(bx.ok()) << bx.status().message();
  ASSERT_TRUE(bo.ok()) << bo.status().message();
  SinLoop k;
  NdarrayArg ax{&*bx}, ao{&*bo};
  std::vector<LaunchArg> args{LaunchArg::i32(30), LaunchArg::ndarray(&ax), LaunchArg::ndarray(&ao)};
  absl::Status s = k.program->launch("g", args, *gpu());
  ASSERT_TRUE(s.ok()) << s.message();
  // The result is in the caller's memory, read without the buffer.
  std::vector<float> got(n), ref(n);
  ASSERT_TRUE(device->copyToHost(got.data(), out.get(), n * 4).ok());
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 30, hx, ref).ok());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-4f * std::max(1.f, std::fabs(ref[i]))) << i;
  // And through the buffer (copied back on the first host read).
  EXPECT_NEAR(bo->get(1234).f, ref[1234], 1e-4);
  // Bad pointers are clear errors.
  auto bad = gpu()->borrowDeviceArray(ScalarType::F32, {n}, 0x1000);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("is not device memory"), std::string::npos)
      << bad.status().message();
  auto tooSmall = gpu()->borrowDeviceArray(ScalarType::F32, {n + 1}, x.get());
  ASSERT_FALSE(tooSmall.ok());
  EXPECT_NE(std::string(tooSmall.status().message()).find("the array needs"), std::string::npos)
      << tooSmall.status().message();
}

/// @m is written on the GPU by @setup; @g's adstack is bounded by
/// 1 + max of @m (over the task's range), which sizing reduces on the GPU.
constexpr const char *kDeviceSized = R"(field @m : i32[65536]
field @y : f32[65536]
kernel @setup(%k: i32) {
  parallel for %i = 0 to 65536 {
    %c40 = const 40000 : i32
    %hit = cmp eq %i, %c40 : i32
    %c64 = const 64 : i32
    %r = rem %i, %c64 : i32
    %v = select %hit, %k, %r : i32
    store @m[%i], %v
  }
}
kernel @g() {
  parallel for %i = 0 to 65536 {
    %s = adstack.alloca f32, capacity 0
    %n = load @m[%i] : i32
    %one = const 1.0 : f32
    adstack.push %s, %one
    for %j = 0 to %n {
      %two = const 2.0 : f32
      adstack.push %s, %two
    }
    %d = adstack.load_top %s : f32
    store @y[%i], %d
  }
}
)";

TEST(CudaBackendTest, ReductionsOnTheDeviceMatchTheHost) {
  REQUIRE_GPU();
  for (ScalarType t : {ScalarType::I1, ScalarType::I32, ScalarType::I64}) {
    constexpr int64_t n = 5'000'003;
    Buffer host = *Buffer::create(t, {n});
    std::mt19937_64 rng(uint64_t(t) + 1);
    for (int64_t i = 0; i < n; ++i)
      host.set(i, Scalar::ofInt(t, t == ScalarType::I1 ? 0 : -int64_t(rng() % 1000000) - 5));
    int64_t peak = n - 2;
    host.set(peak, Scalar::ofInt(t, t == ScalarType::I1 ? 1 : -3));
    auto device = *cuda::Device::open(0);
    auto mem = *cuda::DeviceBuffer::allocate(*device, host.sizeInBytes());
    ASSERT_TRUE(device->copyToDevice(mem.get(), host.data(), host.sizeInBytes()).ok());
    auto b = gpu()->borrowDeviceArray(t, {n}, mem.get());
    ASSERT_TRUE(b.ok()) << b.status().message();
    for (auto [lo, hi] :
         {std::pair<int64_t, int64_t>{0, n}, {0, peak}, {peak, peak + 1}, {n - 1, n}, {7, 70000}}) {
      auto got = b->maxInteger(lo, hi);
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, *host.maxInteger(lo, hi)) << toString(t) << " [" << lo << ", " << hi << ")";
    }
    EXPECT_FALSE(b->hostIsCurrent()); // no copy back
  }
}

TEST(CudaBackendTest, SizingReadsDeviceDataWithoutCopyingItBack) {
  REQUIRE_GPU();
  auto module = *parseModule(kDeviceSized, {"sized.qd", 1});
  auto program = *Program::create(*module);
  for (int k : {10, 900, 3000}) {
    std::vector<LaunchArg> args{LaunchArg::i32(k)};
    ASSERT_TRUE(program->launch("setup", args, *smallGrid()).ok());
    EXPECT_FALSE(program->field("m")->hostIsCurrent());
    absl::Status s = program->launch("g", {}, *smallGrid());
    ASSERT_TRUE(s.ok()) << s.message();
    // The bound is 1 + max(@m) = 1 + max(k, 63), read on the GPU.
    ASSERT_EQ(program->lastAdStackCapacities().size(), 1u);
    EXPECT_EQ(program->lastAdStackCapacities().begin()->second, 1 + std::max(k, 63)) << k;
    EXPECT_FALSE(program->field("m")->hostIsCurrent()) << "sizing copied @m back";
    EXPECT_EQ(program->field("y")->get(0).f, 1.0);
    EXPECT_EQ(program->field("y")->get(3).f, 2.0);
    EXPECT_EQ(program->field("y")->get(40000).f, 2.0);
  }
}

TEST(CudaBackendTest, AHeapTheGpuCannotHoldRunsInWavesAndOneIterationTooLargeIsAnError) {
  REQUIRE_GPU();
  SinLoop k;
  std::vector<float> x(1000, 0.5f), out(1000, -1.f), ref(1000);
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 9, x, ref).ok());
  // 2^40 entries of 4 bytes per thread: one iteration alone is over any
  // budget, so no schedule fits.
  LaunchOptions absurd;
  absurd.sizeAdStacks = false;
  absurd.defaultAdStackCapacity = int64_t(1) << 40;
  absl::Status s = k.run(*gpu(), 9, x, out, absurd);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s.message();
  EXPECT_NE(std::string(s.message()).find("more than the adstack memory budget"), std::string::npos)
      << s.message();
  // 4 GiB per thread: the grid's heap does not fit, a few threads at a time do.
  LaunchOptions huge;
  huge.sizeAdStacks = false;
  huge.defaultAdStackCapacity = int64_t(1) << 30;
  s = k.run(*gpu(), 9, x, out, huge);
  ASSERT_TRUE(s.ok()) << s.message();
  std::optional<AdStackHeapUsage> usage = gpu()->lastAdStackHeapUsage();
  ASSERT_TRUE(usage.has_value());
  EXPECT_GT(usage->waves, 1);
  EXPECT_LE(usage->bytes, usage->budgetBytes);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
  std::fill(out.begin(), out.end(), -1.f);
  s = k.run(*gpu(), 9, x, out);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
}

TEST(CudaBackendTest, AProgramOutlivesItsBackend) {
  REQUIRE_GPU();
  auto module = *parseModule(kResident, {"resident.qd", 1});
  auto program = *Program::create(*module);
  program->field("w")->fill(Scalar::ofFloat(ScalarType::F32, 2.0));
  {
    auto local = CudaBackend::create();
    ASSERT_TRUE(local.ok());
    ASSERT_TRUE(program->launch("inc", {}, **local).ok());
  } // the backend is gone; @f's device copy is not
  EXPECT_EQ(program->field("f")->get(9).f, 2.0);
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok()); // another backend takes over
  EXPECT_EQ(program->field("f")->get(9).f, 4.0);
}

// Random kernels and their gradients (GenConfig::cpu; see CpuBackendTest)
// on the GPU against the interpreter: integers exactly, floats within 1e-4
// relative (libdevice's math differs from glibc's by a few ulp; parallel
// float atomics sum in another order).
void randomKernelsOnTheGpu() {
  bool stacks = *rc::gen::inRange(0, 4) == 0;
  testgen::GenConfig config = testgen::GenConfig::cpu(stacks);
  if (*rc::gen::inRange(0, 4) == 0)
    config.threads = 300; // more iterations than a warp, fewer than the grid
  testgen::GenProgram p = *testgen::genProgram(config);
  testgen::Printed printed = testgen::print(p);
  auto parsed = parseModule(printed.text, {"gen.qd", 1});
  if (!parsed.ok())
    testgen::fail(p, "does not parse: " + message(parsed.status()));
  std::unique_ptr<Module> m = *std::move(parsed);
  bool withGrad = !printed.hasStacks;
  if (withGrad && !buildGradientKernel(*m, *m->findKernel("k")).ok())
    testgen::fail(p, "no gradient");
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasStacks, "adstacks");
  std::string d = testgen::runAgainstInterpreter(p, *m, withGrad, *smallGrid(), 1e-4);
  if (!d.empty())
    testgen::fail(p, "cuda: " + d);
}

TEST(CudaBackendTest, RandomKernelsAndGradientsMatchTheInterpreter) {
  REQUIRE_GPU();
  testgen::checkProperty(&randomKernelsOnTheGpu, 40);
}

} // namespace
} // namespace qd
