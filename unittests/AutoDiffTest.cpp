//===- AutoDiffTest.cpp - Reverse-mode autodiff against finite differences ===//
//
// Every gradient kernel built here is verified, run on the interpreter after
// its primal kernel, and compared with central finite differences of
// sum(output * seed) over every element of every grad-bearing input
// (AutoDiffHarness.h). This file: the differentiable operations, the
// errors and the random-kernel property; control flow and taping are in
// AutoDiffControlFlowTest.cpp and AutoDiffTapingTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "AutoDiffHarness.h"

namespace qd {
namespace {

using namespace adtest;

//===----------------------------------------------------------------------===//
// Differentiable operations, one kernel each
//===----------------------------------------------------------------------===//

/// y[] += f(x0, x1) for an expression over %a = x[0], %b = x[1].
GradCase binaryCase(const std::string &body, std::vector<double> x) {
  GradCase c;
  c.text = "field @x : f64[2] grad\nfield @y : f64 grad\n"
           "kernel @k() {\n  serial {\n    %i0 = const 0 : i32\n    %i1 = const 1 : i32\n"
           "    %a = load @x[%i0] : f64\n    %b = load @x[%i1] : f64\n" +
           body + "    atomic_add @y[], %r : f64\n  }\n}\n";
  c.init["x"] = std::move(x);
  c.seeds["y"] = {1.5};
  return c;
}

struct OpCase {
  const char *name;
  const char *body;
  std::vector<double> x;
};

class OpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTest, MatchesFiniteDifferences) {
  const OpCase &o = GetParam();
  Grads g = expectGradOk(binaryCase(o.body, o.x));
  // Every op here depends on %a: its gradient is not trivially zero.
  ASSERT_EQ(g.count("x"), 1u);
  EXPECT_NE(g["x"][0], 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    AutoDiffTest, OpTest,
    ::testing::Values(
        OpCase{"add", "    %r = add %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"add_same", "    %r = add %a, %a : f64\n", {0.3, -1.2}},
        OpCase{"sub", "    %r = sub %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"sub_same", "    %t = mul %a, %a : f64\n    %r = sub %t, %a : f64\n", {0.3, 1}},
        OpCase{"mul", "    %r = mul %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"mul_same", "    %r = mul %a, %a : f64\n", {0.7, -1.2}},
        OpCase{"div", "    %r = div %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"div_same", "    %t = sin %a : f64\n    %r = div %t, %a : f64\n", {0.3, 1}},
        OpCase{"neg", "    %t = neg %a : f64\n    %r = mul %t, %b : f64\n", {0.3, -1.2}},
        OpCase{"min_lhs", "    %r = min %a, %b : f64\n", {-2.0, 1.0}},
        OpCase{"min_rhs", "    %r = min %b, %a : f64\n", {-2.0, 1.0}},
        OpCase{"max_lhs", "    %r = max %a, %b : f64\n", {2.0, 1.0}},
        OpCase{"max_rhs", "    %r = max %b, %a : f64\n", {2.0, 1.0}},
        OpCase{"abs_neg", "    %r = abs %a : f64\n", {-0.7, 1}},
        OpCase{"abs_pos", "    %r = abs %a : f64\n", {0.7, 1}},
        OpCase{"select_true",
               "    %p = cmp lt %a, %b : f64\n    %s = sin %a : f64\n"
               "    %r = select %p, %s, %b : f64\n",
               {0.3, 1.2}},
        OpCase{"select_false",
               "    %p = cmp lt %a, %b : f64\n    %s = sin %b : f64\n"
               "    %r = select %p, %s, %a : f64\n",
               {1.3, 1.2}},
        OpCase{"sin", "    %r = sin %a : f64\n", {0.3, 0}},
        OpCase{"cos", "    %r = cos %a : f64\n", {0.3, 0}},
        OpCase{"tan", "    %r = tan %a : f64\n", {0.3, 0}},
        OpCase{"exp", "    %r = exp %a : f64\n", {0.3, 0}},
        OpCase{"log", "    %r = log %a : f64\n", {0.3, 0}},
        OpCase{"sqrt", "    %r = sqrt %a : f64\n", {0.3, 0}},
        OpCase{"tanh", "    %r = tanh %a : f64\n", {0.3, 0}},
        OpCase{"pow", "    %r = pow %a, %b : f64\n", {1.3, 2.5}},
        OpCase{"pow_same", "    %r = pow %a, %a : f64\n", {1.3, 0}},
        OpCase{"pow_int_exponent", "    %r = pow %a, %b : f64\n", {-1.3, 3.0}},
        OpCase{"atan2", "    %r = atan2 %a, %b : f64\n", {0.3, -1.2}},
        OpCase{"atan2_same", "    %t = mul %a, %a : f64\n    %r = atan2 %a, %t : f64\n", {0.3, 0}},
        OpCase{"chain",
               "    %t = mul %a, %b : f64\n    %u = exp %t : f64\n    %v = tanh %u : f64\n"
               "    %w = sqrt %u : f64\n    %s = add %v, %w : f64\n    %r = mul %s, %a : f64\n",
               {0.3, -1.2}}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(AutoDiffTest, PowGradientOfBothOperandsIsExact) {
  // d/da a^b = b a^(b-1) = 2.5 * 1.3^1.5; d/db = a^b log a.
  Grads g = expectGradOk(binaryCase("    %r = pow %a, %b : f64\n", {1.3, 2.5}));
  EXPECT_NEAR(g["x"][0], 1.5 * 2.5 * std::pow(1.3, 1.5), 1e-12);
  EXPECT_NEAR(g["x"][1], 1.5 * std::pow(1.3, 2.5) * std::log(1.3), 1e-12);
}

TEST(AutoDiffTest, F32CastsCarryTheGradientInF32) {
  GradCase c = binaryCase("    %t = cast %a : f64 to f32\n    %u = mul %t, %t : f32\n"
                          "    %r = cast %u : f32 to f64\n",
                          {0.75, 0});
  GradChecker g(c);
  ASSERT_EQ(g.build(), "");
  auto grads = g.gradients();
  ASSERT_TRUE(grads.ok()) << grads.status().message();
  EXPECT_EQ((*grads)["x"][0], 1.5 * 2 * 0.75); // exact in f32
  EXPECT_EQ((*grads)["x"][1], 0.0);
}

TEST(AutoDiffTest, F64ToF32ToF64MatchesFiniteDifferencesInF32Precision) {
  GradCase c = binaryCase("    %t = cast %a : f64 to f32\n    %u = sin %t : f32\n"
                          "    %r = cast %u : f32 to f64\n",
                          {0.5, 0});
  c.step = 1e-2;
  c.rtol = 1e-5;
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"][0], double(1.5f * std::cos(0.5f)));
}

TEST(AutoDiffTest, IntegerCastsStopTheGradient) {
  // y = float(int(a * 10)) + b: d/da is exactly 0 (a stopped gradient, not
  // a finite difference), d/db is 1.
  GradCase c = binaryCase("    %ten = const 10.0 : f64\n    %t = mul %a, %ten : f64\n"
                          "    %n = cast %t : f64 to i32\n    %f = cast %n : i32 to f64\n"
                          "    %r = add %f, %b : f64\n",
                          {0.37, 2});
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"][0], 0.0);
  EXPECT_EQ(g["x"][1], 1.5);
  // Through i64 and i1 too.
  Grads g2 =
      expectGradOk(binaryCase("    %n = cast %a : f64 to i64\n    %f = cast %n : i64 to f64\n"
                              "    %p = cast %b : f64 to i1\n    %q = cast %p : i1 to f64\n"
                              "    %s = add %f, %q : f64\n    %r = mul %s, %b : f64\n",
                              {3.5, 2}));
  EXPECT_EQ(g2["x"][0], 0.0);
  EXPECT_EQ(g2["x"][1], 1.5 * 4); // (3 + 1) * d(b)/db
}

TEST(AutoDiffTest, NdarrayArgumentsWithGradCompanions) {
  GradCase c;
  c.text = R"(
field @y : f64 grad
kernel @k(%a: ndarray<f64, 2> grad, %w: ndarray<f64, 1> grad, %o: ndarray<f64, 1> grad) {
  parallel for %i = 0 to 2 {
    %cols = shape %a, 1 : i32
    %acc = alloca f64
    for %j = 0 to %cols {
      %v = load %a[%i, %j] : f64
      %ww = load %w[%j] : f64
      %p = mul %v, %ww : f64
      %s = sin %p : f64
      %old = load %acc : f64
      %n = add %old, %s : f64
      store %acc, %n
    }
    %r = load %acc : f64
    store %o[%i], %r
    %r2 = mul %r, %r : f64
    atomic_add @y[], %r2 : f64
  }
}
)";
  c.args = {ArgSpec::ndarray({{2, 3}, {0.1, 0.2, 0.3, -0.4, 0.5, 0.6}, {}}),
            ArgSpec::ndarray({{3}, {1.0, -0.5, 0.25}, {}}),
            ArgSpec::ndarray({{2}, {0, 0}, {0.5, -2.0}})};
  c.seeds["y"] = {1.0};
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["%a"].size(), 6u);
  EXPECT_EQ(g["%w"].size(), 3u);
  EXPECT_EQ(g.count("%o"), 0u);
}

TEST(AutoDiffTest, AtomicAddAndStoreOutputs) {
  GradCase c;
  c.text = R"(
field @x : f64[3] grad
field @s : f64 grad
field @z : f64[3] grad
kernel @k() {
  parallel for %i = 0 to 3 {
    %v = load @x[%i] : f64
    %e = exp %v : f64
    atomic_add @s[], %e : f64
    atomic_add @s[], %v : f64
    %t = tanh %v : f64
    store @z[%i], %t
  }
}
)";
  c.init["x"] = {0.1, -0.2, 0.3};
  c.seeds["s"] = {2.0};
  c.seeds["z"] = {1.0, -1.0, 3.0};
  Grads g = expectGradOk(c);
  for (int i = 0; i < 3; ++i) {
    double x = c.init["x"][i], t = std::tanh(x);
    EXPECT_NEAR(g["x"][i], 2.0 * (std::exp(x) + 1) + c.seeds["z"][i] * (1 - t * t), 1e-12);
  }
}

// Only the last store to an element reaches the output: the values stored
// before it, or added to it before it, get no gradient (regression: every
// store used to read the seed).
TEST(AutoDiffTest, OverwrittenOutputsGetNoGradient) {
  GradCase c;
  c.text = R"(
field @x : f64[4] grad
field @z : f64[2] grad
field @w : f64 grad
kernel @k(%o: ndarray<f64, 1> grad) {
  serial {
    %zero = const 0 : i32
    %one = const 1 : i32
    for %j = 0 to 3 {
      %v = load @x[%j] : f64
      %s = sin %v : f64
      store @z[%zero], %s
      store %o[%zero], %v
    }
    %a = load @x[%zero] : f64
    atomic_add @z[%one], %a : f64
    %b = load @x[%one] : f64
    %e = exp %b : f64
    store @z[%one], %e
    %three = const 3 : i32
    %d = load @x[%three] : f64
    store @w[], %d
    %c = const 2.0 : f64
    store @w[], %c
  }
}
)";
  c.args = {ArgSpec::ndarray({{1}, {0}, {3.0}})};
  c.init["x"] = {0.1, 0.2, 0.3, 0.4};
  c.seeds["z"] = {1.0, 10.0};
  c.seeds["w"] = {100.0};
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"], (std::vector<double>{0, 10 * std::exp(0.2), std::cos(0.3) + 3, 0}));
}

TEST(AutoDiffTest, LaunchTimeIntegerStatementsAndScalarArguments) {
  GradCase c;
  c.text = R"(
field @x : f64[4] grad
field @y : f64 grad
kernel @k(%n: i32, %scale: f64) {
  %m = sub %n, %n : i32
  parallel for %i = %m to %n {
    %v = load @x[%i] : f64
    %w = mul %v, %scale : f64
    %c = cos %w : f64
    atomic_add @y[], %c : f64
  }
}
)";
  c.args = {ArgSpec::i32(3), ArgSpec::f64(0.7)};
  c.init["x"] = {0.1, 0.2, 0.3, 0.4};
  c.seeds["y"] = {1.0};
  Grads g = expectGradOk(c);
  EXPECT_EQ(g["x"][3], 0.0); // outside the range
  EXPECT_NEAR(g["x"][0], -std::sin(0.07) * 0.7, 1e-12);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(AutoDiffTest, NonDifferentiableOpsNameTheStatement) {
  std::string floorK = R"(field @x : f64[2] grad
field @y : f64 grad
kernel @k() {
  serial {
    %i = const 0 : i32
    %a = load @x[%i] : f64
    %f = floor %a : f64
    atomic_add @y[], %f : f64
  }
}
)";
  EXPECT_EQ(buildError(floorK),
            "t.qd:7:5: error: reverse-ad: 'floor' is not differentiable; cast the value to an "
            "integer to stop its gradient explicitly (in kernel @k: %f = floor %a : f64)");
  std::string ceilK = floorK;
  ceilK.replace(ceilK.find("floor"), 5, "ceil");
  EXPECT_EQ(buildError(ceilK),
            "t.qd:7:5: error: reverse-ad: 'ceil' is not differentiable; cast the value to an "
            "integer to stop its gradient explicitly (in kernel @k: %f = ceil %a : f64)");
  std::string remK = floorK;
  remK.replace(remK.find("floor %a"), 8, "rem %a, %a");
  EXPECT_EQ(buildError(remK),
            "t.qd:7:5: error: reverse-ad: 'rem' is not differentiable; compute it from values "
            "without a gradient (in kernel @k: %f = rem %a, %a : f64)");
  // Off the differentiated path, floor is fine.
  std::string inactive = floorK;
  inactive.replace(inactive.find("atomic_add @y[], %f"), 19, "atomic_add @y[], %a");
  EXPECT_EQ(buildError(inactive), "<no error>");
}

TEST(AutoDiffTest, KernelWithAdStacksIsRejected) {
  EXPECT_EQ(buildError(R"(field @y : f64 grad
kernel @k() {
  serial {
    %s = adstack.alloca f64, capacity 4
    %one = const 1.0 : f64
    adstack.push %s, %one
    %t = adstack.load_top %s : f64
    atomic_add @y[], %t : f64
    adstack.pop %s
  }
}
)"),
            "t.qd:4:5: error: reverse-ad: the kernel already uses adstacks; differentiate the "
            "kernel before adding them (in kernel @k: %s = adstack.alloca f64, capacity 4)");
}

TEST(AutoDiffTest, NameClashIsAnError) {
  std::string text = "kernel @k() {\n}\nkernel @k_grad() {\n}\n";
  EXPECT_EQ(buildError(text), "reverse-ad: the module already has a kernel named '@k_grad'; "
                              "remove it or pick another name");
  auto m = parseModule(text);
  ASSERT_TRUE(m.ok());
  auto g = buildGradientKernel(**m, *(*m)->findKernel("k"), "k_adj");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)->name(), "k_adj");
  EXPECT_EQ(buildGradientKernel(**m, *(*m)->findKernel("k"), "k_adj").status().code(),
            absl::StatusCode::kAlreadyExists);
}

//===----------------------------------------------------------------------===//
// Property: random kernels against finite differences
//===----------------------------------------------------------------------===//

/// The gradient check of a generated program (GenConfig::autodiff): every
/// field and ndarray output gets a seed, every grad-bearing input (@x, %u)
/// is checked element by element.
GradCase gradCaseOf(const testgen::GenProgram &p, const std::string &text, const Module &m) {
  GradCase c;
  c.text = text;
  if (m.findField("x"))
    c.init["x"] = testgen::xValues(p);
  if (m.findField("cnt"))
    for (int64_t v : testgen::cntValues(p))
      c.init["cnt"].push_back(double(v));
  if (m.findField("bit"))
    for (int64_t v : testgen::bitValues(p))
      c.init["bit"].push_back(double(v));
  if (m.findField("y"))
    c.seeds["y"] = {1.0};
  for (int l = 0; l < 3; ++l)
    if (const Field *f = m.findField(fmt::format("z{}", l)))
      for (int64_t i = 0; i < f->numElements(); ++i)
        c.seeds[f->name()].push_back(0.5 + l - 0.25 * double(i));
  const Kernel *k = m.findKernel("k");
  auto doubles = [](const std::vector<int64_t> &v) {
    return std::vector<double>(v.begin(), v.end());
  };
  for (unsigned i = 0; i < k->numArguments(); ++i) {
    const std::string &name = k->argument(i)->name();
    if (name == "n")
      c.args.push_back(ArgSpec::i32(int32_t(testgen::nValue(p))));
    else if (name == "s")
      c.args.push_back(ArgSpec::f64(testgen::sValue(p)));
    else if (name == "a")
      c.args.push_back(ArgSpec::ndarray({testgen::aShape(p), doubles(testgen::aValues(p)), {}}));
    else if (name == "m")
      c.args.push_back(ArgSpec::ndarray({testgen::mShape(p), doubles(testgen::mValues(p)), {}}));
    else if (name == "u")
      c.args.push_back(ArgSpec::ndarray({testgen::uShape(p), testgen::uValues(p), {}}));
    else { // %w: an output
      NdSpec w{testgen::wShape(p), {}, {}};
      for (int64_t j = 0; j < w.shape[0]; ++j)
        w.seed.push_back(0.75 - 0.5 * double(j));
      c.args.push_back(ArgSpec::ndarray(w));
    }
  }
  // The sizing default (256) is for real programs; nested loops inside
  // while loops may go deeper here.
  c.options.defaultAdStackCapacity = int64_t(1) << 16;
  c.skipNonSmooth = true;
  c.rtol = 1e-5;
  c.atol = 1e-7;
  return c;
}

// Random f64 kernels (every differentiable operation in a bounded form,
// loop-carried float and integer locals, nested loops with dynamic bounds,
// while loops, breaks and continues, data-dependent ifs, several tasks,
// field and ndarray inputs and outputs): reverse-mode gradients agree with
// Richardson-extrapolated central differences, and forward mode agrees with
// reverse mode on every input element.
QD_PROPERTY(AutoDiffTest, RandomKernelsMatchFiniteDifferences, 150) {
  testgen::GenProgram p = *testgen::genProgram(testgen::GenConfig::autodiff());
  testgen::Printed printed = testgen::print(p);
  auto m = parseModule(printed.text, {"t.qd", 1});
  if (!m.ok())
    testgen::fail(p, "does not parse: " + std::string(m.status().message()));
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasFor, "for");
  RC_CLASSIFY(printed.hasJump, "break/continue");
  GradCase c = gradCaseOf(p, printed.text, **m);
  GradCase recompute = c;
  recompute.reverse.tapeNestedLoops = false;
  GradCase noFactors = c;
  noFactors.reverse.tapeFactors = !c.reverse.tapeFactors;
  GradChecker g(std::move(c));
  Grads taped;
  std::string err = g.check(&taped);
  RC_CLASSIFY(g.skipped() > 0, "non-smooth elements skipped");
  if (!err.empty())
    testgen::fail(p, err);
  // Taping nested loops, or derivative factors, changes what is stored,
  // not the gradient.
  auto sameGradients = [&](GradCase variant, const std::string &what) {
    GradChecker v(std::move(variant));
    Grads grads;
    if (std::string e = v.check(&grads); !e.empty())
      testgen::fail(p, "(" + what + ") " + e);
    if (std::string d = compareGrads(taped, grads); !d.empty())
      testgen::fail(p, "the gradients change with " + what + ":\n" + d);
  };
  sameGradients(std::move(recompute), "nested loops recomputed");
  sameGradients(std::move(noFactors), "derivative factors taped or not, the other way");
}

} // namespace
} // namespace qd
