//===- CheckedInt.h - Overflow-checked int64 arithmetic ---------*- C++ -*-===//
//
// Private to qd_analysis: the SizeExpr builders fold constants with these,
// and the evaluator saturates where they report an overflow.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>

namespace qd::detail {

inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}
inline std::optional<int64_t> checkedSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    return std::nullopt;
  return r;
}
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

} // namespace qd::detail
