//===- VulkanBackendDeviceTest.cpp - The Vulkan backend's device side ----===//
//
// Residency of buffers, the grid, timing, a program outliving its backend,
// the validation layer, atomics and random programs against the
// interpreter (VulkanBackendHarness.h says where it runs and what every
// test asserts).
//
//===----------------------------------------------------------------------===//
#include "VulkanBackendHarness.h"

namespace qd {
namespace {

/// A field incremented per element on the device, and a read-only field.
/// `text` with every N replaced by `n` (a field's extent).
std::string withN(std::string text, int64_t n) {
  for (size_t at; (at = text.find('N')) != std::string::npos;)
    text.replace(at, 1, std::to_string(n));
  return text;
}

constexpr const char *kResident = R"(field @f : f32[4096]
field @w : f32[4096]
field @b : i1[4096]
kernel @inc() {
  parallel for %i = 0 to 4096 {
    %a = load @f[%i] : f32
    %c = load @w[%i] : f32
    %d = add %a, %c : f32
    store @f[%i], %d
    %t = load @b[%i] : i1
    %nt = not %t : i1
    store @b[%i], %nt
  }
}
)";

TEST_F(VulkanBackendTest, FieldsStayOnTheDeviceUntilTheHostReadsThem) {
  REQUIRE_DEVICE();
  auto module = *parseModule(kResident, {"resident.qd", 1});
  auto program = *Program::create(*module);
  Buffer &f = *program->field("f");
  Buffer &w = *program->field("w");
  Buffer &b = *program->field("b");
  w.fill(Scalar::ofFloat(ScalarType::F32, 1.0));
  b.set(7, Scalar::ofInt(ScalarType::I1, 1));
  for (int i = 0; i < 3; ++i) {
    absl::Status s = program->launch("inc", {}, *gpu());
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_FALSE(f.hostIsCurrent()) << "launch " << i;
    EXPECT_TRUE(w.hostIsCurrent()) << "launch " << i;
  }
  EXPECT_EQ(f.get(17).f, 3.0);
  EXPECT_TRUE(f.hostIsCurrent());
  EXPECT_EQ(b.get(7).i, 0); // flipped three times; 32-bit booleans on the device
  EXPECT_EQ(b.get(8).i, 1);
  f.set(17, Scalar::ofFloat(ScalarType::F32, 100.0));
  w.set(5, Scalar::ofFloat(ScalarType::F32, 10.0));
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
  EXPECT_EQ(f.get(17).f, 101.0);
  EXPECT_EQ(f.get(5).f, 13.0);
  EXPECT_EQ(f.get(4095).f, 4.0);
  Interpreter interp;
  ASSERT_TRUE(program->launch("inc", {}, interp).ok());
  ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
  EXPECT_EQ(f.get(17).f, 103.0);
  EXPECT_EQ(f.get(5).f, 33.0);
}

// A launch without heap whose iterations are known runs one invocation per
// iteration; one with heap, or with invocationPerIteration off, keeps T.
TEST_F(VulkanBackendTest, ALaunchWithoutHeapRunsOneInvocationPerIteration) {
  REQUIRE_DEVICE();
  SinLoop k;
  constexpr int kPeriod = 5000;
  std::vector<float> x(3 * gpu()->gridThreads() + 100), local(x.size()), fixedGrid(x.size()),
      heap(x.size());
  std::vector<float> xp(kPeriod), ref(kPeriod);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.001f * float(i % kPeriod);
  std::copy(x.begin(), x.begin() + kPeriod, xp.begin());
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 6, xp, ref).ok());
  ASSERT_TRUE(k.run(*gpu(), 6, x, local).ok());
  EXPECT_EQ(gpu()->lastAdStackHeapBytes(), 0) << "a local tape";
  EXPECT_EQ(gpu()->lastLaunchThreads(), (int64_t(x.size()) + 63) / 64 * 64);
  VulkanBackendOptions o = validated();
  o.invocationPerIteration = false;
  auto fixed = VulkanBackend::create(o);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  ASSERT_TRUE(k.run(**fixed, 6, x, fixedGrid).ok());
  EXPECT_EQ((*fixed)->lastLaunchThreads(), (*fixed)->gridThreads());
  expectValidatedAndClean(**fixed, "the fixed-grid backend");
  o = validated();
  o.localTapeBytes = 0;
  auto heapOnly = VulkanBackend::create(o);
  ASSERT_TRUE(heapOnly.ok()) << heapOnly.status().message();
  ASSERT_TRUE(k.run(**heapOnly, 6, x, heap).ok());
  EXPECT_GT((*heapOnly)->lastAdStackHeapBytes(), 0);
  EXPECT_EQ((*heapOnly)->lastLaunchThreads(), (*heapOnly)->gridThreads());
  expectValidatedAndClean(**heapOnly, "the heap backend");
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(local[i], ref[i % kPeriod], 1e-4) << i;
    ASSERT_EQ(local[i], fixedGrid[i]) << i;
    ASSERT_EQ(local[i], heap[i]) << i;
  }
}

// A launch without heap whose tasks have no loop runs at most gridWaves
// grids of maxThreads invocations, each several iterations; gridWaves = 0
// gives each iteration an invocation. The same values either way.
TEST_F(VulkanBackendTest, ALoopFreeLaunchRunsSeveralIterationsToAnInvocation) {
  REQUIRE_DEVICE();
  constexpr int64_t rows = 40, cols = 500; // 20 000 iterations
  for (int64_t waves : {int64_t(4), int64_t(0)}) {
    VulkanBackendOptions o = validated();
    o.maxThreads = 1024;
    o.gridWaves = waves;
    auto b = VulkanBackend::create(o);
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(corpus::expectLoopFreeStencilMatchesTheHost(
                  **b, rows, cols, [&] { return (*b)->lastLaunchThreads(); }),
              waves ? 4 * 1024 : (rows * cols + 63) / 64 * 64);
    expectValidatedAndClean(**b, "the grid-waves backend");
  }
}

// Host transfers go through staging memory the device keeps, at most 64
// MiB at a time (vk::Device::kStagingChunkBytes): a field of more than
// that goes up and comes back whole, and the maxima sizing reads from the
// device see the elements past the first piece.
TEST_F(VulkanBackendTest, TransfersLargerThanTheStagingMemoryGoInPieces) {
  REQUIRE_DEVICE();
  constexpr int64_t n = (int64_t(64) << 20) / 4 + 4099;
  std::string text = R"(field @y : i32[N]
field @z : i32[N]
kernel @fill() {
  parallel for %i = 0 to N {
    store @y[%i], %i
  }
}
kernel @copy() {
  parallel for %i = 0 to N {
    %v = load @y[%i] : i32
    store @z[%i], %v
  }
}
)";
  text = withN(std::move(text), n);
  auto module = parseModule(text, {"pieces.qd", 1});
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto program = *Program::create(**module);
  Buffer &y = *program->field("y");
  Buffer &z = *program->field("z");
  ASSERT_TRUE(program->launch("fill", {}, *gpu()).ok());
  ASSERT_FALSE(y.hostIsCurrent());
  // Read on the device copy, across the pieces.
  EXPECT_EQ(*y.maxInteger(0, n), n - 1);
  EXPECT_EQ(*y.maxInteger(1000, 2000), 1999);
  EXPECT_EQ(*y.readInteger(n - 2), n - 2);
  EXPECT_EQ(y.get(n - 1).i, n - 1); // the whole field comes back
  EXPECT_EQ(y.get(int64_t(1) << 24).i, int64_t(1) << 24);
  y.set(n - 1, Scalar::ofInt(ScalarType::I32, -7));
  y.set(3, Scalar::ofInt(ScalarType::I32, 11));
  ASSERT_TRUE(program->launch("copy", {}, *gpu()).ok()); // y goes up whole
  EXPECT_EQ(z.get(n - 1).i, -7);
  EXPECT_EQ(z.get(n - 4099).i, n - 4099);
  EXPECT_EQ(z.get(3).i, 11);
  EXPECT_EQ(*z.maxInteger(n - 10, n), n - 2);
  expectValidatedAndClean(*gpu(), "the backend");
}

TEST_F(VulkanBackendTest, MaximaOfLongRangesAreReducedOnTheDevice) {
  REQUIRE_DEVICE();
  // Negative i32s, and i64s whose high words tie for many elements (the
  // low word, unsigned, decides; half of them have its top bit set).
  constexpr int64_t n = 100003;
  std::string text = R"(field @a : i32[N]
field @b : i64[N]
kernel @fill() {
  parallel for %i = 0 to N {
    %base = const -1000000 : i32
    %v = sub %base, %i : i32
    store @a[%i], %v
    %k = const 1000 : i32
    %r = rem %i, %k : i32
    %half = const 500 : i32
    %h = sub %r, %half : i32
    %h64 = cast %h : i32 to i64
    %s = const 32 : i64
    %high = shl %h64, %s : i64
    %i64 = cast %i : i32 to i64
    %m = const 2654435761 : i64
    %p = mul %i64, %m : i64
    %mask = const 4294967295 : i64
    %low = and %p, %mask : i64
    %w = or %high, %low : i64
    store @b[%i], %w
  }
}
)";
  text = withN(std::move(text), n);
  auto module = parseModule(text, {"maxima.qd", 1});
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto program = *Program::create(**module);
  Buffer &a = *program->field("a");
  Buffer &b = *program->field("b");
  ASSERT_TRUE(program->launch("fill", {}, *gpu()).ok());
  ASSERT_FALSE(a.hostIsCurrent());
  auto value = [](int64_t i) {
    return int64_t(uint64_t(i % 1000 - 500) << 32 | (uint64_t(i) * 2654435761u & 0xffffffffu));
  };
  auto expected = [&](int64_t begin, int64_t end) {
    int64_t most = INT64_MIN;
    for (int64_t i = begin; i < end; ++i)
      most = std::max(most, value(i));
    return most;
  };
  // Longer than the reducer's lanes (on the device), and not (the host).
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, n},
                            {77, n - 5},
                            {n - 40000, n},
                            {12345, 12345 + 20000},
                            {5, 1005}}) {
    EXPECT_EQ(*a.maxInteger(begin, end), -1000000 - begin) << begin << ".." << end;
    EXPECT_EQ(*b.maxInteger(begin, end), expected(begin, end)) << begin << ".." << end;
  }
  EXPECT_EQ(*b.readInteger(n - 1), value(n - 1));
  expectValidatedAndClean(*gpu(), "the backend");
}

TEST_F(VulkanBackendTest, KernelTimesComeFromTimestampQueries) {
  REQUIRE_DEVICE();
  if (gpu()->deviceInfo().timestampValidBits == 0) {
    absl::Status s = gpu()->timeKernels(true);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s.message();
    GTEST_SKIP() << "the device has no timestamps on its compute queue";
  }
  auto module = *parseModule(kResident, {"resident.qd", 1});
  auto program = *Program::create(*module);
  program->field("w")->fill(Scalar::ofFloat(ScalarType::F32, 1.0));
  ASSERT_TRUE(gpu()->timeKernels(false).ok());
  EXPECT_EQ(gpu()->lastKernelMs().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(gpu()->timeKernels(true).ok());
  absl::StatusOr<double> none = gpu()->lastKernelMs();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no launch"), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
    double wallMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    absl::StatusOr<double> ms = gpu()->lastKernelMs();
    ASSERT_TRUE(ms.ok()) << ms.status().message();
    EXPECT_GT(*ms, 0.0);
    EXPECT_LT(*ms, wallMs);
  }
  EXPECT_EQ(program->field("f")->get(9).f, 3.0);
  ASSERT_TRUE(gpu()->timeKernels(false).ok());
  EXPECT_FALSE(gpu()->lastKernelMs().ok());
}

TEST_F(VulkanBackendTest, AProgramOutlivesItsBackend) {
  REQUIRE_DEVICE();
  auto received = std::make_shared<Received>();
  {
    auto module = *parseModule(kResident, {"resident.qd", 1});
    auto program = *Program::create(*module);
    program->field("w")->fill(Scalar::ofFloat(ScalarType::F32, 2.0));
    {
      auto local = VulkanBackend::create(receivingInto(received));
      ASSERT_TRUE(local.ok()) << local.status().message();
      ASSERT_TRUE((*local)->validationActive() || validationOptional());
      ASSERT_TRUE(program->launch("inc", {}, **local).ok());
    } // the backend is gone; @f's device copy is not
    EXPECT_EQ(program->field("f")->get(9).f, 2.0);
    ASSERT_TRUE(program->launch("inc", {}, *gpu()).ok());
    EXPECT_EQ(program->field("f")->get(9).f, 4.0);
  } // the program is gone, and with it the first backend's device and instance
  // Nothing, the destruction of the device and the instance included (where
  // the layer reports objects not destroyed), drew a message.
  EXPECT_EQ(received->get(), std::vector<std::string>{});
}

/// A raw misuse of the backend's device (a buffer without usage flags)
/// reaches validationMessages() and onValidationMessage; the suite's zero
/// counts mean something.
TEST_F(VulkanBackendTest, TheValidationLayersMessagesAreCollected) {
  REQUIRE_DEVICE();
  auto received = std::make_shared<Received>();
  auto backend = VulkanBackend::create(receivingInto(received));
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  VulkanBackend &b = **backend;
  if (!b.validationActive() && validationOptional())
    GTEST_SKIP() << "no validation layer here (QD_VULKAN_TEST_VALIDATION=if-installed)";
  ASSERT_TRUE(b.validationActive());
  EXPECT_EQ(b.validationMessageCount(), 0u);
  VulkanBackend::NativeHandles h = b.nativeHandles();
  auto getInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(h.getInstanceProcAddr);
  auto instance = static_cast<VkInstance>(h.instance);
  auto device = static_cast<VkDevice>(h.device);
  auto getDeviceProcAddr = reinterpret_cast<PFN_vkGetDeviceProcAddr>(
      getInstanceProcAddr(instance, "vkGetDeviceProcAddr"));
  ASSERT_NE(getDeviceProcAddr, nullptr);
  auto createBuffer =
      reinterpret_cast<PFN_vkCreateBuffer>(getDeviceProcAddr(device, "vkCreateBuffer"));
  auto destroyBuffer =
      reinterpret_cast<PFN_vkDestroyBuffer>(getDeviceProcAddr(device, "vkDestroyBuffer"));
  ASSERT_NE(createBuffer, nullptr);
  ASSERT_NE(destroyBuffer, nullptr);
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = 64;
  info.usage = 0; // must not be 0
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  if (createBuffer(device, &info, nullptr, &buffer) == VK_SUCCESS)
    destroyBuffer(device, buffer, nullptr);
  std::vector<std::string> messages = b.validationMessages();
  ASSERT_EQ(b.validationMessageCount(), messages.size());
  ASSERT_GE(messages.size(), 1u);
  EXPECT_EQ(messages[0].rfind("error [validation] ", 0), 0u) << messages[0];
  EXPECT_NE(messages[0].find("VUID-VkBufferCreateInfo-usage-requiredbitmask"), std::string::npos)
      << messages[0];
  EXPECT_EQ(received->get(), messages);
  // The shared backend, another instance, heard nothing.
  EXPECT_EQ(gpu()->validationMessageCount(), 0u);
  b.clearValidationMessages();
  EXPECT_EQ(b.validationMessageCount(), 0u);
  EXPECT_EQ(b.validationMessages(), std::vector<std::string>{});
  // The backend's own work draws none.
  SinLoop k;
  std::vector<float> x(256, 0.5f), out(256);
  ASSERT_TRUE(k.run(b, 10, x, out).ok());
  expectValidatedAndClean(b, "after the misuse");
}

/// Sets an environment variable for the scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

/// Without the layer (the loader told to look for explicit layers in an
/// empty folder), Required is an error naming the package, and IfInstalled
/// runs without it and says so.
TEST_F(VulkanBackendTest, AMissingValidationLayerIsAClearError) {
  REQUIRE_DEVICE();
  std::filesystem::path empty =
      std::filesystem::temp_directory_path() / fmt::format("qd-no-layers-{}", getpid());
  std::filesystem::create_directories(empty);
  {
    ScopedEnv layers("VK_LAYER_PATH", empty.string());
    ScopedEnv added("VK_ADD_LAYER_PATH", "");
    VulkanBackendOptions req;
    req.validation = Validation::Required;
    auto required = VulkanBackend::create(req);
    ASSERT_FALSE(required.ok());
    EXPECT_EQ(required.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(message(required.status()),
              "vulkan: the Vulkan validation layer (VK_LAYER_KHRONOS_validation) is not "
              "installed; install it (Debian: vulkan-validationlayers, which "
              "scripts/install-deps.sh installs), or set VulkanBackendOptions::validation to "
              "IfInstalled or Off");
    VulkanBackendOptions o;
    o.validation = Validation::IfInstalled;
    auto optional = VulkanBackend::create(o);
    ASSERT_TRUE(optional.ok()) << optional.status().message();
    EXPECT_FALSE((*optional)->validationActive());
    EXPECT_EQ((*optional)->validationMessageCount(), 0u);
    SinLoop k;
    std::vector<float> x(64, 0.25f), out(64);
    ASSERT_TRUE(k.run(**optional, 3, x, out).ok());
  }
  std::filesystem::remove_all(empty);
  // With the layer where it is, IfInstalled turns it on.
  VulkanBackendOptions o;
  o.validation = Validation::IfInstalled;
  auto on = VulkanBackend::create(o);
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_TRUE((*on)->validationActive() || validationOptional());
  auto off = VulkanBackend::create();
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->validationActive());
}

/// Float atomic adds, with the device's atomics and with the
/// compare-exchange loop: sums of halves, exact in any order.
TEST_F(VulkanBackendTest, FloatAtomicAddsWithAndWithoutDeviceAtomics) {
  REQUIRE_DEVICE();
  auto module = *parseModule(R"(field @y : f32[4]
field @z : f64[4]
field @w : i1[4]
kernel @k() {
  parallel for %i = 0 to 4000 {
    %four = const 4 : i32
    %b = rem %i, %four : i32
    %f = cast %i : i32 to f32
    %h = const 0.5 : f32
    %v = mul %f, %h : f32
    atomic_add @y[%b], %v : f32
    %d = cast %i : i32 to f64
    atomic_add @z[%b], %d : f64
    %t = const true : i1
    atomic_add @w[%b], %t : i1
  }
}
)",
                             {"atomics.qd", 1});
  auto ref = *Program::create(*module);
  Interpreter interp;
  ASSERT_TRUE(ref->launch("k", {}, interp).ok());
  for (bool deviceAtomics : {true, false}) {
    VulkanBackendOptions o;
    o.floatAtomics = deviceAtomics;
    o.maxThreads = 1024; // many iterations per invocation, many invocations per element
    o.invocationPerIteration = false;
    auto backend = VulkanBackend::create(validated(o));
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    if (!(*backend)->deviceInfo().features.float64 ||
        !(*backend)->deviceInfo().features.int64Atomics)
      GTEST_SKIP() << "the device lacks 64-bit floats or atomics";
    auto text = disassembleSpirv((*(*backend)->spirv(*module->findKernel("k")))->words);
    ASSERT_TRUE(text.ok());
    bool native = deviceAtomics && (*backend)->deviceInfo().features.atomicFloat32Add;
    EXPECT_EQ(text->find("OpAtomicFAddEXT") != std::string::npos, native);
    auto program = *Program::create(*module);
    absl::Status s = program->launch("k", {}, **backend);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(compareFields(*module, *ref, *program, /*exact=*/true), "") << deviceAtomics;
    EXPECT_EQ(program->field("y")->get(1).f, 0.5 * (1000.0 * 1 + 4.0 * 999 * 1000 / 2));
    expectValidatedAndClean(**backend, fmt::format("float atomics {}", deviceAtomics));
  }
}

/// The math functions against libm, in ulp of the result, over arguments
/// where the reductions are accurate (docs/runtime.md, "Vulkan").
/// How far `got` is from `want` (a value of type `t`), in ulp of `want`.
double ulpError(ScalarType t, double want, double got) {
  if (std::isnan(want))
    return std::isnan(got) ? 0.0 : INFINITY;
  if (std::isinf(want) || want == 0)
    return want == got ? 0.0 : INFINITY;
  // A subnormal result may be flushed to zero (the device's denormal
  // mode: NVIDIA's driver flushes f32).
  double smallest = t == ScalarType::F32 ? double(std::numeric_limits<float>::min())
                                         : std::numeric_limits<double>::min();
  if (std::fabs(want) < smallest && got == 0)
    return 0.0;
  double unit = t == ScalarType::F32
                    ? std::nextafter(float(std::fabs(want)), INFINITY) - std::fabs(float(want))
                    : std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
  return std::fabs(want - got) / unit;
}

TEST_F(VulkanBackendTest, MathFunctionsAreAccurate) {
  REQUIRE_DEVICE();
  const char *fns[] = {"sin", "cos", "tan", "exp", "log", "tanh", "sqrt"};
  for (ScalarType t : {ScalarType::F32, ScalarType::F64}) {
    if (t == ScalarType::F64 && !gpu()->deviceInfo().features.float64)
      continue;
    std::string ty(toString(t));
    std::string text = fmt::format("field @x : {0}[2048]\nfield @p : {0}[2048]\n", ty);
    for (const char *fn : fns)
      text += fmt::format("field @{1} : {0}[2048]\n", ty, fn);
    text += fmt::format("field @pow : {0}[2048]\nfield @atan2 : {0}[2048]\n", ty);
    text += "kernel @k() {\n  parallel for %i = 0 to 2048 {\n";
    text += fmt::format("    %x = load @x[%i] : {0}\n    %p = load @p[%i] : {0}\n", ty);
    for (const char *fn : fns)
      text += fmt::format("    %{1} = {1} %x : {0}\n    store @{1}[%i], %{1}\n", ty, fn);
    text += fmt::format("    %pw = pow %x, %p : {0}\n    store @pow[%i], %pw\n", ty);
    text += fmt::format("    %at = atan2 %p, %x : {0}\n    store @atan2[%i], %at\n", ty);
    text += "  }\n}\n";
    auto module = parseModule(text, {"math.qd", 1});
    ASSERT_TRUE(module.ok()) << module.status().message();
    auto program = *Program::create(**module);
    Buffer &x = *program->field("x"), &p = *program->field("p");
    for (int64_t i = 0; i < 2048; ++i) {
      // Magnitudes from 1e-3 to 1e3, both signs, and exponents in [-4, 4].
      double mag = std::pow(10.0, -3 + 6 * double(i) / 2047);
      x.set(i, Scalar::ofFloat(t, (i % 2 ? -1 : 1) * mag));
      p.set(i, Scalar::ofFloat(t, -4 + 8 * double((i * 7919) % 2048) / 2047));
    }
    absl::Status s = program->launch("k", {}, *gpu());
    ASSERT_TRUE(s.ok()) << s.message();
    auto check = [&](const char *name, auto libm, double maxUlp) {
      Buffer &out = *program->field(name);
      double worst = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < 2048; ++i) {
        double xv = x.get(i).f, pv = p.get(i).f;
        double want =
            t == ScalarType::F32 ? double(float(libm(xv, pv, true))) : libm(xv, pv, false);
        double e = ulpError(t, want, out.get(i).f);
        if (e > worst)
          worst = e, at = i;
      }
      std::cout << fmt::format("[vulkan math] {} {}: {} ulp at most\n", ty, name, worst);
      EXPECT_LE(worst, maxUlp) << ty << " " << name << " at x = " << x.get(at).f
                               << ", p = " << p.get(at).f << ": " << out.get(at).f;
    };
#define QD_LIBM(expr)                                                                              \
  [](double x, double p, bool single) {                                                            \
    (void)p;                                                                                       \
    return single ? double([](float x, float p) { return expr; }(float(x), float(p)))              \
                  : [](double x, double p) { return expr; }(x, p);                                 \
  }
    check("sin", QD_LIBM(std::sin(x)), 4);
    check("cos", QD_LIBM(std::cos(x)), 4);
    check("tan", QD_LIBM(std::tan(x)), 8);
    check("sqrt", QD_LIBM(std::sqrt(x)), 4);
    check("tanh", QD_LIBM(std::tanh(x)), 8);
    check("log", QD_LIBM(std::log(x)), 4);
    check("exp", QD_LIBM(std::exp(x)), 4);
    check("pow", QD_LIBM(std::pow(x, p)), 64);
    check("atan2", QD_LIBM(std::atan2(p, x)), 8);
#undef QD_LIBM
  }
}

// f32 sin and cos within 1 ulp of the correctly rounded result (glibc's
// double sin and cos rounded to f32) on two dense sweeps: 4096 evenly
// spaced arguments, and multiples of pi/4 (the odd ones are where the
// quadrant changes) with the three floats either side: every one on
// [-pi, pi], every 198th on [-1e4, 1e4]. On [-pi, pi] the error is in ulp
// of the result (and +-inf and NaN give NaN). On [-1e4, 1e4] a result near
// a zero of sin or cos carries the reduction's absolute error (about
// |x| 2^-48), so there a result below 1/2 is measured in ulp of the results
// just below 1 (2^-24).
TEST_F(VulkanBackendTest, MathSinAndCosOfF32SweepsAreWithinOneUlp) {
  REQUIRE_DEVICE();
  std::vector<float> xs;
  std::vector<bool> wide; // on the [-1e4, 1e4] sweep
  for (double limit : {std::numbers::pi, 1e4}) {
    auto add = [&](float v) {
      xs.push_back(v);
      wide.push_back(limit > 4);
    };
    for (int i = 0; i < 4096; ++i)
      add(float(-limit + 2 * limit * i / 4095));
    if (limit < 4)
      for (float v : {INFINITY, -INFINITY, NAN, 0.0f, -0.0f}) // NaN results; signed zeros
        add(v);
    int kMax = int(limit / (std::numbers::pi / 4));
    for (int k = -kMax; k <= kMax; k += std::max(1, kMax / 64)) {
      float v = float(k * std::numbers::pi / 4), below = v, above = v;
      add(v);
      for (int n = 0; n < 3; ++n) {
        add(below = std::nextafter(below, -INFINITY));
        add(above = std::nextafter(above, INFINITY));
      }
    }
  }
  size_t n = xs.size();
  std::string text = fmt::format("field @x : f32[{0}]\nfield @sin : f32[{0}]\n"
                                 "field @cos : f32[{0}]\n",
                                 n);
  text += fmt::format("kernel @k() {{\n  parallel for %i = 0 to {} {{\n"
                      "    %x = load @x[%i] : f32\n"
                      "    %s = sin %x : f32\n    store @sin[%i], %s\n"
                      "    %c = cos %x : f32\n    store @cos[%i], %c\n  }}\n}}\n",
                      n);
  auto module = parseModule(text, {"sweep.qd", 1});
  ASSERT_TRUE(module.ok()) << module.status().message();
  auto program = *Program::create(**module);
  Buffer &x = *program->field("x");
  for (size_t i = 0; i < n; ++i)
    x.set(int64_t(i), Scalar::ofFloat(ScalarType::F32, xs[i]));
  absl::Status s = program->launch("k", {}, *gpu());
  ASSERT_TRUE(s.ok()) << s.message();
  auto check = [&](const char *name, double (*libm)(double)) {
    Buffer &out = *program->field(name);
    double worst[2] = {0, 0};
    size_t at[2] = {0, 0};
    for (size_t i = 0; i < n; ++i) {
      double want = float(libm(double(xs[i]))), got = out.get(int64_t(i)).f;
      double e = ulpError(ScalarType::F32, want, got);
      if (wide[i] && std::fabs(want) < 0.5)
        e = std::fabs(got - want) * 0x1p24;
      if (e > worst[wide[i]])
        worst[wide[i]] = e, at[wide[i]] = i;
    }
    for (int w : {0, 1}) {
      std::cout << fmt::format("[vulkan math] f32 {} on {}: {} ulp at most\n", name,
                               w ? "[-1e4, 1e4]" : "[-pi, pi]", worst[w]);
      EXPECT_LE(worst[w], 1) << fmt::format("{} at x = {}: {}", name, xs[at[w]],
                                            out.get(int64_t(at[w])).f);
    }
  };
  check("sin", [](double v) { return std::sin(v); });
  check("cos", [](double v) { return std::cos(v); });
  for (size_t i = 0; i < n; ++i) {
    if (xs[i] == 0) { // sin(-0) = -0, sin(+0) = +0
      EXPECT_EQ(std::signbit(program->field("sin")->get(int64_t(i)).f), std::signbit(xs[i]))
          << "sin(" << xs[i] << ")";
    }
  }
}

// Random kernels and their gradients (GenConfig::cpu; see CpuBackendTest)
// on the device against the interpreter: integers exactly, floats within
// 1e-4 relative (parallel float atomics sum in another order).
void randomKernelsOnVulkan() {
  bool stacks = *rc::gen::inRange(0, 4) == 0;
  testgen::GenConfig config = testgen::GenConfig::cpu(stacks);
  if (*rc::gen::inRange(0, 4) == 0)
    config.threads = 300; // more iterations than the grid's invocations
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
    testgen::fail(p, "vulkan: " + d);
  if (std::string v = takeValidationMessages(*smallGrid()); !v.empty())
    testgen::fail(p, "vulkan: " + v);
}

TEST_F(VulkanBackendTest, RandomKernelsAndGradientsMatchTheInterpreter) {
  REQUIRE_DEVICE();
  testgen::checkProperty(&randomKernelsOnVulkan, 25);
}

} // namespace
} // namespace qd
