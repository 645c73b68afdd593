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

/// The IR's integer `div` and `rem` on int64 (truncating; INT64_MIN / -1
/// wraps like the kernel's i64 arithmetic). By 0: 0, a value no valid
/// execution uses (the kernel fails at that statement).
inline int64_t truncatingDiv(int64_t a, int64_t b) {
  if (b == 0)
    return 0;
  if (b == -1)
    return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
  return a / b;
}
inline int64_t truncatingRem(int64_t a, int64_t b) {
  if (b == 0 || b == -1)
    return 0;
  return a % b;
}

} // namespace qd::detail
