//===- Smoke.cpp - Smoke in a periodic box with a pressure projection ----===//
//
// DiffTaichi's smoke: a velocity field v and a smoke density s on an
// n x n periodic grid (velocities in cells per step). The loss is the
// squared distance of s at step T to a target, its gradient with respect
// to the initial velocity v[0]. @step(t), K + 4 tasks over the cells:
//
//   advect_v    vu[t] = v[t] traced back along v[t] (bilinear, cast to i32
//               for the cell, periodic wrap by selects)
//   divergence  div[t] of vu[t] (central differences)
//   jacobi k    p[t, k + 1] = (div + the 4 neighbours of p[t, k]) / 4, for
//               k = 0 .. K - 1 (p[t, 0] = 0): one task per iteration
//   project     v[t + 1] = vu[t] - grad p[t, K] / 2
//   advect_s    s[t + 1] = s[t] traced back along v[t + 1]
//
//===----------------------------------------------------------------------===//
#include "SimEmitter.h"
#include "Simulation.h"

#include <array>
#include <cmath>
#include <functional>
#include <numbers>

namespace qdsim {
namespace {

using qd::Value;

class Smoke final : public Simulation, SimEmitter {
public:
  Smoke(int n, int jacobi) : n_(n), jacobi_(jacobi) {}

  std::string_view name() const override { return "smoke"; }
  std::string_view parameter() const override { return "v"; }
  std::vector<int64_t> checkedElements() const override {
    int64_t mid = (int64_t(n_ / 2) * n_ + n_ / 3) * 2;
    return {mid, mid + 1, (int64_t(n_ / 4) * n_ + n_ / 2) * 2};
  }

  std::vector<SimArray> arrays(int steps) const override {
    const int64_t t1 = steps + 1, n = n_;
    std::vector<double> v0, s0, target;
    auto blob = [&](int r, int c, double cr, double cc) {
      double dr = (r - cr * n_) / (0.15 * n_), dc = (c - cc * n_) / (0.15 * n_);
      return std::exp(-0.5 * (dr * dr + dc * dc));
    };
    for (int r = 0; r < n_; ++r)
      for (int c = 0; c < n_; ++c) {
        double tr = 2 * std::numbers::pi * r / n_, tc = 2 * std::numbers::pi * c / n_;
        v0.insert(v0.end(), {0.3 * std::sin(tc) + 0.1, 0.5 + 0.3 * std::cos(tr)});
        s0.push_back(blob(r, c, 0.5, 0.3));
        target.push_back(blob(r, c, 0.5, 0.7));
      }
    using qd::ScalarType;
    return {{"v", ScalarType::F32, {t1, n, n, 2}, true, v0},
            {"vu", ScalarType::F32, {t1, n, n, 2}, true, {}},
            {"div", ScalarType::F32, {t1, n, n}, true, {}},
            {"p", ScalarType::F32, {t1, jacobi_ + 1, n, n}, true, {}},
            {"s", ScalarType::F32, {t1, n, n}, true, s0},
            {"target", ScalarType::F32, {n, n}, false, target},
            lossArray()};
  }

protected:
  void emitStep(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    Value *t = a.t();
    qd::Argument *v = a["v"], *vu = a["vu"], *p = a["p"];
    for (int d = 0; d < 2; ++d)
      advect(
          v, t, 0,
          [&](Value *r, Value *c) {
            return ld(v, {t, r, c, i(d)});
          },
          [&](Value *r, Value *c, Value *x) {
            st(vu, {t, r, c, i(d)}, x);
          });
    {
      auto cells = grid2(n_, n_);
      Value *r = cells.index(0), *c = cells.index(1);
      Value *dx = b.sub(ld(vu, {t, wrap(r, 1), c, i(0)}), ld(vu, {t, wrap(r, -1), c, i(0)}));
      Value *dy = b.sub(ld(vu, {t, r, wrap(c, 1), i(1)}), ld(vu, {t, r, wrap(c, -1), i(1)}));
      st(a["div"], {t, r, c}, b.mul(f(-0.5), b.add(dx, dy)));
    }
    for (int k = 0; k < jacobi_; ++k) {
      auto cells = grid2(n_, n_);
      Value *r = cells.index(0), *c = cells.index(1), *kv = i(k);
      Value *sum = ld(a["div"], {t, r, c});
      sum = b.add(sum, b.add(ld(p, {t, kv, wrap(r, -1), c}), ld(p, {t, kv, wrap(r, 1), c})));
      sum = b.add(sum, b.add(ld(p, {t, kv, r, wrap(c, -1)}), ld(p, {t, kv, r, wrap(c, 1)})));
      st(p, {t, i(k + 1), r, c}, b.mul(sum, f(0.25)));
    }
    {
      auto cells = grid2(n_, n_);
      Value *r = cells.index(0), *c = cells.index(1), *last = i(jacobi_);
      Value *next = b.add(t, i(1));
      Value *gr = b.sub(ld(p, {t, last, wrap(r, 1), c}), ld(p, {t, last, wrap(r, -1), c}));
      Value *gc = b.sub(ld(p, {t, last, r, wrap(c, 1)}), ld(p, {t, last, r, wrap(c, -1)}));
      st(v, {next, r, c, i(0)}, madd(ld(vu, {t, r, c, i(0)}), f(-0.5), gr));
      st(v, {next, r, c, i(1)}, madd(ld(vu, {t, r, c, i(1)}), f(-0.5), gc));
    }
    advect(
        v, t, 1,
        [&](Value *r, Value *c) {
          return ld(a["s"], {t, r, c});
        },
        [&](Value *r, Value *c, Value *x) {
          st(a["s"], {b.add(t, i(1)), r, c}, x);
        });
  }

  void emitLoss(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    meanSquaredLoss(a["s"], a["target"], a["loss"], a.t(), n_);
  }

private:
  Value *wrap(Value *k, int by) { return wrapIndex(b_->add(k, i(by)), n_); }

  using Sample = std::function<Value *(Value *r, Value *c)>;
  using Store = std::function<void(Value *r, Value *c, Value *x)>;

  /// A task storing, at each cell, `field` interpolated bilinearly at the
  /// cell traced back one step along `vel` at step t + `offset`.
  void advect(qd::Argument *vel, Value *t, int offset, const Sample &field, const Store &store) {
    auto cells = grid2(n_, n_);
    Value *r = cells.index(0), *c = cells.index(1);
    Value *step = offset ? b_->add(t, i(offset)) : t;
    std::array<Value *, 2> base, frac;
    for (int d = 0; d < 2; ++d) {
      // + n keeps the position positive: the cast to i32 is then a floor.
      Value *cell = b_->cast(d == 0 ? r : c, qd::ScalarType::F32);
      Value *pos = b_->add(b_->sub(cell, ld(vel, {step, r, c, i(d)})), f(n_));
      Value *whole = b_->cast(pos, qd::ScalarType::I32);
      frac[d] = b_->sub(pos, b_->cast(whole, qd::ScalarType::F32));
      base[d] = wrapIndex(b_->sub(whole, i(n_)), n_);
    }
    Value *r1 = wrap(base[0], 1), *c1 = wrap(base[1], 1);
    auto mix = [&](Value *lo, Value *hi, Value *w) { return madd(lo, w, b_->sub(hi, lo)); };
    Value *top = mix(field(base[0], base[1]), field(base[0], c1), frac[1]);
    Value *bottom = mix(field(r1, base[1]), field(r1, c1), frac[1]);
    store(r, c, mix(top, bottom, frac[0]));
  }

  int n_, jacobi_;
};

} // namespace

std::unique_ptr<Simulation> makeSmoke(SimSize size) {
  switch (size) {
  case SimSize::Small:
    return std::make_unique<Smoke>(12, 4);
  case SimSize::Large:
    return std::make_unique<Smoke>(110, 6);
  case SimSize::Gpu: // 22x the cells of the large size
    break;
  }
  return std::make_unique<Smoke>(512, 6);
}

} // namespace qdsim
