//===- MpmKernel.cpp - An unrolled MLS-MPM step built with IRBuilder ------===//
#include "MpmKernel.h"

#include "qd/ir/IRBuilder.h"

#include <array>
#include <string>
#include <vector>

namespace qdbench {
namespace {

using namespace qd;

constexpr float kDt = 2e-4f, kDx = 1.0f / kMpmGrid, kInvDx = float(kMpmGrid);
constexpr float kMass = 1.0f, kVolume = 1.0f, kYoung = 10.0f, kGravity = 9.8f;
constexpr int kWall = 3; // nodes of the boundary layer

/// A particle's stencil: the base node and the quadratic B-spline weights
/// along each axis.
struct Stencil {
  std::array<Value *, 2> base{}, fx{};
  std::array<std::array<Value *, 3>, 2> w{};
};

class MpmBuilder {
public:
  MpmBuilder(Module &m, int steps) : steps_(steps) {
    kernel_ = m.addKernel(std::make_unique<Kernel>("k"));
    auto arg = [&](const char *name, unsigned ndim, bool grad) {
      return kernel_->addArgument(
          std::make_unique<Argument>(name, Type::ndarray(ScalarType::F32, ndim), grad));
    };
    x_ = arg("x", 3, true);
    v_ = arg("v", 3, true);
    c_ = arg("C", 3, true);
    f_ = arg("F", 3, true);
    gridV_ = arg("grid_v", 4, true);
    gridM_ = arg("grid_m", 3, true);
    gridOut_ = arg("grid_o", 4, true);
    target_ = arg("target", 1, false);
    loss_ = arg("loss", 1, true);
  }

  void build() {
    IRBuilder b(*kernel_);
    b_ = &b;
    Value *n = b.shape(x_, 1);
    clearGrid();
    for (int s = 0; s < steps_; ++s) {
      p2g(s, n);
      gridUpdate(s);
      g2p(s, n);
    }
    loss(n);
  }

private:
  Value *f(float c) { return b_->f32(c); }
  Value *i(int c) { return b_->i32(c); }
  Value *ld(Argument *a, std::initializer_list<Value *> idx) {
    return b_->load(GlobalRef::ofNdarray(a), idx);
  }
  void st(Argument *a, std::initializer_list<Value *> idx, Value *v) {
    b_->store(GlobalRef::ofNdarray(a), idx, v);
  }
  Value *sq(Value *a) { return b_->mul(a, a); }
  /// Of three values, the one `k` (an i32 in [0, 3)) names.
  Value *pick(Value *k, const std::array<Value *, 3> &of) {
    Value *is0 = b_->cmp(CmpPredicate::Eq, k, i(0));
    Value *is1 = b_->cmp(CmpPredicate::Eq, k, i(1));
    return b_->select(is0, of[0], b_->select(is1, of[1], of[2]));
  }

  Stencil stencil(Value *step, Value *p) {
    Stencil st;
    for (int d = 0; d < 2; ++d) {
      Value *xs = b_->mul(ld(x_, {step, p, i(d)}), f(kInvDx));
      st.base[d] = b_->cast(b_->sub(xs, f(0.5f)), ScalarType::I32);
      Value *fx = b_->sub(xs, b_->cast(st.base[d], ScalarType::F32));
      st.fx[d] = fx;
      st.w[d][0] = b_->mul(f(0.5f), sq(b_->sub(f(1.5f), fx)));
      st.w[d][1] = b_->sub(f(0.75f), sq(b_->sub(fx, f(1.0f))));
      st.w[d][2] = b_->mul(f(0.5f), sq(b_->sub(fx, f(0.5f))));
    }
    return st;
  }

  void clearGrid() {
    std::vector<Bound> begins(3, Bound(0)), ends = {Bound(steps_), kMpmGrid, kMpmGrid};
    auto task = b_->parallelBand(begins, ends);
    Value *s = task.index(0), *gi = task.index(1), *gj = task.index(2);
    for (int d = 0; d < 2; ++d)
      st(gridV_, {s, gi, gj, i(d)}, f(0));
    st(gridM_, {s, gi, gj}, f(0));
  }

  /// (I + dt C) F, stored as F of the next step; returns its determinant.
  Value *deform(Value *step, Value *next, Value *p, const std::array<Value *, 4> &c) {
    std::array<Value *, 4> fm, nf;
    for (int k = 0; k < 4; ++k)
      fm[k] = ld(f_, {step, p, i(k)});
    for (int r = 0; r < 2; ++r)
      for (int col = 0; col < 2; ++col) {
        Value *a0 = b_->mul(f(kDt), c[2 * r]), *a1 = b_->mul(f(kDt), c[2 * r + 1]);
        a0 = r == 0 ? b_->add(f(1), a0) : a0;
        a1 = r == 1 ? b_->add(f(1), a1) : a1;
        nf[2 * r + col] = b_->add(b_->mul(a0, fm[col]), b_->mul(a1, fm[2 + col]));
        st(f_, {next, p, i(2 * r + col)}, nf[2 * r + col]);
      }
    return b_->sub(b_->mul(nf[0], nf[3]), b_->mul(nf[1], nf[2]));
  }

  void p2g(int s, Value *n) {
    auto task = b_->parallelFor(0, n);
    Value *p = task.index(), *step = i(s), *next = i(s + 1);
    Stencil sc = stencil(step, p);
    std::array<Value *, 4> c;
    for (int k = 0; k < 4; ++k)
      c[k] = ld(c_, {step, p, i(k)});
    Value *j = deform(step, next, p, c);
    // Stress of a compressible fluid-like material, E (J - 1) J.
    Value *cauchy = b_->mul(b_->mul(f(kYoung), b_->sub(j, f(1))), j);
    Value *stress = b_->mul(f(-kDt * kVolume * 4 * kInvDx * kInvDx), cauchy);
    std::array<Value *, 4> affine;
    for (int k = 0; k < 4; ++k) {
      affine[k] = b_->mul(f(kMass), c[k]);
      if (k == 0 || k == 3)
        affine[k] = b_->add(affine[k], stress);
    }
    std::array<Value *, 2> mv = {b_->mul(f(kMass), ld(v_, {step, p, i(0)})),
                                 b_->mul(f(kMass), ld(v_, {step, p, i(1)}))};
    // The x offset of the stencil's column, stepped by dx: a loop-carried
    // local (a DSL's mutable variable), one adstack per step.
    AllocaStmt *offset = b_->alloca(ScalarType::F32);
    b_->store(offset, b_->mul(b_->neg(sc.fx[0]), f(kDx)));
    auto li = b_->forRange(0, 3);
    Value *wx = pick(li.index(), sc.w[0]);
    Value *dposx = b_->load(offset);
    Value *gi = b_->add(sc.base[0], li.index());
    {
      auto lj = b_->forRange(0, 3);
      Value *weight = b_->mul(wx, pick(lj.index(), sc.w[1]));
      Value *dposy = b_->mul(b_->sub(b_->cast(lj.index(), ScalarType::F32), sc.fx[1]), f(kDx));
      Value *gj = b_->add(sc.base[1], lj.index());
      for (int d = 0; d < 2; ++d) {
        Value *m = b_->add(
            mv[d], b_->add(b_->mul(affine[2 * d], dposx), b_->mul(affine[2 * d + 1], dposy)));
        b_->atomicAdd(GlobalRef::ofNdarray(gridV_), {step, gi, gj, i(d)}, b_->mul(weight, m));
      }
      b_->atomicAdd(GlobalRef::ofNdarray(gridM_), {step, gi, gj}, b_->mul(weight, f(kMass)));
    }
    b_->store(offset, b_->add(dposx, f(kDx)));
  }

  /// `v` set to 0 where `node` lies in a wall and `v` points into it.
  Value *clamp(Value *node, Value *v) {
    Value *low = b_->cmp(CmpPredicate::Lt, node, i(kWall));
    Value *high = b_->cmp(CmpPredicate::Gt, node, i(kMpmGrid - kWall));
    Value *in = b_->binary(BinaryOp::And, low, b_->cmp(CmpPredicate::Lt, v, f(0)));
    Value *out = b_->binary(BinaryOp::And, high, b_->cmp(CmpPredicate::Gt, v, f(0)));
    return b_->select(b_->binary(BinaryOp::Or, in, out), f(0), v);
  }

  void gridUpdate(int s) {
    std::vector<Bound> begins(2, Bound(0)), ends(2, Bound(kMpmGrid));
    auto task = b_->parallelBand(begins, ends);
    Value *gi = task.index(0), *gj = task.index(1), *step = i(s);
    Value *inv = b_->div(f(1), b_->add(ld(gridM_, {step, gi, gj}), f(1e-10f)));
    Value *vx = b_->mul(ld(gridV_, {step, gi, gj, i(0)}), inv);
    Value *vy = b_->mul(ld(gridV_, {step, gi, gj, i(1)}), inv);
    vy = b_->sub(vy, f(kDt * kGravity));
    st(gridOut_, {step, gi, gj, i(0)}, clamp(gi, vx));
    st(gridOut_, {step, gi, gj, i(1)}, clamp(gj, vy));
  }

  void g2p(int s, Value *n) {
    auto task = b_->parallelFor(0, n);
    Value *p = task.index(), *step = i(s), *next = i(s + 1);
    Stencil sc = stencil(step, p);
    std::array<Value *, 2> nv;
    std::array<Value *, 4> nc;
    for (Value *&a : nv) {
      a = b_->alloca(ScalarType::F32);
      b_->store(a, f(0));
    }
    for (Value *&a : nc) {
      a = b_->alloca(ScalarType::F32);
      b_->store(a, f(0));
    }
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
        Value *gv = ld(gridOut_, {step, gi, gj, i(d)});
        Value *wv = b_->mul(weight, gv);
        b_->store(nv[d], b_->add(b_->load(nv[d]), wv));
        for (int e = 0; e < 2; ++e) {
          Value *term = b_->mul(b_->mul(f(4 * kInvDx), wv), dpos[e]);
          b_->store(nc[2 * d + e], b_->add(b_->load(nc[2 * d + e]), term));
        }
      }
    }
    for (int d = 0; d < 2; ++d) {
      Value *vd = b_->load(nv[d]);
      st(v_, {next, p, i(d)}, vd);
      st(x_, {next, p, i(d)}, b_->add(ld(x_, {step, p, i(d)}), b_->mul(f(kDt), vd)));
    }
    for (int k = 0; k < 4; ++k)
      st(c_, {next, p, i(k)}, b_->load(nc[k]));
  }

  void loss(Value *n) {
    auto task = b_->parallelFor(0, n);
    Value *p = task.index(), *last = i(steps_), *sum = nullptr;
    for (int d = 0; d < 2; ++d) {
      Value *e = sq(b_->sub(ld(x_, {last, p, i(d)}), ld(target_, {i(d)})));
      sum = sum ? b_->add(sum, e) : e;
    }
    b_->atomicAdd(GlobalRef::ofNdarray(loss_), {i(0)}, sum);
  }

  int steps_;
  Kernel *kernel_ = nullptr;
  IRBuilder *b_ = nullptr;
  Argument *x_, *v_, *c_, *f_, *gridV_, *gridM_, *gridOut_, *target_, *loss_;
};

} // namespace

std::unique_ptr<Module> buildMpmModule(int steps) {
  auto m = std::make_unique<Module>();
  MpmBuilder(*m, steps).build();
  return m;
}

} // namespace qdbench
