//===- BackendConformanceTest.cpp - Errors, atomics and stops everywhere --===//
//
// The fixture and harness of support/BackendConformance.h, and the cases
// about what goes wrong at run time, on every registered backend: division
// by zero and out-of-range indices as errors naming the statement (the
// interpreter's words), atomics that lose no contribution, adstack
// overflow then a clean next launch, and launches stopped by a timeout or
// a cancel flag. BackendConformanceArithTest.cpp has the arithmetic.
//
//===----------------------------------------------------------------------===//
#include "BackendConformance.h"
#include "GpuBackendChecks.h"
#include "RunawayKernels.h"

#include "qd/runtime/AllBackends.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

namespace qd::conformance {

using corpus::locationPrefix;
using corpus::message;

//===----------------------------------------------------------------------===//
// Fixture and harness
//===----------------------------------------------------------------------===//

std::vector<Subject> subjects() {
  registerAllBackends();
  std::vector<Subject> out;
  for (const std::string &name : registeredBackends()) {
    // Vulkan under the validation layer where it is installed (messages
    // fail the case: TearDown).
    out.push_back({name, name, name == "vulkan" ? "validation=if-installed" : ""});
    if (name == "cpu") {
      // The interpreter's order bit for bit, and many threads taking one
      // iteration at a time with the light tier.
      out.push_back({"cpu_serial", "cpu", "threads=1,vector-width=1"});
      out.push_back({"cpu_parallel", "cpu", "threads=4,chunk=1,vector-width=1,light=true"});
    }
  }
  return out;
}

namespace {

/// A backend of the suite, made at its first case and kept.
struct Made {
  std::unique_ptr<Backend> backend;
  absl::Status status;
  std::mutex mutex;
  std::vector<std::string> diagnostics; // since the last case
};

std::map<std::string, std::unique_ptr<Made>> &allMade() {
  static std::map<std::string, std::unique_ptr<Made>> all;
  return all;
}

/// Destroys the backends when the tests end, before the process exits: a
/// GPU driver loaded after `allMade` was constructed tears itself down at
/// exit before that map's destructor would run, and destroying a device
/// after that crashes (NVIDIA's Vulkan driver, H200, driver 580).
class ReleaseBackends : public ::testing::Environment {
public:
  void TearDown() override { allMade().clear(); }
};
[[maybe_unused]] ::testing::Environment *const kReleaseBackends =
    ::testing::AddGlobalTestEnvironment(new ReleaseBackends);

Made &made(const Subject &s) {
  std::unique_ptr<Made> &m = allMade()[s.label];
  if (m)
    return *m;
  m = std::make_unique<Made>();
  absl::StatusOr<BackendOptions> options = BackendOptions::parse(s.options);
  if (!options.ok()) {
    m->status = options.status();
    return *m;
  }
  Made *into = m.get();
  options->onDiagnostic = [into](const std::string &d) {
    std::lock_guard<std::mutex> lock(into->mutex);
    into->diagnostics.push_back(d);
  };
  auto created = createBackend(s.backend, *options);
  m->status = created.status();
  if (created.ok())
    m->backend = *std::move(created);
  else
    std::cout << "[" << s.label << "] " << m->status.message() << "\n";
  return *m;
}

} // namespace

void BackendConformanceTest::SetUp() {
  Made &m = made(GetParam());
  if (!m.backend) {
    // No device or driver for a GPU backend: nothing to check here.
    if (m.status.code() == absl::StatusCode::kFailedPrecondition)
      GTEST_SKIP() << GetParam().backend << " is built but cannot run here: " << m.status.message();
    FAIL() << GetParam().label << ": " << m.status.message();
  }
  backend_ = m.backend.get();
}

void BackendConformanceTest::TearDown() {
  if (!backend_)
    return;
  Made &m = made(GetParam());
  std::lock_guard<std::mutex> lock(m.mutex);
  for (const std::string &d : m.diagnostics)
    ADD_FAILURE() << GetParam().label << " reported: " << d;
  m.diagnostics.clear();
}

INSTANTIATE_TEST_SUITE_P(Registered, BackendConformanceTest, ::testing::ValuesIn(subjects()),
                         [](const ::testing::TestParamInfo<Subject> &info) {
                           return info.param.label;
                         });

Pair::Pair(Backend &backend, std::string_view text) : backend_(backend) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return;
  module = *std::move(m);
  absl::Status v = verify(*module);
  EXPECT_TRUE(v.ok()) << v.message();
  ref = *Program::create(*module);
  mine = *Program::create(*module);
}

std::pair<absl::Status, absl::Status>
Pair::run(std::string_view kernel, std::vector<LaunchArg> args, LaunchOptions options) {
  absl::Status a = ref->launch(kernel, args, interp_, options);
  absl::Status b = mine->launch(kernel, args, backend_, options);
  return {a, b};
}

void Pair::runOk(std::string_view kernel, std::vector<LaunchArg> args, LaunchOptions options) {
  auto [a, b] = run(kernel, args, options);
  ASSERT_TRUE(a.ok()) << "interp: " << a.message();
  ASSERT_TRUE(b.ok()) << backend_.name() << ": " << b.message();
}

void Pair::set(std::string_view field, const std::vector<double> &values) {
  std::vector<Scalar> scalars;
  ScalarType type = ref->field(field)->elementType();
  for (double v : values)
    scalars.push_back(isFloat(type) ? Scalar::ofFloat(type, v)
                                    : Scalar::ofInt(type, static_cast<int64_t>(v)));
  setRaw(field, scalars);
}

void Pair::setRaw(std::string_view field, const std::vector<Scalar> &values) {
  for (Program *p : {ref.get(), mine.get()})
    for (size_t i = 0; i < values.size(); ++i)
      p->field(field)->set(static_cast<int64_t>(i), values[i]);
}

void Pair::expectSame() {
  std::string d = corpus::compareFields(*module, *ref, *mine, /*exact=*/true);
  EXPECT_TRUE(d.empty()) << d;
}

namespace {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST_P(BackendConformanceTest, DivisionByZeroIsAnErrorNamingTheStatement) {
  REQUIRE_CAPABILITY(int64);
  Pair p(backend(), R"(
field @x : i32[8]
field @y : i32[8]
field @o : i64[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %a = load @x[%i] : i32
    %b = load @y[%i] : i32
    %q = div %a, %b : i32
    %w = cast %q : i32 to i64
    store @o[%i], %w
  }
}
kernel @r(%d: i64) {
  serial {
    %c = const 5 : i64
    %m = rem %c, %d : i64
    %z = const 0 : i32
    store @o[%z], %m
  }
}
)");
  p.set("x", {1, 2, 3, 4, 5, 6, 7, 8});
  p.set("y", {1, 1, 0, 1, 1, 0, 1, 1});
  auto [a, b] = p.run("k");
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(locationPrefix(a), "t.qd:9:5");
  EXPECT_EQ(locationPrefix(b), "t.qd:9:5");
  EXPECT_NE(message(b).find("integer division by zero"), std::string::npos) << message(b);
  EXPECT_NE(message(b).find("kernel @k, task at t.qd:6:3"), std::string::npos) << message(b);
  EXPECT_NE(message(b).find("%q = div %a, %b : i32"), std::string::npos) << message(b);
  auto [c, d] = p.run("r", {LaunchArg::i64(0)});
  EXPECT_EQ(locationPrefix(c), "t.qd:17:5");
  EXPECT_EQ(locationPrefix(d), "t.qd:17:5");
  EXPECT_EQ(message(d), message(c)); // one site: the same words
  // The next launch starts clean.
  p.runOk("r", {LaunchArg::i64(3)});
  EXPECT_BOTH(p, "o", 0, I64(2));
}

TEST_P(BackendConformanceTest, OutOfRangeIndicesAreErrorsWhenBoundsChecked) {
  REQUIRE_CAPABILITY(float64);
  Pair p(backend(), R"(
field @x : f32[16]
field @y : f32[4, 4]
kernel @k(%n: i32) {
  parallel for %i = 0 to %n {
    %v = load @x[%i] : f32
    %z = const 0 : i32
    store @y[%z, %i], %v
  }
}
kernel @nd(%a: ndarray<f64, 1>, %off: i32) {
  serial {
    %j = const 0 : i32
    %k = add %j, %off : i32
    %v = load %a[%k] : f64
    store %a[%j], %v
  }
}
)");
  LaunchOptions checked;
  checked.boundsChecked = true;
  p.runOk("k", {LaunchArg::i32(4)}, checked);
  auto [a, b] = p.run("k", {LaunchArg::i32(17)}, checked);
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  // The interpreter stops at %i = 4 (the store); a backend running
  // iterations at once may first fail at the load of %i = 16. Where it
  // fails at the same site, with the interpreter's words and indices.
  EXPECT_EQ(locationPrefix(a), "t.qd:8:5");
  EXPECT_TRUE(locationPrefix(b) == "t.qd:8:5" || locationPrefix(b) == "t.qd:6:5") << message(b);
  if (locationPrefix(b) == locationPrefix(a) && GetParam().label == "cpu_serial") {
    EXPECT_EQ(message(b), message(a));
  }
  EXPECT_NE(message(b).find("is out of range for '@"), std::string::npos) << message(b);
  EXPECT_NE(message(b).find("kernel @k, task at t.qd:5:3"), std::string::npos) << message(b);
  Buffer arr = *Buffer::create(ScalarType::F64, {3});
  NdarrayArg nd{&arr};
  for (int off : {3, -1, 100000}) {
    auto [c, d] = p.run("nd", {LaunchArg::ndarray(&nd), LaunchArg::i32(off)}, checked);
    EXPECT_EQ(locationPrefix(c), "t.qd:15:5") << message(c);
    EXPECT_EQ(message(d), message(c));
    EXPECT_NE(message(d).find(fmt::format("index [{}] is out of range for '%a' of shape [3]", off)),
              std::string::npos)
        << message(d);
  }
  arr.set(2, F64(4.5));
  p.runOk("nd", {LaunchArg::ndarray(&nd), LaunchArg::i32(2)}, checked);
  EXPECT_EQ(arr.get(0).f, 4.5);
}

// An adstack that underflows is the interpreter's error too, and the
// backend stays usable.
TEST_P(BackendConformanceTest, AdStackUnderflowReadsAsTheInterpretersError) {
  Pair p(backend(), R"(field @y : f32[4]
kernel @under() {
  serial {
    %s = adstack.alloca f32, capacity 4
    adstack.pop %s
  }
}
kernel @ok() {
  serial {
    %z = const 1 : i32
    %v = const 2.5 : f32
    store @y[%z], %v
  }
}
)");
  auto [a, b] = p.run("under");
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.code(), a.code());
  EXPECT_EQ(message(b), message(a));
  p.runOk("ok");
  EXPECT_BOTH(p, "y", 1, F32(2.5));
}

// A launch whose adstack is too small fails naming the capacity it
// needed; the next, sized launch matches the interpreter.
TEST_P(BackendConformanceTest, AdStackOverflowIsAnErrorAndTheNextLaunchWorks) {
  corpus::expectOverflowIsAnErrorAndTheNextLaunchWorks(backend());
}

//===----------------------------------------------------------------------===//
// Atomics
//===----------------------------------------------------------------------===//

TEST_P(BackendConformanceTest, AtomicsInParallelTasksSumEveryContribution) {
  REQUIRE_CAPABILITY(int64Atomics);
  REQUIRE_CAPABILITY(float64);
  Pair p(backend(), R"(
field @si : i64
field @sf : f64
field @sh : f32
field @bins : i32[8]
kernel @k(%n: i32) {
  parallel for %i = 0 to %n {
    %w = cast %i : i32 to i64
    atomic_add @si[], %w : i64
    %one = const 1.0 : f64
    atomic_add @sf[], %one : f64
    %half = const 0.5 : f32
    atomic_add @sh[], %half : f32
    %seven = const 7 : i32
    %b = and %i, %seven : i32
    %c1 = const 1 : i32
    atomic_add @bins[%b], %c1 : i32
  }
}
)");
  const int n = 200000;
  p.runOk("k", {LaunchArg::i32(n)});
  EXPECT_BOTH(p, "si", 0, I64(int64_t(n) * (n - 1) / 2));
  EXPECT_BOTH(p, "sf", 0, F64(n));
  EXPECT_BOTH(p, "sh", 0, F32(n / 2));
  for (int b = 0; b < 8; ++b)
    EXPECT_BOTH(p, "bins", b, I32(n / 8));
}

// The shape of a gradient iteration: read an output's adjoint and zero it,
// run a loop, add to an input's adjoint. With distinct buffers the zeroing
// may be emitted last (docs/runtime.md, "Deferred stores"); with one
// buffer for both ndarrays it must stay first, or the add would be lost.
TEST_P(BackendConformanceTest, AnAdjointZeroedBeforeAnotherArgumentsAddStaysZeroedFirst) {
  auto m = parseModule(R"(
kernel @k(%x: ndarray<f32, 1> grad, %y: ndarray<f32, 1> grad) {
  %n = shape %x, 0 : i32
  parallel for %i = 0 to %n {
    %zero = const 0.0 : f32
    %half = const 0.5 : f32
    %a = load %y.grad[%i] : f32
    store %y.grad[%i], %zero
    %v = alloca f32
    store %v, %a
    for %j = 0 to 3 {
      %t = load %v : f32
      %u = mul %t, %half : f32
      store %v, %u
    }
    %r = load %v : f32
    atomic_add %x.grad[%i], %r : f32
  }
}
)",
                       {"t.qd", 1});
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::unique_ptr<Program> program = *Program::create(**m);
  const int64_t n = 1000;
  auto filled = [&](float scale) {
    Buffer b = *Buffer::create(ScalarType::F32, {n});
    for (int64_t i = 0; i < n; ++i)
      b.set(i, F32(scale * float(i % 64)));
    return b;
  };
  // One buffer for both: each element ends as its own adjoint over 8.
  Buffer primal = filled(1), grad = filled(8);
  NdarrayArg shared{&primal, &grad};
  ASSERT_TRUE(
      program
          ->launch("k",
                   std::vector<LaunchArg>{LaunchArg::ndarray(&shared), LaunchArg::ndarray(&shared)},
                   backend())
          .ok());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(grad.get(i).asDouble(), double(i % 64)) << "element " << i;
  // Distinct buffers: y's adjoint ends zeroed, x's gains y's over 8.
  Buffer xp = filled(1), xg = filled(1), yp = filled(1), yg = filled(8);
  NdarrayArg x{&xp, &xg}, y{&yp, &yg};
  ASSERT_TRUE(program
                  ->launch("k",
                           std::vector<LaunchArg>{LaunchArg::ndarray(&x), LaunchArg::ndarray(&y)},
                           backend())
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(yg.get(i).asDouble(), 0.0) << "element " << i;
    ASSERT_EQ(xg.get(i).asDouble(), 2.0 * double(i % 64)) << "element " << i;
  }
}

//===----------------------------------------------------------------------===//
// Stop checks
//===----------------------------------------------------------------------===//

// A launch stops at its timeout or when its cancel flag is set, naming the
// loop a thread was in (the task or its `while`), and the same program
// and backend then run a finite launch. Where the device ends long loops
// (longLoops false: lavapipe) the stopped launch is a finite one too long
// for the timeout: 2^21 task iterations of 1000 each.
TEST_P(BackendConformanceTest, ATimeoutOrACancelFlagStopsALaunchNamingTheLoop) {
  using namespace std::chrono_literals;
  auto module =
      parseModule(std::string("field @x : f32[64]\n") + kShortLoopsKernel, {"short.qd", 1});
  ASSERT_TRUE(module.ok()) << module.status();
  auto program = *Program::create(**module);
  const bool endless = backend().capabilities().longLoops;
  auto run = [&](int32_t m, int32_t n, const LaunchOptions &o) {
    LaunchArg args[] = {LaunchArg::i32(m), LaunchArg::i32(n)};
    return program->launch("short", args, backend(), o);
  };
  auto runForever = [&](const LaunchOptions &o) {
    return endless ? run(64, -1, o) : run(1 << 21, 1000, o);
  };
  auto finiteRunWorks = [&](const LaunchOptions &o) {
    absl::Status ran = run(64, 7, o);
    ASSERT_TRUE(ran.ok()) << message(ran);
    for (int i = 0; i < 64; ++i)
      ASSERT_EQ(program->field("x")->get(i).f, 7) << "element " << i;
  };
  auto inALoop = [](const absl::Status &s, const std::string &what) {
    return message(s).find("short.qd:8:5: error: " + what) == 0 ||
           message(s).find("short.qd:4:3: error: " + what) == 0;
  };

  LaunchOptions o;
  o.timeout = 100ms;
  auto start = std::chrono::steady_clock::now();
  absl::Status s = runForever(o);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s.message();
  EXPECT_TRUE(inALoop(s, "the launch ran past its timeout of 100 ms and was stopped in this loop"))
      << message(s);
  EXPECT_NE(message(s).find("(in kernel @short, task at short.qd:4:3: `"), std::string::npos)
      << message(s);
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 20s); // compiles included
  o.timeout = 60s;
  finiteRunWorks(o);
  finiteRunWorks({});

  std::atomic<bool> cancel{false};
  LaunchOptions c;
  c.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(50ms);
    cancel.store(true);
  });
  s = runForever(c);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s.message();
  EXPECT_TRUE(inALoop(s, "the launch was cancelled (LaunchOptions::cancel) while in this loop"))
      << message(s);
  // A flag that is already set stops a launch at its first checks.
  s = runForever(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s.message();
  cancel.store(false);
  finiteRunWorks(c);
}

} // namespace
} // namespace qd::conformance
