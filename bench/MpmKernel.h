//===- MpmKernel.h - An unrolled MLS-MPM step built with IRBuilder -*- C++ -*-===//
//
// The kernel of qd-bench-compile's `mpm` series: S time steps of a 2-D
// MLS-MPM simulation (as in DiffTaichi's mpm), unrolled into one kernel of
// 3S + 2 tasks: one clear of every step's grid, then per step p2g, grid
// and g2p, then the loss. The tasks and the nine ndarray arguments are
// those of bench/workloads/MpmEmitter.h (x, v, C, F, grid_v, grid_m,
// grid_o, target, loss), the step a constant; N, the particle count, is
// the launch's: the shape of x along axis 1.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"

#include <memory>

namespace qdbench {

/// Grid nodes along each axis of the `mpm` kernel.
inline constexpr int kMpmGrid = 32;

/// A module holding the kernel `@k` of `steps` unrolled MLS-MPM steps.
std::unique_ptr<qd::Module> buildMpmModule(int steps);

} // namespace qdbench
