//===- AdjointFill.h - Seeding and zeroing companions -----------*- C++ -*-===//
//
// Private to qd::runtime: launchWithGradient (GradientLaunch.cpp) and the
// launch tape (LaunchTape.cpp) zero and seed adjoint and tangent buffers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Buffer.h"

namespace qd::runtime_detail {

/// Sets every element of `b` (a float or integer buffer) to `value`.
void fillWith(Buffer &b, double value);

} // namespace qd::runtime_detail
