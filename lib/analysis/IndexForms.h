//===- IndexForms.h - What an index says about the iteration -----*- C++ -*-===//
//
// Two shapes of an integer index inside a parallel task, for the element
// ownership analysis (ElementOwnership.h):
//
//  - shared + offset: `base + c` where `base` is the same value in every
//    iteration (a scalar argument, a top-level value, arithmetic of such
//    values) or absent (a constant). Two accesses whose index at one
//    position is `base + c1` and `base + c2` with c1 != c2 never touch the
//    same element, in any iterations (slices `t` and `t + 1` of an array).
//  - near: `i_d + o` with `i_d` the task index of dimension d and o in
//    [lo, hi] (neighbours `i + 1`, clamped `max(min(i + 1, n - 1), 0)`),
//    or congruent to it modulo the dimension's extent E (periodic
//    neighbours `select(k < 0, k + E, k)`). Iterations whose indices
//    there can be equal then differ by at most hi - lo in dimension d
//    (cyclically, when modular).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Stmt.h"

#include <cstdint>
#include <optional>

namespace qd::analysis_detail {

struct SharedOffset {
  const Value *base = nullptr; // null: a constant
  int64_t offset = 0;
};
std::optional<SharedOffset> sharedOffsetOf(const Value *v, const ForStmt &task);

/// Whether `a` and `b` (accesses of one global) never touch the same
/// element: some index position holds `base + c1` in one and `base + c2`
/// in the other, c1 != c2.
bool provablyDisjoint(const GlobalAccessStmt &a, const GlobalAccessStmt &b, const ForStmt &task);

struct NearIndex {
  int dim = -1;
  int64_t lo = 0, hi = 0;
  bool modular = false; // congruent modulo the extent of `dim`
};
std::optional<NearIndex> nearIndexOf(const Value *v, const ForStmt &task);

} // namespace qd::analysis_detail
