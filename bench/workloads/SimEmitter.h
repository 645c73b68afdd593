//===- SimEmitter.h - Shorthands for simulation kernels built with IRBuilder -*- C++ -*-===//
//
// What every simulation kernel of bench/workloads writes many times: f32
// and i32 constants, ndarray loads, stores and atomic adds, squares, and
// clamped or periodic neighbour indices. The builders of the simulations
// derive from SimEmitter and set the IRBuilder they emit into.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/IRBuilder.h"

#include <initializer_list>
#include <span>

namespace qdsim {

class SimEmitter {
protected:
  SimEmitter() = default;
  explicit SimEmitter(qd::IRBuilder &b) : b_(&b) {}

  /// Constants: floats are f32 (a copy widened to f64 widens them too).
  qd::Value *f(double c) { return b_->f32(static_cast<float>(c)); }
  qd::Value *i(int c) { return b_->i32(c); }
  qd::Value *ld(qd::Argument *a, std::initializer_list<qd::Value *> idx) {
    return b_->load(qd::GlobalRef::ofNdarray(a), idx);
  }
  qd::Value *ld(qd::Argument *a, std::span<qd::Value *const> idx) {
    return b_->load(qd::GlobalRef::ofNdarray(a), idx);
  }
  void st(qd::Argument *a, std::initializer_list<qd::Value *> idx, qd::Value *v) {
    b_->store(qd::GlobalRef::ofNdarray(a), idx, v);
  }
  void acc(qd::Argument *a, std::initializer_list<qd::Value *> idx, qd::Value *v) {
    b_->atomicAdd(qd::GlobalRef::ofNdarray(a), idx, v);
  }
  qd::Value *sq(qd::Value *a) { return b_->mul(a, a); }
  /// `a + b * c`.
  qd::Value *madd(qd::Value *a, qd::Value *b, qd::Value *c) { return b_->add(a, b_->mul(b, c)); }
  /// `k` clamped to [0, n - 1] (an index of an axis of n elements).
  qd::Value *clampIndex(qd::Value *k, int n) { return b_->max(b_->min(k, i(n - 1)), i(0)); }
  /// `k` in [-n, 2n) wrapped onto [0, n - 1] (a periodic index).
  qd::Value *wrapIndex(qd::Value *k, int n) {
    qd::Value *low = b_->select(b_->lt(k, i(0)), b_->add(k, i(n)), k);
    return b_->select(b_->ge(low, i(n)), b_->sub(low, i(n)), low);
  }
  /// A new f32 local holding `init`.
  qd::AllocaStmt *local(qd::Value *init) {
    qd::AllocaStmt *a = b_->alloca(qd::ScalarType::F32);
    b_->store(a, init);
    return a;
  }
  /// Adds `v` to the local `a`.
  void addTo(qd::Value *a, qd::Value *v) { b_->store(a, b_->add(b_->load(a), v)); }
  /// A parallel band over [0, n0) x [0, n1) (the cells of a square grid).
  [[nodiscard]] qd::IRBuilder::LoopScope grid2(qd::Bound n0, qd::Bound n1) {
    qd::Bound begins[] = {0, 0}, ends[] = {n0, n1};
    return b_->parallelBand(begins, ends);
  }

  /// A task adding the mean over the n x n cells of (target - field[t])^2
  /// into loss[0].
  void meanSquaredLoss(qd::Argument *field, qd::Argument *target, qd::Argument *loss, qd::Value *t,
                       int n) {
    auto cells = grid2(n, n);
    qd::Value *r = cells.index(0), *c = cells.index(1);
    qd::Value *e = sq(b_->sub(ld(target, {r, c}), ld(field, {t, r, c})));
    acc(loss, {i(0)}, b_->mul(f(1.0 / (double(n) * n)), e));
  }

  qd::IRBuilder *b_ = nullptr;
};

} // namespace qdsim
