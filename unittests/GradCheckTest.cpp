//===- GradCheckTest.cpp - The gradient checker ---------------------------===//
//
// Every passing check here also asserts the derivatives themselves against
// closed forms (times the report's weights), and every failing one asserts
// which mode disagrees where: a checker that always says PASS, or that
// compares a value with itself, fails these tests.
//
//===----------------------------------------------------------------------===//
#include "qd/check/GradCheck.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Visitor.h"
#include "qd/runtime/CpuBackend.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qd {
namespace {

std::unique_ptr<Module> parse(const std::string &text) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *std::move(m) : nullptr;
}

/// The entries of `report` for `input`, by element name (`@x[2]`).
std::map<std::string, GradCheckEntry> entriesOf(const GradCheckReport &report,
                                                const std::string &input) {
  std::map<std::string, GradCheckEntry> out;
  for (const GradCheckEntry &e : report.entries)
    if (e.input == input)
      out[e.name()] = e;
  return out;
}

/// first, first + step, ... (n values).
std::vector<double> ramp(size_t n, double first, double step) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = first + step * double(i);
  return out;
}

/// Expects reverse, forward and finite differences at `e` to be `expected`
/// within the relative tolerances given.
void expectDerivative(const GradCheckEntry &e, double expected, double modeTol, double fdTol) {
  SCOPED_TRACE(e.name());
  EXPECT_TRUE(e.ok());
  EXPECT_TRUE(e.fdReliable);
  EXPECT_NEAR(e.reverse, expected, modeTol * std::abs(expected));
  EXPECT_NEAR(e.forward, expected, modeTol * std::abs(expected));
  EXPECT_NEAR(e.finiteDifference, expected, fdTol * std::abs(expected));
}

//===----------------------------------------------------------------------===//
// Passing checks, with the derivatives asserted
//===----------------------------------------------------------------------===//

// y = sum_i sum_{j<3} sin(x_i) exp(x_i j / 2).
constexpr const char *kSmooth = R"(field @x : f64[4]
field @y : f64
kernel @k() {
  parallel for %i = 0 to 4 {
    %v = load @x[%i] : f64
    %acc = alloca f64
    for %j = 0 to 3 {
      %jf = cast %j : i32 to f64
      %half = const 0.5 : f64
      %t = mul %jf, %half : f64
      %xt = mul %v, %t : f64
      %e = exp %xt : f64
      %s = sin %v : f64
      %term = mul %s, %e : f64
      %old = load %acc : f64
      %new = add %old, %term : f64
      store %acc, %new
    }
    %r = load %acc : f64
    atomic_add @y[], %r : f64
  }
}
)";

double smoothDerivative(double x) {
  double d = 0;
  for (int j = 0; j < 3; ++j) {
    double t = j * 0.5;
    d += (std::cos(x) + t * std::sin(x)) * std::exp(x * t);
  }
  return d;
}

GradCheckInputs smoothInputs() {
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({4}, {0.3, -0.7, 1.1, 2.0});
  return in;
}

TEST(GradCheckTest, SmoothKernelWithALoopPasses) {
  auto m = parse(kSmooth);
  ASSERT_NE(m, nullptr);
  auto r = checkGradient(*m, "k", smoothInputs());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  EXPECT_EQ(r->precision, ScalarType::F64);
  EXPECT_EQ(r->backend, "interp");
  EXPECT_EQ(r->rtol, 1e-6);
  EXPECT_EQ(r->atol, 1e-9);
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].name, "@y");
  ASSERT_EQ(r->outputs[0].weights.size(), 1u);
  double w = r->outputs[0].weights[0];
  EXPECT_GE(std::abs(w), 0.5);
  EXPECT_LT(std::abs(w), 1.5);
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].name, "@x");
  EXPECT_EQ(r->inputs[0].checked, 4);
  ASSERT_EQ(r->entries.size(), 4u);
  std::vector<double> x = {0.3, -0.7, 1.1, 2.0};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r->entries[i].index, std::vector<int64_t>{int64_t(i)});
    // Both modes in f64 to rounding; Richardson's O(h^4) to about 1e-10.
    expectDerivative(r->entries[i], w * smoothDerivative(x[i]), 1e-13, 1e-9);
  }
  EXPECT_LT(r->worstReverseError, 1e-9);
  EXPECT_LT(r->worstForwardError, 1e-9);
  EXPECT_EQ(r->failures, 0);
  EXPECT_EQ(r->unreliable, 0);
  EXPECT_EQ(r->primalDifference, 0); // an f64 kernel is its own f64 copy
}

TEST(GradCheckTest, ResultsAreReproducibleAndTheSeedPicksTheWeights) {
  auto m = parse(kSmooth);
  ASSERT_NE(m, nullptr);
  auto a = checkGradient(*m, "k", smoothInputs());
  auto b = checkGradient(*m, "k", smoothInputs());
  GradCheckOptions other;
  other.seed = 12345;
  auto c = checkGradient(*m, "k", smoothInputs(), other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->outputs[0].weights, b->outputs[0].weights);
  for (size_t i = 0; i < a->entries.size(); ++i) {
    EXPECT_EQ(a->entries[i].reverse, b->entries[i].reverse);
    EXPECT_EQ(a->entries[i].finiteDifference, b->entries[i].finiteDifference);
  }
  EXPECT_NE(a->outputs[0].weights, c->outputs[0].weights);
  EXPECT_TRUE(c->passed);
  // J is linear in the weights.
  double ratio = c->outputs[0].weights[0] / a->outputs[0].weights[0];
  EXPECT_NEAR(c->entries[2].reverse, ratio * a->entries[2].reverse,
              1e-14 * std::abs(c->entries[2].reverse));
}

TEST(GradCheckTest, LoopCarriedValueWithAnAdstackInF32) {
  // The main job's kernel (f32): v = sin(v) + 0.1, n times, with n read
  // from a field; the gradient needs an adstack for v.
  auto text = readTextFile(std::string(QD_SOURCE_DIR) + "/examples/kernels/sin_loop.qd");
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto m = parse(*text);
  ASSERT_NE(m, nullptr);
  GradCheckInputs in;
  std::vector<double> x = ramp(16, -2.5, 0.375);
  in.fields["x"] = GradCheckValue::array({16}, x);
  in.fields["n"] = GradCheckValue::integers({}, {5});
  GradCheckOptions o;
  int stacks = 0;
  o.editGradient = [&](Module &, Kernel &grad) {
    walk(grad, [&](Stmt &s) { stacks += isa<AdStackAllocaStmt>(&s); });
    return absl::OkStatus();
  };
  auto r = checkGradient(*m, "compute", in, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  EXPECT_EQ(stacks, 1);
  EXPECT_EQ(r->precision, ScalarType::F32);
  EXPECT_EQ(r->rtol, 1e-3);
  EXPECT_EQ(r->atol, 1e-5);
  double w = r->outputs[0].weights[0];
  ASSERT_EQ(r->entries.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    // d/dx of five steps of v = sin(v) + 0.1f: the product of cos(v_k),
    // in double from the f32 input (0.1f as the constant, as the f64 copy
    // of the kernel has it).
    double v = static_cast<float>(x[i]), d = 1;
    for (int k = 0; k < 5; ++k) {
      d *= std::cos(v);
      v = std::sin(v) + static_cast<double>(0.1f);
    }
    const GradCheckEntry &e = r->entries[i];
    SCOPED_TRACE(e.name());
    // The modes compute in f32; the differences of the f64 copy are exact
    // to about 1e-11, far below f32 rounding (differences of the f32
    // kernel would be off by about 1e-4): they were not taken in f32. The
    // error estimate is conservative (the one-sided estimates' O(h^3)).
    EXPECT_NEAR(e.reverse, w * d, 1e-5 * std::abs(w * d));
    EXPECT_NEAR(e.forward, w * d, 1e-5 * std::abs(w * d));
    EXPECT_NEAR(e.finiteDifference, w * d, 1e-10 * std::abs(w * d));
    EXPECT_LT(e.fdError, 1e-7 * std::abs(w * d));
    EXPECT_TRUE(e.ok());
  }
  // f32 outputs against the f64 copy's: rounding only.
  EXPECT_GT(r->primalDifference, 0);
  EXPECT_LT(r->primalDifference, 1e-5);
}

// o[i] = sin(a[i] * s) for i < n.
constexpr const char *kArgs =
    R"(kernel @k(%a: ndarray<f64, 1>, %s: f64, %o: ndarray<f64, 1>, %n: i32) {
  parallel for %i = 0 to %n {
    %v = load %a[%i] : f64
    %p = mul %v, %s : f64
    %q = sin %p : f64
    store %o[%i], %q
  }
}
)";

TEST(GradCheckTest, NdarrayAndScalarArgumentInputs) {
  auto m = parse(kArgs);
  ASSERT_NE(m, nullptr);
  GradCheckInputs in;
  std::vector<double> a = {0.5, -1.25, 2.0};
  double s = 0.75;
  in.args["a"] = GradCheckValue::array({3}, a);
  in.args["s"] = GradCheckValue::scalar(s);
  in.args["o"] = GradCheckValue::array({3}, {0, 0, 0});
  in.args["n"] = GradCheckValue::integer(3);
  auto r = checkGradient(*m, "k", in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  ASSERT_EQ(r->inputs.size(), 2u);
  EXPECT_EQ(r->inputs[0].name, "%a");
  EXPECT_EQ(r->inputs[1].name, "%s");
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].name, "%o");
  const std::vector<double> &w = r->outputs[0].weights;
  ASSERT_EQ(w.size(), 3u);
  auto ea = entriesOf(*r, "%a");
  ASSERT_EQ(ea.size(), 3u);
  double ds = 0;
  for (size_t i = 0; i < 3; ++i) {
    expectDerivative(ea["%a[" + std::to_string(i) + "]"], w[i] * s * std::cos(a[i] * s), 1e-13,
                     1e-9);
    ds += w[i] * a[i] * std::cos(a[i] * s);
  }
  auto es = entriesOf(*r, "%s");
  ASSERT_EQ(es.size(), 1u);
  expectDerivative(es["%s"], ds, 1e-13, 1e-9);
  // The caller's module is untouched: no companions, no new kernels.
  EXPECT_EQ(m->kernels().size(), 1u);
  EXPECT_FALSE(m->findKernel("k")->argument(0)->hasGrad());
  EXPECT_TRUE(m->fields().empty());
}

TEST(GradCheckTest, AGlobalBothReadAndWrittenIsAnInputAndAnOutput) {
  // x[1] = sin(x[0]): J = w0 x0 + w1 sin(x0), so dJ/dx0 = w0 + w1 cos(x0),
  // and dJ/dx1 = 0 (its initial value is overwritten).
  auto m = parse(R"(field @x : f64[2]
kernel @k() {
  serial {
    %z = const 0 : i32
    %one = const 1 : i32
    %v = load @x[%z] : f64
    %s = sin %v : f64
    store @x[%one], %s
  }
}
)");
  ASSERT_NE(m, nullptr);
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({2}, {0.4, 3.0});
  auto r = checkGradient(*m, "k", in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  ASSERT_EQ(r->outputs.size(), 1u);
  const std::vector<double> &w = r->outputs[0].weights;
  auto e = entriesOf(*r, "@x");
  expectDerivative(e["@x[0]"], w[0] + w[1] * std::cos(0.4), 1e-13, 1e-9);
  EXPECT_EQ(e["@x[1]"].reverse, 0.0);
  EXPECT_EQ(e["@x[1]"].forward, 0.0);
  EXPECT_EQ(e["@x[1]"].finiteDifference, 0.0); // the outputs do not move at all
  EXPECT_TRUE(e["@x[1]"].ok());
}

/// A serial kernel over %a = x[0] and %b = x[1] of field @x : f64[2], with
/// the f64 fields `outputs` declared.
std::unique_ptr<Module> overTwoInputs(const std::vector<std::string> &outputs,
                                      const std::string &body) {
  std::string text = "field @x : f64[2]\n";
  for (const std::string &o : outputs)
    text += "field @" + o + " : f64\n";
  return parse(text +
               "kernel @k() {\n  serial {\n    %z0 = const 0 : i32\n"
               "    %z1 = const 1 : i32\n    %a = load @x[%z0] : f64\n"
               "    %b = load @x[%z1] : f64\n" +
               body + "  }\n}\n");
}

TEST(GradCheckTest, WrtAndOutputsRestrictTheCheck) {
  auto m = overTwoInputs({"y", "z"}, "    %p = mul %a, %b : f64\n    store @y[], %p\n"
                                     "    %e = exp %a : f64\n    store @z[], %e\n");
  ASSERT_NE(m, nullptr);
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({2}, {0.5, 2.0});
  GradCheckOptions o;
  o.outputs = {"z"};
  o.wrt = {"@x"};
  auto r = checkGradient(*m, "k", in, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed);
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].name, "@z");
  double w = r->outputs[0].weights[0];
  auto e = entriesOf(*r, "@x");
  expectDerivative(e["@x[0]"], w * std::exp(0.5), 1e-13, 1e-9); // not + w_y * b
  EXPECT_EQ(e["@x[1]"].reverse, 0.0);
}

TEST(GradCheckTest, LargeInputsAreSampledAndGetADirectionalCheck) {
  std::string text = R"(field @x : f64[100]
field @y : f64
kernel @k() {
  parallel for %i = 0 to 100 {
    %v = load @x[%i] : f64
    %s = sin %v : f64
    %p = mul %s, %v : f64
    atomic_add @y[], %p : f64
  }
}
)";
  auto m = parse(text);
  ASSERT_NE(m, nullptr);
  GradCheckInputs in;
  std::vector<double> x = ramp(100, -1, 0.03);
  in.fields["x"] = GradCheckValue::array({100}, x);
  GradCheckOptions o;
  o.maxElements = 5;
  auto r = checkGradient(*m, "k", in, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  ASSERT_EQ(r->entries.size(), 6u);
  EXPECT_EQ(r->inputs[0].checked, 5);
  EXPECT_EQ(r->inputs[0].elements, 100);
  EXPECT_EQ(r->entries.front().index, std::vector<int64_t>{0});
  EXPECT_EQ(r->entries[4].index, std::vector<int64_t>{99});
  double w = r->outputs[0].weights[0];
  for (size_t i = 0; i < 5; ++i) {
    double xi = x[static_cast<size_t>(r->entries[i].index[0])];
    expectDerivative(r->entries[i], w * (std::cos(xi) * xi + std::sin(xi)), 1e-13, 1e-9);
  }
  // The reverse gradient of every element, checked or not.
  ASSERT_EQ(r->inputs[0].gradient.size(), 100u);
  for (size_t i = 0; i < 100; ++i)
    EXPECT_NEAR(r->inputs[0].gradient[i], w * (std::cos(x[i]) * x[i] + std::sin(x[i])), 1e-13) << i;
  const GradCheckEntry &d = r->entries.back();
  EXPECT_TRUE(d.direction);
  EXPECT_EQ(d.name(), "@x . v");
  EXPECT_TRUE(d.ok());
  EXPECT_TRUE(d.fdReliable);
  EXPECT_NEAR(d.forward, d.reverse, 1e-12 * std::abs(d.reverse));
  EXPECT_NEAR(d.finiteDifference, d.reverse, 1e-8 * std::abs(d.reverse));
}

TEST(GradCheckTest, AKinkIsNotComparedButTheModesMustStillAgree) {
  // y = |x0| + x1^2 at x0 = 0: the differences straddle the kink.
  auto m = overTwoInputs({"y"}, "    %abs = abs %a : f64\n    %sq = mul %b, %b : f64\n"
                                "    %r = add %abs, %sq : f64\n    store @y[], %r\n");
  ASSERT_NE(m, nullptr);
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({2}, {0.0, 1.5});
  auto r = checkGradient(*m, "k", in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto e = entriesOf(*r, "@x");
  EXPECT_FALSE(e["@x[0]"].fdReliable);
  EXPECT_TRUE(e["@x[0]"].modesAgree);
  EXPECT_TRUE(std::isnan(e["@x[0]"].reverseError));
  EXPECT_TRUE(e["@x[1]"].fdReliable);
  EXPECT_EQ(r->unreliable, 1);
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  EXPECT_NE(formatGradCheckReport(*r).find("@x[0]"), std::string::npos);
  EXPECT_NE(formatGradCheckReport(*r).find("not smooth"), std::string::npos);
}

TEST(GradCheckTest, TheCpuBackendGivesTheInterpretersDerivatives) {
  auto m = parse(kSmooth);
  ASSERT_NE(m, nullptr);
  auto cpu = CpuBackend::create();
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  GradCheckOptions o;
  o.backend = cpu->get();
  auto c = checkGradient(*m, "k", smoothInputs(), o);
  auto i = checkGradient(*m, "k", smoothInputs());
  ASSERT_TRUE(c.ok() && i.ok());
  EXPECT_TRUE(c->passed) << formatGradCheckReport(*c, true);
  EXPECT_EQ(c->backend, "cpu");
  for (size_t k = 0; k < i->entries.size(); ++k) {
    EXPECT_NEAR(c->entries[k].reverse, i->entries[k].reverse, 1e-13);
    EXPECT_NEAR(c->entries[k].forward, i->entries[k].forward, 1e-13);
  }
}

//===----------------------------------------------------------------------===//
// Broken derivatives are caught
//===----------------------------------------------------------------------===//

// (The grad companions are for a gradient kernel written by hand; the
// checker adds the companions it needs itself.)
constexpr const char *kSin = R"(field @x : f64[3] grad
field @y : f64 grad
kernel @k() {
  parallel for %i = 0 to 3 {
    %v = load @x[%i] : f64
    %s = sin %v : f64
    atomic_add @y[], %s : f64
  }
}
)";

GradCheckInputs sinInputs() {
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({3}, {0.2, 1.0, 2.5});
  return in;
}

/// Replaces every `cos` of `k` with what `make` builds from its operand;
/// returns how many it replaced.
int replaceCos(Kernel &k, const std::function<Value *(IRBuilder &, Value *)> &make) {
  std::vector<UnaryStmt *> found;
  walk(k, [&](Stmt &s) {
    if (auto *u = dyn_cast<UnaryStmt>(&s); u && u->op() == UnaryOp::Cos)
      found.push_back(u);
  });
  for (UnaryStmt *u : found) {
    IRBuilder b = IRBuilder::before(*u);
    u->replaceAndErase(make(b, u->input()));
  }
  return static_cast<int>(found.size());
}

/// The check of kSin with every cos of its gradient kernel (or its dual
/// kernel) replaced by what `make` builds from its operand.
GradCheckReport checkWithCosReplaced(bool inGradient,
                                     const std::function<Value *(IRBuilder &, Value *)> &make) {
  auto m = parse(kSin);
  EXPECT_NE(m, nullptr);
  GradCheckOptions o;
  int replaced = 0;
  (inGradient ? o.editGradient : o.editDual) = [&](Module &, Kernel &k) {
    replaced = replaceCos(k, make);
    return absl::OkStatus();
  };
  absl::StatusOr<GradCheckReport> r = absl::InternalError("no module");
  if (m)
    r = checkGradient(*m, "k", sinInputs(), o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(replaced, 1);
  return r.ok() ? *std::move(r) : GradCheckReport{};
}

TEST(GradCheckTest, AWrongReverseRuleIsReportedAtEveryElement) {
  // The reverse rule of sin made to use sin instead of cos.
  GradCheckReport r = checkWithCosReplaced(true, [](IRBuilder &b, Value *x) { return b.sin(x); });
  ASSERT_EQ(r.entries.size(), 3u);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.failures, 3);
  EXPECT_EQ(r.verdict.rfind("FAIL: 3 of 3 derivatives disagree", 0), 0u) << r.verdict;
  double w = r.outputs[0].weights[0];
  std::vector<double> x = {0.2, 1.0, 2.5};
  for (size_t i = 0; i < 3; ++i) {
    const GradCheckEntry &e = r.entries[i];
    EXPECT_NEAR(e.reverse, w * std::sin(x[i]), 1e-14);         // the broken rule
    EXPECT_NEAR(e.forward, w * std::cos(x[i]), 1e-14);         // untouched
    EXPECT_NEAR(e.finiteDifference, w * std::cos(x[i]), 1e-9); // the truth
    EXPECT_FALSE(e.reverseAgrees);
    EXPECT_TRUE(e.forwardAgrees);
    EXPECT_FALSE(e.modesAgree);
  }
  EXPECT_GT(r.worstReverseError, 0.1);
  EXPECT_LT(r.worstForwardError, 1e-9);
  std::string text = formatGradCheckReport(r);
  EXPECT_NE(text.find("@x (f64[3]): 3 of 3 elements checked, 3 DISAGREE"), std::string::npos)
      << text;
  EXPECT_NE(text.find("@x[1]"), std::string::npos) << text;
  EXPECT_NE(text.find("DISAGREE (reverse vs finite differences)"), std::string::npos) << text;
}

TEST(GradCheckTest, AWrongForwardRuleIsReported) {
  // The tangent rule of sin with its sign flipped.
  GradCheckReport r =
      checkWithCosReplaced(false, [](IRBuilder &b, Value *x) { return b.neg(b.cos(x)); });
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_FALSE(r.passed);
  for (const GradCheckEntry &e : r.entries) {
    EXPECT_TRUE(e.reverseAgrees) << e.name();
    EXPECT_FALSE(e.forwardAgrees) << e.name();
    EXPECT_NEAR(e.forward, -e.reverse, 1e-14);
  }
  EXPECT_NE(formatGradCheckReport(r).find("DISAGREE (forward vs finite differences)"),
            std::string::npos);
}

TEST(GradCheckTest, AnEditHookErrorOrInvalidEditIsReported) {
  auto m = parse(kSin);
  ASSERT_NE(m, nullptr);
  GradCheckOptions o;
  o.editGradient = [](Module &, Kernel &) { return absl::InternalError("hook says no"); };
  auto r = checkGradient(*m, "k", sinInputs(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "hook says no");
  o.editGradient = [](Module &, Kernel &grad) {
    // An add of an f64 and an i32: invalid.
    IRBuilder b(grad);
    b.insert(std::make_unique<BinaryStmt>(BinaryOp::Add, b.f64(1.0), b.i32(1), Type::f64()));
    return absl::OkStatus();
  };
  r = checkGradient(*m, "k", sinInputs(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not verify after editGradient/editDual"),
            std::string::npos)
      << r.status().message();
}

// kSin with a gradient kernel written by hand, right or wrong.
std::string withHandWrittenGradient(const std::string &partial) {
  return std::string(kSin) + "kernel @k_by_hand() {\n  parallel for %i = 0 to 3 {\n" +
         "    %v = load @x[%i] : f64\n    %d = " + partial + " %v : f64\n" +
         "    %g = load @y.grad[] : f64\n    %p = mul %g, %d : f64\n" +
         "    atomic_add @x.grad[%i], %p : f64\n  }\n}\n";
}

TEST(GradCheckTest, AGivenGradientKernelIsChecked) {
  GradCheckOptions o;
  o.gradientKernel = "k_by_hand";
  auto right = parse(withHandWrittenGradient("cos"));
  ASSERT_NE(right, nullptr);
  auto r = checkGradient(*right, "k", sinInputs(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->passed) << formatGradCheckReport(*r, true);
  double w = r->outputs[0].weights[0];
  expectDerivative(r->entries[1], w * std::cos(1.0), 1e-14, 1e-9);

  auto wrong = parse(withHandWrittenGradient("sin"));
  ASSERT_NE(wrong, nullptr);
  r = checkGradient(*wrong, "k", sinInputs(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->passed);
  EXPECT_EQ(r->failures, 3);
  for (const GradCheckEntry &e : r->entries) {
    EXPECT_FALSE(e.reverseAgrees);
    EXPECT_TRUE(e.forwardAgrees);
  }
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

std::string errorOf(const std::string &text, const std::string &kernel, GradCheckInputs in,
                    GradCheckOptions o = {}) {
  auto m = parse(text);
  if (!m)
    return "<parse error>";
  auto r = checkGradient(*m, kernel, in, o);
  return r.ok() ? "<no error>" : std::string(r.status().message());
}

TEST(GradCheckTest, UnknownKernel) {
  auto m = parse(kSin);
  ASSERT_NE(m, nullptr);
  auto r = checkGradient(*m, "nope", sinInputs());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no kernel named '@nope' in the module (kernels: @k)");
  GradCheckOptions o;
  o.gradientKernel = "k_grad";
  EXPECT_EQ(errorOf(kSin, "k", sinInputs(), o),
            "no gradient kernel named '@k_grad' in the module (kernels: @k)");
}

TEST(GradCheckTest, KernelsWithoutFloatInputsOrOutputs) {
  EXPECT_EQ(errorOf(R"(field @y : f64
kernel @k() {
  serial {
    %c = const 2.0 : f64
    store @y[], %c
  }
}
)",
                    "k", {}),
            "@k reads no float field, ndarray or scalar argument: there is nothing to "
            "differentiate with respect to");
  EXPECT_EQ(errorOf(R"(field @x : f64
field @n : i32
kernel @k() {
  serial {
    %v = load @x[] : f64
    %i = cast %v : f64 to i32
    store @n[], %i
  }
}
)",
                    "k", {}),
            "@k writes no float field or ndarray: it has no output to differentiate");
}

TEST(GradCheckTest, NonDifferentiableKernel) {
  std::string e = errorOf(R"(field @x : f64
field @y : f64
kernel @k() {
  serial {
    %v = load @x[] : f64
    %f = floor %v : f64
    store @y[], %f
  }
}
)",
                          "k", {});
  EXPECT_NE(e.find("t.qd:6:5: error: reverse-ad: 'floor' is not differentiable"), std::string::npos)
      << e;
}

TEST(GradCheckTest, UnknownOrUnsuitableNames) {
  GradCheckOptions o;
  o.wrt = {"q"};
  EXPECT_EQ(errorOf(kSin, "k", sinInputs(), o),
            "@k has no field or argument named 'q' (the inputs are: @x)");
  o.wrt = {"y"};
  EXPECT_EQ(errorOf(kSin, "k", sinInputs(), o),
            "@y is not an input of @k: the kernel never reads it (the inputs are: @x)");
  o.wrt = {};
  o.outputs = {"x"};
  EXPECT_EQ(errorOf(kSin, "k", sinInputs(), o),
            "@x is not an output of @k: the kernel never stores or atomically adds to it (the "
            "outputs are: @y)");
  GradCheckOptions n;
  n.wrt = {"%n"};
  GradCheckInputs in;
  in.args = {{"a", GradCheckValue::array({3}, {1, 2, 3})},
             {"s", GradCheckValue::scalar(1)},
             {"o", GradCheckValue::array({3}, {0, 0, 0})},
             {"n", GradCheckValue::integer(3)}};
  EXPECT_EQ(errorOf(kArgs, "k", in, n),
            "%n is i32: only float arguments have derivatives (the inputs are: %a, %s)");
}

TEST(GradCheckTest, MissingOrMisshapenValues) {
  GradCheckInputs in;
  in.args = {{"a", GradCheckValue::array({3}, {1, 2, 3})},
             {"o", GradCheckValue::array({3}, {0, 0, 0})},
             {"n", GradCheckValue::integer(3)}};
  EXPECT_EQ(errorOf(kArgs, "k", in), "argument %s (f64) of @k has no value");
  in.args["s"] = GradCheckValue::array({1}, {1});
  EXPECT_EQ(errorOf(kArgs, "k", in), "argument %s is f64, but its value has shape [1]");
  in.args["s"] = GradCheckValue::scalar(1);
  in.args["n"] = GradCheckValue::scalar(2.5);
  EXPECT_EQ(errorOf(kArgs, "k", in), "argument %n is i32 but the value 2.5 is not an integer");
  GradCheckInputs f;
  f.fields["x"] = GradCheckValue::array({2}, {1, 2});
  EXPECT_EQ(errorOf(kSin, "k", f), "field @x has shape [3], but its value has shape [2]");
}

TEST(GradCheckTest, AKernelBreakingTheGlobalAccessRule) {
  std::string e = errorOf(R"(field @x : f64[2]
kernel @k() {
  parallel for %i = 0 to 2 {
    %v = load @x[%i] : f64
    %d = mul %v, %v : f64
    store @x[%i], %d
  }
}
)",
                          "k", {});
  EXPECT_NE(e.find("t.qd:6:5: error: @x[0] is written here after it was read at t.qd:4:5"),
            std::string::npos)
      << e;
}

TEST(GradCheckTest, AScalarArgumentUsedAtLaunchTime) {
  std::string e = errorOf(R"(field @y : f64[2]
kernel @k(%s: f64) {
  %c = const 2.0 : f64
  %h = mul %s, %c : f64
  parallel for %i = 0 to 2 {
    %q = sin %h : f64
    store @y[%i], %q
  }
}
)",
                          "k", {{}, {{"s", GradCheckValue::scalar(0.5)}}});
  EXPECT_EQ(
      e, "t.qd:4:3: error: scalar argument %s of @k is used by the launch-time float computation "
         "'%h = mul %s, %c : f64' at the kernel's top level, which reverse mode cannot "
         "differentiate; compute it inside the task that uses it, or leave %s out of the "
         "inputs");
}

TEST(GradCheckTest, RelativeError) {
  EXPECT_EQ(gradCheckRelativeError(1.5, 1.0, 1e-3), 0.5);
  EXPECT_EQ(gradCheckRelativeError(1e-6, 0.0, 1e-3), 1e-3); // below the floor: absolute / floor
  EXPECT_EQ(gradCheckRelativeError(INFINITY, INFINITY, 1), 0.0);
  EXPECT_EQ(gradCheckRelativeError(NAN, 1.0, 1), INFINITY);
  EXPECT_EQ(gradCheckRelativeError(1.0, NAN, 1), INFINITY);
}

} // namespace
} // namespace qd
