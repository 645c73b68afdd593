//===- ScalarOps.cpp - Scalar operation semantics -------------------------===//
#include "qd/ir/ScalarOps.h"

#include <cmath>
#include <limits>

namespace qd {
namespace {

int64_t wrap(ScalarType t, uint64_t bits) {
  switch (t) {
  case ScalarType::I1:
    return static_cast<int64_t>(bits & 1);
  case ScalarType::I32:
    return static_cast<int32_t>(static_cast<uint32_t>(bits));
  default:
    return static_cast<int64_t>(bits);
  }
}

Scalar makeInt(ScalarType t, uint64_t bits) {
  return Scalar::ofInt(t, wrap(t, bits));
}

/// Applies `op` in the precision of `t` (float for f32, double for f64).
template <typename Op> Scalar floatOp(ScalarType t, double a, double b, Op op) {
  if (t == ScalarType::F32)
    return Scalar::ofFloat(t, op(static_cast<float>(a), static_cast<float>(b)));
  return Scalar::ofFloat(t, op(a, b));
}
template <typename Op> Scalar floatOp1(ScalarType t, double a, Op op) {
  if (t == ScalarType::F32)
    return Scalar::ofFloat(t, op(static_cast<float>(a)));
  return Scalar::ofFloat(t, op(a));
}

/// IEEE minNum/maxNum with a deterministic choice: NaN loses to a number,
/// and -0.0 is below +0.0.
double minMax(double a, double b, bool isMin) {
  if (std::isnan(a))
    return b;
  if (std::isnan(b))
    return a;
  if (a == b)
    return (std::signbit(a) == isMin) ? a : b;
  return (a < b) == isMin ? a : b;
}

int64_t minOf(ScalarType t) {
  return t == ScalarType::I32 ? std::numeric_limits<int32_t>::min()
                              : std::numeric_limits<int64_t>::min();
}

} // namespace

ScalarResult evalBinary(BinaryOp op, const Scalar &a, const Scalar &b) {
  ScalarType t = a.type;
  if (a.isFloat()) {
    switch (op) {
    case BinaryOp::Add:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return x + y; });
    case BinaryOp::Sub:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return x - y; });
    case BinaryOp::Mul:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return x * y; });
    case BinaryOp::Div:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return x / y; });
    case BinaryOp::Rem:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return std::fmod(x, y); });
    case BinaryOp::Min:
      return Scalar::ofFloat(t, minMax(a.f, b.f, true));
    case BinaryOp::Max:
      return Scalar::ofFloat(t, minMax(a.f, b.f, false));
    case BinaryOp::Pow:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return std::pow(x, y); });
    case BinaryOp::Atan2:
      return floatOp(t, a.f, b.f, [](auto x, auto y) { return std::atan2(x, y); });
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      return std::string("bitwise operation on a float");
    }
  }
  uint64_t ua = static_cast<uint64_t>(a.i), ub = static_cast<uint64_t>(b.i);
  unsigned width = bitWidth(t);
  switch (op) {
  case BinaryOp::Add:
    return makeInt(t, ua + ub);
  case BinaryOp::Sub:
    return makeInt(t, ua - ub);
  case BinaryOp::Mul:
    return makeInt(t, ua * ub);
  case BinaryOp::Div:
  case BinaryOp::Rem:
    if (b.i == 0)
      return std::string("integer division by zero");
    if (t != ScalarType::I1 && a.i == minOf(t) && b.i == -1) // wraps
      return makeInt(t, op == BinaryOp::Div ? static_cast<uint64_t>(a.i) : 0);
    return makeInt(t, static_cast<uint64_t>(op == BinaryOp::Div ? a.i / b.i : a.i % b.i));
  case BinaryOp::Min:
    return makeInt(t, static_cast<uint64_t>(std::min(a.i, b.i)));
  case BinaryOp::Max:
    return makeInt(t, static_cast<uint64_t>(std::max(a.i, b.i)));
  case BinaryOp::And:
    return makeInt(t, ua & ub);
  case BinaryOp::Or:
    return makeInt(t, ua | ub);
  case BinaryOp::Xor:
    return makeInt(t, ua ^ ub);
  case BinaryOp::Shl:
  case BinaryOp::Shr:
    if (b.i < 0 || b.i >= static_cast<int64_t>(width))
      return "shift amount " + std::to_string(b.i) + " is outside [0, " + std::to_string(width) +
             ")";
    return makeInt(t, op == BinaryOp::Shl ? ua << b.i : static_cast<uint64_t>(a.i >> b.i));
  case BinaryOp::Pow:
  case BinaryOp::Atan2:
    break;
  }
  return std::string("float operation on an integer");
}

Scalar evalUnary(UnaryOp op, const Scalar &a) {
  ScalarType t = a.type;
  OpDomain domain = domainOf(op);
  if (domain != OpDomain::Any && (domain == OpDomain::Float) != a.isFloat())
    return a; // outside its domain: the verifier rejects it
  uint64_t ua = static_cast<uint64_t>(a.i);
  switch (op) {
  case UnaryOp::Neg:
    return a.isFloat() ? Scalar::ofFloat(t, -a.f) : makeInt(t, 0 - ua);
  case UnaryOp::Abs:
    return a.isFloat() ? Scalar::ofFloat(t, std::fabs(a.f)) : makeInt(t, a.i < 0 ? 0 - ua : ua);
  case UnaryOp::Sin:
    return floatOp1(t, a.f, [](auto x) { return std::sin(x); });
  case UnaryOp::Cos:
    return floatOp1(t, a.f, [](auto x) { return std::cos(x); });
  case UnaryOp::Tan:
    return floatOp1(t, a.f, [](auto x) { return std::tan(x); });
  case UnaryOp::Exp:
    return floatOp1(t, a.f, [](auto x) { return std::exp(x); });
  case UnaryOp::Log:
    return floatOp1(t, a.f, [](auto x) { return std::log(x); });
  case UnaryOp::Sqrt:
    return floatOp1(t, a.f, [](auto x) { return std::sqrt(x); });
  case UnaryOp::Tanh:
    return floatOp1(t, a.f, [](auto x) { return std::tanh(x); });
  case UnaryOp::Floor:
    return floatOp1(t, a.f, [](auto x) { return std::floor(x); });
  case UnaryOp::Ceil:
    return floatOp1(t, a.f, [](auto x) { return std::ceil(x); });
  case UnaryOp::Not:
    return makeInt(t, ~ua);
  }
  return a;
}

bool evalCmp(CmpPredicate pred, const Scalar &a, const Scalar &b) {
  if (a.isFloat()) {
    switch (pred) {
    case CmpPredicate::Eq:
      return a.f == b.f;
    case CmpPredicate::Ne:
      return a.f != b.f;
    case CmpPredicate::Lt:
      return a.f < b.f;
    case CmpPredicate::Le:
      return a.f <= b.f;
    case CmpPredicate::Gt:
      return a.f > b.f;
    case CmpPredicate::Ge:
      return a.f >= b.f;
    }
    return false;
  }
  switch (pred) {
  case CmpPredicate::Eq:
    return a.i == b.i;
  case CmpPredicate::Ne:
    return a.i != b.i;
  case CmpPredicate::Lt:
    return a.i < b.i;
  case CmpPredicate::Le:
    return a.i <= b.i;
  case CmpPredicate::Gt:
    return a.i > b.i;
  case CmpPredicate::Ge:
    return a.i >= b.i;
  }
  return false;
}

Scalar evalCast(const Scalar &a, ScalarType to) {
  if (!a.isFloat()) {
    if (isFloat(to))
      return Scalar::ofFloat(to, to == ScalarType::F32
                                     ? static_cast<double>(static_cast<float>(a.i))
                                     : static_cast<double>(a.i));
    if (to == ScalarType::I1)
      return Scalar::ofInt(to, a.i != 0);
    return makeInt(to, static_cast<uint64_t>(a.i));
  }
  if (isFloat(to))
    return Scalar::ofFloat(to, a.f);
  if (to == ScalarType::I1)
    return Scalar::ofInt(to, a.f != 0);
  if (std::isnan(a.f))
    return Scalar::ofInt(to, 0);
  double lo = static_cast<double>(minOf(to)), hi = -lo; // hi is exclusive
  double t = std::trunc(a.f);
  if (t < lo)
    return Scalar::ofInt(to, minOf(to));
  if (t >= hi)
    return Scalar::ofInt(to, to == ScalarType::I32 ? std::numeric_limits<int32_t>::max()
                                                   : std::numeric_limits<int64_t>::max());
  return Scalar::ofInt(to, static_cast<int64_t>(t));
}

Scalar evalAdd(const Scalar &a, const Scalar &b) {
  return std::get<Scalar>(evalBinary(BinaryOp::Add, a, b));
}

} // namespace qd
