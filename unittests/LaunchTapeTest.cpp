//===- LaunchTapeTest.cpp - Gradients through several launches -----------===//
#include "qd/runtime/LaunchTape.h"

#include "qd/check/GradCheck.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace qd {
namespace {

// A simulation: each step maps a state of 4 elements to the next one,
// applying v = v + c * sin(v) @n times per element (an adstack, its
// capacity from the field @n), and the loss is the sum of squares of the
// last state. @unrolled does all the steps in one launch (the reference).
constexpr const char *kText = R"(
field @n : i32
field @loss : f64 grad dual

kernel @step(%src: ndarray<f64, 1> grad dual, %dst: ndarray<f64, 1> grad dual, %c: f64) {
  parallel for %i = 0 to 4 {
    %x = load %src[%i] : f64
    %v = alloca f64
    store %v, %x
    %n = load @n[] : i32
    for %j = 0 to %n {
      %a = load %v : f64
      %s = sin %a : f64
      %m = mul %s, %c : f64
      %b = add %m, %a : f64
      store %v, %b
    }
    %r = load %v : f64
    store %dst[%i], %r
  }
}

kernel @sumsq(%x: ndarray<f64, 1> grad dual) {
  parallel for %i = 0 to 4 {
    %a = load %x[%i] : f64
    %q = mul %a, %a : f64
    atomic_add @loss[], %q : f64
  }
}

kernel @unrolled(%x: ndarray<f64, 1> grad, %steps: i32) {
  parallel for %i = 0 to 4 {
    %x0 = load %x[%i] : f64
    %v = alloca f64
    store %v, %x0
    %n = load @n[] : i32
    for %t = 0 to %steps {
      %ft = cast %t : i32 to f64
      %k = const 0.0625 : f64
      %kt = mul %ft, %k : f64
      %h = const 0.25 : f64
      %c = add %kt, %h : f64
      for %j = 0 to %n {
        %a = load %v : f64
        %s = sin %a : f64
        %m = mul %s, %c : f64
        %b = add %m, %a : f64
        store %v, %b
      }
    }
    %r = load %v : f64
    %q = mul %r, %r : f64
    atomic_add @loss[], %q : f64
  }
}
)";

constexpr int kSteps = 6;
constexpr double kX0[4] = {0.3, -0.7, 1.1, 2.0};
double stepC(int t) {
  return 0.25 + 0.0625 * t;
} // exact in binary

double *f64(Buffer &b) {
  return reinterpret_cast<double *>(b.data());
}
double at(const Buffer &b, int i) {
  return reinterpret_cast<const double *>(b.data())[i];
}

/// An ndarray with grad and dual companions.
struct Array {
  Buffer primal, grad, dual;
  NdarrayArg arg;
  Array() {
    for (Buffer *b : {&primal, &grad, &dual})
      *b = *Buffer::create(ScalarType::F64, {4});
    arg = {&primal, &grad, &dual};
  }
};

struct Sim {
  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;
  /// pingPong: two arrays, step t reads one and writes the other (the
  /// state a later step overwrites); else one array per state.
  std::vector<std::unique_ptr<Array>> states;
  bool pingPong;

  explicit Sim(bool pingPong, int n = 2) : pingPong(pingPong) {
    module = *parseModule(kText, {"sim.qd", 1});
    for (const char *k : {"step", "sumsq", "unrolled"})
      EXPECT_TRUE(buildGradientKernel(*module, *module->findKernel(k)).ok());
    for (const char *k : {"step", "sumsq"})
      EXPECT_TRUE(buildDualKernel(*module, *module->findKernel(k)).ok());
    program = *Program::create(*module);
    program->field("n")->set(0, Scalar::ofInt(ScalarType::I32, n));
    for (int i = 0; i < (pingPong ? 2 : kSteps + 1); ++i)
      states.push_back(std::make_unique<Array>());
    std::memcpy(f64(states[0]->primal), kX0, sizeof kX0);
  }
  Array &state(int t) { return *states[pingPong ? t % 2 : t]; }
  Array &first() { return *states[0]; }

  /// Records the simulation and the loss on `tape`.
  absl::Status record(LaunchTape &tape) {
    program->field("loss")->set(0, Scalar::ofFloat(ScalarType::F64, 0.0));
    for (int t = 0; t < kSteps; ++t) {
      LaunchArg args[] = {LaunchArg::ndarray(&state(t).arg), LaunchArg::ndarray(&state(t + 1).arg),
                          LaunchArg::f64(stepC(t))};
      if (absl::Status s = tape.launch("step", args); !s.ok())
        return s;
    }
    LaunchArg loss[] = {LaunchArg::ndarray(&state(kSteps).arg)};
    return tape.launch("sumsq", loss);
  }
  double loss() { return at(*program->field("loss"), 0); }
};

/// The gradient of the loss with respect to the first state, from one
/// launch of @unrolled and its gradient.
std::vector<double> unrolledGradient(Backend &backend) {
  Sim sim(false);
  Array &x = sim.first();
  LaunchArg args[] = {LaunchArg::ndarray(&x.arg), LaunchArg::i32(kSteps)};
  EXPECT_TRUE(sim.program->launch("unrolled", args, backend).ok());
  sim.program->field("loss", Component::Grad)->set(0, Scalar::ofFloat(ScalarType::F64, 1.0));
  EXPECT_TRUE(sim.program->launch("unrolled_grad", args, backend).ok());
  return {at(x.grad, 0), at(x.grad, 1), at(x.grad, 2), at(x.grad, 3)};
}

/// The loss after the plain forward launches from `x0`.
double forwardLoss(Backend &backend, const double *x0) {
  Sim sim(true);
  std::memcpy(f64(sim.first().primal), x0, sizeof kX0);
  LaunchTape tape(*sim.program, backend, {.checkUnchanged = false});
  EXPECT_TRUE(sim.record(tape).ok());
  return sim.loss();
}

/// `a` agrees with `b` to `rel` relative to |b| (the gradients are of order 1).
void expectClose(double a, double b, double rel = 1e-12) {
  EXPECT_LE(std::abs(a - b), rel * std::abs(b)) << a << " vs " << b;
}

std::vector<std::unique_ptr<Backend>> backends() {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::make_unique<Interpreter>());
  out.push_back(*CpuBackend::create({.threads = 2}));
  return out;
}

std::vector<double> firstGrad(Sim &sim) {
  Buffer &g = sim.first().grad;
  return {at(g, 0), at(g, 1), at(g, 2), at(g, 3)};
}

// Step t reads what step t-1 wrote; with two arrays, step t+1 overwrites
// what step t-1's gradient reads, so the tape snapshots it. Both layouts
// give the gradient of the one-launch reference and of finite differences.
TEST(LaunchTapeTest, GradientOfASimulationMatchesTheUnrolledKernelAndFiniteDifferences) {
  for (auto &backend : backends()) {
    std::vector<double> reference = unrolledGradient(*backend);
    for (bool pingPong : {false, true}) {
      SCOPED_TRACE(std::string(backend->name()) + (pingPong ? " ping-pong" : " distinct"));
      Sim sim(pingPong);
      LaunchTape tape(*sim.program, *backend);
      ASSERT_TRUE(sim.record(tape).ok());
      EXPECT_EQ(tape.size(), size_t(kSteps + 1));
      double lossBefore = sim.loss();
      std::vector<double> finalState(4);
      for (int i = 0; i < 4; ++i)
        finalState[i] = at(sim.state(kSteps).primal, i);
      TapeSeed seed{.field = "loss"};
      ASSERT_TRUE(tape.backward({&seed, 1}).ok());
      std::vector<double> grad = firstGrad(sim);
      for (int i = 0; i < 4; ++i) {
        SCOPED_TRACE(i);
        EXPECT_GT(std::abs(grad[i]), 0.01);
        expectClose(grad[i], reference[i]);
        double x[4], h = 1e-6;
        std::memcpy(x, kX0, sizeof x);
        x[i] += h;
        double up = forwardLoss(*backend, x);
        x[i] -= 2 * h;
        double fd = (up - forwardLoss(*backend, x)) / (2 * h);
        expectClose(grad[i], fd, 1e-7);
        // Backward leaves the buffers as the forward did.
        EXPECT_EQ(at(sim.state(kSteps).primal, i), finalState[i]);
      }
      EXPECT_EQ(sim.loss(), lossBefore);
      TapeMemory m = tape.memory();
      // Ping-pong: every step but the last two overwrites a state an
      // earlier gradient reads (4 doubles each); distinct arrays: nothing.
      EXPECT_EQ(m.heldBytes, pingPong ? uint64_t(kSteps - 1) * 32 : 0u);
      EXPECT_GE(m.peakBytes, m.heldBytes);
      // A second backward, seeded twice as hard, gives twice the gradient.
      seed.value = 2.0;
      ASSERT_TRUE(tape.backward({&seed, 1}).ok());
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(firstGrad(sim)[i], 2 * grad[i]);
    }
  }
}

// The reference itself agrees with finite differences (qd::checkGradient).
TEST(LaunchTapeTest, TheUnrolledReferenceIsARightGradient) {
  auto module = *parseModule(kText, {"sim.qd", 1});
  GradCheckInputs in;
  in.fields["n"] = GradCheckValue::scalar(2);
  in.args["x"] = GradCheckValue::array({4}, {kX0[0], kX0[1], kX0[2], kX0[3]});
  in.args["steps"] = GradCheckValue::scalar(kSteps);
  absl::StatusOr<GradCheckReport> report = checkGradient(*module, "unrolled", in, {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passed) << formatGradCheckReport(*report);
}

constexpr const char *kSlices = R"(
field @loss : f64 grad dual

kernel @tstep(%a: ndarray<f64, 2> grad dual, %t: i32, %c: f64) {
  parallel for %i = 0 to 4 {
    %x = load %a[%t, %i] : f64
    %s = sin %x : f64
    %m = mul %s, %c : f64
    %y = add %m, %x : f64
    %one = const 1 : i32
    %n = add %t, %one : i32
    store %a[%n, %i], %y
  }
}

kernel @tloss(%a: ndarray<f64, 2> grad dual, %t: i32) {
  parallel for %i = 0 to 4 {
    %x = load %a[%t, %i] : f64
    %q = mul %x, %x : f64
    atomic_add @loss[], %q : f64
  }
}
)";

/// d loss / d s0 for s_{k+1} = s_k + c_k sin(s_k), loss = sum s_n^2.
double sliceReference(double s, std::span<const double> cs) {
  double d = 1;
  for (double c : cs) {
    d *= 1 + c * std::cos(s);
    s += c * std::sin(s);
  }
  return 2 * s * d;
}

// One array holds every state (row t), and step t reads row t and writes
// row t + 1: no launch writes a row an earlier gradient reads, so the tape
// copies nothing. A launch that writes a row an earlier gradient still
// reads (step 0 again, after step 1 read row 1) is copied as before, and
// the gradient is the one of the launches the loss depends on.
TEST(LaunchTapeTest, RowsTheGradientsDoNotReadAreNotCopied) {
  for (auto &backend : backends()) {
    SCOPED_TRACE(backend->name());
    auto module = *parseModule(kSlices, {"slices.qd", 1});
    for (const char *k : {"tstep", "tloss"}) {
      ASSERT_TRUE(buildGradientKernel(*module, *module->findKernel(k)).ok());
      ASSERT_TRUE(buildDualKernel(*module, *module->findKernel(k)).ok());
    }
    struct Case {
      std::vector<std::pair<int, double>> steps; // (t, c) per launch
      int lossRow;
      std::vector<double> chain; // the c of the launches the loss depends on
      bool copies;
    };
    std::vector<Case> cases = {
        {{{0, 0.25}, {1, 0.3125}, {2, 0.375}, {3, 0.4375}, {4, 0.5}, {5, 0.5625}},
         6,
         {0.25, 0.3125, 0.375, 0.4375, 0.5, 0.5625},
         false},
        {{{0, 0.25}, {1, 0.3125}, {0, 0.5}}, 2, {0.25, 0.3125}, true},
    };
    for (const Case &c : cases) {
      auto program = *Program::create(*module);
      Buffer a = *Buffer::create(ScalarType::F64, {7, 4}),
             g = *Buffer::create(ScalarType::F64, {7, 4}),
             d = *Buffer::create(ScalarType::F64, {7, 4});
      for (int i = 0; i < 4; ++i)
        f64(a)[i] = kX0[i];
      NdarrayArg arg{&a, &g, &d};
      LaunchTape tape(*program, *backend);
      for (auto [t, k] : c.steps) {
        LaunchArg args[] = {LaunchArg::ndarray(&arg), LaunchArg::i32(t), LaunchArg::f64(k)};
        ASSERT_TRUE(tape.launch("tstep", args).ok());
      }
      LaunchArg loss[] = {LaunchArg::ndarray(&arg), LaunchArg::i32(c.lossRow)};
      ASSERT_TRUE(tape.launch("tloss", loss).ok());
      TapeMemory m = tape.memory();
      if (c.copies)
        EXPECT_EQ(m.heldBytes, 7u * 4 * 8); // the whole array, once
      else
        EXPECT_EQ(m.heldBytes, 0u);
      TapeSeed seed{.field = "loss"};
      ASSERT_TRUE(tape.backward({&seed, 1}).ok());
      for (int i = 0; i < 4; ++i)
        expectClose(at(g, i), sliceReference(kX0[i], c.chain));
    }
  }
}

TEST(LaunchTapeTest, WithoutSnapshotsAnOverwriteIsRefusedNamingBothLaunches) {
  Interpreter interp;
  Sim sim(true);
  LaunchTape tape(*sim.program, interp, {.snapshots = false});
  absl::Status s = sim.record(tape);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "launch 1 (@step) writes %dst, which the gradient of launch 0 (@step) "
                         "reads as that launch left it (as %src), and the tape keeps no copies "
                         "(LaunchTapeOptions::snapshots is false); allow snapshots, or write the "
                         "new values to another buffer");
  EXPECT_EQ(tape.size(), 1u); // the refused launch did not run
  // Distinct buffers need no copies.
  Sim distinct(false);
  LaunchTape plain(*distinct.program, interp, {.snapshots = false});
  ASSERT_TRUE(distinct.record(plain).ok());
  TapeSeed seed{.field = "loss"};
  ASSERT_TRUE(plain.backward({&seed, 1}).ok());
  std::vector<double> reference = unrolledGradient(interp);
  for (int i = 0; i < 4; ++i)
    expectClose(firstGrad(distinct)[i], reference[i]);
}

// The loop bound @n changes between recording and backward: the gradients
// would replay a different number of iterations. The tape says so.
TEST(LaunchTapeTest, ALoopBoundChangedBeforeBackwardIsAnError) {
  for (auto &backend : backends()) {
    Sim sim(true);
    LaunchTape tape(*sim.program, *backend);
    ASSERT_TRUE(sim.record(tape).ok());
    sim.program->field("n")->set(0, Scalar::ofInt(ScalarType::I32, 5));
    TapeSeed seed{.field = "loss"};
    absl::Status s = tape.backward({&seed, 1});
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(),
              "@n changed outside the tape after launch 5 (@step), before backward: the tape "
              "needs it as that launch left it (a gradient reads it, or a recomputed launch "
              "does); write it in a recorded launch, put its contents back, or clear() the tape "
              "and record again");
    // Put back, the gradient is the right one.
    sim.program->field("n")->set(0, Scalar::ofInt(ScalarType::I32, 2));
    ASSERT_TRUE(tape.backward({&seed, 1}).ok());
    std::vector<double> reference = unrolledGradient(*backend);
    for (int i = 0; i < 4; ++i)
      expectClose(firstGrad(sim)[i], reference[i]);
    // Changed between two launches: the next launch that touches it says so.
    LaunchTape again(*sim.program, *backend);
    LaunchArg args[] = {LaunchArg::ndarray(&sim.state(0).arg),
                        LaunchArg::ndarray(&sim.state(1).arg), LaunchArg::f64(0.5)};
    ASSERT_TRUE(again.launch("step", args).ok());
    sim.program->field("n")->set(0, Scalar::ofInt(ScalarType::I32, 4));
    LaunchArg next[] = {LaunchArg::ndarray(&sim.state(1).arg),
                        LaunchArg::ndarray(&sim.state(2).arg), LaunchArg::f64(0.5)};
    s = again.launch("step", next);
    EXPECT_NE(s.message().find("@n changed outside the tape after launch 0 (@step), before "
                               "launch 1 (@step)"),
              std::string::npos)
        << s;
  }
}

// Under a budget the tape keeps every k-th state and recomputes: the
// gradient is the fully recorded tape's, bit for bit.
TEST(LaunchTapeTest, CheckpointedGradientsEqualTheFullyRecordedOnes) {
  for (auto &backend : backends()) {
    SCOPED_TRACE(backend->name());
    Sim full(true);
    LaunchTape fullTape(*full.program, *backend);
    ASSERT_TRUE(full.record(fullTape).ok());
    TapeSeed seed{.field = "loss"};
    ASSERT_TRUE(fullTape.backward({&seed, 1}).ok());
    // Initial contents: both arrays and @loss (72 bytes); a checkpoint of
    // the same buffers, 72 bytes more.
    for (uint64_t budget : {72u, 144u, 216u, 100000u}) {
      Sim sim(true);
      LaunchTape tape(*sim.program, *backend, {.checkpointBudget = budget});
      ASSERT_TRUE(sim.record(tape).ok());
      EXPECT_EQ(sim.loss(), full.loss());
      TapeMemory m = tape.memory();
      EXPECT_LE(m.heldBytes, budget);
      EXPECT_GE(m.checkpoints, 1);
      EXPECT_GE(m.checkpointInterval, 1);
      ASSERT_TRUE(tape.backward({&seed, 1}).ok());
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(firstGrad(sim)[i], firstGrad(full)[i]) << budget << " " << i;
      EXPECT_EQ(sim.loss(), full.loss()); // the state the forward left
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(at(sim.state(kSteps).primal, i), at(full.state(kSteps).primal, i));
      if (budget == 72u) {
        EXPECT_EQ(tape.memory().checkpoints, 1); // everything recomputed at once
      } else if (budget == 100000u) {
        EXPECT_EQ(tape.memory().checkpointInterval, 1);
        EXPECT_EQ(tape.memory().checkpoints, kSteps + 1);
      }
    }
    Sim tooSmall(true);
    LaunchTape tape(*tooSmall.program, *backend, {.checkpointBudget = 40});
    absl::Status s = tooSmall.record(tape);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("more than the checkpoint budget of 40 bytes"), std::string::npos)
        << s;
  }
}

// Forward mode: the tangent kernels replayed from the first state give the
// directional derivative of the loss, which reverse mode also gives.
TEST(LaunchTapeTest, JvpReplaysTheTangentKernelsInOrder) {
  for (auto &backend : backends()) {
    SCOPED_TRACE(backend->name());
    for (bool checkpoint : {false, true}) {
      Sim sim(true);
      LaunchTapeOptions o;
      o.keepInitialState = !checkpoint;
      o.checkpointBudget = checkpoint ? 1000 : 0;
      LaunchTape tape(*sim.program, *backend, o);
      ASSERT_TRUE(sim.record(tape).ok());
      double loss = sim.loss();
      TapeSeed seed{.field = "loss"};
      ASSERT_TRUE(tape.backward({&seed, 1}).ok());
      std::vector<double> grad = firstGrad(sim);
      // One column at a time: loss.dual = dloss/dx0[i].
      for (int i = 0; i < 4; ++i) {
        double e[4] = {0, 0, 0, 0};
        e[i] = 1.0;
        TapeSeed dir{.buffer = &sim.first().dual, .values = e};
        ASSERT_TRUE(tape.jvp({&dir, 1}).ok());
        expectClose(at(*sim.program->field("loss", Component::Dual), 0), grad[i]);
      }
      // Every element at once (a uniform seed): the sum.
      TapeSeed all{.buffer = &sim.first().dual, .value = 1.0};
      ASSERT_TRUE(tape.jvp({&all, 1}).ok());
      double sum = grad[0] + grad[1] + grad[2] + grad[3];
      expectClose(at(*sim.program->field("loss", Component::Dual), 0), sum);
      EXPECT_EQ(sim.loss(), loss); // the primal state put back
    }
    Sim plain(true);
    LaunchTape tape(*plain.program, *backend);
    ASSERT_TRUE(plain.record(tape).ok());
    absl::Status s = tape.jvp({});
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("keepInitialState"), std::string::npos) << s;
  }
}

TEST(LaunchTapeTest, SeedsAndMissingKernelsAreErrorsNamingThem) {
  Interpreter interp;
  Sim sim(true);
  LaunchTape tape(*sim.program, interp);
  ASSERT_TRUE(sim.record(tape).ok());
  TapeSeed wrong{.field = "n"};
  absl::Status s = tape.backward({&wrong, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the seed for @n.grad names no grad companion the recorded gradient "
                             "kernels use (they use: %dst.grad of launch 0 (@step), %src.grad of "
                             "launch 0 (@step), "),
            std::string::npos)
      << s;
  TapeSeed twice[] = {{.field = "loss"}, {.field = "loss", .value = 2.0}};
  s = tape.backward(twice);
  EXPECT_NE(s.message().find("the seed for @loss.grad is given twice"), std::string::npos) << s;
  // A launch recorded without a gradient kernel.
  LaunchTape partial(*sim.program, interp);
  TapeKernels only{sim.module->findKernel("sumsq")};
  LaunchArg args[] = {LaunchArg::ndarray(&sim.first().arg)};
  ASSERT_TRUE(partial.launch(only, args).ok());
  s = partial.backward({});
  EXPECT_NE(s.message().find("launch 0 (@sumsq) has no gradient kernel (@sumsq_grad)"),
            std::string::npos)
      << s;
  // An ndarray without the grad buffer its gradient needs: refused before
  // it runs.
  NdarrayArg noGrad{&sim.first().primal};
  LaunchArg bad[] = {LaunchArg::ndarray(&noGrad)};
  s = partial.launch("sumsq", bad);
  EXPECT_NE(s.message().find("launch 1 (@sumsq): argument 0 (%x) of kernel @sumsq declares a grad "
                             "companion, but no grad buffer was given"),
            std::string::npos)
      << s;
  EXPECT_EQ(partial.size(), 1u);
  EXPECT_EQ(partial.launch("nope", {}).code(), absl::StatusCode::kNotFound);
}

} // namespace
} // namespace qd
