//===- SizeExprEvalTest.cpp - Evaluating SizeExprs at launch --------------===//
//
// evaluateSizeExpr on fake launch inputs (SizeExprTestInputs.h): leaves,
// saturation, ranges and their plans, out-of-range reads, step limits, and
// the operations of format v3.
//
//===----------------------------------------------------------------------===//
#include "SizeExprTestInputs.h"

namespace qd {
namespace {

using namespace sizeexprtest;

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

TEST(SizeExprTest, EvaluatesLeaves) {
  FakeInputs in;
  in.args = {{0, 12}, {3, -4}};
  in.fields["x"] = Array{{2, 3}, {1, 2, 3, 4, 5, 6}};
  in.fields["s"] = Array{{}, {42}};
  in.ndarrays[1] = Array{{2, 2}, {10, 20, 30, 40}};
  EXPECT_EQ(valueOf(c(-9), in), -9);
  EXPECT_EQ(valueOf(arg(0), in), 12);
  EXPECT_EQ(valueOf(arg(3), in), -4);
  EXPECT_EQ(valueOf(SizeExpr::fieldLoad("x", {c(1), c(2)}), in), 6);
  EXPECT_EQ(valueOf(SizeExpr::fieldLoad("x", {c(0), c(1)}), in), 2);
  EXPECT_EQ(valueOf(SizeExpr::fieldLoad("s", {}), in), 42);
  EXPECT_EQ(valueOf(SizeExpr::ndarrayShape(1, 0), in), 2);
  EXPECT_EQ(valueOf(SizeExpr::ndarrayRead(1, {c(1), c(0)}), in), 30);
  // Indices are expressions.
  EXPECT_EQ(valueOf(SizeExpr::ndarrayRead(1, {SizeExpr::sub(arg(0), c(11)), c(1)}), in), 40);
  ASSERT_EQ(in.ndarrayRequests.size(), 2u);
  EXPECT_EQ(in.ndarrayRequests[1].second, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(valueOf(SizeExpr::add(arg(0), arg(3)), in), 8);
  EXPECT_EQ(valueOf(SizeExpr::sub(arg(3), arg(0)), in), -16);
  EXPECT_EQ(valueOf(SizeExpr::mul(arg(3), arg(0)), in), -48);
  EXPECT_EQ(valueOf(SizeExpr::max(arg(3), arg(0)), in), 12);
}

TEST(SizeExprTest, MissingLeavesAreErrors) {
  FakeInputs in;
  in.ndarrays[1] = vec({1, 2});
  absl::Status st = errorOf(arg(3), in);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "argument 3")) << st;
  st = errorOf(SizeExpr::ndarrayShape(1, 2), in);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "argument 1 has no axis 2")) << st;
  // An error inside a max-over-range is still an error (not a skipped
  // iteration).
  st = errorOf(SizeExpr::maxOverRange(0, c(0), c(3), SizeExpr::add(var(0), arg(9))), in);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "argument 9")) << st;
}

TEST(SizeExprTest, SaturationIsAnError) {
  FakeInputs in;
  in.args = {{0, I64::max()}, {1, 1}, {2, I64::min()}, {3, -1}, {4, 3}};
  std::vector<SizeExprRef> overflowing = {
      SizeExpr::add(arg(0), arg(1)),
      SizeExpr::sub(arg(2), arg(1)),
      SizeExpr::sub(arg(0), arg(3)),
      SizeExpr::mul(arg(0), arg(4)),
      SizeExpr::mul(arg(2), arg(3)),
      // A saturated intermediate that a later operation would bring back
      // into range must not produce a plausible wrong value.
      SizeExpr::sub(SizeExpr::add(arg(0), arg(4)), arg(4)),
      SizeExpr::max(SizeExpr::mul(arg(2), arg(4)), c(0)),
      SizeExpr::maxOverRange(5, c(0), arg(4), SizeExpr::add(arg(0), var(5))),
  };
  for (const SizeExprRef &e : overflowing) {
    absl::Status st = errorOf(e, in);
    EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << print(e);
    EXPECT_TRUE(contains(st.message(), "overflows int64")) << st;
  }
  // Right at the limits is fine.
  EXPECT_EQ(valueOf(SizeExpr::sub(arg(0), arg(1)), in), I64::max() - 1);
  EXPECT_EQ(valueOf(SizeExpr::add(arg(2), arg(0)), in), -1);
  EXPECT_EQ(valueOf(SizeExpr::mul(arg(0), arg(3)), in), -I64::max());
}

TEST(SizeExprTest, MaxOverRange) {
  FakeInputs in;
  in.args = {{0, 5}, {1, 5}, {2, 2}, {3, -7}};
  in.ndarrays[4] = vec({3, -1, 9, 2, 0});
  // max over i in [0, n) of i.
  auto maxI = SizeExpr::maxOverRange(0, c(0), arg(0), var(0));
  EXPECT_EQ(valueOf(maxI, in), 4);
  // Empty ranges are 0, even for a negative body.
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, arg(1), arg(0), var(0)), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, arg(0), arg(2), var(0)), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, arg(0), arg(2), arg(3)), in), 0);
  // A non-empty range with a negative body is that body, not 0.
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(0), arg(2), arg(3)), in), -7);
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(0), arg(2), SizeExpr::sub(var(0), c(10))), in), -9);
  // Over an ndarray.
  auto maxA = SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(4, 0), read(4, var(0)));
  EXPECT_EQ(valueOf(maxA, in), 9);
  // Shadowing: the innermost binding wins.
  auto shadow =
      SizeExpr::maxOverRange(0, c(0), c(3), SizeExpr::maxOverRange(0, c(10), c(12), var(0)));
  EXPECT_EQ(valueOf(shadow, in), 11);
}

TEST(SizeExprTest, SumOverRange) {
  FakeInputs in;
  in.args = {{0, 5}, {1, 5}, {2, 2}, {3, -7}};
  in.ndarrays[4] = vec({3, -1, 9, 2, 0});
  // sum over i in [0, n) of i: 0 + 1 + 2 + 3 + 4.
  auto sumI = SizeExpr::sumOverRange(0, c(0), arg(0), var(0));
  ASSERT_EQ(sumI->kind(), K::SumOverRange);
  EXPECT_EQ(valueOf(sumI, in), 10);
  EXPECT_EQ(print(sumI), "sum(%v0 in [0, %arg0): %v0)");
  // Empty ranges are 0; negative terms count.
  EXPECT_EQ(valueOf(SizeExpr::sumOverRange(0, arg(1), arg(0), SizeExpr::add(var(0), c(1))), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::sumOverRange(0, c(0), arg(0), SizeExpr::sub(var(0), c(3))), in), -5);
  // Over an ndarray: 3 - 1 + 9 + 2 + 0.
  EXPECT_EQ(
      valueOf(SizeExpr::sumOverRange(0, c(0), SizeExpr::ndarrayShape(4, 0), read(4, var(0))), in),
      13);
  // A triangular nest: the largest over i of sum over j < a[i] of j.
  auto tri = SizeExpr::maxOverRange(
      1, c(0), SizeExpr::ndarrayShape(4, 0),
      SizeExpr::sumOverRange(0, c(0), read(4, var(1)), SizeExpr::max(var(0), c(0))));
  EXPECT_EQ(valueOf(tri, in), 36); // a = 9: 0 + ... + 8
  // Shadowing: the inner sum rebinds %v0.
  auto shadow =
      SizeExpr::maxOverRange(0, c(0), c(3), SizeExpr::sumOverRange(0, c(10), c(12), var(0)));
  EXPECT_EQ(valueOf(shadow, in), 21);
}

TEST(SizeExprTest, SumOverRangeSimplifies) {
  FakeInputs in;
  in.args = {{0, 6}, {1, 7}, {2, -3}};
  EXPECT_EQ(SizeExpr::sumOverRange(0, c(4), c(4), var(0))->value(), 0);
  EXPECT_EQ(SizeExpr::sumOverRange(0, c(0), arg(0), c(0))->value(), 0);
  // A body without the variable: trip * body on a constant range; on a
  // launch-time range the body is evaluated once, and 0 on an empty range.
  EXPECT_EQ(print(SizeExpr::sumOverRange(0, c(2), c(5), arg(1))), "3 * %arg1");
  auto indep = SizeExpr::sumOverRange(0, c(2), arg(0), arg(1));
  EXPECT_EQ(print(indep), "sum(%v0 in [2, %arg0): %arg1)");
  EXPECT_EQ(valueOf(indep, in), 28);
  EXPECT_EQ(valueOf(SizeExpr::sumOverRange(0, arg(0), c(2), arg(1)), in), 0);
  in.args[3] = I64::max(); // an empty range is 0 even where end - begin overflows
  EXPECT_EQ(valueOf(SizeExpr::sumOverRange(0, arg(3), c(-3), arg(1)), in), 0);
  // Constant sums fold to their value when evaluated at compile time.
  EXPECT_EQ(valueOf(SizeExpr::sumOverRange(0, c(0), c(4), SizeExpr::mul(c(3), var(0))), in), 18);
  // Signs.
  auto pos = SizeExpr::sumOverRange(0, c(0), arg(0), SizeExpr::max(var(0), c(0)));
  EXPECT_TRUE(pos->isNonNegative());
  EXPECT_FALSE(pos->isNonPositive());
  auto negative = SizeExpr::sumOverRange(0, c(0), arg(0), SizeExpr::mul(c(-1), pos));
  EXPECT_TRUE(negative->isNonPositive());
  EXPECT_FALSE(negative->isNonNegative());
  EXPECT_FALSE(SizeExpr::sumOverRange(0, c(0), arg(0), var(0))->isNonNegative());
}

TEST(SizeExprTest, LongSumsAreBoundedByTripTimesMax) {
  FakeInputs in;
  int64_t n = kSumIterationLimit + 1;
  in.args = {{0, n}};
  // sum over i < n of i is n(n-1)/2; past the iteration limit the bound is
  // n * (n - 1), found with one evaluation of the (increasing) body.
  auto e = SizeExpr::sumOverRange(0, c(0), arg(0), var(0));
  EXPECT_EQ(valueOf(e, in, 100), n * (n - 1));
  in.args = {{0, kSumIterationLimit}};
  EXPECT_EQ(valueOf(e, in, 4 * kSumIterationLimit),
            kSumIterationLimit * (kSumIterationLimit - 1) / 2);
  // Overflowing sums are errors, never wrapped numbers.
  in.args = {{0, 8}, {1, I64::max() / 4}};
  absl::Status st =
      errorOf(SizeExpr::sumOverRange(0, c(0), arg(0), SizeExpr::add(var(0), arg(1))), in);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
}

TEST(SizeExprTest, TriangularSumOverAFieldIsOneScan) {
  // max(%i in [0, 2^20): sum(%j in [0, m[%i]): max(%j, 0))), the size of a
  // taped triangular nest, costs one scan of m and one short sum.
  FakeInputs in;
  in.views = true;
  std::vector<int64_t> m(1 << 20);
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = 4 + int64_t(i * 7 % 13);
  in.ndarrays[1] = vec(std::move(m));
  auto e = SizeExpr::maxOverRange(
      0, c(0), SizeExpr::ndarrayShape(1, 0),
      SizeExpr::sumOverRange(1, c(0), read(1, var(0)), SizeExpr::max(var(1), c(0))));
  EXPECT_EQ(valueOf(e, in, 1000), 16 * 15 / 2);
  // Where the data also lives on a GPU, the scan is its reduction instead:
  // one call, the same value.
  in.maxElsewhere = true;
  EXPECT_EQ(valueOf(e, in, 1000), 16 * 15 / 2);
  EXPECT_EQ(in.rangeMaxCalls, 1);
  EXPECT_TRUE(in.ndarrayRequests.empty());
}

TEST(SizeExprTest, IndependentBodyIsEvaluatedOnce) {
  FakeInputs in;
  in.args = {{0, int64_t{1} << 40}, {1, 7}};
  auto e = SizeExpr::maxOverRange(0, c(0), arg(0), arg(1));
  ASSERT_EQ(e->kind(), K::MaxOverRange);
  // A trillion iterations would exceed a limit of 100 steps.
  EXPECT_EQ(valueOf(e, in, 100), 7);
  in.args[0] = 0;
  EXPECT_EQ(valueOf(e, in, 100), 0);
}

TEST(SizeExprTest, NestedTriangularRanges) {
  FakeInputs in;
  in.args = {{0, 6}};
  in.ndarrays[1] = vec({4, 8, 1, 7, 2, 100});
  // max_{i<n} max_{j<i} j = n - 2.
  auto tri =
      SizeExpr::maxOverRange(0, c(0), arg(0), SizeExpr::maxOverRange(1, c(0), var(0), var(1)));
  EXPECT_EQ(valueOf(tri, in), 4);
  // max_{i<n} max_{i<=j<n} (j - i) = n - 1.
  auto upper = SizeExpr::maxOverRange(
      0, c(0), arg(0), SizeExpr::maxOverRange(1, var(0), arg(0), SizeExpr::sub(var(1), var(0))));
  EXPECT_EQ(valueOf(upper, in), 5);
  // max_{i<n} max_{j<i} a[j] never reaches a[n-1].
  auto prefix = SizeExpr::maxOverRange(0, c(0), arg(0),
                                       SizeExpr::maxOverRange(1, c(0), var(0), read(1, var(1))));
  EXPECT_EQ(valueOf(prefix, in), 8);
  // max_{i<n} (i * max_{j<=i} a[j]): the inner range depends on i.
  auto weighted = SizeExpr::maxOverRange(
      0, c(0), c(5),
      SizeExpr::mul(var(0),
                    SizeExpr::maxOverRange(1, c(0), SizeExpr::add(var(0), c(1)), read(1, var(1)))));
  EXPECT_EQ(valueOf(weighted, in), 32); // 4 * 8
}

TEST(SizeExprTest, OutOfRangeReadsAreZeroAndNeverPerformed) {
  FakeInputs in;
  in.ndarrays[1] = vec({5, 1, 3});
  in.fields["f"] = vec({2, 9});
  // i in [0, 6): a[i] for i >= 3 is outside the buffer and counts as 0.
  auto overA = SizeExpr::maxOverRange(0, c(0), c(6), read(1, var(0)));
  EXPECT_EQ(valueOf(overA, in), 5);
  std::vector<int64_t> asked;
  for (auto &[a, idx] : in.ndarrayRequests) {
    EXPECT_EQ(a, 1u);
    asked.push_back(idx.at(0));
  }
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  // Negative indices too.
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(-4), c(2), read(1, var(0))), in), 5);
  auto overF = SizeExpr::maxOverRange(0, c(-1), c(4), SizeExpr::fieldLoad("f", {var(0)}));
  EXPECT_EQ(valueOf(overF, in), 9);
  // Every iteration out of range: 0.
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(3), c(9), read(1, var(0))), in), 0);
  // An index read out of range is 0, and so reads a[0].
  auto viaIndex = SizeExpr::maxOverRange(0, c(0), c(4), read(1, read(1, var(0))));
  EXPECT_EQ(valueOf(viaIndex, in), 5); // a[a[3]] = a[0]
  // Outside every range, and in operands and bounds: also 0, not an error.
  EXPECT_EQ(valueOf(read(1, c(3)), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::fieldLoad("f", {c(1), c(-1)}), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::fieldLoad("nope", {}), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::add(c(1), read(1, c(7))), in), 1);
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(0), read(1, c(9)), var(0)), in), 0);
  // The case that makes "skip the iteration" unsound: a guarded read past
  // the end of one array next to a loop over another. The sum keeps b's
  // part for the iterations where a[i] is out of range.
  in.ndarrays[2] = vec({4, 4, 4, 4, 4});
  auto guarded = SizeExpr::maxOverRange(
      0, c(0), c(5), SizeExpr::add(SizeExpr::max(read(1, var(0)), c(0)), read(2, var(0))));
  EXPECT_EQ(valueOf(guarded, in), 9); // i = 0: 5 + 4; i >= 3: 0 + 4
  // A max with an out-of-range alternative keeps the other.
  EXPECT_EQ(valueOf(SizeExpr::max(read(1, c(9)), c(-4)), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::max(read(1, c(2)), read(1, c(3))), in), 3);
  // Errors stay errors.
  absl::Status st = errorOf(SizeExpr::max(arg(7), c(1)), in);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(SizeExprTest, PairsIndicesOfArraysOfDifferentLengths) {
  FakeInputs in;
  in.ndarrays[0] = vec({1, 2, 3, 4});            // a: 4 elements
  in.ndarrays[1] = vec({5, 3, 10, 2, 100, 100}); // b: 6 elements
  // max over i < len(b) of b[i] - a[i]: i = 4, 5 read past a (never
  // performed; 0 is used), so 100 - 0 counts for them.
  auto diff = SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(1, 0),
                                     SizeExpr::sub(read(1, var(0)), read(0, var(0))));
  EXPECT_EQ(valueOf(diff, in), 100);
  // Each iteration asks b[i] and a[i] for the same i.
  std::vector<std::pair<unsigned, std::vector<int64_t>>> expected;
  for (int64_t i = 0; i < 6; ++i) {
    expected.push_back({1, {i}});
    expected.push_back({0, {i}});
  }
  EXPECT_EQ(in.ndarrayRequests, expected);
  // The same over len(a): no read out of range at all.
  in.ndarrayRequests.clear();
  auto diffA = SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(0, 0),
                                      SizeExpr::sub(read(1, var(0)), read(0, var(0))));
  EXPECT_EQ(valueOf(diffA, in), 7);
  EXPECT_EQ(in.ndarrayRequests.size(), 8u);
  for (auto &[a, idx] : in.ndarrayRequests)
    EXPECT_LT(idx.at(0), 4);
  // a[i] - b[i] over len(b) is maximal at i = 3 (4 - 2); for i = 4, 5 the
  // missing a[i] is 0.
  auto rev = SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(1, 0),
                                    SizeExpr::sub(read(0, var(0)), read(1, var(0))));
  EXPECT_EQ(valueOf(rev, in), 2);
}

TEST(SizeExprTest, StepLimit) {
  FakeInputs in;
  in.args = {{0, 1000000}, {1, 10}};
  // (i - 3) * (i - 3) is not monotone in i: every iteration is evaluated.
  auto square = [](const SizeExprRef &x) { return SizeExpr::mul(x, x); };
  auto e = SizeExpr::maxOverRange(0, c(0), arg(0), square(SizeExpr::sub(var(0), c(3))));
  absl::Status st = errorOf(e, in, 1000);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "step limit")) << st;
  // A nested range whose total work exceeds the limit.
  auto nested = SizeExpr::maxOverRange(
      0, c(0), arg(1),
      SizeExpr::maxOverRange(1, c(0), arg(0), square(SizeExpr::sub(var(0), var(1)))));
  st = errorOf(nested, in, 100000);
  EXPECT_TRUE(contains(st.message(), "step limit")) << st;
  // Within the limit.
  EXPECT_EQ(valueOf(e, in, 10000000), 999996 * int64_t{999996});
  in.args[0] = 10;
  EXPECT_EQ(valueOf(nested, in, 10000), 81);
}

TEST(SizeExprTest, MonotoneBodiesPeakAtTheLastIteration) {
  FakeInputs in;
  in.args = {{0, int64_t{1} << 40}, {1, 3}};
  in.ndarrays[2] = vec({4, 1});
  const int64_t last = (int64_t{1} << 40) - 1;
  // A trillion iterations would exceed a limit of 100 steps.
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(0), arg(0), var(0)), in, 100), last);
  EXPECT_EQ(
      valueOf(SizeExpr::maxOverRange(0, c(5), arg(0), SizeExpr::add(var(0), arg(1))), in, 100),
      last + 3);
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(5), arg(0),
                                           SizeExpr::mul(c(2), SizeExpr::max(var(0), c(0)))),
                    in, 100),
            2 * last);
  // A nested range whose end grows with the outer variable.
  auto nested = SizeExpr::maxOverRange(
      0, c(0), arg(0),
      SizeExpr::maxOverRange(1, c(0), var(0), SizeExpr::max(SizeExpr::sub(var(1), arg(1)), c(0))));
  EXPECT_EQ(valueOf(nested, in, 100), last - 1 - 3);
  // A read is not monotone: every iteration is scanned (the read past the
  // end counts as 0).
  in.args[0] = 10;
  auto withRead = SizeExpr::maxOverRange(0, c(0), arg(0), SizeExpr::add(var(0), read(2, var(0))));
  EXPECT_EQ(valueOf(withRead, in), 9); // i = 9: 9 + 0 (i = 0: 0 + 4)
  // A decreasing body peaks at the first iteration.
  EXPECT_EQ(valueOf(SizeExpr::maxOverRange(0, c(-3), arg(0), SizeExpr::sub(c(1), var(0))), in), 4);
  // So does a product with a decreasing factor: -i * 3 peaks at i = -3.
  auto prod =
      SizeExpr::maxOverRange(0, c(-3), arg(0), SizeExpr::mul(SizeExpr::sub(c(0), var(0)), arg(1)));
  EXPECT_EQ(valueOf(prod, in), 9);
}

TEST(SizeExprTest, DecreasingBodiesPeakAtTheFirstIteration) {
  FakeInputs in;
  in.args = {{0, int64_t{1} << 40}, {1, 3}};
  // A trillion iterations would exceed a limit of 100 steps.
  EXPECT_EQ(
      valueOf(SizeExpr::maxOverRange(0, c(5), arg(0), SizeExpr::sub(c(1000), var(0))), in, 100),
      995);
  // The range of an inner max shrinks as the outer variable grows.
  auto shrinking = SizeExpr::maxOverRange(
      0, c(0), arg(0), SizeExpr::maxOverRange(1, var(0), arg(0), SizeExpr::max(arg(1), c(0))));
  EXPECT_EQ(valueOf(shrinking, in, 100), 3);
  // max(n - 1 - j, 0) over j in [0, n): the reverse loop of a gradient
  // kernel counting down.
  auto countdown = SizeExpr::maxOverRange(
      0, c(0), arg(0), SizeExpr::max(SizeExpr::sub(SizeExpr::sub(arg(0), c(1)), var(0)), c(0)));
  EXPECT_EQ(valueOf(countdown, in, 100), (int64_t{1} << 40) - 1);
}

TEST(SizeExprTest, BodiesGrowingWithOneReadPeakAtTheLargestElement) {
  for (bool views : {false, true}) {
    SCOPED_TRACE(views ? "with views" : "element accessors");
    FakeInputs in;
    in.views = views;
    const int64_t n = 200000;
    std::vector<int64_t> data(n);
    for (int64_t i = 0; i < n; ++i)
      data[i] = 4 + (i * 7) % 13; // 4..16
    in.fields["m"] = vec(data);
    in.args = {{0, n}, {1, -50}};
    auto m = [](const SizeExprRef &i) { return SizeExpr::fieldLoad("m", {i}); };
    auto mi = m(var(0));
    // The stack of a triangular nest's inner loop: max over the outer
    // element of max(%j in [0, m[i]): max(m[i] - 1 - %j, 0)).
    auto tri = SizeExpr::maxOverRange(
        0, c(0), arg(0),
        SizeExpr::maxOverRange(
            1, c(0), mi, SizeExpr::max(SizeExpr::sub(SizeExpr::sub(mi, c(1)), var(1)), c(0))));
    // With views the elements are scanned without a step per element; the
    // accessors cost one step each.
    EXPECT_EQ(valueOf(tri, in, views ? 100 : 2 * n), 15);
    // max(m, 0) * max(m, 0): a product of non-negative factors.
    auto sq = SizeExpr::maxOverRange(
        0, c(0), arg(0), SizeExpr::mul(SizeExpr::max(mi, c(0)), SizeExpr::max(mi, c(0))));
    EXPECT_EQ(valueOf(sq, in, views ? 100 : 2 * n), 256);
    // Elements outside the buffer count as 0: a range past the end of a
    // buffer of negative numbers peaks at 0.
    in.fields["neg"] = vec({-7, -3, -9});
    auto neg = [&](int64_t lo, int64_t hi) {
      return SizeExpr::maxOverRange(0, c(lo), c(hi), SizeExpr::fieldLoad("neg", {var(0)}));
    };
    EXPECT_EQ(valueOf(neg(0, 3), in), -3);
    EXPECT_EQ(valueOf(neg(2, 3), in), -9);
    EXPECT_EQ(valueOf(neg(-1, 2), in), 0);
    EXPECT_EQ(valueOf(neg(0, 4), in), 0);
    EXPECT_EQ(valueOf(neg(5, 9), in), 0);
    // A body that also uses the variable itself, or falls as the element
    // grows, is iterated: m[i] - i peaks at i = 1 (11 - 1 = 10); -50 - m[i]
    // peaks at the smallest element.
    EXPECT_EQ(
        valueOf(SizeExpr::maxOverRange(0, c(0), arg(0), SizeExpr::sub(mi, var(0))), in, 10 * n),
        10);
    EXPECT_EQ(
        valueOf(SizeExpr::maxOverRange(0, c(0), arg(0), SizeExpr::sub(arg(1), mi)), in, 10 * n),
        -54);
    // Two different buffers indexed by the variable are iterated too.
    in.fields["k"] = vec({1, 100});
    auto two = SizeExpr::maxOverRange(0, c(0), c(2),
                                      SizeExpr::add(m(var(0)), SizeExpr::fieldLoad("k", {var(0)})));
    EXPECT_EQ(valueOf(two, in), 111); // i = 1: 11 + 100
    // A nested max that rebinds the variable reads its own index.
    auto rebind = SizeExpr::maxOverRange(
        0, c(0), c(3), SizeExpr::add(m(var(0)), SizeExpr::maxOverRange(0, c(0), c(2), m(var(0)))));
    EXPECT_EQ(valueOf(rebind, in), 11 + 11); // max m[0..3) = 11, inner max m[0..2) = 11
  }
}

// A deserialised expression is a DAG: x1 = x0 * x0, x2 = x1 * x1, ... has
// 2^60 paths through 61 nodes. Deciding how to evaluate a range over it
// (direction, and the search for a `b[%v]` read) must visit each node once;
// the search did not (found by qd-fuzz-sizeexpr,
// fuzz/regressions/qd-fuzz-sizeexpr/read-search-shared-dag.bin). Evaluating
// the body itself then hits the step limit.
TEST(SizeExprTest, PlanningARangeOverASharedDagIsLinear) {
  FakeInputs in;
  SizeExprRef x = SizeExpr::sub(c(0), var(0));
  for (int i = 0; i < 60; ++i)
    x = SizeExpr::make(SizeExprKind::Mul, {x, x});
  auto e = SizeExpr::maxOverRange(0, c(0), c(3), x);
  absl::Status st = errorOf(e, in, 100000);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(contains(st.message(), "step limit")) << st;
}

TEST(SizeExprTest, UnboundVariableIsAnError) {
  FakeInputs in;
  absl::Status st = errorOf(var(3), in);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "%v3")) << st;
  // Bound by a range, but a different variable.
  st = errorOf(SizeExpr::maxOverRange(0, c(0), c(2), SizeExpr::add(var(0), var(1))), in);
  EXPECT_TRUE(contains(st.message(), "%v1")) << st;
  // A range's variable is not bound in its own bounds.
  st = errorOf(SizeExpr::make(K::MaxOverRange, {c(0), var(2), c(1)}, 0, 2), in);
  EXPECT_TRUE(contains(st.message(), "%v2")) << st;
}

//===----------------------------------------------------------------------===//
// min, div, rem and narrowing casts (format v3)
//===----------------------------------------------------------------------===//

TEST(SizeExprTest, DivisionAndRemainderFollowTheIR) {
  FakeInputs in;
  in.args = {{0, -7}, {1, 2}, {2, 0}, {3, -1}, {4, I64::min()}};
  auto div = [](SizeExprRef a, SizeExprRef b) { return SizeExpr::make(K::Div, {a, b}); };
  auto rem = [](SizeExprRef a, SizeExprRef b) { return SizeExpr::make(K::Rem, {a, b}); };
  EXPECT_EQ(valueOf(div(arg(0), arg(1)), in), -3); // truncates toward zero
  EXPECT_EQ(valueOf(rem(arg(0), arg(1)), in), -1); // the sign of the dividend
  EXPECT_EQ(valueOf(div(arg(0), arg(2)), in), 0);  // by 0: the kernel fails there
  EXPECT_EQ(valueOf(rem(arg(0), arg(2)), in), 0);
  EXPECT_EQ(valueOf(div(arg(4), arg(3)), in), I64::min()); // wraps, as i64 does
  EXPECT_EQ(valueOf(rem(arg(4), arg(3)), in), 0);
  EXPECT_EQ(valueOf(SizeExpr::make(K::Min, {arg(0), arg(1)}), in), -7);
  in.args[5] = (int64_t(1) << 32) + 5;
  in.args[6] = int64_t(3) << 31; // 0x1'8000'0000: low 32 bits are INT32_MIN
  EXPECT_EQ(valueOf(SizeExpr::make(K::Trunc32, {arg(5)}), in), 5);
  EXPECT_EQ(valueOf(SizeExpr::make(K::Trunc32, {arg(6)}), in), I64::min() >> 32);
}

TEST(SizeExprTest, DivisionRemainderAndMinSimplify) {
  EXPECT_EQ(print(SizeExpr::div(c(-7), c(2))), "-3");
  EXPECT_EQ(print(SizeExpr::rem(c(-7), c(2))), "-1");
  EXPECT_EQ(print(SizeExpr::div(arg(0), c(1))), "%arg0");
  EXPECT_EQ(print(SizeExpr::div(arg(0), c(0))), "0");
  EXPECT_EQ(print(SizeExpr::rem(arg(0), c(1))), "0");
  EXPECT_EQ(print(SizeExpr::min(arg(0), arg(0))), "%arg0");
  EXPECT_EQ(print(SizeExpr::min(c(4), arg(1))), "min(%arg1, 4)");
  EXPECT_EQ(print(SizeExpr::trunc32(c((int64_t(1) << 32) + 9))), "9");
  EXPECT_EQ(print(SizeExpr::trunc32(SizeExpr::trunc32(arg(0)))), "trunc32(%arg0)");
  // Precedence: the right operand of / and % is parenthesised when compound.
  EXPECT_EQ(print(SizeExpr::div(SizeExpr::add(arg(0), c(1)), SizeExpr::mul(arg(1), arg(2)))),
            "(%arg0 + 1) / (%arg1 * %arg2)");
  EXPECT_EQ(print(SizeExpr::mul(c(2), SizeExpr::rem(arg(0), arg(1)))), "2 * (%arg0 % %arg1)");
  // Signs.
  EXPECT_TRUE(SizeExpr::div(SizeExpr::ndarrayShape(0, 0), c(3))->isNonNegative());
  EXPECT_TRUE(SizeExpr::rem(SizeExpr::ndarrayShape(0, 0), arg(1))->isNonNegative());
  EXPECT_FALSE(SizeExpr::rem(arg(0), c(3))->isNonNegative());
  EXPECT_TRUE(SizeExpr::min(arg(0), c(-1))->isNonPositive());
}

// A flattened 2-D index: max over %t in [0, n*m) of a body that uses %t / m
// and %t % m is evaluated over rows, never per %t: 2^22 indices, a step
// limit of 200.
TEST(SizeExprTest, FlattenedIndicesAreEvaluatedByRows) {
  FakeInputs in;
  in.args = {{0, 1 << 11}, {1, 1 << 11}}; // n, m
  SizeExprRef t = var(0), n = arg(0), m = arg(1);
  SizeExprRef i = SizeExpr::div(t, m), j = SizeExpr::rem(t, m);
  auto maxOver = [&](SizeExprRef begin, SizeExprRef end, SizeExprRef body) {
    return SizeExpr::maxOverRange(0, begin, end, body);
  };
  SizeExprRef all = SizeExpr::mul(n, m);
  EXPECT_EQ(valueOf(maxOver(c(0), all, j), in, 200), (1 << 11) - 1);
  EXPECT_EQ(valueOf(maxOver(c(0), all, i), in, 200), (1 << 11) - 1);
  // A body of both: the largest i + 2 j is in the last row, last column.
  SizeExprRef both = SizeExpr::add(i, SizeExpr::mul(c(2), j));
  EXPECT_EQ(valueOf(maxOver(c(0), all, both), in, 200), 3 * ((1 << 11) - 1));
  // Non-monotone in j: (j - 5)^2 peaks at a row's ends.
  SizeExprRef bowl = SizeExpr::mul(SizeExpr::sub(j, c(5)), SizeExpr::sub(j, c(5)));
  in.args = {{0, 3}, {1, 10}};
  EXPECT_EQ(valueOf(maxOver(c(0), all, bowl), in, 2000), 25);
  // Partial rows: [13, 17) covers j = 3..6 of row 1; [8, 12) j = 8, 9, 0, 1.
  EXPECT_EQ(valueOf(maxOver(c(13), c(17), j), in, 2000), 6);
  EXPECT_EQ(valueOf(maxOver(c(8), c(12), j), in, 2000), 9);
  EXPECT_EQ(valueOf(maxOver(c(8), c(12), bowl), in, 2000), 25);
  EXPECT_EQ(valueOf(maxOver(c(13), c(17), bowl), in, 2000), 4);
  // A negative start or divisor is iterated, exactly.
  EXPECT_EQ(valueOf(maxOver(c(-4), c(3), j), in, 2000), 2);
  in.args = {{0, 3}, {1, -4}};
  EXPECT_EQ(valueOf(maxOver(c(0), c(12), j), in, 2000), 3);
}

TEST(SizeExprTest, VersionTwoDataHasNoDivisions) {
  std::vector<uint8_t> bytes = serializeSizeExpr(*SizeExpr::div(arg(0), arg(1)));
  EXPECT_EQ(bytes[4], 3);
  bytes[4] = 2;
  auto r = deserializeSizeExpr(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "unknown node kind 13 in format version 2"))
      << r.status();
  bytes[4] = 3;
  auto back = deserializeSizeExpr(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(print(*back), "%arg0 / %arg1");
}

} // namespace
} // namespace qd
