//===- Wave.cpp - The 2-D wave equation on a grid -----------------------===//
//
// DiffTaichi's wave: the pressure p of a wave on an n x n grid (zero
// outside it), stepped by central differences in time and space; the loss
// is the squared distance of p at step T to a target pattern, and its
// gradient is with respect to the initial pressure p[0]. @step(t), two
// tasks over the cells:
//
//   laplacian  lap[t, i, j] = the 5-point Laplacian of p[t] (cells outside
//              the grid read as 0: clamped loads and selects)
//   update     p[t + 1] = 2 p[t] - p[t - 1] + c^2 lap[t] (p[-1] = p[0]:
//              the wave starts at rest)
//
//===----------------------------------------------------------------------===//
#include "SimEmitter.h"
#include "Simulation.h"

#include <cmath>
#include <numbers>

namespace qdsim {
namespace {

using qd::Value;

// (c dt / dx)^2, as DiffTaichi's dt = dx / (sqrt(3) c) gives.
constexpr double kCourant2 = 1.0 / 3.0;

class Wave final : public Simulation, SimEmitter {
public:
  explicit Wave(int n) : n_(n) {}

  std::string_view name() const override { return "wave"; }
  std::string_view parameter() const override { return "p"; }
  std::vector<int64_t> checkedElements() const override {
    return {int64_t(n_ / 2) * n_ + n_ / 2, int64_t(n_ / 3) * n_ + n_ / 4, n_ + 1};
  }

  std::vector<SimArray> arrays(int steps) const override {
    const int64_t t1 = steps + 1, n = n_;
    std::vector<double> p0, target;
    for (int r = 0; r < n_; ++r)
      for (int c = 0; c < n_; ++c) {
        double dr = (r - 0.4 * n_) / (0.1 * n_), dc = (c - 0.5 * n_) / (0.1 * n_);
        p0.push_back(std::exp(-0.5 * (dr * dr + dc * dc)));
        target.push_back(0.1 * std::sin(2 * std::numbers::pi * r / n_) *
                         std::cos(2 * std::numbers::pi * c / n_));
      }
    using qd::ScalarType;
    return {{"p", ScalarType::F32, {t1, n, n}, true, p0},
            {"lap", ScalarType::F32, {t1, n, n}, true, {}},
            {"target", ScalarType::F32, {n, n}, false, target},
            lossArray()};
  }

protected:
  void emitStep(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    Value *t = a.t();
    {
      auto cells = grid2(n_, n_);
      Value *r = cells.index(0), *c = cells.index(1);
      Value *sum = b.mul(f(-4), ld(a["p"], {t, r, c}));
      for (auto [dr, dc] : {std::pair{-1, 0}, {1, 0}, {0, -1}, {0, 1}})
        sum = b.add(sum, neighbour(a["p"], t, r, c, dr, dc));
      st(a["lap"], {t, r, c}, sum);
    }
    auto cells = grid2(n_, n_);
    Value *r = cells.index(0), *c = cells.index(1);
    Value *prev = ld(a["p"], {b.max(b.sub(t, i(1)), i(0)), r, c});
    Value *now = ld(a["p"], {t, r, c});
    Value *next = madd(b.sub(b.mul(f(2), now), prev), f(kCourant2), ld(a["lap"], {t, r, c}));
    st(a["p"], {b.add(t, i(1)), r, c}, next);
  }

  void emitLoss(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    meanSquaredLoss(a["p"], a["target"], a["loss"], a.t(), n_);
  }

private:
  /// p[t, r + dr, c + dc], 0 outside the grid (one of dr, dc is 0).
  Value *neighbour(qd::Argument *p, Value *t, Value *r, Value *c, int dr, int dc) {
    Value *k = dr ? b_->add(r, i(dr)) : b_->add(c, i(dc));
    Value *inside = (dr ? dr : dc) < 0 ? b_->ge(k, i(0)) : b_->lt(k, i(n_));
    Value *kc = clampIndex(k, n_);
    Value *v = dr ? ld(p, {t, kc, c}) : ld(p, {t, r, kc});
    return b_->select(inside, v, f(0));
  }

  int n_;
};

} // namespace

std::unique_ptr<Simulation> makeWave(SimSize size) {
  // The GPU size: 64x the cells of the large one.
  return std::make_unique<Wave>(size == SimSize::Small ? 16 : size == SimSize::Large ? 256 : 2048);
}

} // namespace qdsim
