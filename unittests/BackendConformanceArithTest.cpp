//===- BackendConformanceArithTest.cpp - Arithmetic on every backend ------===//
//
// docs/ir.md's arithmetic semantics on every registered backend, against
// exact values and the interpreter (support/BackendConformance.h): integer
// wrap-around, truncating division and remainders of every sign, shifts,
// saturating float-to-int casts, unsigned i1, and min/max with NaN and
// signed zeros.
//
//===----------------------------------------------------------------------===//
#include "BackendConformance.h"

#include <cmath>

namespace qd::conformance {
namespace {

using corpus::locationPrefix;
using corpus::message;

TEST_P(BackendConformanceTest, IntegerArithmeticWraps) {
  REQUIRE_CAPABILITY(int64);
  Pair p(backend(), R"(
field @a : i32[4]
field @b : i64[4]
field @o : i32[8]
field @q : i64[8]
kernel @k() {
  serial {
    %c0 = const 0 : i32
    %c1 = const 1 : i32
    %c2 = const 2 : i32
    %c3 = const 3 : i32
    %max = load @a[%c0] : i32
    %one = load @a[%c1] : i32
    %min = load @a[%c2] : i32
    %big = load @a[%c3] : i32
    %r0 = add %max, %one : i32
    store @o[%c0], %r0
    %r1 = sub %min, %one : i32
    store @o[%c1], %r1
    %r2 = mul %big, %big : i32
    store @o[%c2], %r2
    %r3 = neg %min : i32
    store @o[%c3], %r3
    %c4 = const 4 : i32
    %r4 = abs %min : i32
    store @o[%c4], %r4
    %M = load @b[%c0] : i64
    %O = load @b[%c1] : i64
    %N = load @b[%c2] : i64
    %s0 = add %M, %O : i64
    store @q[%c0], %s0
    %s1 = sub %N, %O : i64
    store @q[%c1], %s1
    %s2 = mul %M, %M : i64
    store @q[%c2], %s2
    %s3 = neg %N : i64
    store @q[%c3], %s3
    %c5 = const 5 : i32
    %s4 = cast %M : i64 to i32
    store @o[%c5], %s4
    %s5 = cast %min : i32 to i64
    store @q[%c5], %s5
  }
}
)");
  p.setRaw("a", {I32(kMax32), I32(1), I32(kMin32), I32(65536 + 3)});
  p.setRaw("b", {I64(kMax64), I64(1), I64(kMin64), I64(0)});
  p.runOk("k");
  EXPECT_BOTH(p, "o", 0, I32(kMin32));
  EXPECT_BOTH(p, "o", 1, I32(kMax32));
  EXPECT_BOTH(p, "o", 2, I32(static_cast<int32_t>(uint32_t(65539) * uint32_t(65539))));
  EXPECT_BOTH(p, "o", 3, I32(kMin32)); // -INT_MIN wraps
  EXPECT_BOTH(p, "o", 4, I32(kMin32)); // abs(INT_MIN) wraps
  EXPECT_BOTH(p, "o", 5, I32(-1));     // (i32) INT64_MAX
  EXPECT_BOTH(p, "q", 0, I64(kMin64));
  EXPECT_BOTH(p, "q", 1, I64(kMax64));
  EXPECT_BOTH(p, "q", 2, I64(1)); // (2^63-1)^2 mod 2^64
  EXPECT_BOTH(p, "q", 3, I64(kMin64));
  EXPECT_BOTH(p, "q", 5, I64(kMin32)); // sign-extended
  p.expectSame();
}

TEST_P(BackendConformanceTest, IntegerDivisionTruncatesAndIntMinByMinusOneWraps) {
  REQUIRE_CAPABILITY(int64);
  Pair p(backend(), R"(
field @x : i32[8]
field @y : i32[8]
field @d : i32[8]
field @r : i32[8]
field @X : i64[2]
field @Y : i64[2]
field @D : i64[2]
field @R : i64[2]
kernel @k() {
  parallel for %i = 0 to 8 {
    %a = load @x[%i] : i32
    %b = load @y[%i] : i32
    %q = div %a, %b : i32
    store @d[%i], %q
    %m = rem %a, %b : i32
    store @r[%i], %m
  }
  parallel for %j = 0 to 2 {
    %A = load @X[%j] : i64
    %B = load @Y[%j] : i64
    %Q = div %A, %B : i64
    store @D[%j], %Q
    %M = rem %A, %B : i64
    store @R[%j], %M
  }
}
)");
  p.set("x", {7, -7, 7, -7, kMin32, kMin32, kMax32, 0});
  p.set("y", {2, 2, -2, -2, -1, 1, -1, -5});
  p.setRaw("X", {I64(kMin64), I64(-9)});
  p.setRaw("Y", {I64(-1), I64(4)});
  p.runOk("k");
  int32_t wantD[] = {3, -3, -3, 3, kMin32, kMin32, -kMax32, 0};
  int32_t wantR[] = {1, -1, 1, -1, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) {
    EXPECT_BOTH(p, "d", i, I32(wantD[i]));
    EXPECT_BOTH(p, "r", i, I32(wantR[i]));
  }
  EXPECT_BOTH(p, "D", 0, I64(kMin64));
  EXPECT_BOTH(p, "R", 0, I64(0));
  EXPECT_BOTH(p, "D", 1, I64(-2));
  EXPECT_BOTH(p, "R", 1, I64(-1));
}

// C's truncated remainders (and quotients) for every sign, i32 and i64, by
// a divisor from memory and by a constant. NVIDIA's driver (580) returned
// the dividend for OpSRem by a negative divisor: qd's SPIR-V computes
// x - (x / y) y instead.
TEST_P(BackendConformanceTest, SignedRemaindersByNegativeDivisors) {
  REQUIRE_CAPABILITY(int64);
  auto module = *parseModule(R"(field @a : i64[8]
field @d : i64[8]
field @r : i64[8]
field @q : i64[8]
field @rc : i64[8]
field @a32 : i32[8]
field @d32 : i32[8]
field @r32 : i32[8]
field @rc32 : i32[8]

kernel @k() {
  parallel for %i = 0 to 8 {
    %x = load @a[%i] : i64
    %y = load @d[%i] : i64
    %r = rem %x, %y : i64
    store @r[%i], %r
    %q = div %x, %y : i64
    store @q[%i], %q
    %m3 = const -3 : i64
    %rc = rem %x, %m3 : i64
    store @rc[%i], %rc
    %x32 = load @a32[%i] : i32
    %y32 = load @d32[%i] : i32
    %r32 = rem %x32, %y32 : i32
    store @r32[%i], %r32
    %m7 = const -7 : i32
    %rc32 = rem %x32, %m7 : i32
    store @rc32[%i], %rc32
  }
}
)",
                             {"rem.qd", 1});
  auto program = *Program::create(*module);
  const int64_t a[8] = {5154, -5154, 7, -7, 5155, INT64_MAX, INT64_MIN, 0};
  const int64_t d[8] = {-3, -3, -3, -3, 3, -3, -1, -5};
  const int32_t a32[8] = {5154, -5154, 7, -7, 5155, INT32_MAX, INT32_MIN, 0};
  const int32_t d32[8] = {-3, -3, -3, -3, 3, -3, -1, -5};
  for (int i = 0; i < 8; ++i) {
    program->field("a")->set(i, Scalar::ofInt(ScalarType::I64, a[i]));
    program->field("d")->set(i, Scalar::ofInt(ScalarType::I64, d[i]));
    program->field("a32")->set(i, Scalar::ofInt(ScalarType::I32, a32[i]));
    program->field("d32")->set(i, Scalar::ofInt(ScalarType::I32, d32[i]));
  }
  absl::Status s = program->launch("k", {}, backend());
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 8; ++i) {
    bool wraps = d[i] == -1; // INT_MIN / -1 wraps, remainder 0
    EXPECT_EQ(program->field("r")->get(i).i, wraps ? 0 : a[i] % d[i]) << i;
    EXPECT_EQ(program->field("q")->get(i).i, wraps ? int64_t(0 - uint64_t(a[i])) : a[i] / d[i])
        << i;
    EXPECT_EQ(program->field("rc")->get(i).i, a[i] % -3) << i;
    EXPECT_EQ(program->field("r32")->get(i).i, d32[i] == -1 ? 0 : a32[i] % d32[i]) << i;
    EXPECT_EQ(program->field("rc32")->get(i).i, a32[i] % -7) << i;
  }
}

TEST_P(BackendConformanceTest, ShiftsAreArithmeticAndOutOfRangeAmountsAreErrors) {
  REQUIRE_CAPABILITY(int64);
  Pair p(backend(), R"(
field @x : i32[4]
field @s : i32[4]
field @o : i32[8]
field @X : i64
field @S : i64
field @O : i64[2]
kernel @k() {
  parallel for %i = 0 to 4 {
    %a = load @x[%i] : i32
    %b = load @s[%i] : i32
    %l = shl %a, %b : i32
    store @o[%i], %l
    %r = shr %a, %b : i32
    %four = const 4 : i32
    %j = add %i, %four : i32
    store @o[%j], %r
  }
  serial {
    %A = load @X[] : i64
    %B = load @S[] : i64
    %L = shl %A, %B : i64
    %z = const 0 : i32
    store @O[%z], %L
    %R = shr %A, %B : i64
    %one = const 1 : i32
    store @O[%one], %R
  }
}
)");
  p.set("x", {1, -8, -1, 0x40000000});
  p.set("s", {31, 1, 31, 1});
  p.setRaw("X", {I64(-3)});
  p.setRaw("S", {I64(63)});
  p.runOk("k");
  EXPECT_BOTH(p, "o", 0, I32(kMin32));
  EXPECT_BOTH(p, "o", 1, I32(-16));
  EXPECT_BOTH(p, "o", 2, I32(kMin32));
  EXPECT_BOTH(p, "o", 3, I32(kMin32));
  EXPECT_BOTH(p, "o", 4, I32(0));
  EXPECT_BOTH(p, "o", 5, I32(-4)); // arithmetic
  EXPECT_BOTH(p, "o", 6, I32(-1));
  EXPECT_BOTH(p, "o", 7, I32(0x20000000));
  EXPECT_BOTH(p, "O", 0, I64(kMin64));
  EXPECT_BOTH(p, "O", 1, I64(-1));
  for (int64_t bad : {32, -1, 1000}) {
    p.set("s", {0, 0, static_cast<double>(bad), 0});
    auto [a, b] = p.run("k");
    EXPECT_EQ(locationPrefix(a), "t.qd:12:5") << message(a);
    EXPECT_EQ(locationPrefix(b), "t.qd:12:5") << message(b);
    // (The interpreter names the amount: "shift amount 32 is outside".)
    EXPECT_NE(message(b).find("is outside [0, 32)"), std::string::npos) << message(b);
  }
  p.set("s", {0, 0, 0, 0});
  p.setRaw("S", {I64(64)});
  auto [a, b] = p.run("k");
  EXPECT_EQ(locationPrefix(a), "t.qd:22:5") << message(a);
  EXPECT_EQ(locationPrefix(b), "t.qd:22:5") << message(b);
}

TEST_P(BackendConformanceTest, FloatToIntCastsSaturate) {
  REQUIRE_CAPABILITY(int64);
  REQUIRE_CAPABILITY(float64);
  Pair p(backend(), R"(
field @f : f32[8]
field @d : f64[8]
field @a : i32[8]
field @b : i64[8]
field @c : i32[8]
field @e : i1[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %x = load @f[%i] : f32
    %y = load @d[%i] : f64
    %p = cast %x : f32 to i32
    store @a[%i], %p
    %q = cast %y : f64 to i64
    store @b[%i], %q
    %r = cast %y : f64 to i32
    store @c[%i], %r
    %s = cast %y : f64 to i1
    store @e[%i], %s
  }
}
)");
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  p.set("f", {nan, inf, -inf, 3e9, -3e9, -3.7, 2.9, -0.0});
  p.set("d", {nan, inf, -inf, 1e20, -1e20, -3.7, 2147483647.9, -0.0});
  p.runOk("k");
  int32_t wantA[] = {0, kMax32, kMin32, kMax32, kMin32, -3, 2, 0};
  int64_t wantB[] = {0, kMax64, kMin64, kMax64, kMin64, -3, 2147483647, 0};
  int32_t wantC[] = {0, kMax32, kMin32, kMax32, kMin32, -3, kMax32, 0};
  bool wantE[] = {true, true, true, true, true, true, true, false};
  for (int i = 0; i < 8; ++i) {
    EXPECT_BOTH(p, "a", i, I32(wantA[i]));
    EXPECT_BOTH(p, "b", i, I64(wantB[i]));
    EXPECT_BOTH(p, "c", i, I32(wantC[i]));
    EXPECT_BOTH(p, "e", i, I1(wantE[i]));
  }
}

TEST_P(BackendConformanceTest, I1IsUnsigned) {
  Pair p(backend(), R"(
field @a : i1[4]
field @b : i1[4]
field @o : i1[40]
field @n : i32[8]
field @g : f32[4]
kernel @k() {
  parallel for %i = 0 to 4 {
    %x = load @a[%i] : i1
    %y = load @b[%i] : i1
    %c10 = const 10 : i32
    %base = mul %i, %c10 : i32
    %r0 = add %x, %y : i1
    store @o[%base], %r0
    %k1 = const 1 : i32
    %j1 = add %base, %k1 : i32
    %r1 = mul %x, %y : i1
    store @o[%j1], %r1
    %k2 = const 2 : i32
    %j2 = add %base, %k2 : i32
    %r2 = min %x, %y : i1
    store @o[%j2], %r2
    %k3 = const 3 : i32
    %j3 = add %base, %k3 : i32
    %r3 = max %x, %y : i1
    store @o[%j3], %r3
    %k4 = const 4 : i32
    %j4 = add %base, %k4 : i32
    %r4 = cmp lt %x, %y : i1
    store @o[%j4], %r4
    %k5 = const 5 : i32
    %j5 = add %base, %k5 : i32
    %r5 = cmp ge %x, %y : i1
    store @o[%j5], %r5
    %k6 = const 6 : i32
    %j6 = add %base, %k6 : i32
    %r6 = sub %x, %y : i1
    store @o[%j6], %r6
    %k7 = const 7 : i32
    %j7 = add %base, %k7 : i32
    %r7 = not %x : i1
    store @o[%j7], %r7
    %k8 = const 8 : i32
    %j8 = add %base, %k8 : i32
    %r8 = xor %x, %y : i1
    store @o[%j8], %r8
    %z = cast %x : i1 to i32
    store @n[%i], %z
    %four = const 4 : i32
    %i4 = add %i, %four : i32
    %w = cast %y : i1 to i64
    %w3 = const -3 : i64
    %ww = add %w, %w3 : i64
    %wv = cast %ww : i64 to i32
    store @n[%i4], %wv
    %fv = cast %x : i1 to f32
    store @g[%i], %fv
  }
}
)");
  p.set("a", {0, 0, 1, 1});
  p.set("b", {0, 1, 0, 1});
  p.runOk("k");
  for (int i = 0; i < 4; ++i) {
    bool x = i >= 2, y = i % 2 == 1;
    EXPECT_BOTH(p, "o", i * 10 + 0, I1(x != y));
    EXPECT_BOTH(p, "o", i * 10 + 1, I1(x && y));
    EXPECT_BOTH(p, "o", i * 10 + 2, I1(x && y));
    EXPECT_BOTH(p, "o", i * 10 + 3, I1(x || y));
    EXPECT_BOTH(p, "o", i * 10 + 4, I1(!x && y)); // false < true
    EXPECT_BOTH(p, "o", i * 10 + 5, I1(x || !y));
    EXPECT_BOTH(p, "o", i * 10 + 6, I1(x != y));
    EXPECT_BOTH(p, "o", i * 10 + 7, I1(!x));
    EXPECT_BOTH(p, "o", i * 10 + 8, I1(x != y));
    EXPECT_BOTH(p, "n", i, I32(x ? 1 : 0)); // zero-extends
    EXPECT_BOTH(p, "n", i + 4, I32(y ? -2 : -3));
    EXPECT_BOTH(p, "g", i, F32(x ? 1 : 0));
  }
}

TEST_P(BackendConformanceTest, FloatMinMaxLoseNaNAndOrderSignedZeros) {
  REQUIRE_CAPABILITY(float64);
  Pair p(backend(), R"(
field @x : f64[8]
field @y : f64[8]
field @mn : f64[8]
field @mx : f64[8]
field @fx : f32[8]
field @fy : f32[8]
field @fmn : f32[8]
field @fmx : f32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %a = load @x[%i] : f64
    %b = load @y[%i] : f64
    %m = min %a, %b : f64
    store @mn[%i], %m
    %M = max %a, %b : f64
    store @mx[%i], %M
    %c = load @fx[%i] : f32
    %d = load @fy[%i] : f32
    %n = min %c, %d : f32
    store @fmn[%i], %n
    %N = max %c, %d : f32
    store @fmx[%i], %N
  }
}
)");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x = {nan, 1, nan, -0.0, 0.0, -0.0, 2, -3};
  std::vector<double> y = {1, nan, nan, 0.0, -0.0, -0.0, -5, -3};
  p.set("x", x);
  p.set("y", y);
  p.set("fx", x);
  p.set("fy", y);
  p.runOk("k");
  double wantMin[] = {1, 1, nan, -0.0, -0.0, -0.0, -5, -3};
  double wantMax[] = {1, 1, nan, 0.0, 0.0, -0.0, 2, -3};
  for (int i = 0; i < 8; ++i) {
    EXPECT_BOTH(p, "mn", i, F64(wantMin[i]));
    EXPECT_BOTH(p, "mx", i, F64(wantMax[i]));
    EXPECT_BOTH(p, "fmn", i, F32(wantMin[i]));
    EXPECT_BOTH(p, "fmx", i, F32(wantMax[i]));
  }
}

} // namespace
} // namespace qd::conformance
