//===- qd/ir/Scalar.h - A typed scalar value --------------------*- C++ -*-===//
#pragma once

#include "qd/ir/Type.h"

#include <cstdint>
#include <string>

namespace qd {

/// A typed scalar: constants, launch arguments, interpreter registers.
/// Integer types use `i` (sign-extended; i1 is 0 or 1); float types use `f`
/// (an f32 value is always exactly representable in the double).
struct Scalar {
  ScalarType type = ScalarType::I32;
  int64_t i = 0;
  double f = 0;

  static Scalar ofInt(ScalarType t, int64_t v);
  /// Rounds `v` to f32 when `t` is f32.
  static Scalar ofFloat(ScalarType t, double v);
  bool isFloat() const { return qd::isFloat(type); }
  /// The value as a double (exact for floats, converted for integers).
  double asDouble() const { return isFloat() ? f : static_cast<double>(i); }
  /// Text form as in the IR (`1.5`, `-3`, `true`).
  std::string str() const;

  /// Bitwise equality (NaN == NaN, -0.0 != 0.0).
  friend bool operator==(const Scalar &a, const Scalar &b);
};

} // namespace qd
