//===- MpmEmitter.cpp - The tasks of 2-D MLS-MPM steps -------------------===//
#include "MpmEmitter.h"

#include <vector>

namespace qdsim {
namespace {

constexpr float kDt = 2e-4f;
constexpr float kMass = 1.0f, kVolume = 1.0f, kYoung = 10.0f, kGravity = 9.8f;
constexpr int kWall = 3; // nodes of the boundary layer

} // namespace

using namespace qd;

MpmEmitter::MpmEmitter(IRBuilder &b, const MpmArgs &args, int grid, Value *stepArg)
    : SimEmitter(b), a_(args), grid_(grid), dx_(1.0f / float(grid)), invDx_(float(grid)),
      stepArg_(stepArg) {}

Value *MpmEmitter::step(int s, int offset) {
  if (!stepArg_)
    return i(s + offset);
  return offset ? b_->add(stepArg_, i(offset)) : stepArg_;
}

/// Of three values, the one `k` (an i32 in [0, 3)) names.
Value *MpmEmitter::pick(Value *k, const std::array<Value *, 3> &of) {
  Value *is0 = b_->cmp(CmpPredicate::Eq, k, i(0));
  Value *is1 = b_->cmp(CmpPredicate::Eq, k, i(1));
  return b_->select(is0, of[0], b_->select(is1, of[1], of[2]));
}

MpmEmitter::Stencil MpmEmitter::stencil(Value *step, Value *p) {
  Stencil st;
  for (int d = 0; d < 2; ++d) {
    Value *xs = b_->mul(ld(a_.x, {step, p, i(d)}), f(invDx_));
    st.base[d] = b_->cast(b_->sub(xs, f(0.5f)), ScalarType::I32);
    Value *fx = b_->sub(xs, b_->cast(st.base[d], ScalarType::F32));
    st.fx[d] = fx;
    st.w[d][0] = b_->mul(f(0.5f), sq(b_->sub(f(1.5f), fx)));
    st.w[d][1] = b_->sub(f(0.75f), sq(b_->sub(fx, f(1.0f))));
    st.w[d][2] = b_->mul(f(0.5f), sq(b_->sub(fx, f(0.5f))));
  }
  return st;
}

void MpmEmitter::clearGrids(int steps) {
  std::vector<Bound> begins(3, Bound(0)), ends = {Bound(steps), grid_, grid_};
  auto task = b_->parallelBand(begins, ends);
  Value *s = task.index(0), *gi = task.index(1), *gj = task.index(2);
  for (int d = 0; d < 2; ++d)
    st(a_.gridV, {s, gi, gj, i(d)}, f(0));
  st(a_.gridM, {s, gi, gj}, f(0));
}

void MpmEmitter::clearGrid(int s) {
  auto task = grid2(grid_, grid_);
  Value *gi = task.index(0), *gj = task.index(1), *at = step(s);
  for (int d = 0; d < 2; ++d)
    st(a_.gridV, {at, gi, gj, i(d)}, f(0));
  st(a_.gridM, {at, gi, gj}, f(0));
}

/// (I + dt C) F, stored as F of the next step; returns its determinant.
Value *MpmEmitter::deform(Value *step, Value *next, Value *p, const std::array<Value *, 4> &c) {
  std::array<Value *, 4> fm, nf;
  for (int k = 0; k < 4; ++k)
    fm[k] = ld(a_.f, {step, p, i(k)});
  for (int r = 0; r < 2; ++r)
    for (int col = 0; col < 2; ++col) {
      Value *a0 = b_->mul(f(kDt), c[2 * r]), *a1 = b_->mul(f(kDt), c[2 * r + 1]);
      a0 = r == 0 ? b_->add(f(1), a0) : a0;
      a1 = r == 1 ? b_->add(f(1), a1) : a1;
      nf[2 * r + col] = b_->add(b_->mul(a0, fm[col]), b_->mul(a1, fm[2 + col]));
      st(a_.f, {next, p, i(2 * r + col)}, nf[2 * r + col]);
    }
  return b_->sub(b_->mul(nf[0], nf[3]), b_->mul(nf[1], nf[2]));
}

void MpmEmitter::p2g(int s, Value *n) {
  auto task = b_->parallelFor(0, n);
  Value *p = task.index(), *now = step(s), *next = step(s, 1);
  Stencil sc = stencil(now, p);
  std::array<Value *, 4> c;
  for (int k = 0; k < 4; ++k)
    c[k] = ld(a_.c, {now, p, i(k)});
  Value *j = deform(now, next, p, c);
  // Stress of a compressible fluid-like material, E (J - 1) J.
  Value *cauchy = b_->mul(b_->mul(f(kYoung), b_->sub(j, f(1))), j);
  Value *stress = b_->mul(f(-kDt * kVolume * 4 * invDx_ * invDx_), cauchy);
  std::array<Value *, 4> affine;
  for (int k = 0; k < 4; ++k) {
    affine[k] = b_->mul(f(kMass), c[k]);
    if (k == 0 || k == 3)
      affine[k] = b_->add(affine[k], stress);
  }
  std::array<Value *, 2> mv = {b_->mul(f(kMass), ld(a_.v, {now, p, i(0)})),
                               b_->mul(f(kMass), ld(a_.v, {now, p, i(1)}))};
  // The x offset of the stencil's column, stepped by dx: a loop-carried
  // local (a DSL's mutable variable), one adstack per step.
  AllocaStmt *offset = b_->alloca(ScalarType::F32);
  b_->store(offset, b_->mul(b_->neg(sc.fx[0]), f(dx_)));
  auto li = b_->forRange(0, 3);
  Value *wx = pick(li.index(), sc.w[0]);
  Value *dposx = b_->load(offset);
  Value *gi = b_->add(sc.base[0], li.index());
  {
    auto lj = b_->forRange(0, 3);
    Value *weight = b_->mul(wx, pick(lj.index(), sc.w[1]));
    Value *dposy = b_->mul(b_->sub(b_->cast(lj.index(), ScalarType::F32), sc.fx[1]), f(dx_));
    Value *gj = b_->add(sc.base[1], lj.index());
    for (int d = 0; d < 2; ++d) {
      Value *m =
          b_->add(mv[d], b_->add(b_->mul(affine[2 * d], dposx), b_->mul(affine[2 * d + 1], dposy)));
      b_->atomicAdd(GlobalRef::ofNdarray(a_.gridV), {now, gi, gj, i(d)}, b_->mul(weight, m));
    }
    b_->atomicAdd(GlobalRef::ofNdarray(a_.gridM), {now, gi, gj}, b_->mul(weight, f(kMass)));
  }
  b_->store(offset, b_->add(dposx, f(dx_)));
}

/// `v` set to 0 where `node` lies in a wall and `v` points into it.
Value *MpmEmitter::clamp(Value *node, Value *v) {
  Value *low = b_->cmp(CmpPredicate::Lt, node, i(kWall));
  Value *high = b_->cmp(CmpPredicate::Gt, node, i(grid_ - kWall));
  Value *in = b_->binary(BinaryOp::And, low, b_->cmp(CmpPredicate::Lt, v, f(0)));
  Value *out = b_->binary(BinaryOp::And, high, b_->cmp(CmpPredicate::Gt, v, f(0)));
  return b_->select(b_->binary(BinaryOp::Or, in, out), f(0), v);
}

void MpmEmitter::gridUpdate(int s) {
  auto task = grid2(grid_, grid_);
  Value *gi = task.index(0), *gj = task.index(1), *now = step(s);
  Value *inv = b_->div(f(1), b_->add(ld(a_.gridM, {now, gi, gj}), f(1e-10f)));
  Value *vx = b_->mul(ld(a_.gridV, {now, gi, gj, i(0)}), inv);
  Value *vy = b_->mul(ld(a_.gridV, {now, gi, gj, i(1)}), inv);
  vy = b_->sub(vy, f(kDt * kGravity));
  st(a_.gridOut, {now, gi, gj, i(0)}, clamp(gi, vx));
  st(a_.gridOut, {now, gi, gj, i(1)}, clamp(gj, vy));
}

void MpmEmitter::g2p(int s, Value *n) {
  auto task = b_->parallelFor(0, n);
  Value *p = task.index(), *now = step(s), *next = step(s, 1);
  Stencil sc = stencil(now, p);
  std::array<Value *, 2> nv = {local(f(0)), local(f(0))};
  std::array<Value *, 4> nc = {local(f(0)), local(f(0)), local(f(0)), local(f(0))};
  {
    auto li = b_->forRange(0, 3);
    Value *wx = pick(li.index(), sc.w[0]);
    Value *dposx = b_->sub(b_->cast(li.index(), ScalarType::F32), sc.fx[0]);
    Value *gi = b_->add(sc.base[0], li.index());
    auto lj = b_->forRange(0, 3);
    Value *weight = b_->mul(wx, pick(lj.index(), sc.w[1]));
    Value *dposy = b_->sub(b_->cast(lj.index(), ScalarType::F32), sc.fx[1]);
    Value *gj = b_->add(sc.base[1], lj.index());
    std::array<Value *, 2> dpos = {dposx, dposy};
    for (int d = 0; d < 2; ++d) {
      Value *wv = b_->mul(weight, ld(a_.gridOut, {now, gi, gj, i(d)}));
      addTo(nv[d], wv);
      for (int e = 0; e < 2; ++e)
        addTo(nc[2 * d + e], b_->mul(b_->mul(f(4 * invDx_), wv), dpos[e]));
    }
  }
  for (int d = 0; d < 2; ++d) {
    Value *vd = b_->load(nv[d]);
    st(a_.v, {next, p, i(d)}, vd);
    st(a_.x, {next, p, i(d)}, b_->add(ld(a_.x, {now, p, i(d)}), b_->mul(f(kDt), vd)));
  }
  for (int k = 0; k < 4; ++k)
    st(a_.c, {next, p, i(k)}, b_->load(nc[k]));
}

void MpmEmitter::loss(int last, Value *n) {
  auto task = b_->parallelFor(0, n);
  Value *p = task.index(), *at = step(last), *sum = nullptr;
  for (int d = 0; d < 2; ++d) {
    Value *e = sq(b_->sub(ld(a_.x, {at, p, i(d)}), ld(a_.target, {i(d)})));
    sum = sum ? b_->add(sum, e) : e;
  }
  b_->atomicAdd(GlobalRef::ofNdarray(a_.loss), {i(0)}, sum);
}

} // namespace qdsim
