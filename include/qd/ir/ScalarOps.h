//===- qd/ir/ScalarOps.h - Scalar operation semantics -----------*- C++ -*-===//
//
// The defined result of every scalar operation, shared by the interpreter,
// the constant folder (which declines the cases a backend could compute
// differently) and tests of the backends. Operations that are undefined (integer
// division by zero, shifts out of range) return an error message instead.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Scalar.h"
#include "qd/ir/Stmt.h"

#include <string>
#include <variant>

namespace qd {

/// Either a value or the reason the operation is undefined.
using ScalarResult = std::variant<Scalar, std::string>;

ScalarResult evalBinary(BinaryOp op, const Scalar &a, const Scalar &b);
Scalar evalUnary(UnaryOp op, const Scalar &a);
bool evalCmp(CmpPredicate pred, const Scalar &a, const Scalar &b);
/// Integer-to-integer casts wrap (to i1: "not zero"), float-to-integer casts
/// truncate toward zero and saturate (NaN gives 0), float-to-i1 is "not
/// zero", others round to nearest.
Scalar evalCast(const Scalar &a, ScalarType to);
/// `a + b` as atomic_add performs it (wrapping for integers).
Scalar evalAdd(const Scalar &a, const Scalar &b);

} // namespace qd
