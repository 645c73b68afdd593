//===- MpmKernel.h - An unrolled MLS-MPM step built with IRBuilder -*- C++ -*-===//
//
// The kernel of qd-bench-compile's `mpm` series: S time steps of a 2-D
// MLS-MPM simulation (as in DiffTaichi's mpm), unrolled into one kernel of
// 3S + 2 tasks, built with qd's IRBuilder:
//
//   clear    zeroes the grid of every step (a band over (S, G, G));
//   per step s:
//     p2g    each particle scatters mass and momentum (plus its stress
//            and affine velocity) into the 3x3 grid nodes around it with
//            atomic adds, and stores its deformation gradient of step s+1;
//     grid   each node normalises its momentum by its mass, adds gravity
//            and clamps the velocity at the four walls (compare, select);
//     g2p    each particle gathers the velocity and its affine part back
//            from the 3x3 nodes, and moves;
//   loss     sums the squared distance of the final positions to a target.
//
// Nine ndarray arguments, the per-step state indexed by the step as
// DiffTaichi does (every element is written once, before it is read):
//
//   x, v : f32[S+1, N, 2]   positions, velocities           (grad)
//   C, F : f32[S+1, N, 4]   affine velocity, deformation    (grad)
//   grid_v, grid_m, grid_o  f32[S, G, G, 2], f32[S, G, G], f32[S, G, G, 2]
//                           momentum, mass, node velocity   (grad)
//   target : f32[2], loss : f32[1]                          (loss grad)
//
// N, the particle count, is the launch's: the shape of x along axis 1.
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
