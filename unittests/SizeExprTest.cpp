//===- SizeExprTest.cpp - Launch-time adstack bounds ----------------------===//
//
// SizeExprs, the launch-time bounds of adstacks: construction,
// simplification and printing. Evaluation, serialisation and the
// properties are in SizeExpr{Eval,Serialisation,Property}Test.cpp.
//
//===----------------------------------------------------------------------===//
#include "SizeExprTestInputs.h"

namespace qd {
namespace {

using namespace sizeexprtest;

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

} // namespace
} // namespace qd
