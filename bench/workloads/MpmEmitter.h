//===- MpmEmitter.h - The tasks of 2-D MLS-MPM steps -------------*- C++ -*-===//
//
// The tasks of a 2-D MLS-MPM time step (as in DiffTaichi's diffmpm), built
// with IRBuilder, shared by qd-bench-compile's unrolled kernel
// (bench/MpmKernel.h: S steps in one kernel, the step a constant) and the
// `mpm` simulation (one kernel per step, the step its argument `t`):
//
//   clear    zeroes the grid of a step (or of every step: a band over (S, G, G));
//   p2g      each particle scatters mass and momentum (plus its stress
//            and affine velocity) into the 3x3 grid nodes around it with
//            atomic adds, and stores its deformation gradient of step s+1;
//            the x offset of the stencil's column is a loop-carried local
//            (a DSL's mutable variable): one adstack per step;
//   grid     each node normalises its momentum by its mass, adds gravity
//            and clamps the velocity at the four walls (compare, select);
//   g2p      each particle gathers the velocity and its affine part back
//            from the 3x3 nodes, and moves;
//   loss     sums the squared distance of the final positions to a target.
//
// The arrays (the step is axis 0, every element is written once, before
// it is read):
//
//   x, v : f32[S+1, N, 2]   positions, velocities           (grad)
//   C, F : f32[S+1, N, 4]   affine velocity, deformation    (grad)
//   grid_v, grid_m, grid_o  f32[S, G, G, 2], f32[S, G, G], f32[S, G, G, 2]
//                           momentum, mass, node velocity   (grad)
//   target : f32[2], loss : f32[1]                          (loss grad)
//
//===----------------------------------------------------------------------===//
#pragma once

#include "SimEmitter.h"

#include <array>

namespace qdsim {

/// The ndarray arguments of an MLS-MPM kernel.
struct MpmArgs {
  qd::Argument *x, *v, *c, *f, *gridV, *gridM, *gridOut, *target, *loss;
};

class MpmEmitter : SimEmitter {
public:
  /// Steps are the constants s given to the tasks, or, with `stepArg`,
  /// `stepArg` (s = 0) and `stepArg + 1`. `grid`: nodes along each axis.
  MpmEmitter(qd::IRBuilder &b, const MpmArgs &args, int grid, qd::Value *stepArg = nullptr);

  /// Zeroes the grid of steps [0, steps) in one task.
  void clearGrids(int steps);
  /// Zeroes the grid of step s.
  void clearGrid(int s);
  void p2g(int s, qd::Value *n);
  void gridUpdate(int s);
  void g2p(int s, qd::Value *n);
  /// Adds the loss of the positions of step `last` into loss[0].
  void loss(int last, qd::Value *n);

private:
  /// A particle's stencil: the base node and the quadratic B-spline
  /// weights along each axis.
  struct Stencil {
    std::array<qd::Value *, 2> base{}, fx{};
    std::array<std::array<qd::Value *, 3>, 2> w{};
  };
  /// The step s + offset, emitted where the builder is.
  qd::Value *step(int s, int offset = 0);
  qd::Value *pick(qd::Value *k, const std::array<qd::Value *, 3> &of);
  Stencil stencil(qd::Value *step, qd::Value *p);
  qd::Value *deform(qd::Value *step, qd::Value *next, qd::Value *p,
                    const std::array<qd::Value *, 4> &c);
  qd::Value *clamp(qd::Value *node, qd::Value *v);

  MpmArgs a_;
  int grid_;
  float dx_, invDx_;
  qd::Value *stepArg_;
};

} // namespace qdsim
