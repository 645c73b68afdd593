//===- GradCheckRoundingTest.cpp - The checker's tolerance of f32 sums ----===//
//
// A directional derivative sums a term per element; in f32 the sum may be
// off by up to n u / (1 - n u) * sum |terms| (GradCheckEntry::
// roundingAllowance), however small its value. A correct gradient whose
// terms cancel must pass; a gradient off by 1% must still fail.
//
//===----------------------------------------------------------------------===//
#include "qd/check/GradCheck.h"

#include "support/VerifiedModule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qd {
namespace {

constexpr int64_t kN = 1024;

// loss = sum a[i] * x[i] in f32 (atomic adds): forward mode's directional
// derivative sum v[i] * a[i] is summed in f32 by the dual kernel. With a
// gradient kernel written by hand that is right (factor 1) or 1% off
// (factor 1.01).
std::string dot(const std::string &factor = "1.0") {
  return R"(field @x : f32[1024] grad
field @a : f32[1024]
field @loss : f32 grad

kernel @k() {
  parallel for %i = 0 to 1024 {
    %v = load @x[%i] : f32
    %c = load @a[%i] : f32
    %p = mul %v, %c : f32
    atomic_add @loss[], %p : f32
  }
}

kernel @k_by_hand() {
  parallel for %i = 0 to 1024 {
    %c = load @a[%i] : f32
    %f = const )" +
         factor + R"( : f32
    %d = mul %c, %f : f32
    %g = load @loss.grad[] : f32
    %q = mul %g, %d : f32
    atomic_add @x.grad[%i], %q : f32
  }
}
)";
}

std::vector<double> xs() {
  std::vector<double> x(kN);
  for (int64_t i = 0; i < kN; ++i)
    x[i] = 0.5 + 0.75 * std::sin(0.37 * double(i)) + double(i % 7) / 8;
  return x;
}

const GradCheckEntry &directional(const GradCheckReport &r) {
  for (const GradCheckEntry &e : r.entries)
    if (e.direction)
      return e;
  ADD_FAILURE() << "no directional entry";
  static GradCheckEntry none;
  return none;
}

/// The directional derivative of the dot kernel along the check's seeded
/// direction, with weights `a` (reverse mode: exact, from f32 products of
/// the exact weights, summed in f64).
double dotDirectional(const Module &m, const std::vector<double> &a) {
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({kN}, xs());
  in.fields["a"] = GradCheckValue::array({kN}, a);
  GradCheckOptions o;
  o.wrt = {"@x"};
  o.maxElements = 0;
  o.forward = false;
  auto r = checkGradient(m, "k", in, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? directional(*r).reverse : 0;
}

TEST(GradCheckTest, AnF32SumWhoseTermsCancelPasses) {
  std::unique_ptr<Module> m = parseVerified(dot());
  ASSERT_TRUE(m);
  // Weights that make the directional derivative cancel: 100 on the first
  // half, 100 * lambda on the second, lambda from the halves' sums.
  std::vector<double> first(kN, 0), second(kN, 0);
  std::fill(first.begin(), first.begin() + kN / 2, 1.0);
  std::fill(second.begin() + kN / 2, second.end(), 1.0);
  double d1 = dotDirectional(*m, first), d2 = dotDirectional(*m, second);
  ASSERT_GT(std::abs(d2), 1.0);
  std::vector<double> a(kN, 100.0);
  std::fill(a.begin() + kN / 2, a.end(), static_cast<float>(-100 * d1 / d2));

  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({kN}, xs());
  in.fields["a"] = GradCheckValue::array({kN}, a);
  GradCheckOptions o;
  o.wrt = {"@x"};
  o.maxElements = 0; // the direction dotDirectional saw
  auto r = checkGradient(*m, "k", in, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GradCheckEntry &e = directional(*r);
  SCOPED_TRACE(formatGradCheckReport(*r, true));
  // The derivative is nearly 0 against terms of about 100: the f32 sum of
  // the dual kernel is off by more than atol, and within the allowance.
  double w = r->outputs[0].weights[0];
  double terms = 0;
  for (int64_t i = 0; i < kN; ++i)
    terms += std::abs(w * static_cast<float>(a[i]));
  double gamma = kN * std::ldexp(1.0, -24) / (1 - kN * std::ldexp(1.0, -24));
  // |v_i| is in [0.5, 1.5).
  EXPECT_GE(e.roundingAllowance, gamma * 0.5 * terms);
  EXPECT_LT(e.roundingAllowance, gamma * 1.5 * terms);
  EXPECT_TRUE(e.fdReliable);
  EXPECT_LT(std::abs(e.finiteDifference), 1e-2 * std::abs(w) * 100);
  EXPECT_GT(std::abs(e.forward - e.finiteDifference), r->atol);
  EXPECT_LE(std::abs(e.forward - e.finiteDifference), e.roundingAllowance);
  EXPECT_TRUE(e.ok());
  EXPECT_TRUE(r->passed);
  EXPECT_NE(formatGradCheckReport(*r).find("  rounding: atol raised to the error bound of a sum "
                                           "in f32, n u / (1 - n u) * sum |terms|, up to "),
            std::string::npos);
}

GradCheckReport checkByHand(const std::string &factor) {
  std::unique_ptr<Module> m = parseVerified(dot(factor));
  GradCheckInputs in;
  in.fields["x"] = GradCheckValue::array({kN}, xs());
  in.fields["a"] = GradCheckValue::array({kN}, xs());
  GradCheckOptions o;
  o.wrt = {"@x"};
  o.gradientKernel = "k_by_hand";
  o.forward = false;
  auto r = m ? checkGradient(*m, "k", in, o) : absl::InternalError("no module");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *std::move(r) : GradCheckReport{};
}

TEST(GradCheckTest, AGradientOffByOnePercentFailsOverAnF32Sum) {
  GradCheckReport right = checkByHand("1.0");
  EXPECT_TRUE(right.passed) << formatGradCheckReport(right, true);
  const GradCheckEntry &ok = directional(right);
  EXPECT_TRUE(ok.ok());
  EXPECT_GT(ok.roundingAllowance, right.atol);
  // Element by element, nothing is summed: the allowance is one rounding.
  ASSERT_EQ(right.entries.size(), 65u);
  for (const GradCheckEntry &one : right.entries) {
    if (!one.direction) {
      EXPECT_NEAR(one.roundingAllowance, std::ldexp(std::abs(one.reverse), -24),
                  1e-12 * std::abs(one.reverse));
    }
  }

  GradCheckReport wrong = checkByHand("1.01");
  ASSERT_EQ(wrong.entries.size(), right.entries.size());
  EXPECT_FALSE(wrong.passed);
  EXPECT_EQ(wrong.failures, static_cast<int64_t>(wrong.entries.size()));
  // The sum along the direction is 1% off, beyond its rounding allowance.
  const GradCheckEntry &e = directional(wrong);
  EXPECT_FALSE(e.reverseAgrees) << formatGradCheckReport(wrong, true);
  EXPECT_NEAR(e.reverse, 1.01 * ok.reverse, 1e-4 * std::abs(ok.reverse));
  EXPECT_GT(std::abs(e.reverse - e.finiteDifference), e.roundingAllowance);
  EXPECT_GT(e.reverseError, wrong.rtol);
}

} // namespace
} // namespace qd
