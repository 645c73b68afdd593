//===- GradientLaunchTest.cpp - launchWithGradient and gradientAdjoints ---===//
#include "qd/runtime/GradientLaunch.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qd {
namespace {

// loss = sum_i sin(x[i]) * w[i] over a field and an ndarray; o[i] = x[i]^2.
constexpr const char *kText = R"(
field @x : f64[3] grad
field @loss : f64 grad
kernel @k(%w: ndarray<f64, 1> grad, %o: ndarray<f64, 1> grad) {
  parallel for %i = 0 to 3 {
    %xi = load @x[%i] : f64
    %wi = load %w[%i] : f64
    %s = sin %xi : f64
    %p = mul %s, %wi : f64
    atomic_add @loss[], %p : f64
    %q = mul %xi, %xi : f64
    store %o[%i], %q
  }
}
)";

struct Fixture {
  std::unique_ptr<Module> module;
  const Kernel *fwd = nullptr, *grad = nullptr;
  std::unique_ptr<Program> program;
  Buffer w, wg, o, og;
  NdarrayArg wa, oa;
  std::vector<LaunchArg> args;

  Fixture() {
    module = *parseModule(kText, {"t.qd", 1});
    fwd = module->findKernel("k");
    grad = *buildGradientKernel(*module, *fwd);
    program = *Program::create(*module);
    for (Buffer *b : {&w, &wg, &o, &og})
      *b = *Buffer::create(ScalarType::F64, {3});
    wa = {&w, &wg};
    oa = {&o, &og};
    args = {LaunchArg::ndarray(&wa), LaunchArg::ndarray(&oa)};
    double *x = reinterpret_cast<double *>(program->field("x")->data());
    double *wd = reinterpret_cast<double *>(w.data());
    for (int i = 0; i < 3; ++i) {
      x[i] = 0.3 * (i + 1);
      wd[i] = 1.0 + i;
    }
  }
  double at(Buffer &b, int i) {
    return reinterpret_cast<const double *>(std::as_const(b).data())[i];
  }
  double xGrad(int i) { return at(*program->field("x", Component::Grad), i); }
};

std::string names(const std::vector<AdjointRef> &refs) {
  std::string out;
  for (const AdjointRef &r : refs)
    out += (out.empty() ? "" : " ") + r.str();
  return out;
}

TEST(GradientLaunchTest, TheGradientSaysWhatItAccumulatesAndConsumes) {
  Fixture f;
  GradientAdjoints adj = gradientAdjoints(*f.grad);
  EXPECT_EQ(names(adj.accumulated), "%w.grad @x.grad");
  EXPECT_EQ(names(adj.consumed), "%o.grad @loss.grad");
  EXPECT_TRUE(gradientAdjoints(*f.fwd).accumulated.empty());
  EXPECT_TRUE(gradientAdjoints(*f.fwd).consumed.empty());
}

// Seeded and zeroed on every call: the second launch gives the same
// gradient, not twice it, on the interpreter and the CPU backend.
TEST(GradientLaunchTest, ZeroesSeedsAndLaunchesBothKernels) {
  Interpreter interp;
  auto cpu = CpuBackend::create({.threads = 2});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (Backend *backend : {static_cast<Backend *>(&interp), static_cast<Backend *>(cpu->get())}) {
    Fixture f;
    // Stale adjoints a front-end forgot: overwritten, not added to.
    f.program->field("x", Component::Grad)->set(0, Scalar::ofFloat(ScalarType::F64, 100.0));
    f.og.set(1, Scalar::ofFloat(ScalarType::F64, 7.0));
    std::vector<AdjointSeed> seeds = {{"loss", 2.0}};
    for (int round = 0; round < 2; ++round) {
      absl::Status s = launchWithGradient(*f.program, *f.fwd, *f.grad, f.args, seeds, *backend);
      ASSERT_TRUE(s.ok()) << backend->name() << ": " << s;
      for (int i = 0; i < 3; ++i) {
        double x = 0.3 * (i + 1), w = 1.0 + i;
        EXPECT_NEAR(f.xGrad(i), 2.0 * std::cos(x) * w, 1e-12) << backend->name() << " " << i;
        EXPECT_NEAR(f.at(f.wg, i), 2.0 * std::sin(x), 1e-12) << backend->name() << " " << i;
        EXPECT_NEAR(f.at(f.o, i), x * x, 1e-12);
      }
    }
    // Seeding the ndarray output instead: d(sum o)/dx = 2x, and w gets none.
    std::vector<AdjointSeed> other = {{"o", 1.0}};
    ASSERT_TRUE(launchWithGradient(*f.program, *f.fwd, *f.grad, f.args, other, *backend).ok());
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(f.xGrad(i), 2 * 0.3 * (i + 1), 1e-12) << backend->name();
      EXPECT_EQ(f.at(f.wg, i), 0.0);
    }
  }
}

TEST(GradientLaunchTest, BadSeedsAreErrorsBeforeAnythingIsWritten) {
  Interpreter interp;
  Fixture f;
  f.wg.set(0, Scalar::ofFloat(ScalarType::F64, 5.0));
  std::vector<AdjointSeed> unknown = {{"x", 1.0}};
  absl::Status s = launchWithGradient(*f.program, *f.fwd, *f.grad, f.args, unknown, interp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'x' names no adjoint the gradient consumes (it consumes: o, loss)"),
            std::string::npos)
      << s;
  std::vector<AdjointSeed> twice = {{"loss", 1.0}, {"loss", 2.0}};
  s = launchWithGradient(*f.program, *f.fwd, *f.grad, f.args, twice, interp);
  EXPECT_NE(s.message().find("'loss' is given twice"), std::string::npos) << s;
  NdarrayArg noGrad{&f.w};
  std::vector<LaunchArg> args = {LaunchArg::ndarray(&noGrad), f.args[1]};
  std::vector<AdjointSeed> ok = {{"loss", 1.0}};
  s = launchWithGradient(*f.program, *f.fwd, *f.grad, args, ok, interp);
  EXPECT_NE(s.message().find("argument 0 (w) needs a grad buffer for %w.grad"), std::string::npos)
      << s;
  EXPECT_EQ(f.at(f.wg, 0), 5.0); // nothing was written
}

} // namespace
} // namespace qd
