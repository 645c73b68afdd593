//===- SpirvMath.cpp - Accurate math functions for Vulkan -----------------===//
//
// Vulkan lets an implementation compute GLSL.std.450's sin and cos with an
// absolute error of 2^-11, exp and log with several ulp growing with the
// argument, and derives tan, tanh, pow and atan2 from those; none of them is
// defined on 64-bit floats at all. Gradients checked against the
// interpreter (libm) need better, so these functions are emitted inline as
// straight-line code (no branches: selects), with the usual reductions:
//
//   exp    x = k ln2 + r (Cody-Waite split of ln2), Taylor series of e^r on
//          |r| <= ln2/2, scaled by 2^k in two Ldexp steps (subnormal results);
//   log    x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
//          s = (m - 1) / (m + 1), odd series in s;
//   sin, cos, tan  x = q pi/2 + r (three-part Cody-Waite split of pi/2,
//          each step one Fma), minimax polynomials for sin r and cos r on
//          |r| <= pi/4 (see sinCoefficients), the quadrant from the low
//          two bits of q as an integer (sin and cos pick one of the two
//          polynomials and a sign; tan divides them);
//   tanh   expm1(2x) / (expm1(2x) + 2) for |x| < 0.35 (series), else
//          1 - 2 / (exp(2|x|) + 1);
//   atan2  atan of y/x with the reduction to |z| <= tan(pi/8), quadrants,
//          signed zeros and infinities as C's atan2;
//   pow    exp(y log|x|) with C's special cases (negative bases with
//          integer exponents, zeros, infinities, NaN, pow(x, 0) = 1).
//
// The series are truncated where the next term is below the type's
// precision; they and the minimax polynomials are evaluated by Horner's
// rule with GLSL.std.450 Fma (fused where the device fuses it; Vulkan
// allows a multiply and an add, which is as accurate as the code was before
// it used Fma). The ranges where the reductions stay accurate are in
// docs/runtime.md ("Vulkan").
//
//===----------------------------------------------------------------------===//
#include "SpirvBuilder.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace qd::spirv {
namespace {

/// Float arithmetic of one width.
struct F {
  SpirvBuilder &b;
  unsigned w;
  Id t;
  F(SpirvBuilder &b, unsigned w) : b(b), w(w), t(b.tFloat(w)) {}

  Id c(double v) { return b.m.constFloat(w, v); }
  Id add(Id x, Id y) { return b.fadd(t, x, y); }
  Id sub(Id x, Id y) { return b.fsub(t, x, y); }
  Id mul(Id x, Id y) { return b.fmul(t, x, y); }
  Id div(Id x, Id y) { return b.fdiv(t, x, y); }
  Id neg(Id x) { return b.fneg(t, x); }
  Id sel(Id cond, Id x, Id y) { return b.select(t, cond, x, y); }
  Id lt(Id x, Id y) { return b.cmp(spv::Op::OpFOrdLessThan, x, y); }
  Id gt(Id x, Id y) { return b.cmp(spv::Op::OpFOrdGreaterThan, x, y); }
  Id eq(Id x, Id y) { return b.cmp(spv::Op::OpFOrdEqual, x, y); }
  Id ne(Id x, Id y) { return b.cmp(spv::Op::OpFOrdNotEqual, x, y); }
  Id abs(Id x) { return b.ext(GLSLstd450FAbs, t, {x}); }
  Id floor(Id x) { return b.ext(GLSLstd450Floor, t, {x}); }
  Id roundEven(Id x) { return b.ext(GLSLstd450RoundEven, t, {x}); }
  /// x y + z through GLSL.std.450 Fma: one instruction where the device
  /// fuses it, a multiply and an add (today's accuracy) where it does not.
  Id fma(Id x, Id y, Id z) { return b.ext(GLSLstd450Fma, t, {x, y, z}); }
  /// fma decorated NoContraction: one operation (fused, or a multiply
  /// and an add each rounded) that a driver neither splits into parts it
  /// reassociates nor merges with its neighbours.
  Id fmaExact(Id x, Id y, Id z) {
    Id v = fma(x, y, z);
    b.m.decorate(v, spv::Decoration::NoContraction);
    return v;
  }
  /// c[0] + x (c[1] + x (c[2] + ...)).
  Id horner(Id x, const std::vector<double> &coeffs) {
    Id acc = c(coeffs.back());
    for (size_t i = coeffs.size() - 1; i-- > 0;)
      acc = fma(x, acc, c(coeffs[i]));
    return acc;
  }
  /// The sign bit of `x` (true for -0 and negative NaNs).
  Id signBit(Id x) {
    Id hi = w == 32 ? b.bitcast(b.tU32(), x)
                    : b.op(spv::Op::OpCompositeExtract, b.tU32(), {b.bitcast(b.tUvec2(), x), 1});
    Id bit = b.op(spv::Op::OpBitwiseAnd, b.tU32(), {hi, b.u32(0x80000000u)});
    return b.cmp(spv::Op::OpINotEqual, bit, b.u32(0));
  }
  /// |v| with the sign of `s`.
  Id copySign(Id v, Id s) {
    Id a = abs(v);
    return sel(signBit(s), neg(a), a);
  }
};

/// Coefficients 1/n! for n in [first, first + count) (every `step`-th), with
/// alternating signs when `alternate`.
std::vector<double> factorialSeries(int first, int last, int step, bool alternate) {
  std::vector<double> out;
  int sign = 1;
  for (int n = first; n <= last; n += step) {
    out.push_back(sign / std::tgamma(double(n) + 1));
    if (alternate)
      sign = -sign;
  }
  return out;
}

/// e^x, with the special values of C's exp.
Id expOf(F &f, Id x) {
  bool single = f.w == 32;
  // ln2 = hi + lo, hi with trailing zero bits so that k * hi is exact.
  double hi = single ? 0.693359375 : 6.93147180369123816490e-01;
  double lo = single ? -2.12194440e-4 : 1.90821492927058770002e-10;
  Id k = f.roundEven(f.mul(x, f.c(std::numbers::log2e)));
  Id r = f.sub(f.sub(x, f.mul(k, f.c(hi))), f.mul(k, f.c(lo)));
  // |r| <= ln2/2: the next term after r^N/N! is below the precision.
  Id p = f.horner(r, factorialSeries(0, single ? 8 : 16, 1, false));
  SpirvBuilder &b = f.b;
  Id kc = b.ext(GLSLstd450FClamp, f.t, {k, f.c(-2000), f.c(2000)});
  Id ki = b.op(spv::Op::OpConvertFToS, b.tI32(), {kc});
  Id half = b.op(spv::Op::OpSDiv, b.tI32(), {ki, b.m.constI32(2)});
  Id rest = b.isub(b.tI32(), ki, half);
  Id v = b.ext(GLSLstd450Ldexp, f.t, {b.ext(GLSLstd450Ldexp, f.t, {p, half}), rest});
  double maxArg = single ? 88.72283935546875 : 709.782712893384;
  double minArg = single ? -103.97208404541015625 : -745.1332191019412;
  v = f.sel(f.gt(x, f.c(maxArg)), f.c(INFINITY), v);
  v = f.sel(f.lt(x, f.c(minArg)), f.c(0), v);
  return f.sel(b.isNan(x), x, v);
}

/// e^x - 1 for |x| <= 0.7 (series).
Id expm1Small(F &f, Id x) {
  return f.mul(x, f.horner(x, factorialSeries(1, f.w == 32 ? 11 : 19, 1, false)));
}

/// log(x), with the special values of C's log.
Id logOf(F &f, Id x) {
  SpirvBuilder &b = f.b;
  bool single = f.w == 32;
  Id st = b.m.typeStruct({f.t, b.tI32()});
  Id fr = b.ext(GLSLstd450FrexpStruct, st, {x});
  Id m = b.op(spv::Op::OpCompositeExtract, f.t, {fr, 0});
  Id e = b.op(spv::Op::OpCompositeExtract, b.tI32(), {fr, 1});
  Id small = f.lt(m, f.c(std::numbers::sqrt2 / 2));
  m = f.sel(small, f.add(m, m), m);
  e = b.select(b.tI32(), small, b.isub(b.tI32(), e, b.m.constI32(1)), e);
  Id g = f.sub(m, f.c(1));
  Id s = f.div(g, f.add(f.c(2), g));
  Id z = f.mul(s, s);
  std::vector<double> series; // 1, 1/3, 1/5, ...: 2 atanh(s) = 2 s (1 + z/3 + ...)
  for (int n = 1; n <= (single ? 11 : 23); n += 2)
    series.push_back(1.0 / n);
  Id logm = f.mul(f.add(s, s), f.horner(z, series));
  Id ef = b.op(spv::Op::OpConvertSToF, f.t, {e});
  double hi = single ? 0.693359375 : 6.93147180369123816490e-01;
  double lo = single ? -2.12194440e-4 : 1.90821492927058770002e-10;
  Id v = f.add(f.mul(ef, f.c(hi)), f.add(logm, f.mul(ef, f.c(lo))));
  v = f.sel(f.eq(x, f.c(INFINITY)), x, v);
  v = f.sel(f.eq(x, f.c(0)), f.c(-INFINITY), v);
  v = f.sel(f.lt(x, f.c(0)), f.c(NAN), v);
  return f.sel(b.isNan(x), x, v);
}

/// The argument reduced by pi/2: x = q pi/2 + r with q = roundEven(x 2/pi)
/// (|r| <= pi/4, a little more where x 2/pi rounds), and q as a 32-bit
/// integer, whose low two bits are the quadrant.
struct Reduction {
  Id r, q;
};

Reduction reduceByHalfPi(F &f, Id x) {
  bool single = f.w == 32;
  // pi/2 = p1 + p2 + p3, p1 and p2 with trailing zeros: q * p1 is exact
  // while |q| < 2^16 (f32) or 2^22 (f64), q * p2 while |q| < 2^13 or 2^21,
  // and then the step rounds once, fused or not. On a device that fuses
  // Fma every step rounds once (in f32 for every |q| < 2^16).
  double p1 = single ? 1.5703125 : 1.57079632673412561417e+00;
  double p2 = single ? 4.837512969970703125e-4 : 6.07710050630396597660e-11;
  double p3 = single ? 7.54978995489188216e-8 : 2.02226624879595063154e-21;
  Id q = f.roundEven(f.mul(x, f.c(2 / std::numbers::pi)));
  Id r = f.fmaExact(q, f.c(-p1), x);
  r = f.fmaExact(q, f.c(-p2), r);
  r = f.fmaExact(q, f.c(-p3), r);
  // For x = +-inf or NaN, r is NaN and so is every result whatever the
  // conversion gives; a |q| past 2^31 is far beyond the accurate range.
  return {r, f.b.op(spv::Op::OpConvertFToS, f.b.tI32(), {q})};
}

/// Minimax coefficients on |r| <= pi/4, z = r^2:
///   sin r = r + r^3 (s1 + s2 z + ...),   cos r = 1 + z (c1 + c2 z + ...),
/// f32: sin of degree 7, cos of degree 8; f64: degrees 13 and 14. Computed
/// with scripts/fit-sincos-minimax.py: a Remez exchange in z minimizing the
/// largest error relative to sin r (cos r), in 60-digit arithmetic (mpmath),
/// the coefficients rounded to the type one at a time from the first, the
/// rest refitted after each. The largest relative error of the rounded
/// polynomials on the interval: f32 sin 2^-27.9, cos 2^-33.0; f64 sin
/// 2^-57.9, cos 2^-63.3 (below the rounding of their evaluation).
std::vector<double> sinCoefficients(bool single) {
  if (single)
    return {-0x1.555546p-3, 0x1.110778p-7, -0x1.995408p-13};
  return {-0x1.5555555555548p-3, 0x1.111111110f730p-7,   -0x1.a01a019be9217p-13,
          0x1.71de35552b52cp-19, -0x1.ae5e4b83e46f4p-26, 0x1.5d8b559495e1dp-33};
}
std::vector<double> cosCoefficients(bool single) {
  if (single)
    return {1, -0.5, 0x1.55554ap-5, -0x1.6c0c28p-10, 0x1.99e80cp-16};
  return {1,
          -0.5,
          0x1.5555555555552p-5,
          -0x1.6c16c16c15ccep-10,
          0x1.a01a019da312bp-16,
          -0x1.27e4f8a2a2b42p-22,
          0x1.1eea48900373fp-29,
          -0x1.8fda10481b803p-37};
}

/// sin r and cos r of the reduced argument.
struct SinCos {
  Id sin, cos;
};

SinCos sinCosOfReduced(F &f, Id r) {
  bool single = f.w == 32;
  Id z = f.mul(r, r);
  // r + r^3 s(z): the small term carries the polynomial's rounding.
  Id sin = f.fma(f.mul(r, z), f.horner(z, sinCoefficients(single)), r);
  return {sin, f.horner(z, cosCoefficients(single))};
}

/// Whether integer `n` has a bit of `mask` set.
Id anyBit(F &f, Id n, uint32_t mask) {
  SpirvBuilder &b = f.b;
  Id bits = b.op(spv::Op::OpBitwiseAnd, b.tI32(), {n, b.m.constI32(int32_t(mask))});
  return b.cmp(spv::Op::OpINotEqual, bits, b.m.constI32(0));
}

/// sin(x) (`cosine`: cos(x)): by the quadrant n, +-sin r (n even) or
/// +-cos r (n odd), negated in quadrants 2 and 3.
Id sinOrCos(F &f, Id x, bool cosine) {
  Reduction red = reduceByHalfPi(f, x);
  SinCos sc = sinCosOfReduced(f, red.r);
  Id n = red.q;
  if (cosine) // cos(x) = sin(x + pi/2): one quadrant on
    n = f.b.iadd(f.b.tI32(), n, f.b.m.constI32(1));
  Id v = f.sel(anyBit(f, n, 1), sc.cos, sc.sin);
  v = f.sel(anyBit(f, n, 2), f.neg(v), v);
  // The reduction turns -0 into +0: sin(-0) is -0.
  return cosine ? v : f.sel(f.eq(x, f.c(0)), x, v);
}

/// tan(x): sin r / cos r in even quadrants, -cos r / sin r in odd ones.
Id tanOf(F &f, Id x) {
  Reduction red = reduceByHalfPi(f, x);
  SinCos sc = sinCosOfReduced(f, red.r);
  Id odd = anyBit(f, red.q, 1);
  Id v = f.div(f.sel(odd, f.neg(sc.cos), sc.sin), f.sel(odd, sc.sin, sc.cos));
  return f.sel(f.eq(x, f.c(0)), x, v); // tan(-0) is -0
}

/// atan(x), odd, for every x.
Id atanOf(F &f, Id x) {
  bool single = f.w == 32;
  Id a = f.abs(x);
  Id big = f.gt(a, f.c(2.414213562373095));  // tan(3pi/8)
  Id mid = f.gt(a, f.c(0.4142135623730950)); // tan(pi/8)
  Id z =
      f.sel(big, f.neg(f.div(f.c(1), a)), f.sel(mid, f.div(f.sub(a, f.c(1)), f.add(a, f.c(1))), a));
  Id y0 = f.sel(big, f.c(std::numbers::pi / 2), f.sel(mid, f.c(std::numbers::pi / 4), f.c(0)));
  std::vector<double> series; // 1, -1/3, 1/5, ...
  for (int n = 1, sign = 1; n <= (single ? 21 : 45); n += 2, sign = -sign)
    series.push_back(sign / double(n));
  Id v = f.add(y0, f.mul(z, f.horner(f.mul(z, z), series)));
  return f.copySign(v, x);
}

Id atan2Of(F &f, Id y, Id x) {
  SpirvBuilder &b = f.b;
  Id pi = f.c(std::numbers::pi);
  Id base = atanOf(f, f.div(y, x));
  Id v = f.sel(f.lt(x, f.c(0)), f.add(base, f.copySign(pi, y)), base);
  // x = +-0: +-pi/2 by the sign of y; y = +-0: +-0 or +-pi by the sign of x.
  v = f.sel(f.eq(x, f.c(0)), f.copySign(f.c(std::numbers::pi / 2), y), v);
  v = f.sel(f.eq(y, f.c(0)), f.sel(f.signBit(x), f.copySign(pi, y), f.copySign(f.c(0), y)), v);
  Id bothInf = b.land(b.isInf(x), b.isInf(y));
  Id corner = f.sel(f.gt(x, f.c(0)), f.c(std::numbers::pi / 4), f.c(3 * std::numbers::pi / 4));
  v = f.sel(bothInf, f.copySign(corner, y), v);
  return f.sel(b.lor(b.isNan(x), b.isNan(y)), f.add(x, y), v);
}

Id powOf(F &f, Id x, Id y) {
  SpirvBuilder &b = f.b;
  Id ax = f.abs(x);
  Id e = expOf(f, f.mul(y, logOf(f, ax)));
  Id isInt = f.eq(f.floor(y), y);
  Id halfY = f.mul(y, f.c(0.5));
  Id odd = b.land(isInt, f.ne(f.floor(halfY), halfY));
  Id v = f.sel(b.land(f.signBit(x), odd), f.neg(e), e);
  v = f.sel(b.land(f.lt(x, f.c(0)), b.lnot(isInt)), f.c(NAN), v);
  v = f.sel(b.land(f.eq(ax, f.c(1)), b.isInf(y)), f.c(1), v);
  v = f.sel(b.lor(b.isNan(x), b.isNan(y)), f.add(x, y), v);
  v = f.sel(f.eq(x, f.c(1)), f.c(1), v);
  return f.sel(f.eq(y, f.c(0)), f.c(1), v);
}

} // namespace

Id emitMath(SpirvBuilder &b, MathFn fn, unsigned width, std::initializer_list<Id> args) {
  F f(b, width);
  Id x = *args.begin();
  switch (fn) {
  case MathFn::Exp:
    return expOf(f, x);
  case MathFn::Log:
    return logOf(f, x);
  case MathFn::Sin:
    return sinOrCos(f, x, false);
  case MathFn::Cos:
    return sinOrCos(f, x, true);
  case MathFn::Tan:
    return tanOf(f, x);
  case MathFn::Tanh: {
    Id em1 = expm1Small(f, f.add(x, x));
    Id small = f.div(em1, f.add(em1, f.c(2)));
    Id a = f.abs(x);
    Id large = f.sub(f.c(1), f.div(f.c(2), f.add(expOf(f, f.add(a, a)), f.c(1))));
    Id v = f.sel(f.lt(a, f.c(0.35)), small, f.copySign(large, x));
    return f.sel(b.isNan(x), x, v);
  }
  case MathFn::Pow:
    return powOf(f, x, *(args.begin() + 1));
  case MathFn::Atan2:
    return atan2Of(f, x, *(args.begin() + 1));
  }
  return x;
}

} // namespace qd::spirv
