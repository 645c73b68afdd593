//===- qd/analysis/ConstantFolding.h - Exact scalar evaluation --*- C++ -*-===//
//
// Evaluates operations on constants with exactly the semantics the runtime
// has, or declines. Integers are two's complement and wrap; floats follow
// IEEE 754 in the operation's own precision (f32 arithmetic is done in
// float). Anything whose result could depend on the backend is not folded:
// integer or float division by zero, INT_MIN / -1, shifts by the bit width
// or more, float-to-integer casts of out-of-range values or NaN,
// transcendental functions (sin, exp, pow... differ between libms), and
// float min/max where NaN or signed zeros make the choice ambiguous.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Scalar.h"
#include "qd/ir/Stmt.h"

#include <cstdint>
#include <optional>

namespace qd {

/// Constants are plain typed scalars (`ConstStmt::value()` reads one).
using ConstantValue = Scalar;

std::optional<ConstantValue> foldBinary(BinaryOp op, const ConstantValue &a,
                                        const ConstantValue &b);
std::optional<ConstantValue> foldUnary(UnaryOp op, const ConstantValue &a);
std::optional<ConstantValue> foldCmp(CmpPredicate pred, const ConstantValue &a,
                                     const ConstantValue &b);
std::optional<ConstantValue> foldCast(const ConstantValue &a, ScalarType to);

/// Evaluates `v` if it is a tree of constants and foldable operations
/// (const, binary, unary, cmp, select, cast), e.g. a loop bound written as
/// `add %c4, %c1`. Returns nullopt otherwise.
std::optional<ConstantValue> evaluateConstant(const Value *v);

/// The integer value of `v` if `evaluateConstant` succeeds with an integer.
std::optional<int64_t> evaluateConstantInt(const Value *v);

/// Trip count of a range-for whose bounds fold to constants (0 when
/// end <= begin); nullopt if either bound is not a compile-time constant.
std::optional<int64_t> constantTripCount(const ForStmt &loop);

} // namespace qd
