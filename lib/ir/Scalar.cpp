//===- Scalar.cpp - A typed scalar value ----------------------------------===//
#include "qd/ir/Scalar.h"
#include "qd/ir/Printer.h"

#include <bit>

namespace qd {

Scalar Scalar::ofInt(ScalarType t, int64_t v) {
  Scalar s;
  s.type = t;
  s.i = v;
  return s;
}

Scalar Scalar::ofFloat(ScalarType t, double v) {
  Scalar s;
  s.type = t;
  s.f = t == ScalarType::F32 ? static_cast<double>(static_cast<float>(v)) : v;
  return s;
}

std::string Scalar::str() const {
  if (isFloat())
    return formatFloat(f, type);
  if (type == ScalarType::I1)
    return i ? "true" : "false";
  return std::to_string(i);
}

bool operator==(const Scalar &a, const Scalar &b) {
  if (a.type != b.type)
    return false;
  if (a.isFloat())
    return std::bit_cast<uint64_t>(a.f) == std::bit_cast<uint64_t>(b.f);
  return a.i == b.i;
}

} // namespace qd
