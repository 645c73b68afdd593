//===- SizeExprTest.cpp - Launch-time adstack bounds ----------------------===//
#include "qd/analysis/SizeExpr.h"
#include "qd/analysis/KernelSizing.h"
#include "qd/ir/Parser.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace qd {
namespace {

using I64 = std::numeric_limits<int64_t>;
using K = SizeExprKind;

SizeExprRef c(int64_t v) {
  return SizeExpr::constant(v);
}
SizeExprRef arg(unsigned i) {
  return SizeExpr::scalarArg(i);
}
SizeExprRef var(unsigned v) {
  return SizeExpr::boundVar(v);
}
SizeExprRef read(unsigned a, SizeExprRef index) {
  return SizeExpr::ndarrayRead(a, {std::move(index)});
}
std::string print(const SizeExprRef &e) {
  return printSizeExpr(*e);
}

/// A dense row-major int64 array.
struct Array {
  std::vector<int64_t> shape;
  std::vector<int64_t> data;
};

/// The launch data of a test: scalar arguments, fields and ndarrays by
/// name or index. Every element request is recorded; out-of-range or
/// missing elements are nullopt.
class FakeInputs : public SizeExprInputs {
public:
  std::map<unsigned, int64_t> args;
  std::map<std::string, Array> fields;
  std::map<unsigned, Array> ndarrays;
  mutable std::vector<std::pair<unsigned, std::vector<int64_t>>> ndarrayRequests;
  mutable std::vector<std::pair<std::string, std::vector<int64_t>>> fieldRequests;
  /// Offer direct views (the fast path) besides the element accessors.
  bool views = false;
  /// Views ask ndarrayRangeMax for range maxima (SizeExprBufferView::
  /// rangeMaxElsewhere), which answers from `ndarrays` and counts its calls.
  bool maxElsewhere = false;
  mutable int rangeMaxCalls = 0;

  std::optional<int64_t> scalarArg(unsigned argIndex) const override {
    auto it = args.find(argIndex);
    if (it == args.end())
      return std::nullopt;
    return it->second;
  }
  std::optional<int64_t> fieldElement(const std::string &field,
                                      std::span<const int64_t> indices) const override {
    fieldRequests.emplace_back(field, std::vector<int64_t>(indices.begin(), indices.end()));
    auto it = fields.find(field);
    return it == fields.end() ? std::nullopt : element(it->second, indices);
  }
  std::optional<int64_t> ndarrayShape(unsigned argIndex, unsigned axis) const override {
    auto it = ndarrays.find(argIndex);
    if (it == ndarrays.end() || axis >= it->second.shape.size())
      return std::nullopt;
    return it->second.shape[axis];
  }
  std::optional<int64_t> ndarrayElement(unsigned argIndex,
                                        std::span<const int64_t> indices) const override {
    ndarrayRequests.emplace_back(argIndex, std::vector<int64_t>(indices.begin(), indices.end()));
    auto it = ndarrays.find(argIndex);
    return it == ndarrays.end() ? std::nullopt : element(it->second, indices);
  }

  std::optional<SizeExprBufferView> fieldView(const std::string &field) const override {
    auto it = fields.find(field);
    if (!views || it == fields.end())
      return std::nullopt;
    return view(it->second);
  }
  std::optional<SizeExprBufferView> ndarrayView(unsigned argIndex) const override {
    auto it = ndarrays.find(argIndex);
    if (!views || it == ndarrays.end())
      return std::nullopt;
    return view(it->second);
  }
  std::optional<int64_t> ndarrayRangeMax(unsigned argIndex, int64_t begin,
                                         int64_t end) const override {
    auto it = ndarrays.find(argIndex);
    if (!maxElsewhere || it == ndarrays.end())
      return std::nullopt;
    ++rangeMaxCalls;
    return *std::max_element(it->second.data.begin() + begin, it->second.data.begin() + end);
  }

private:
  SizeExprBufferView view(const Array &a) const {
    return {reinterpret_cast<const std::byte *>(a.data.data()), ScalarType::I64, a.shape,
            maxElsewhere};
  }
  static std::optional<int64_t> element(const Array &a, std::span<const int64_t> indices) {
    if (indices.size() != a.shape.size())
      return std::nullopt;
    int64_t flat = 0;
    for (size_t d = 0; d < indices.size(); ++d) {
      if (indices[d] < 0 || indices[d] >= a.shape[d])
        return std::nullopt;
      flat = flat * a.shape[d] + indices[d];
    }
    return a.data.at(static_cast<size_t>(flat));
  }
};

Array vec(std::vector<int64_t> data) {
  int64_t n = static_cast<int64_t>(data.size());
  return Array{{n}, std::move(data)};
}

/// The evaluation's value; fails the test on an error.
int64_t valueOf(const SizeExprRef &e, const SizeExprInputs &in, int64_t limit = 1 << 20) {
  absl::StatusOr<int64_t> v = evaluateSizeExpr(*e, in, limit);
  EXPECT_TRUE(v.ok()) << v.status() << " for " << print(e);
  return v.ok() ? *v : -999999;
}

/// The evaluation's error; fails the test if it succeeded.
absl::Status errorOf(const SizeExprRef &e, const SizeExprInputs &in, int64_t limit = 1 << 20) {
  absl::StatusOr<int64_t> v = evaluateSizeExpr(*e, in, limit);
  EXPECT_FALSE(v.ok()) << "unexpected value " << (v.ok() ? *v : 0) << " for " << print(e);
  return v.status();
}

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

//===----------------------------------------------------------------------===//
// Construction and simplification
//===----------------------------------------------------------------------===//

TEST(SizeExprTest, LeavesKeepTheirPayload) {
  auto f = SizeExpr::fieldLoad("x", {c(1), arg(2)});
  EXPECT_EQ(f->kind(), K::FieldLoad);
  EXPECT_EQ(f->fieldName(), "x");
  ASSERT_EQ(f->operands().size(), 2u);
  EXPECT_EQ(f->size(), 3u);
  auto s = SizeExpr::ndarrayShape(3, 1);
  EXPECT_EQ(s->kind(), K::NdarrayShape);
  EXPECT_EQ(s->argIndex(), 3u);
  EXPECT_EQ(s->axis(), 1u);
  EXPECT_TRUE(s->isNonNegative());
  EXPECT_FALSE(arg(0)->isNonNegative());
  EXPECT_TRUE(c(0)->isNonNegative());
  EXPECT_FALSE(c(-1)->isNonNegative());
  EXPECT_EQ(var(4)->var(), 4u);
  EXPECT_TRUE(var(4)->usesVar(4));
  EXPECT_FALSE(var(4)->usesVar(3));
  EXPECT_EQ(toString(K::MaxOverRange), "max_over_range");
  EXPECT_EQ(toString(K::SumOverRange), "sum_over_range");
  EXPECT_EQ(toString(K::NdarrayRead), "ndarray_read");
}

TEST(SizeExprTest, ConstantsFold) {
  auto e = SizeExpr::add(c(2), SizeExpr::mul(c(3), c(4)));
  ASSERT_TRUE(e->isConst());
  EXPECT_EQ(e->value(), 14);
  auto s = SizeExpr::sub(c(5), c(7));
  ASSERT_TRUE(s->isConst());
  EXPECT_EQ(s->value(), -2);
  auto m = SizeExpr::max(c(3), c(-7));
  ASSERT_TRUE(m->isConst());
  EXPECT_EQ(m->value(), 3);
  EXPECT_EQ(SizeExpr::add(c(I64::max() - 1), c(1))->value(), I64::max());
  EXPECT_EQ(SizeExpr::mul(c(I64::min()), c(1))->value(), I64::min());
}

TEST(SizeExprTest, IdentitiesDisappear) {
  auto x = arg(0);
  EXPECT_EQ(SizeExpr::add(x, c(0)), x);
  EXPECT_EQ(SizeExpr::add(c(0), x), x);
  EXPECT_EQ(SizeExpr::sub(x, c(0)), x);
  EXPECT_EQ(SizeExpr::mul(c(1), x), x);
  EXPECT_EQ(SizeExpr::mul(x, c(1)), x);
  auto z1 = SizeExpr::mul(c(0), x);
  ASSERT_TRUE(z1->isConst());
  EXPECT_EQ(z1->value(), 0);
  auto z2 = SizeExpr::mul(x, c(0));
  ASSERT_TRUE(z2->isConst());
  EXPECT_EQ(z2->value(), 0);
  // x - x for a structurally equal (not identical) x.
  auto xx = SizeExpr::sub(SizeExpr::add(arg(1), c(2)), SizeExpr::add(arg(1), c(2)));
  ASSERT_TRUE(xx->isConst());
  EXPECT_EQ(xx->value(), 0);
  // 0 - x is not an identity.
  auto neg = SizeExpr::sub(c(0), x);
  EXPECT_EQ(neg->kind(), K::Sub);
  EXPECT_EQ(print(neg), "0 - %arg0");
}

TEST(SizeExprTest, ConstantsAreOrdered) {
  auto a = SizeExpr::add(c(3), arg(0));
  ASSERT_EQ(a->kind(), K::Add);
  EXPECT_EQ(a->operands()[0]->kind(), K::ScalarArg);
  EXPECT_EQ(a->operands()[1]->value(), 3);
  auto m = SizeExpr::mul(arg(0), c(3));
  ASSERT_EQ(m->kind(), K::Mul);
  EXPECT_EQ(m->operands()[0]->value(), 3);
  EXPECT_EQ(m->operands()[1]->kind(), K::ScalarArg);
  auto mx = SizeExpr::max(c(3), arg(0));
  ASSERT_EQ(mx->kind(), K::Max);
  EXPECT_EQ(mx->operands()[0]->kind(), K::ScalarArg);
  EXPECT_EQ(mx->operands()[1]->value(), 3);
}

TEST(SizeExprTest, MaxSimplifies) {
  auto x = SizeExpr::add(arg(0), c(1));
  auto x2 = SizeExpr::add(arg(0), c(1));
  EXPECT_EQ(SizeExpr::max(x, x), x);
  EXPECT_EQ(SizeExpr::max(x, x2), x);
  auto shape = SizeExpr::ndarrayShape(1, 0);
  EXPECT_EQ(SizeExpr::max(shape, c(0)), shape);
  EXPECT_EQ(SizeExpr::max(c(0), shape), shape);
  EXPECT_EQ(SizeExpr::max(shape, c(-5)), shape);
  // A positive constant is not dominated by a non-negative expression.
  EXPECT_EQ(SizeExpr::max(shape, c(1))->kind(), K::Max);
  // The argument may be negative: max(x, 0) stays.
  auto m = SizeExpr::max(arg(0), c(0));
  ASSERT_EQ(m->kind(), K::Max);
  EXPECT_TRUE(m->isNonNegative());
  EXPECT_EQ(print(m), "max(%arg0, 0)");
  // Non-negativity propagates through sums, products and maxima.
  auto nn = SizeExpr::mul(c(2), SizeExpr::add(shape, m));
  EXPECT_TRUE(nn->isNonNegative());
  EXPECT_EQ(SizeExpr::max(nn, c(0)), nn);
  EXPECT_FALSE(SizeExpr::sub(shape, c(1))->isNonNegative());
}

TEST(SizeExprTest, MaxOverRangeSimplifies) {
  auto body = read(1, var(0));
  // Empty constant ranges are 0.
  for (auto [b, e] : {std::pair<int64_t, int64_t>{3, 3}, {5, 2}, {0, -1}}) {
    auto r = SizeExpr::maxOverRange(0, c(b), c(e), body);
    ASSERT_TRUE(r->isConst()) << b << ", " << e;
    EXPECT_EQ(r->value(), 0);
  }
  // A non-empty constant range with a body independent of the variable.
  auto indep = arg(2);
  EXPECT_EQ(SizeExpr::maxOverRange(0, c(0), c(4), indep), indep);
  auto indepConst = SizeExpr::maxOverRange(0, c(0), c(4), c(7));
  ASSERT_TRUE(indepConst->isConst());
  EXPECT_EQ(indepConst->value(), 7);
  // The body uses the variable: kept.
  auto kept = SizeExpr::maxOverRange(0, c(0), c(4), body);
  ASSERT_EQ(kept->kind(), K::MaxOverRange);
  EXPECT_EQ(kept->var(), 0u);
  EXPECT_FALSE(kept->usesVar(0));
  EXPECT_EQ(kept->size(), 5u);
  // A range that may be empty keeps even an independent body (0 if empty).
  auto maybeEmpty = SizeExpr::maxOverRange(0, c(0), arg(1), indep);
  ASSERT_EQ(maybeEmpty->kind(), K::MaxOverRange);
  // A body using another variable: that variable stays free.
  auto outer = SizeExpr::maxOverRange(1, c(0), var(0), SizeExpr::add(var(1), var(0)));
  EXPECT_TRUE(outer->usesVar(0));
  EXPECT_FALSE(outer->usesVar(1));
  // The variable is free in the range bounds, which it does not bind.
  auto selfBound = SizeExpr::maxOverRange(0, c(0), var(0), var(0));
  EXPECT_TRUE(selfBound->usesVar(0));
}

TEST(SizeExprTest, TripCount) {
  auto five = SizeExpr::tripCount(c(2), c(7));
  ASSERT_TRUE(five->isConst());
  EXPECT_EQ(five->value(), 5);
  auto none = SizeExpr::tripCount(c(7), c(2));
  ASSERT_TRUE(none->isConst());
  EXPECT_EQ(none->value(), 0);
  auto shape = SizeExpr::ndarrayShape(0, 0);
  EXPECT_EQ(SizeExpr::tripCount(c(0), shape), shape);
  auto sym = SizeExpr::tripCount(arg(0), arg(1));
  EXPECT_EQ(print(sym), "max(%arg1 - %arg0, 0)");
  EXPECT_TRUE(sym->isNonNegative());
  FakeInputs in;
  in.args = {{0, 10}, {1, 4}};
  EXPECT_EQ(valueOf(sym, in), 0);
  in.args = {{0, -4}, {1, 10}};
  EXPECT_EQ(valueOf(sym, in), 14);
}

TEST(SizeExprTest, OverflowingConstantsStayUnfolded) {
  FakeInputs in;
  struct Case {
    SizeExprRef e;
    K kind;
  };
  std::vector<Case> cases = {
      {SizeExpr::add(c(I64::max()), c(1)), K::Add},
      {SizeExpr::add(c(I64::min()), c(-1)), K::Add},
      {SizeExpr::sub(c(I64::min()), c(1)), K::Sub},
      {SizeExpr::sub(c(0), c(I64::min())), K::Sub},
      {SizeExpr::mul(c(I64::max()), c(2)), K::Mul},
      {SizeExpr::mul(c(I64::min()), c(-1)), K::Mul},
      {SizeExpr::tripCount(c(I64::min()), c(I64::max())), K::Max},
  };
  for (const Case &cs : cases) {
    EXPECT_EQ(cs.e->kind(), cs.kind) << print(cs.e);
    absl::Status st = errorOf(cs.e, in);
    EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << print(cs.e);
    EXPECT_TRUE(contains(st.message(), "overflows")) << st;
  }
  // The unfolded node prints both constants.
  // Constants go right in a sum, so the swapped operands print.
  EXPECT_EQ(print(cases[0].e), "1 + 9223372036854775807");
  EXPECT_EQ(print(cases[6].e), "max(9223372036854775807 - -9223372036854775808, 0)");
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

TEST(SizeExprTest, PrintsEveryKind) {
  EXPECT_EQ(print(c(-3)), "-3");
  EXPECT_EQ(print(arg(2)), "%arg2");
  EXPECT_EQ(print(SizeExpr::fieldLoad("n", {})), "@n[]");
  EXPECT_EQ(print(SizeExpr::fieldLoad("m", {c(1), arg(0)})), "@m[1, %arg0]");
  EXPECT_EQ(print(SizeExpr::ndarrayShape(1, 0)), "shape(%arg1, 0)");
  EXPECT_EQ(print(SizeExpr::ndarrayRead(1, {var(0), c(2)})), "%arg1[%v0, 2]");
  EXPECT_EQ(print(var(7)), "%v7");
  EXPECT_EQ(print(SizeExpr::add(arg(0), c(1))), "%arg0 + 1");
  EXPECT_EQ(print(SizeExpr::sub(arg(0), arg(1))), "%arg0 - %arg1");
  EXPECT_EQ(print(SizeExpr::mul(c(2), arg(1))), "2 * %arg1");
  EXPECT_EQ(print(SizeExpr::max(arg(0), arg(1))), "max(%arg0, %arg1)");
  EXPECT_EQ(print(SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(1, 0), read(1, var(0)))),
            "max(%v0 in [0, shape(%arg1, 0)): %arg1[%v0])");
}

TEST(SizeExprTest, PrintsPrecedence) {
  auto a = arg(0), b = arg(1), d = arg(2);
  // Sums are left-associative: the left operand needs no parentheses, the
  // right operand of '-' does.
  EXPECT_EQ(print(SizeExpr::sub(SizeExpr::sub(a, b), d)), "%arg0 - %arg1 - %arg2");
  EXPECT_EQ(print(SizeExpr::sub(a, SizeExpr::sub(b, d))), "%arg0 - (%arg1 - %arg2)");
  EXPECT_EQ(print(SizeExpr::sub(a, SizeExpr::add(b, d))), "%arg0 - (%arg1 + %arg2)");
  EXPECT_EQ(print(SizeExpr::add(a, SizeExpr::sub(b, d))), "%arg0 + %arg1 - %arg2");
  EXPECT_EQ(print(SizeExpr::add(SizeExpr::sub(a, b), d)), "%arg0 - %arg1 + %arg2");
  // Products bind tighter than sums.
  EXPECT_EQ(print(SizeExpr::add(SizeExpr::mul(c(2), a), b)), "2 * %arg0 + %arg1");
  EXPECT_EQ(print(SizeExpr::sub(a, SizeExpr::mul(b, d))), "%arg0 - %arg1 * %arg2");
  EXPECT_EQ(print(SizeExpr::mul(SizeExpr::add(a, c(1)), c(2))), "2 * (%arg0 + 1)");
  EXPECT_EQ(print(SizeExpr::mul(SizeExpr::add(a, b), SizeExpr::sub(d, c(1)))),
            "(%arg0 + %arg1) * (%arg2 - 1)");
  EXPECT_EQ(print(SizeExpr::mul(SizeExpr::max(SizeExpr::sub(a, c(1)), c(0)), c(2))),
            "2 * max(%arg0 - 1, 0)");
  // Operands of max and indices are top level again.
  EXPECT_EQ(print(SizeExpr::mul(c(3), SizeExpr::max(SizeExpr::add(a, b), d))),
            "3 * max(%arg0 + %arg1, %arg2)");
  EXPECT_EQ(print(SizeExpr::mul(c(3), read(1, SizeExpr::add(a, c(1))))), "3 * %arg1[%arg0 + 1]");
  EXPECT_EQ(print(SizeExpr::maxOverRange(1, SizeExpr::add(a, c(1)), SizeExpr::mul(c(2), b),
                                         SizeExpr::sub(var(1), a))),
            "max(%v1 in [%arg0 + 1, 2 * %arg1): %v1 - %arg0)");
}

TEST(SizeExprTest, PrintsKernelNames) {
  auto module = parseModule(R"(
kernel @k(%n: i32, %a: ndarray<i32, 1>, %b: ndarray<f32, 2>) {
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Kernel &k = *(*module)->findKernel("k");
  SizeExprNames names = SizeExprNames::forKernel(k);
  auto e = SizeExpr::maxOverRange(
      0, c(0), SizeExpr::ndarrayShape(1, 0),
      SizeExpr::add(read(1, var(0)), SizeExpr::mul(arg(0), SizeExpr::ndarrayShape(2, 1))));
  EXPECT_EQ(printSizeExpr(*e, names), "max(%v0 in [0, shape(%a, 0)): %a[%v0] + %n * shape(%b, 1))");
  // An index past the kernel's arguments keeps the default name.
  EXPECT_EQ(printSizeExpr(*arg(5), names), "%arg5");
  names.varName = [](unsigned v) { return "%i" + std::to_string(v); };
  EXPECT_EQ(printSizeExpr(*e, names), "max(%i0 in [0, shape(%a, 0)): %a[%i0] + %n * shape(%b, 1))");
}

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
// Serialisation
//===----------------------------------------------------------------------===//

/// The whole evaluation result as text, for comparisons.
std::string evalText(const SizeExpr &e, const SizeExprInputs &in, int64_t limit) {
  absl::StatusOr<int64_t> v = evaluateSizeExpr(e, in, limit);
  return v.ok() ? std::to_string(*v) : v.status().ToString();
}

FakeInputs sampleInputs() {
  FakeInputs in;
  in.args = {{0, 3}, {1, -2}, {2, I64::max()}, {3, 1}};
  in.ndarrays[0] = Array{{2, 1, 3}, {3, 1, 4, 1, 5, 9}};
  in.ndarrays[2] = Array{{3, 2, 1}, {2, 7, 1, 8, 2, 8}};
  in.fields["x"] = vec({4, -1, 6});
  in.fields["m"] = Array{{2, 2}, {1, 2, 3, 4}};
  in.fields["s"] = Array{{}, {5}};
  in.ndarrays[1] = vec({7, 0, 2, 9});
  in.ndarrays[3] = Array{{2, 3}, {1, 2, 3, 4, 5, 6}};
  return in;
}

std::vector<SizeExprRef> handPicked() {
  return {
      c(0),
      c(-1),
      c(63),
      c(64),
      c(-65),
      c(I64::max()),
      c(I64::min()),
      arg(0),
      arg(1u << 20),
      SizeExpr::fieldLoad("s", {}),
      SizeExpr::fieldLoad("m", {c(1), arg(0)}),
      SizeExpr::fieldLoad("", {}),
      SizeExpr::ndarrayShape(3, 1),
      SizeExpr::ndarrayRead(3, {c(1), c(2)}),
      SizeExpr::tripCount(arg(0), arg(1)),
      SizeExpr::add(c(I64::max()), c(1)),
      SizeExpr::mul(c(2), SizeExpr::max(SizeExpr::sub(arg(0), c(1)), c(0))),
      SizeExpr::maxOverRange(0, c(0), SizeExpr::ndarrayShape(1, 0), read(1, var(0))),
      SizeExpr::maxOverRange(
          0, c(0), arg(0),
          SizeExpr::maxOverRange(1, var(0), SizeExpr::ndarrayShape(1, 0),
                                 SizeExpr::sub(read(1, var(1)), read(1, var(0))))),
      SizeExpr::maxOverRange(0, c(0), c(3), SizeExpr::maxOverRange(0, c(0), var(0), var(0))),
  };
}

TEST(SizeExprTest, SerialisationRoundTripsHandPicked) {
  FakeInputs in = sampleInputs();
  for (const SizeExprRef &e : handPicked()) {
    std::vector<uint8_t> bytes = serializeSizeExpr(*e);
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "QDSX");
    EXPECT_EQ(bytes[4], kSizeExprFormatVersion);
    EXPECT_EQ(bytes[5] | bytes[6] | bytes[7], 0);
    auto back = deserializeSizeExpr(bytes);
    ASSERT_TRUE(back.ok()) << back.status() << " for " << print(e);
    EXPECT_TRUE((*back)->equals(*e)) << print(*back) << " vs " << print(e);
    EXPECT_EQ(print(*back), print(e));
    EXPECT_EQ(evalText(**back, in, 10000), evalText(*e, in, 10000)) << print(e);
    EXPECT_EQ(serializeSizeExpr(**back), bytes);
  }
}

TEST(SizeExprTest, SerialisationEncodesConstantsCompactly) {
  // Header (8) + count (1) + kind (1) + zigzag varint.
  EXPECT_EQ(serializeSizeExpr(*c(0)).size(), 11u);
  EXPECT_EQ(serializeSizeExpr(*c(-64)).size(), 11u);
  EXPECT_EQ(serializeSizeExpr(*c(64)).size(), 12u);
  EXPECT_EQ(serializeSizeExpr(*c(I64::min())).size(), 20u);
  std::vector<uint8_t> expected = {'Q', 'D', 'S', 'X', 3, 0, 0, 0, 1, 0, 3};
  EXPECT_EQ(serializeSizeExpr(*c(-2)), expected);
}

TEST(SizeExprTest, SharedSubtreesSerialiseOnce) {
  auto build = [] {
    return SizeExpr::add(SizeExpr::mul(c(3), arg(1)),
                         SizeExpr::maxOverRange(0, c(0), arg(0), read(2, var(0))));
  };
  auto s = build();
  auto dag = SizeExpr::make(K::Max, {s, s});
  auto tree = SizeExpr::make(K::Max, {s, build()});
  EXPECT_TRUE(dag->equals(*tree));
  EXPECT_EQ(dag->size(), tree->size());
  std::vector<uint8_t> dagBytes = serializeSizeExpr(*dag);
  std::vector<uint8_t> treeBytes = serializeSizeExpr(*tree);
  EXPECT_LT(dagBytes.size(), treeBytes.size());
  // 9 nodes in s: shared, the DAG has 10 nodes, the tree 19.
  EXPECT_EQ(dagBytes[8], 10);
  EXPECT_EQ(treeBytes[8], 19);
  auto back = deserializeSizeExpr(dagBytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE((*back)->equals(*tree));
  // Sharing survives the round trip.
  EXPECT_EQ((*back)->operands()[0].get(), (*back)->operands()[1].get());
  EXPECT_EQ(serializeSizeExpr(**back), dagBytes);
}

std::vector<uint8_t> header(uint64_t count, uint8_t version = 2) {
  std::vector<uint8_t> b = {'Q', 'D', 'S', 'X', version, 0, 0, 0};
  while (count >= 0x80) {
    b.push_back(static_cast<uint8_t>(count | 0x80));
    count >>= 7;
  }
  b.push_back(static_cast<uint8_t>(count));
  return b;
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, std::initializer_list<uint8_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The deserialiser's error for `bytes`; fails the test if it succeeded.
std::string rejection(const std::vector<uint8_t> &bytes) {
  auto r = deserializeSizeExpr(bytes);
  EXPECT_FALSE(r.ok()) << "accepted " << print(*r);
  if (r.ok())
    return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

constexpr uint8_t kConst = 0, kArg = 1, kField = 2, kRead = 4, kVar = 5, kAdd = 6, kMor = 10,
                  kSor = 11;

TEST(SizeExprTest, HandWrittenEncodingsDecode) {
  // add(arg 3, const -2) as nodes [arg 3, const -2, add(0, 1)].
  auto e = deserializeSizeExpr(cat(header(3), {kArg, 3, kConst, 3, kAdd, 0, 1}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(print(*e), "%arg3 + -2");
  // max(%v1 in [0, 4): %v1) as [const 0, const 4, var 1, mor 1 (0, 1, 2)].
  auto m = deserializeSizeExpr(cat(header(4), {kConst, 0, kConst, 8, kVar, 1, kMor, 1, 0, 1, 2}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(print(*m), "max(%v1 in [0, 4): %v1)");
  // A field load: name length, name, index count, indices.
  auto f = deserializeSizeExpr(cat(header(2), {kConst, 2, kField, 2, 'a', 'b', 1, 0}));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(print(*f), "@ab[1]");
  // sum(%v0 in [0, 4): %v0), format version 2.
  auto sum = deserializeSizeExpr(cat(header(4), {kConst, 0, kConst, 8, kVar, 0, kSor, 0, 0, 1, 2}));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(print(*sum), "sum(%v0 in [0, 4): %v0)");
}

TEST(SizeExprTest, DeserialiserRejectsNonCanonicalVarints) {
  // const 1 is [kind 0, zigzag 2]; 0x82 0x00 is the same value padded.
  ASSERT_TRUE(deserializeSizeExpr(cat(header(1), {kConst, 2})).ok());
  std::string msg = rejection(cat(header(1), {kConst, 0x82, 0x00}));
  EXPECT_TRUE(contains(msg, "const")) << msg;
  // A padded node count.
  std::vector<uint8_t> padded = {'Q', 'D', 'S', 'X', 2, 0, 0, 0, 0x81, 0x00, kConst, 2};
  msg = rejection(padded);
  EXPECT_TRUE(contains(msg, "node count")) << msg;
  // Ten bytes whose last one carries bits past 64.
  msg = rejection(
      cat(header(1), {kConst, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}));
  EXPECT_TRUE(contains(msg, "const")) << msg;
  // The largest value still decodes: zigzag(INT64_MIN) = 2^64 - 1.
  auto big = deserializeSizeExpr(
      cat(header(1), {kConst, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ((*big)->value(), I64::min());
}

TEST(SizeExprTest, VersionOneDataStillDecodesButHasNoSums) {
  // Kernels cached by a version-1 library size their stacks as before.
  auto m = deserializeSizeExpr(
      cat(header(4, /*version=*/1), {kConst, 0, kConst, 8, kVar, 1, kMor, 1, 0, 1, 2}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(print(*m), "max(%v1 in [0, 4): %v1)");
  std::string msg =
      rejection(cat(header(4, /*version=*/1), {kConst, 0, kConst, 8, kVar, 0, kSor, 0, 0, 1, 2}));
  EXPECT_TRUE(contains(msg, "unknown node kind 11 in format version 1")) << msg;
  msg = rejection(cat(header(1), {12}));
  EXPECT_TRUE(contains(msg, "unknown node kind 12 in format version 2")) << msg;
}

TEST(SizeExprTest, DeserialiserRejectsBadHeaders) {
  EXPECT_TRUE(contains(rejection({}), "QDSX"));
  EXPECT_TRUE(contains(rejection({'Q', 'D', 'S'}), "QDSX"));
  EXPECT_TRUE(contains(rejection(cat({'Q', 'D', 'S', 'Y', 1, 0, 0, 0, 1}, {kConst, 0})), "QDSX"));
  std::vector<uint8_t> good = serializeSizeExpr(*c(5));
  ASSERT_TRUE(deserializeSizeExpr(good).ok());
  std::vector<uint8_t> v4 = good;
  v4[4] = 4;
  std::string msg = rejection(v4);
  EXPECT_TRUE(contains(msg, "version 4")) << msg;
  EXPECT_TRUE(contains(msg, "versions 1 to 3")) << msg;
  std::vector<uint8_t> v0 = good;
  v0[4] = 0;
  msg = rejection(v0);
  EXPECT_TRUE(contains(msg, "version 0")) << msg;
  std::vector<uint8_t> vHigh = good;
  vHigh[7] = 1; // version 0x01000003
  msg = rejection(vHigh);
  EXPECT_TRUE(contains(msg, "version 16777219")) << msg;
  // No nodes.
  msg = rejection(header(0));
  EXPECT_TRUE(contains(msg, "node count")) << msg;
  msg = rejection({'Q', 'D', 'S', 'X', 1, 0, 0, 0});
  EXPECT_TRUE(contains(msg, "node count")) << msg;
  // More nodes than bytes.
  msg = rejection(cat(header(1000), {kConst, 0}));
  EXPECT_TRUE(contains(msg, "1000 nodes")) << msg;
  msg = rejection(cat(header(~uint64_t(0)), {kConst, 0}));
  EXPECT_FALSE(msg.empty());
}

TEST(SizeExprTest, DeserialiserRejectsEveryTruncation) {
  for (const SizeExprRef &e : handPicked()) {
    std::vector<uint8_t> bytes = serializeSizeExpr(*e);
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      EXPECT_FALSE(deserializeSizeExpr(prefix).ok()) << print(e) << " cut at " << n;
    }
  }
}

TEST(SizeExprTest, DeserialiserRejectsBadReferences) {
  // Self reference.
  std::string msg = rejection(cat(header(1), {kAdd, 0, 0}));
  EXPECT_TRUE(contains(msg, "node 0 refers to node 0")) << msg;
  // Forward reference.
  msg = rejection(cat(header(3), {kConst, 1, kAdd, 0, 2, kConst, 2}));
  EXPECT_TRUE(contains(msg, "node 1 refers to node 2")) << msg;
  // A reference past every node.
  msg = rejection(cat(header(2), {kConst, 1, kAdd, 0, 0x80, 0x80, 0x04}));
  EXPECT_TRUE(contains(msg, "refers to node 65536")) << msg;
  // Missing operands.
  msg = rejection(cat(header(2), {kConst, 1, kAdd, 0}));
  EXPECT_TRUE(contains(msg, "truncated")) << msg;
}

TEST(SizeExprTest, DeserialiserRejectsBadNodes) {
  std::string msg = rejection(cat(header(1), {16}));
  EXPECT_TRUE(contains(msg, "unknown node kind 16")) << msg;
  msg = rejection(cat(header(1), {0xff}));
  EXPECT_TRUE(contains(msg, "unknown node kind 255")) << msg;
  // Trailing bytes after a valid encoding.
  std::vector<uint8_t> bytes = serializeSizeExpr(*SizeExpr::add(arg(0), c(1)));
  bytes.push_back(0);
  msg = rejection(bytes);
  EXPECT_TRUE(contains(msg, "trailing")) << msg;
  // An unbound variable, alone or next to a range binding another one.
  msg = rejection(cat(header(1), {kVar, 0}));
  EXPECT_TRUE(contains(msg, "%v0")) << msg;
  msg = rejection(cat(header(4), {kConst, 0, kConst, 8, kVar, 1, kMor, 2, 0, 1, 2}));
  EXPECT_TRUE(contains(msg, "%v1")) << msg;
  // The variable of a range in its own bounds.
  msg = rejection(cat(header(4), {kConst, 0, kVar, 1, kConst, 0, kMor, 1, 0, 1, 2}));
  EXPECT_TRUE(contains(msg, "%v1")) << msg;
  // A payload past its limit: an argument index over 2^20.
  msg = rejection(cat(header(1), {kArg, 0x81, 0x80, 0x80, 0x01}));
  EXPECT_TRUE(contains(msg, "scalar_arg")) << msg;
  // A varint longer than 10 bytes.
  msg = rejection(
      cat(header(1), {kConst, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0}));
  EXPECT_TRUE(contains(msg, "const")) << msg;
  // A field name longer than the input.
  msg = rejection(cat(header(1), {kField, 20, 'a', 0}));
  EXPECT_TRUE(contains(msg, "field_load")) << msg;
}

TEST(SizeExprTest, DeserialiserLimitsOperandCounts) {
  auto reads = [](uint8_t kind, unsigned count) {
    std::vector<uint8_t> b = cat(header(2), {kConst, 2, kind});
    if (kind == kField)
      b.insert(b.end(), {1, 'f'});
    else
      b.push_back(0); // argument 0
    b.push_back(static_cast<uint8_t>(count));
    b.insert(b.end(), count, 0); // every index is node 0
    return b;
  };
  for (uint8_t kind : {kField, kRead}) {
    auto ok = deserializeSizeExpr(reads(kind, 64));
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ((*ok)->operands().size(), 64u);
    std::string msg = rejection(reads(kind, 65));
    EXPECT_TRUE(contains(msg, "bad or truncated payload")) << msg;
  }
}

TEST(SizeExprTest, DeserialiserLimitsNesting) {
  // A chain add(add(...(1, 1)...), 1) of the given depth.
  auto chain = [](unsigned depth) {
    SizeExprRef e = c(1);
    for (unsigned d = 1; d < depth; ++d)
      e = SizeExpr::make(K::Add, {e, c(1)});
    return e;
  };
  auto deepest = deserializeSizeExpr(serializeSizeExpr(*chain(4096)));
  ASSERT_TRUE(deepest.ok()) << deepest.status();
  EXPECT_EQ((*deepest)->size(), 2u * 4096 - 1);
  FakeInputs in;
  EXPECT_EQ(valueOf(*deepest, in), 4096);
  std::string msg = rejection(serializeSizeExpr(*chain(4097)));
  EXPECT_TRUE(contains(msg, "nesting exceeds 4096")) << msg;
  msg = rejection(serializeSizeExpr(*chain(6000)));
  EXPECT_TRUE(contains(msg, "nesting exceeds 4096")) << msg;
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

//===----------------------------------------------------------------------===//
// Properties
//===----------------------------------------------------------------------===//

/// A structural choice, uniform in [lo, hi) whatever RapidCheck's size.
template <typename T> T pick(T lo, T hi) {
  return *rc::gen::resize(100, rc::gen::inRange(lo, hi));
}

/// A random well-formed expression built with SizeExpr::make (no
/// simplification). Bound variables are only used inside a range binding
/// them; ranges may shadow an enclosing variable.
SizeExprRef genExpr(int depth, std::vector<unsigned> &bound) {
  auto small = [] { return pick<int64_t>(-3, 8); };
  int choice = pick(0, depth > 0 ? 14 : 4);
  switch (choice) {
  case 0:
    return SizeExpr::make(
        K::Const, {},
        *rc::gen::weightedOneOf<int64_t>({{4, rc::gen::inRange<int64_t>(-3, 8)},
                                          {1, rc::gen::arbitrary<int64_t>()},
                                          {1, rc::gen::element(I64::min(), I64::max())}}));
  case 1:
    return SizeExpr::make(K::ScalarArg, {}, 0, pick(0u, 4u));
  case 2:
    return SizeExpr::make(K::NdarrayShape, {}, 0, pick(0u, 4u), pick(0u, 3u));
  case 3:
    if (bound.empty())
      return SizeExpr::make(K::Const, {}, small());
    return SizeExpr::make(K::BoundVar, {}, 0, *rc::gen::elementOf(bound));
  case 4:
  case 5: {
    std::vector<SizeExprRef> idx;
    int n = pick(0, 3);
    for (int i = 0; i < n; ++i)
      idx.push_back(genExpr(depth - 1, bound));
    if (choice == 4)
      return SizeExpr::make(
          K::FieldLoad, std::move(idx), 0, 0, 0,
          *rc::gen::elementOf(std::vector<std::string>{"x", "m", "s", "no_such"}));
    return SizeExpr::make(K::NdarrayRead, std::move(idx), 0, pick(0u, 4u));
  }
  case 6:
  case 7:
  case 8:
  case 9: {
    static constexpr K ops[] = {K::Add, K::Sub, K::Mul, K::Max};
    auto a = genExpr(depth - 1, bound);
    auto b = genExpr(depth - 1, bound);
    return SizeExpr::make(ops[choice - 6], {a, b});
  }
  case 11: {
    // The IR's other integer operations; a bound variable divided by a small
    // divisor is a flattened index (the evaluator's rows plan).
    static constexpr K ops[] = {K::Min, K::Div, K::Rem};
    K op = ops[pick(0, 3)];
    if (!bound.empty() && pick(0, 2) == 0)
      return SizeExpr::make(op, {SizeExpr::make(K::BoundVar, {}, 0, *rc::gen::elementOf(bound)),
                                 SizeExpr::make(K::Const, {}, pick<int64_t>(-2, 6))});
    auto a = genExpr(depth - 1, bound);
    auto b = genExpr(depth - 1, bound);
    return SizeExpr::make(op, {a, b});
  }
  case 12:
    return SizeExpr::make(K::Trunc32, {genExpr(depth - 1, bound)});
  default: {
    unsigned v = pick(0u, 4u);
    auto begin = genExpr(depth - 1, bound);
    auto end = genExpr(depth - 1, bound);
    bound.push_back(v);
    auto body = genExpr(depth - 1, bound);
    bound.pop_back();
    return SizeExpr::make(*rc::gen::element(K::MaxOverRange, K::SumOverRange), {begin, end, body},
                          0, v);
  }
  }
}

SizeExprRef genExpr() {
  std::vector<unsigned> bound;
  return genExpr(pick(0, 6), bound);
}

RC_GTEST_PROP(SizeExprTest, SerialisationRoundTrips, ()) {
  SizeExprRef e = genExpr();
  RC_CLASSIFY(e->size() >= 10, "10+ nodes");
  std::vector<uint8_t> bytes = serializeSizeExpr(*e);
  auto back = deserializeSizeExpr(bytes);
  RC_ASSERT(back.ok());
  RC_ASSERT((*back)->equals(*e));
  RC_ASSERT(serializeSizeExpr(**back) == bytes);
  RC_ASSERT(printSizeExpr(**back) == printSizeExpr(*e));
  FakeInputs in = sampleInputs();
  RC_ASSERT(evalText(**back, in, 5000) == evalText(*e, in, 5000));
}

RC_GTEST_PROP(SizeExprTest, TruncatedEncodingsAreRejected, ()) {
  SizeExprRef e = genExpr();
  std::vector<uint8_t> bytes = serializeSizeExpr(*e);
  size_t n = pick<size_t>(0, bytes.size());
  bytes.resize(n);
  RC_ASSERT(!deserializeSizeExpr(bytes).ok());
}

/// Whatever the deserialiser accepts is a well-formed expression: it
/// evaluates without crashing and its canonical encoding is a fixed point.
void checkAccepted(const SizeExprRef &e) {
  FakeInputs in = sampleInputs();
  (void)evaluateSizeExpr(*e, in, 2000);
  std::vector<uint8_t> canonical = serializeSizeExpr(*e);
  auto again = deserializeSizeExpr(canonical);
  RC_ASSERT(again.ok());
  RC_ASSERT(serializeSizeExpr(**again) == canonical);
}

RC_GTEST_PROP(SizeExprTest, RandomBytesNeverCrash, (std::vector<uint8_t> body)) {
  // Behind a valid header, so that the node decoder sees the bytes.
  std::vector<uint8_t> bytes = {'Q', 'D', 'S', 'X', 1, 0, 0, 0};
  bytes.insert(bytes.end(), body.begin(), body.end());
  auto r = deserializeSizeExpr(bytes);
  RC_TAG(r.ok() ? "accepted" : "rejected");
  if (r.ok())
    checkAccepted(*r);
  // And as they are.
  auto raw = deserializeSizeExpr(body);
  RC_ASSERT(!raw.ok() || body.size() >= 10);
}

RC_GTEST_PROP(SizeExprTest, MutatedEncodingsNeverCrash, ()) {
  SizeExprRef e = genExpr();
  std::vector<uint8_t> bytes = serializeSizeExpr(*e);
  int edits = *rc::gen::inRange(1, 4);
  for (int i = 0; i < edits; ++i) {
    size_t pos = pick<size_t>(8, bytes.size());
    switch (*rc::gen::inRange(0, 3)) {
    case 0:
      bytes[pos] = *rc::gen::arbitrary<uint8_t>();
      break;
    case 1:
      bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(pos), *rc::gen::arbitrary<uint8_t>());
      break;
    default:
      if (bytes.size() > 9)
        bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(pos));
    }
  }
  auto r = deserializeSizeExpr(bytes);
  RC_TAG(r.ok() ? "accepted" : "rejected");
  if (r.ok())
    checkAccepted(*r);
}

/// A direct reading of the documented semantics, for comparison: every
/// iteration of every range is evaluated.
class ReferenceEvaluator {
public:
  explicit ReferenceEvaluator(const SizeExprInputs &in) : in_(in) {}
  bool error = false;     // a missing argument or axis, an unbound variable
  bool saturated = false; // some operation overflowed
  bool unknown = false;   // some read was out of range (counted as 0)
  bool tooBig = false;    // a range too long to enumerate here

  std::optional<int64_t> eval(const SizeExpr &e) {
    const auto &ops = e.operands();
    switch (e.kind()) {
    case K::Const:
      return e.value();
    case K::ScalarArg:
      return check(in_.scalarArg(e.argIndex()));
    case K::NdarrayShape:
      return check(in_.ndarrayShape(e.argIndex(), e.axis()));
    case K::BoundVar:
      for (auto it = vars_.rbegin(); it != vars_.rend(); ++it)
        if (it->first == e.var())
          return it->second;
      error = true;
      return std::nullopt;
    case K::FieldLoad:
    case K::NdarrayRead: {
      std::vector<int64_t> idx;
      for (const auto &op : ops) {
        auto v = eval(*op);
        if (!v)
          return std::nullopt;
        idx.push_back(*v);
      }
      auto v = e.kind() == K::FieldLoad ? in_.fieldElement(e.fieldName(), idx)
                                        : in_.ndarrayElement(e.argIndex(), idx);
      unknown |= !v;
      return v.value_or(0); // an element outside the buffer counts as 0
    }
    case K::MaxOverRange:
    case K::SumOverRange: {
      auto b = eval(*ops[0]);
      auto en = eval(*ops[1]);
      if (!b || !en)
        return std::nullopt;
      if (*en > *b && static_cast<uint64_t>(*en) - static_cast<uint64_t>(*b) > 64) {
        tooBig = true;
        return std::nullopt;
      }
      std::optional<int64_t> best;
      int64_t sum = 0;
      for (int64_t i = *b; i < *en; ++i) {
        vars_.emplace_back(e.var(), i);
        auto v = eval(*ops[2]);
        vars_.pop_back();
        if (!v)
          return std::nullopt;
        best = best ? std::max(*best, *v) : *v;
        if (e.kind() == K::SumOverRange && __builtin_add_overflow(sum, *v, &sum)) {
          saturated = true;
          return *v > 0 ? I64::max() : I64::min();
        }
      }
      return e.kind() == K::SumOverRange ? sum : best.value_or(0);
    }
    case K::Trunc32: {
      auto a = eval(*ops[0]);
      if (!a)
        return std::nullopt;
      return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(*a)));
    }
    default: {
      auto a = eval(*ops[0]);
      auto b = eval(*ops[1]);
      if (!a || !b)
        return std::nullopt;
      int64_t r = 0;
      bool overflow = false, positive = false;
      switch (e.kind()) {
      case K::Add:
        overflow = __builtin_add_overflow(*a, *b, &r);
        positive = *b > 0;
        break;
      case K::Sub:
        overflow = __builtin_sub_overflow(*a, *b, &r);
        positive = *b < 0;
        break;
      case K::Mul:
        overflow = __builtin_mul_overflow(*a, *b, &r);
        positive = (*a < 0) == (*b < 0);
        break;
      case K::Min:
        r = std::min(*a, *b);
        break;
      case K::Div: // the IR's: truncating, MIN / -1 wraps; by 0: 0
      case K::Rem:
        if (*b == 0)
          r = 0;
        else if (*b == -1)
          r = e.kind() == K::Div ? int64_t(0 - uint64_t(*a)) : 0;
        else
          r = e.kind() == K::Div ? *a / *b : *a % *b;
        break;
      default:
        r = std::max(*a, *b);
      }
      if (overflow) {
        saturated = true;
        return positive ? I64::max() : I64::min();
      }
      return r;
    }
    }
  }

private:
  std::optional<int64_t> check(std::optional<int64_t> v) {
    error |= !v;
    return v;
  }
  const SizeExprInputs &in_;
  std::vector<std::pair<unsigned, int64_t>> vars_;
};

/// The same tree built with the simplifying constructors.
SizeExprRef rebuild(const SizeExprRef &e) {
  std::vector<SizeExprRef> ops;
  for (const auto &op : e->operands())
    ops.push_back(rebuild(op));
  switch (e->kind()) {
  case K::Add:
    return SizeExpr::add(ops[0], ops[1]);
  case K::Sub:
    return SizeExpr::sub(ops[0], ops[1]);
  case K::Mul:
    return SizeExpr::mul(ops[0], ops[1]);
  case K::Max:
    return SizeExpr::max(ops[0], ops[1]);
  case K::Min:
    return SizeExpr::min(ops[0], ops[1]);
  case K::Div:
    return SizeExpr::div(ops[0], ops[1]);
  case K::Rem:
    return SizeExpr::rem(ops[0], ops[1]);
  case K::Trunc32:
    return SizeExpr::trunc32(ops[0]);
  case K::MaxOverRange:
    return SizeExpr::maxOverRange(e->var(), ops[0], ops[1], ops[2]);
  case K::SumOverRange:
    return SizeExpr::sumOverRange(e->var(), ops[0], ops[1], ops[2]);
  default:
    return SizeExpr::make(e->kind(), std::move(ops), e->value(), e->argIndex(), e->axis(),
                          e->fieldName());
  }
}

RC_GTEST_PROP(SizeExprTest, EvaluationMatchesTheReference, ()) {
  SizeExprRef e = genExpr();
  FakeInputs in = sampleInputs();
  in.views = *rc::gen::arbitrary<bool>();
  ReferenceEvaluator ref(in);
  std::optional<int64_t> expected = ref.eval(*e);
  RC_PRE(!ref.tooBig);
  absl::StatusOr<int64_t> got = evaluateSizeExpr(*e, in, 1 << 20);
  RC_TAG(ref.error ? "error" : ref.saturated ? "saturated" : ref.unknown ? "unknown" : "exact");
  if (ref.error) {
    // A missing argument fails the evaluation, wherever it is.
    RC_ASSERT(!got.ok());
    return;
  }
  if (ref.saturated)
    return; // a saturated iteration that a monotone range skips is fine
  RC_ASSERT(expected.has_value());
  RC_ASSERT(got.ok());
  RC_ASSERT(*got == *expected);
  if (ref.unknown)
    return; // simplification may drop a read whose index is out of range
  // The simplifying constructors preserve the value of an expression that
  // reads nothing out of range.
  SizeExprRef simple = rebuild(e);
  absl::StatusOr<int64_t> s = evaluateSizeExpr(*simple, in, 1 << 20);
  RC_ASSERT(s.ok());
  RC_ASSERT(*s == *expected);
}

// The sizing result's names come with qd::sizeexpr (this test links nothing
// else), so a runtime reports tiers without the compile-time analyses.
TEST(KernelSizingTest, TiersAndMethodsHaveNamesWithoutTheAnalyses) {
  EXPECT_EQ(toString(SizingTier::LaunchTime), "tier 2 launch-time");
  EXPECT_EQ(toString(SizingMethod::BellmanFord), "bellman-ford");
  KernelSizing empty;
  EXPECT_TRUE(empty.stacks().empty());
  EXPECT_EQ(empty.find(nullptr), nullptr);
}

} // namespace
} // namespace qd
