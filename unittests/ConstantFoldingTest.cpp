//===- ConstantFoldingTest.cpp - Exact scalar evaluation ------------------===//
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/IRBuilder.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace qd {
namespace {

using I32 = std::numeric_limits<int32_t>;
using I64 = std::numeric_limits<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ConstantValue i1(bool v) {
  return ConstantValue::ofInt(ScalarType::I1, v);
}
ConstantValue i32(int64_t v) {
  return ConstantValue::ofInt(ScalarType::I32, v);
}
ConstantValue i64(int64_t v) {
  return ConstantValue::ofInt(ScalarType::I64, v);
}
ConstantValue f32(double v) {
  return ConstantValue::ofFloat(ScalarType::F32, v);
}
ConstantValue f64(double v) {
  return ConstantValue::ofFloat(ScalarType::F64, v);
}

/// foldBinary's integer result (fails the test on nullopt or a type change).
int64_t intOf(const std::optional<ConstantValue> &c, ScalarType type) {
  EXPECT_TRUE(c.has_value());
  if (!c)
    return -999;
  EXPECT_EQ(c->type, type);
  return c->i;
}

uint64_t bitsOf(const std::optional<ConstantValue> &c, ScalarType type) {
  EXPECT_TRUE(c.has_value());
  if (!c)
    return 0;
  EXPECT_EQ(c->type, type);
  return std::bit_cast<uint64_t>(c->f);
}

uint64_t bits(double d) {
  return std::bit_cast<uint64_t>(d);
}
uint64_t bitsF(float f) {
  return std::bit_cast<uint64_t>(static_cast<double>(f));
}

//===----------------------------------------------------------------------===//
// Integers
//===----------------------------------------------------------------------===//

TEST(ConstantFoldingTest, I32ArithmeticWraps) {
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Add, i32(I32::max()), i32(1)), ScalarType::I32), I32::min());
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Sub, i32(I32::min()), i32(1)), ScalarType::I32), I32::max());
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Mul, i32(65536), i32(65536)), ScalarType::I32), 0);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Mul, i32(-7), i32(6)), ScalarType::I32), -42);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Mul, i32(0x12345), i32(0x54321)), ScalarType::I32),
            static_cast<int32_t>(0x12345u * 0x54321u));
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Neg, i32(I32::min())), ScalarType::I32), I32::min());
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Abs, i32(I32::min())), ScalarType::I32), I32::min());
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Abs, i32(-5)), ScalarType::I32), 5);
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Not, i32(0)), ScalarType::I32), -1);
}

TEST(ConstantFoldingTest, I64ArithmeticWraps) {
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Add, i64(I64::max()), i64(1)), ScalarType::I64), I64::min());
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Mul, i64(int64_t{1} << 32), i64(int64_t{1} << 32)),
                  ScalarType::I64),
            0);
  // i32 would wrap here, i64 does not.
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Add, i64(I32::max()), i64(1)), ScalarType::I64),
            int64_t{I32::max()} + 1);
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Neg, i64(I64::min())), ScalarType::I64), I64::min());
}

TEST(ConstantFoldingTest, DivisionAndRemainder) {
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Div, i32(-7), i32(2)), ScalarType::I32), -3);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Rem, i32(-7), i32(2)), ScalarType::I32), -1);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Rem, i32(7), i32(-2)), ScalarType::I32), 1);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Div, i64(I64::min()), i64(2)), ScalarType::I64),
            I64::min() / 2);
  // Undefined or trapping on real hardware: never folded.
  EXPECT_EQ(foldBinary(BinaryOp::Div, i32(1), i32(0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Rem, i32(1), i32(0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Div, i64(0), i64(0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Div, i32(I32::min()), i32(-1)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Rem, i32(I32::min()), i32(-1)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Div, i64(I64::min()), i64(-1)), std::nullopt);
  // INT_MIN of i32 divided by -1 in i64 is fine.
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Div, i64(I32::min()), i64(-1)), ScalarType::I64),
            -int64_t{I32::min()});
}

TEST(ConstantFoldingTest, Shifts) {
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shl, i32(1), i32(31)), ScalarType::I32), I32::min());
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shl, i32(3), i32(31)), ScalarType::I32), I32::min());
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shl, i64(1), i64(40)), ScalarType::I64), int64_t{1} << 40);
  // Arithmetic right shift.
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shr, i32(-16), i32(2)), ScalarType::I32), -4);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shr, i32(I32::min()), i32(31)), ScalarType::I32), -1);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shr, i64(-1), i64(63)), ScalarType::I64), -1);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Shl, i32(5), i32(0)), ScalarType::I32), 5);
  // Shift amounts outside [0, width) are not folded.
  EXPECT_EQ(foldBinary(BinaryOp::Shl, i32(1), i32(32)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Shr, i32(1), i32(-1)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Shl, i64(1), i64(64)), std::nullopt);
  EXPECT_NE(foldBinary(BinaryOp::Shl, i64(1), i64(63)), std::nullopt);
}

TEST(ConstantFoldingTest, BitwiseMinMaxAndI1) {
  EXPECT_EQ(intOf(foldBinary(BinaryOp::And, i32(12), i32(10)), ScalarType::I32), 8);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Or, i32(12), i32(10)), ScalarType::I32), 14);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Xor, i32(12), i32(10)), ScalarType::I32), 6);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Min, i32(-3), i32(2)), ScalarType::I32), -3);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Max, i64(-3), i64(2)), ScalarType::I64), 2);
  // i1: logical operations only; results stay 0 or 1.
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Xor, i1(true), i1(true)), ScalarType::I1), 0);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::Or, i1(false), i1(true)), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldBinary(BinaryOp::And, i1(true), i1(false)), ScalarType::I1), 0);
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Not, i1(true)), ScalarType::I1), 0);
  EXPECT_EQ(intOf(foldUnary(UnaryOp::Not, i1(false)), ScalarType::I1), 1);
  EXPECT_EQ(foldBinary(BinaryOp::Add, i1(true), i1(true)), std::nullopt);
  EXPECT_EQ(foldUnary(UnaryOp::Neg, i1(true)), std::nullopt);
  // Mismatched operand types are never folded.
  EXPECT_EQ(foldBinary(BinaryOp::Add, i32(1), i64(1)), std::nullopt);
  EXPECT_EQ(foldCmp(CmpPredicate::Eq, i32(1), i64(1)), std::nullopt);
  // Float-only ops do not apply to integers.
  EXPECT_EQ(foldBinary(BinaryOp::Pow, i32(2), i32(3)), std::nullopt);
}

TEST(ConstantFoldingTest, IntegerComparisons) {
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Lt, i32(-1), i32(0)), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Ge, i32(-1), i32(0)), ScalarType::I1), 0);
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Le, i64(5), i64(5)), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Gt, i64(I64::min()), i64(I64::max())), ScalarType::I1), 0);
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Ne, i1(true), i1(false)), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Eq, i32(7), i32(7)), ScalarType::I1), 1);
}

//===----------------------------------------------------------------------===//
// Floats
//===----------------------------------------------------------------------===//

TEST(ConstantFoldingTest, F32OperationsRoundInF32) {
  // 0.1f + 0.2f is computed in float (0.300000011920928955...), not as the
  // double 0.1 + 0.2.
  float sum = 0.1f + 0.2f;
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Add, f32(0.1f), f32(0.2f)), ScalarType::F32), bitsF(sum));
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Add, f64(0.1), f64(0.2)), ScalarType::F64),
            bits(0.1 + 0.2));
  EXPECT_NE(bits(0.1 + 0.2), bitsF(sum));
  // 1/3 in f32 is the float nearest to 1/3, not the double.
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Div, f32(1), f32(3)), ScalarType::F32), bitsF(1.0f / 3.0f));
  // f32 overflow gives inf; the same product in f64 is finite.
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Mul, f32(1e30f), f32(1e30f)), ScalarType::F32), bits(kInf));
  volatile double big = 1e30; // 1e30 * 1e30 is not the double nearest 1e60
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Mul, f64(1e30), f64(1e30)), ScalarType::F64),
            bits(big * big));
  // Results are always f32-representable.
  std::optional<ConstantValue> q = foldBinary(BinaryOp::Div, f32(2), f32(7));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->f, static_cast<double>(static_cast<float>(q->f)));
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Rem, f32(7.5f), f32(2)), ScalarType::F32), bits(1.5));
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Rem, f64(-7.5), f64(2)), ScalarType::F64), bits(-1.5));
  EXPECT_EQ(bitsOf(foldUnary(UnaryOp::Sqrt, f32(2)), ScalarType::F32), bitsF(std::sqrt(2.0f)));
  EXPECT_EQ(bitsOf(foldUnary(UnaryOp::Sqrt, f64(2)), ScalarType::F64), bits(std::sqrt(2.0)));
}

TEST(ConstantFoldingTest, FloatDivisionByZeroIsNotFolded) {
  EXPECT_EQ(foldBinary(BinaryOp::Div, f32(1), f32(0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Div, f64(1), f64(-0.0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Div, f64(0), f64(0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Rem, f64(1), f64(0)), std::nullopt);
  // Dividing zero by something is fine and keeps the sign.
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Div, f64(-0.0), f64(5)), ScalarType::F64), bits(-0.0));
}

TEST(ConstantFoldingTest, FloatUnary) {
  EXPECT_EQ(bitsOf(foldUnary(UnaryOp::Neg, f64(0.0)), ScalarType::F64), bits(-0.0));
  EXPECT_EQ(bitsOf(foldUnary(UnaryOp::Abs, f32(-2.5f)), ScalarType::F32), bits(2.5));
  EXPECT_EQ(bitsOf(foldUnary(UnaryOp::Floor, f64(-1.5)), ScalarType::F64), bits(-2.0));
  EXPECT_EQ(bitsOf(foldUnary(UnaryOp::Ceil, f64(-1.5)), ScalarType::F64), bits(-1.0));
  // Transcendentals differ between libms: not folded.
  for (UnaryOp op :
       {UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Tan, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh})
    EXPECT_EQ(foldUnary(op, f64(0.5)), std::nullopt) << toString(op);
  EXPECT_EQ(foldBinary(BinaryOp::Pow, f64(2), f64(3)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Atan2, f64(1), f64(1)), std::nullopt);
  EXPECT_EQ(foldUnary(UnaryOp::Not, f64(1)), std::nullopt);
}

TEST(ConstantFoldingTest, NaNComparisonsAreOrderedExceptNe) {
  for (auto [a, b] : {std::pair{f64(kNaN), f64(1)}, std::pair{f64(1), f64(kNaN)},
                      std::pair{f32(kNaN), f32(kNaN)}}) {
    EXPECT_EQ(intOf(foldCmp(CmpPredicate::Eq, a, b), ScalarType::I1), 0);
    EXPECT_EQ(intOf(foldCmp(CmpPredicate::Lt, a, b), ScalarType::I1), 0);
    EXPECT_EQ(intOf(foldCmp(CmpPredicate::Le, a, b), ScalarType::I1), 0);
    EXPECT_EQ(intOf(foldCmp(CmpPredicate::Gt, a, b), ScalarType::I1), 0);
    EXPECT_EQ(intOf(foldCmp(CmpPredicate::Ge, a, b), ScalarType::I1), 0);
    EXPECT_EQ(intOf(foldCmp(CmpPredicate::Ne, a, b), ScalarType::I1), 1);
  }
  // Signed zeros compare equal.
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Eq, f64(0.0), f64(-0.0)), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldCmp(CmpPredicate::Lt, f64(-kInf), f64(-1e308)), ScalarType::I1), 1);
}

TEST(ConstantFoldingTest, FloatMinMax) {
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Min, f64(-1), f64(2)), ScalarType::F64), bits(-1.0));
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Max, f32(-1), f32(2)), ScalarType::F32), bits(2.0));
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Max, f64(-kInf), f64(-1)), ScalarType::F64), bits(-1.0));
  // Equal zeros of one sign are fine.
  EXPECT_EQ(bitsOf(foldBinary(BinaryOp::Min, f64(-0.0), f64(-0.0)), ScalarType::F64), bits(-0.0));
  // NaN or zeros of opposite signs: backends disagree, so no folding.
  EXPECT_EQ(foldBinary(BinaryOp::Min, f64(kNaN), f64(1)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Max, f32(1), f32(kNaN)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Min, f64(0.0), f64(-0.0)), std::nullopt);
  EXPECT_EQ(foldBinary(BinaryOp::Max, f32(-0.0), f32(0.0)), std::nullopt);
}

//===----------------------------------------------------------------------===//
// Casts
//===----------------------------------------------------------------------===//

TEST(ConstantFoldingTest, FloatToIntTruncates) {
  EXPECT_EQ(intOf(foldCast(f64(2.9), ScalarType::I32), ScalarType::I32), 2);
  EXPECT_EQ(intOf(foldCast(f64(-2.9), ScalarType::I32), ScalarType::I32), -2);
  EXPECT_EQ(intOf(foldCast(f32(-0.5f), ScalarType::I64), ScalarType::I64), 0);
  EXPECT_EQ(intOf(foldCast(f64(2147483647.9), ScalarType::I32), ScalarType::I32), I32::max());
  EXPECT_EQ(intOf(foldCast(f64(-2147483648.9), ScalarType::I32), ScalarType::I32), I32::min());
  EXPECT_EQ(intOf(foldCast(f64(-9223372036854775808.0), ScalarType::I64), ScalarType::I64),
            I64::min());
  // Out of range, infinite or NaN: left to the runtime.
  EXPECT_EQ(foldCast(f64(2147483648.0), ScalarType::I32), std::nullopt);
  EXPECT_EQ(foldCast(f64(-2147483649.0), ScalarType::I32), std::nullopt);
  EXPECT_EQ(foldCast(f64(9223372036854775808.0), ScalarType::I64), std::nullopt);
  EXPECT_EQ(foldCast(f32(kInf), ScalarType::I64), std::nullopt);
  EXPECT_EQ(foldCast(f64(kNaN), ScalarType::I32), std::nullopt);
  // float -> i1 is not a defined conversion.
  EXPECT_EQ(foldCast(f64(1), ScalarType::I1), std::nullopt);
}

TEST(ConstantFoldingTest, IntToFloatRounds) {
  // 2^24 + 1 is not representable in f32: round to nearest even (2^24).
  EXPECT_EQ(bitsOf(foldCast(i32(16777217), ScalarType::F32), ScalarType::F32), bits(16777216.0));
  EXPECT_EQ(bitsOf(foldCast(i32(16777219), ScalarType::F32), ScalarType::F32), bits(16777220.0));
  EXPECT_EQ(bitsOf(foldCast(i32(16777217), ScalarType::F64), ScalarType::F64), bits(16777217.0));
  // 2^53 + 1 in f64, directly from i64 (one rounding).
  EXPECT_EQ(bitsOf(foldCast(i64((int64_t{1} << 53) + 1), ScalarType::F64), ScalarType::F64),
            bits(9007199254740992.0));
  // i64 -> f32 rounds once, not through f64: 2^53 + 2^29 + 1 rounds up in
  // one step but down when going through double first.
  int64_t tricky = (int64_t{1} << 53) + (int64_t{1} << 29) + 1;
  EXPECT_EQ(bitsOf(foldCast(i64(tricky), ScalarType::F32), ScalarType::F32),
            bitsF(static_cast<float>(tricky)));
  EXPECT_NE(bitsF(static_cast<float>(tricky)),
            bitsF(static_cast<float>(static_cast<double>(tricky))));
  EXPECT_EQ(bitsOf(foldCast(i1(true), ScalarType::F32), ScalarType::F32), bits(1.0));
}

TEST(ConstantFoldingTest, IntegerCastsAndI1) {
  // Truncation and sign extension.
  EXPECT_EQ(intOf(foldCast(i64(int64_t{1} << 32 | 5), ScalarType::I32), ScalarType::I32), 5);
  EXPECT_EQ(intOf(foldCast(i64(0xFFFFFFFF), ScalarType::I32), ScalarType::I32), -1);
  EXPECT_EQ(intOf(foldCast(i32(-1), ScalarType::I64), ScalarType::I64), -1);
  // i1 -> integers zero-extend.
  EXPECT_EQ(intOf(foldCast(i1(true), ScalarType::I32), ScalarType::I32), 1);
  EXPECT_EQ(intOf(foldCast(i1(true), ScalarType::I64), ScalarType::I64), 1);
  // integer -> i1 is "not zero" (2 is true, not its low bit).
  EXPECT_EQ(intOf(foldCast(i32(2), ScalarType::I1), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldCast(i64(int64_t{1} << 40), ScalarType::I1), ScalarType::I1), 1);
  EXPECT_EQ(intOf(foldCast(i32(0), ScalarType::I1), ScalarType::I1), 0);
  EXPECT_EQ(intOf(foldCast(i32(-1), ScalarType::I1), ScalarType::I1), 1);
  // Float to float rounds to the target.
  EXPECT_EQ(bitsOf(foldCast(f64(0.1), ScalarType::F32), ScalarType::F32), bitsF(0.1f));
  EXPECT_EQ(bitsOf(foldCast(f64(1e300), ScalarType::F32), ScalarType::F32), bits(kInf));
  EXPECT_EQ(bitsOf(foldCast(f32(0.1f), ScalarType::F64), ScalarType::F64), bitsF(0.1f));
}

//===----------------------------------------------------------------------===//
// Evaluation of statement trees
//===----------------------------------------------------------------------===//

struct Fixture {
  Module module;
  Kernel *kernel = module.addKernel(std::make_unique<Kernel>("k"));
  Argument *n = kernel->addArgument(std::make_unique<Argument>("n", Type::i32()));
  IRBuilder b{*kernel};
};

TEST(ConstantFoldingTest, EvaluateConstantIntOverAChain) {
  Fixture f;
  Value *c4 = f.b.i32(4);
  Value *c1 = f.b.i32(1);
  Value *sum = f.b.add(c4, c1);                              // 5
  Value *wide = f.b.cast(sum, ScalarType::I64);              // 5 : i64
  Value *sh = f.b.binary(BinaryOp::Shl, wide, f.b.i64(40));  // 5 << 40
  Value *back = f.b.cast(sh, ScalarType::I32);               // truncated: 0
  Value *cond = f.b.cmp(CmpPredicate::Eq, back, f.b.i32(0)); // true
  Value *sel = f.b.select(cond, sum, c4);                    // 5
  Value *neg = f.b.neg(sel);                                 // -5
  Value *fl = f.b.cast(neg, ScalarType::F32);                // -5.0
  Value *abs = f.b.unary(UnaryOp::Abs, fl);                  // 5.0
  Value *tr = f.b.cast(abs, ScalarType::I32);                // 5
  EXPECT_EQ(evaluateConstantInt(sum), 5);
  EXPECT_EQ(evaluateConstantInt(sh), int64_t{5} << 40);
  EXPECT_EQ(evaluateConstantInt(back), 0);
  EXPECT_EQ(evaluateConstantInt(cond), 1);
  EXPECT_EQ(evaluateConstantInt(neg), -5);
  EXPECT_EQ(evaluateConstantInt(fl), std::nullopt); // a float, not an int
  std::optional<ConstantValue> flv = evaluateConstant(fl);
  ASSERT_TRUE(flv);
  EXPECT_EQ(flv->type, ScalarType::F32);
  EXPECT_EQ(flv->f, -5.0);
  EXPECT_EQ(evaluateConstantInt(tr), 5);

  // Anything that is not a constant tree stops evaluation.
  Value *withArg = f.b.add(sum, f.n);
  EXPECT_EQ(evaluateConstantInt(withArg), std::nullopt);
  EXPECT_EQ(evaluateConstantInt(f.n), std::nullopt);
  EXPECT_EQ(evaluateConstantInt(nullptr), std::nullopt);
  EXPECT_EQ(evaluateConstantInt(f.b.binary(BinaryOp::Div, sum, f.b.i32(0))), std::nullopt);
  // A select only needs its chosen arm.
  EXPECT_EQ(evaluateConstantInt(f.b.select(f.b.i1(true), sum, withArg)), 5);
  EXPECT_EQ(evaluateConstantInt(f.b.select(f.b.i1(false), sum, withArg)), std::nullopt);
}

TEST(ConstantFoldingTest, EvaluateSharedOperandsOnce) {
  // A DAG of 60 doublings: without memoization this is 2^60 evaluations.
  Fixture f;
  Value *v = f.b.i64(1);
  for (int i = 0; i < 60; ++i)
    v = f.b.add(v, v);
  EXPECT_EQ(evaluateConstantInt(v), int64_t{1} << 60);
  // Same with a non-constant leaf: the failure must be fast too.
  Value *w = f.b.add(f.n, f.n);
  for (int i = 0; i < 60; ++i)
    w = f.b.mul(w, w);
  EXPECT_EQ(evaluateConstantInt(w), std::nullopt);
}

TEST(ConstantFoldingTest, EvaluationDepthIsBounded) {
  Fixture f;
  Value *v = f.b.i32(0);
  Value *one = f.b.i32(1);
  for (int i = 0; i < 64; ++i)
    v = f.b.add(v, one);
  EXPECT_EQ(evaluateConstantInt(v), 64);
  for (int i = 0; i < 1000; ++i)
    v = f.b.add(v, one);
  // Too deep to evaluate (no stack overflow, no partial answer).
  EXPECT_EQ(evaluateConstantInt(v), std::nullopt);
}

TEST(ConstantFoldingTest, ConstantTripCount) {
  Fixture f;
  Value *c3 = f.b.i32(3);
  Value *c10 = f.b.add(c3, f.b.i32(7));
  ForStmt *literal = f.b.parallelFor(2, 10).stmt();
  ForStmt *folded = f.b.parallelFor(c3, c10).stmt();
  ForStmt *empty = f.b.parallelFor(c10, c3).stmt();
  ForStmt *zero = f.b.parallelFor(5, 5).stmt();
  ForStmt *dynamic = f.b.parallelFor(0, f.n).stmt();
  ForStmt *negative = f.b.parallelFor(-4, -1).stmt();
  EXPECT_EQ(constantTripCount(*literal), 8);
  EXPECT_EQ(constantTripCount(*folded), 7);
  EXPECT_EQ(constantTripCount(*empty), 0);
  EXPECT_EQ(constantTripCount(*zero), 0);
  EXPECT_EQ(constantTripCount(*dynamic), std::nullopt);
  EXPECT_EQ(constantTripCount(*negative), 3);
}

TEST(ConstantFoldingTest, ConstantOfStatement) {
  auto c = ConstStmt::getFloat(ScalarType::F32, 0.1);
  ConstantValue v = c->value();
  EXPECT_EQ(v.type, ScalarType::F32);
  EXPECT_EQ(v.f, static_cast<double>(0.1f));
  auto i = ConstStmt::getInt(ScalarType::I64, -3);
  EXPECT_EQ(i->value(), i64(-3));
}

//===----------------------------------------------------------------------===//
// Properties: folding equals evaluation in the operation's own precision
//===----------------------------------------------------------------------===//

/// Reference i32 semantics, computed in 32-bit unsigned arithmetic.
std::optional<int32_t> referenceI32(BinaryOp op, int32_t a, int32_t b) {
  uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
  switch (op) {
  case BinaryOp::Add:
    return static_cast<int32_t>(ua + ub);
  case BinaryOp::Sub:
    return static_cast<int32_t>(ua - ub);
  case BinaryOp::Mul:
    return static_cast<int32_t>(ua * ub);
  case BinaryOp::Div:
    if (b == 0 || (a == I32::min() && b == -1))
      return std::nullopt;
    return a / b;
  case BinaryOp::Rem:
    if (b == 0 || (a == I32::min() && b == -1))
      return std::nullopt;
    return a % b;
  case BinaryOp::Min:
    return std::min(a, b);
  case BinaryOp::Max:
    return std::max(a, b);
  case BinaryOp::And:
    return static_cast<int32_t>(ua & ub);
  case BinaryOp::Or:
    return static_cast<int32_t>(ua | ub);
  case BinaryOp::Xor:
    return static_cast<int32_t>(ua ^ ub);
  case BinaryOp::Shl:
    if (b < 0 || b >= 32)
      return std::nullopt;
    return static_cast<int32_t>(ua << b);
  case BinaryOp::Shr:
    if (b < 0 || b >= 32)
      return std::nullopt;
    return a >> b;
  default:
    return std::nullopt;
  }
}

const BinaryOp kIntOps[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                            BinaryOp::Rem, BinaryOp::Min, BinaryOp::Max, BinaryOp::And,
                            BinaryOp::Or,  BinaryOp::Xor, BinaryOp::Shl, BinaryOp::Shr};

RC_GTEST_PROP(ConstantFoldingTest, FoldBinaryI32MatchesCpp, (int32_t a, int32_t b)) {
  // Small shift amounts and divisors matter too: mix in some.
  int32_t small = *rc::gen::inRange(-2, 34);
  for (int32_t rhs : {b, small}) {
    for (BinaryOp op : kIntOps) {
      std::optional<ConstantValue> got = foldBinary(op, i32(a), i32(rhs));
      std::optional<int32_t> want = referenceI32(op, a, rhs);
      RC_ASSERT(got.has_value() == want.has_value());
      if (want) {
        RC_ASSERT(got->type == ScalarType::I32);
        RC_ASSERT(got->i == int64_t{*want});
      }
    }
  }
}

template <typename T> std::optional<T> referenceFloat(BinaryOp op, T a, T b) {
  switch (op) {
  case BinaryOp::Add:
    return a + b;
  case BinaryOp::Sub:
    return a - b;
  case BinaryOp::Mul:
    return a * b;
  case BinaryOp::Div:
    if (b == 0)
      return std::nullopt;
    return a / b;
  case BinaryOp::Rem:
    if (b == 0)
      return std::nullopt;
    return std::fmod(a, b);
  case BinaryOp::Min:
  case BinaryOp::Max:
    if (std::isnan(a) || std::isnan(b) || (a == 0 && b == 0 && std::signbit(a) != std::signbit(b)))
      return std::nullopt;
    return op == BinaryOp::Min ? std::min(a, b) : std::max(a, b);
  default:
    return std::nullopt;
  }
}

const BinaryOp kFloatOps[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                              BinaryOp::Rem, BinaryOp::Min, BinaryOp::Max};

/// Same value, with every NaN considered equal (NaN sign and payload after
/// arithmetic are not specified by IEEE 754).
bool sameFloat(double x, double y) {
  if (std::isnan(x) || std::isnan(y))
    return std::isnan(x) && std::isnan(y);
  return std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
}

RC_GTEST_PROP(ConstantFoldingTest, FoldBinaryF32MatchesCpp, (uint32_t abits, uint32_t bbits)) {
  float a = std::bit_cast<float>(abits), b = std::bit_cast<float>(bbits);
  for (BinaryOp op : kFloatOps) {
    std::optional<ConstantValue> got = foldBinary(op, f32(a), f32(b));
    std::optional<float> want = referenceFloat(op, a, b);
    RC_ASSERT(got.has_value() == want.has_value());
    if (want) {
      RC_ASSERT(got->type == ScalarType::F32);
      RC_ASSERT(sameFloat(got->f, static_cast<double>(*want)));
    }
  }
}

RC_GTEST_PROP(ConstantFoldingTest, FoldBinaryF32OnOrdinaryValues, (int16_t x, int16_t y)) {
  // Random bit patterns are mostly huge or tiny; also test everyday values
  // where f32 and f64 rounding visibly differ.
  float a = static_cast<float>(x) / 10.0f, b = static_cast<float>(y) / 7.0f;
  for (BinaryOp op : kFloatOps) {
    std::optional<ConstantValue> got = foldBinary(op, f32(a), f32(b));
    std::optional<float> want = referenceFloat(op, a, b);
    RC_ASSERT(got.has_value() == want.has_value());
    if (want)
      RC_ASSERT(sameFloat(got->f, static_cast<double>(*want)));
  }
}

RC_GTEST_PROP(ConstantFoldingTest, FoldBinaryF64MatchesCpp, (uint64_t abits, uint64_t bbits)) {
  double a = std::bit_cast<double>(abits), b = std::bit_cast<double>(bbits);
  for (BinaryOp op : kFloatOps) {
    std::optional<ConstantValue> got = foldBinary(op, f64(a), f64(b));
    std::optional<double> want = referenceFloat(op, a, b);
    RC_ASSERT(got.has_value() == want.has_value());
    if (want) {
      RC_ASSERT(got->type == ScalarType::F64);
      RC_ASSERT(sameFloat(got->f, *want));
    }
  }
}

} // namespace
} // namespace qd
