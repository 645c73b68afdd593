//===- SimulationsTest.cpp - The simulations of bench/workloads, forward and gradient ---===//
//
// For each of the six simulations (bench/workloads/Simulation.h), over
// several time steps (one kernel launch per step, the gradient kernels in
// reverse step order):
//
//  - the CPU and Vulkan backends (Vulkan where the loader finds a device,
//    lavapipe in CI) give the loss and the gradient of the interpreter, in
//    f32, within kBackendRtol of the largest gradient element (atomic adds
//    in another order, other libm);
//  - the gradient of the f64 copy (every f32 widened, qd::
//    cloneModuleWidenedToF64) agrees with central finite differences of
//    the whole multi-step loss of the same copy (Richardson over h and
//    h/2), element by element and along a seeded random direction, within
//    kFdRtol;
//  - the f32 gradient agrees with the f64 one within kPrecisionRtol of the
//    largest element (f32 rounding over the steps).
//
//===----------------------------------------------------------------------===//
#include "SimRun.h"
#include "Simulation.h"

#include "qd/runtime/AllBackends.h"
#include "qd/runtime/BackendRegistry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace qdsim {
namespace {

// Steps each simulation runs in the tests.
int testSteps(std::string_view sim) {
  return sim == "billiards" ? 24 : sim == "mpm" ? 6 : 10;
}

constexpr double kBackendRtol = 2e-4;
constexpr double kFdRtol = 1e-5;
constexpr double kPrecisionRtol = 2e-2;

std::unique_ptr<qd::Backend> backend(std::string_view name) {
  static const bool registered = [] {
    qd::registerAllBackends();
    return true;
  }();
  (void)registered;
  auto b = qd::createBackend(name);
  return b.ok() ? std::move(*b) : nullptr;
}

struct Result {
  double loss = 0;
  std::vector<double> grad; // of the parameter
};

/// The loss and the parameter's gradient of `sim` on `backendName`.
Result run(std::string_view sim, std::string_view backendName,
           qd::ScalarType precision = qd::ScalarType::F32, SimSize size = SimSize::Small) {
  std::unique_ptr<Simulation> s = makeSimulation(sim, size);
  auto r = SimRun::create(*s, testSteps(sim), precision);
  EXPECT_TRUE(r.ok()) << r.status();
  std::unique_ptr<qd::Backend> b = backend(backendName);
  EXPECT_NE(b, nullptr) << backendName;
  if (!r.ok() || !b)
    return {};
  absl::Status status = (*r)->forwardAndGradient(*b);
  EXPECT_TRUE(status.ok()) << status;
  return {(*r)->loss(), (*r)->read(s->parameter(), qd::Component::Grad)};
}

double maxAbs(const std::vector<double> &v) {
  double m = 0;
  for (double x : v)
    m = std::max(m, std::abs(x));
  return m;
}

/// The largest |a - b| over the elements, relative to the largest |b|.
double relativeDifference(const std::vector<double> &a, const std::vector<double> &b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k)
    d = std::max(d, std::abs(a[k] - b[k]));
  return d / std::max(maxAbs(b), 1e-30);
}

const Result &interpreterF32(std::string_view sim) {
  static std::map<std::string, Result, std::less<>> cache;
  auto it = cache.find(sim);
  if (it == cache.end())
    it = cache.emplace(std::string(sim), run(sim, "interp")).first;
  return it->second;
}

class SimulationsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SimulationsTest, LossAndGradientAreNonTrivial) {
  const Result &ref = interpreterF32(GetParam());
  EXPECT_TRUE(std::isfinite(ref.loss));
  EXPECT_NE(ref.loss, 0.0);
  ASSERT_FALSE(ref.grad.empty());
  EXPECT_GT(maxAbs(ref.grad), 1e-6) << "the gradient of " << GetParam() << " is zero";
  for (double g : ref.grad)
    ASSERT_TRUE(std::isfinite(g));
}

void compareWithInterpreter(const std::string &sim, std::string_view backendName) {
  const Result &ref = interpreterF32(sim);
  Result got = run(sim, backendName);
  EXPECT_NEAR(got.loss, ref.loss, kBackendRtol * std::abs(ref.loss))
      << sim << " on " << backendName;
  EXPECT_LE(relativeDifference(got.grad, ref.grad), kBackendRtol) << sim << " on " << backendName;
}

TEST_P(SimulationsTest, CpuMatchesTheInterpreter) {
  compareWithInterpreter(GetParam(), "cpu");
}

// The launches recorded on a LaunchTape and its backward give the gradient
// of the hand-sequenced launches: bit for bit on the interpreter (the same
// launches in the same order), within rounding on the CPU backend, whose
// workers' atomic adds into adjoints land in a different order each run.
TEST_P(SimulationsTest, TheLaunchTapeGivesTheSameGradient) {
  const std::string &sim = GetParam();
  for (std::string_view name : {"interp", "cpu"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Simulation> s = makeSimulation(sim, SimSize::Small);
    auto r = SimRun::create(*s, testSteps(sim), qd::ScalarType::F32);
    ASSERT_TRUE(r.ok()) << r.status();
    std::unique_ptr<qd::Backend> b = backend(name);
    ASSERT_TRUE((*r)->forwardAndGradient(*b).ok());
    const double loss = (*r)->loss();
    const std::vector<double> grad = (*r)->read(s->parameter(), qd::Component::Grad);
    absl::Status status = (*r)->forwardAndGradientOnTape(*b);
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<double> taped = (*r)->read(s->parameter(), qd::Component::Grad);
    EXPECT_GT(maxAbs(grad), 0.0);
    if (name == "interp") {
      EXPECT_EQ((*r)->loss(), loss);
      EXPECT_EQ(taped, grad);
    } else {
      EXPECT_NEAR((*r)->loss(), loss, 1e-5 * std::abs(loss));
      EXPECT_LT(relativeDifference(taped, grad), 1e-5);
    }
  }
}

// @reset (what qd-bench-sims launches between timed runs, so that a GPU's
// copies stay on the device) puts back what reset() and seedAdjoints()
// write: a run after it gives the same loss and gradient, and every array
// its initial contents (no launch writes an array's initial elements).
TEST_P(SimulationsTest, ResetOnDeviceRestoresTheStart) {
  const std::string &sim = GetParam();
  std::unique_ptr<Simulation> s = makeSimulation(sim, SimSize::Small);
  auto r = SimRun::create(*s, testSteps(sim));
  ASSERT_TRUE(r.ok()) << r.status();
  std::unique_ptr<qd::Backend> cpu = backend("cpu");
  ASSERT_TRUE((*r)->forwardAndGradient(*cpu).ok());
  const double loss = (*r)->loss();
  const std::vector<double> grad = (*r)->parameterGradient();
  ASSERT_TRUE((*r)->resetOnDevice(*cpu).ok());
  for (const SimArray &a : s->arrays(testSteps(sim))) {
    std::vector<double> initial = *(*r)->initial(a.name);
    for (double &v : initial)
      v = double(float(v)); // as the f32 (or small i32) array holds it
    EXPECT_EQ((*r)->read(a.name), initial) << a.name;
    if (!a.grad)
      continue;
    std::vector<double> adjoint = (*r)->read(a.name, qd::Component::Grad);
    if (a.name == "loss")
      EXPECT_EQ(adjoint, std::vector<double>{1.0});
    else
      EXPECT_EQ(maxAbs(adjoint), 0.0) << a.name << ".grad";
  }
  ASSERT_TRUE((*r)->runForward(*cpu).ok());
  ASSERT_TRUE((*r)->runReverse(*cpu).ok());
  EXPECT_NEAR((*r)->loss(), loss, 1e-6 * std::abs(loss));
  EXPECT_LT(relativeDifference((*r)->parameterGradient(), grad), 1e-5);
  // The gradient of the initial contents: slice 0 of a state array.
  const size_t full = (*r)->read(s->parameter(), qd::Component::Grad).size();
  const bool stateArray = sim != "mass_spring" && sim != "newton"; // w1 and k have no step axis
  EXPECT_EQ(grad.size(), stateArray ? full / size_t(testSteps(sim) + 1) : full);
}

TEST_P(SimulationsTest, VulkanMatchesTheInterpreter) {
  if (!backend("vulkan"))
    GTEST_SKIP() << "no Vulkan device (set VK_ICD_FILENAMES to lavapipe's ICD)";
  compareWithInterpreter(GetParam(), "vulkan");
}

TEST_P(SimulationsTest, CudaMatchesTheInterpreter) {
  if (!backend("cuda"))
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  compareWithInterpreter(GetParam(), "cuda");
}

// At the large size the tasks have hundreds to thousands of iterations, so
// CUDA takes the forms it takes for real workloads (billiards' collision
// gradient a block per ball, its shared loop scattering atomic adds; warp
// sums of the adds to one element): against the CPU backend, as the
// interpreter would take minutes.
TEST_P(SimulationsTest, CudaMatchesTheCpuAtTheLargeSize) {
  if (!backend("cuda"))
    GTEST_SKIP() << "no CUDA device or driver on this machine";
  const std::string &sim = GetParam();
  Result cpu = run(sim, "cpu", qd::ScalarType::F32, SimSize::Large);
  Result cuda = run(sim, "cuda", qd::ScalarType::F32, SimSize::Large);
  EXPECT_NEAR(cuda.loss, cpu.loss, kBackendRtol * std::abs(cpu.loss)) << sim;
  EXPECT_LE(relativeDifference(cuda.grad, cpu.grad), kBackendRtol) << sim;
}

TEST_P(SimulationsTest, F64GradientMatchesFiniteDifferences) {
  const std::string &sim = GetParam();
  std::unique_ptr<Simulation> s = makeSimulation(sim, SimSize::Small);
  auto r = SimRun::create(*s, testSteps(sim), qd::ScalarType::F64);
  ASSERT_TRUE(r.ok()) << r.status();
  // Every launch checked for the rule reverse mode relies on: no element
  // written after it was read.
  qd::LaunchOptions checked;
  checked.checkGlobalAccesses = true;
  (*r)->setLaunchOptions(checked);
  std::unique_ptr<qd::Backend> interp = backend("interp");
  absl::Status status = (*r)->forwardAndGradient(*interp);
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<double> grad = (*r)->read(s->parameter(), qd::Component::Grad);
  const size_t n = (*r)->initial(s->parameter())->size();
  // Each element checked, then a seeded random direction over all.
  std::vector<std::vector<double>> directions;
  for (int64_t k : s->checkedElements()) {
    directions.emplace_back(n, 0.0);
    directions.back()[static_cast<size_t>(k)] = 1;
  }
  directions.emplace_back(n, 0.0);
  for (size_t k = 0; k < n; ++k)
    directions.back()[k] = hashUniform(int64_t(k), 99);
  for (size_t d = 0; d < directions.size(); ++d) {
    const std::vector<double> &dir = directions[d];
    double analytic = 0, error = 0;
    for (size_t k = 0; k < n; ++k)
      analytic += dir[k] * grad[k];
    auto fd = (*r)->lossDerivative(*interp, s->parameter(), dir, 1e-4, &error);
    ASSERT_TRUE(fd.ok()) << fd.status();
    EXPECT_GT(std::abs(*fd), 1e-6)
        << sim << ", direction " << d << ": the loss does not depend on it";
    const double scale = std::max(std::abs(*fd), 1e-3 * maxAbs(grad));
    EXPECT_LE(std::abs(analytic - *fd), kFdRtol * scale)
        << sim << ", direction " << d << ": reverse " << analytic << ", finite differences " << *fd
        << " (levels differ by " << error << ")";
  }
}

TEST_P(SimulationsTest, F32GradientMatchesF64) {
  const Result &f32 = interpreterF32(GetParam());
  Result f64 = run(GetParam(), "interp", qd::ScalarType::F64);
  EXPECT_LE(relativeDifference(f32.grad, f64.grad), kPrecisionRtol) << GetParam();
  EXPECT_NEAR(f32.loss, f64.loss, 1e-3 * std::abs(f64.loss)) << GetParam();
}

// The Newton solve's trip counts differ between elements and steps, and its
// gradient's adstacks (one entry per iteration) live in the CPU backend's
// heap, sized at launch.
TEST(SimulationsTestShapes, NewtonIterationsDependOnTheData) {
  std::unique_ptr<Simulation> s = makeSimulation("newton", SimSize::Small);
  auto r = SimRun::create(*s, testSteps("newton"));
  ASSERT_TRUE(r.ok()) << r.status();
  std::unique_ptr<qd::Backend> cpu = backend("cpu");
  ASSERT_TRUE((*r)->forwardAndGradient(*cpu).ok());
  std::vector<double> iters = (*r)->read("iters");
  iters.resize(iters.size() - iters.size() / (testSteps("newton") + 1)); // slices 0 .. T - 1
  auto [lo, hi] = std::minmax_element(iters.begin(), iters.end());
  EXPECT_GE(*lo, 1);
  EXPECT_GT(*hi, *lo);
  EXPECT_LT(*hi, 30) << "a Newton solve did not converge";
  EXPECT_GT((*r)->maxAdStackHeapBytes(), 0);
}

// The cue ball reaches the rack and the collisions reach the last ball:
// impulses in several steps, and a loss that depends on the shot.
TEST(SimulationsTestShapes, BilliardsCollide) {
  std::unique_ptr<Simulation> s = makeSimulation("billiards", SimSize::Small);
  auto r = SimRun::create(*s, testSteps("billiards"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->forwardAndGradient(*backend("cpu")).ok());
  std::vector<double> impulse = (*r)->read("impulse");
  EXPECT_GT(std::count_if(impulse.begin(), impulse.end(), [](double v) { return v != 0; }), 10);
  std::vector<double> grad = (*r)->read("v", qd::Component::Grad);
  EXPECT_NE(grad[0], 0.0);
  EXPECT_NE(grad[1], 0.0);
}

INSTANTIATE_TEST_SUITE_P(All, SimulationsTest, ::testing::ValuesIn(simulationNames()),
                         [](const auto &info) { return info.param; });

} // namespace
} // namespace qdsim
