//===- Billiards.cpp - Balls colliding on a table -----------------------===//
//
// DiffTaichi's billiards: a cue ball shot into a triangle rack; each pair
// of balls that overlaps (one step ahead) and approaches exchanges an
// impulse, with a time-of-impact correction of the position. The loss is
// the squared distance of the last ball to a goal at step T, its gradient
// with respect to the initial velocities (the cue ball's shot). @step(t),
// two tasks:
//
//   collide  each ball i loops over every ball j: `if j != i`, `if the
//            distance < 2r`, `if approaching` (nested ifs on data), adding
//            into impulse and position-correction locals; stores them in
//            impulse[t + 1, i], x_inc[t + 1, i]
//   advance  v[t + 1] = v[t] + impulse, x[t + 1] = x[t] + dt v[t + 1] + x_inc
//
//===----------------------------------------------------------------------===//
#include "SimEmitter.h"
#include "Simulation.h"

#include <array>

namespace qdsim {
namespace {

using qd::Value;

constexpr double kDt = 0.003, kRadius = 0.03, kElasticity = 0.8;

class Billiards final : public Simulation, SimEmitter {
public:
  explicit Billiards(int layers) : layers_(layers) {}

  std::string_view name() const override { return "billiards"; }
  std::string_view parameter() const override { return "v"; }
  std::vector<int64_t> checkedElements() const override { return {0, 1}; }

  std::vector<SimArray> arrays(int steps) const override {
    const int64_t t1 = steps + 1, n = balls();
    std::vector<double> x0 = {0.4, 0.5 - 0.004}, v0 = {2.0, 0.05};
    // The rack's balls 2% further apart than touching: at rest and touching
    // (distance 2r, no relative velocity) a ball sits on the kinks of the
    // collision's `if`s.
    const double gap = 2.04 * kRadius;
    for (int l = 0; l < layers_; ++l)
      for (int j = 0; j <= l; ++j)
        x0.insert(x0.end(), {0.5 + l * gap, 0.5 + j * gap - l * kRadius * 0.7});
    using qd::ScalarType;
    return {{"x", ScalarType::F32, {t1, n, 2}, true, x0},
            {"v", ScalarType::F32, {t1, n, 2}, true, v0},
            {"impulse", ScalarType::F32, {t1, n, 2}, true, {}},
            {"x_inc", ScalarType::F32, {t1, n, 2}, true, {}},
            {"goal", ScalarType::F32, {2}, false, {0.9, 0.75}},
            lossArray()};
  }

protected:
  void emitStep(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    collide(a);
    auto task = b.parallelFor(0, b.shape(a["x"], 1));
    Value *p = task.index(), *t = a.t(), *next = b.add(t, i(1));
    for (int d = 0; d < 2; ++d) {
      Value *v = b.add(ld(a["v"], {t, p, i(d)}), ld(a["impulse"], {next, p, i(d)}));
      st(a["v"], {next, p, i(d)}, v);
      Value *x = b.add(madd(ld(a["x"], {t, p, i(d)}), f(kDt), v), ld(a["x_inc"], {next, p, i(d)}));
      st(a["x"], {next, p, i(d)}, x);
    }
  }

  void emitLoss(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    auto task = b.serial();
    Value *last = b.sub(b.shape(a["x"], 1), i(1)), *sum = f(0);
    for (int d = 0; d < 2; ++d)
      sum = b.add(sum, sq(b.sub(ld(a["x"], {a.t(), last, i(d)}), ld(a["goal"], {i(d)}))));
    st(a["loss"], {i(0)}, sum);
  }

private:
  int balls() const { return 1 + layers_ * (layers_ + 1) / 2; }

  void collide(const SimKernelArgs &a) {
    Value *n = b_->shape(a["x"], 1);
    auto task = b_->parallelFor(0, n);
    Value *p = task.index(), *t = a.t();
    std::array<qd::AllocaStmt *, 2> impulse = {local(f(0)), local(f(0))};
    std::array<qd::AllocaStmt *, 2> shift = {local(f(0)), local(f(0))};
    std::array<Value *, 2> xi, vi;
    for (int d = 0; d < 2; ++d) {
      vi[d] = ld(a["v"], {t, p, i(d)});
      xi[d] = madd(ld(a["x"], {t, p, i(d)}), f(kDt), vi[d]);
    }
    {
      auto other = b_->forRange(0, n);
      Value *q = other.index();
      auto distinct = b_->ifThen(b_->ne(q, p));
      std::array<Value *, 2> dist, rel;
      for (int d = 0; d < 2; ++d) {
        Value *vq = ld(a["v"], {t, q, i(d)});
        dist[d] = b_->sub(xi[d], madd(ld(a["x"], {t, q, i(d)}), f(kDt), vq));
        rel[d] = b_->sub(vi[d], vq);
      }
      Value *norm = b_->sqrt(b_->add(sq(dist[0]), sq(dist[1])));
      auto touching = b_->ifThen(b_->lt(norm, f(2 * kRadius)));
      std::array<Value *, 2> dir = {b_->div(dist[0], norm), b_->div(dist[1], norm)};
      Value *projected = b_->add(b_->mul(dir[0], rel[0]), b_->mul(dir[1], rel[1]));
      auto approaching = b_->ifThen(b_->lt(projected, f(0)));
      Value *strength = b_->mul(f(-(1 + kElasticity) * 0.5), projected);
      Value *toi = b_->div(b_->sub(norm, f(2 * kRadius)), b_->min(f(-1e-3), projected));
      Value *early = b_->min(b_->sub(toi, f(kDt)), f(0));
      for (int d = 0; d < 2; ++d) {
        Value *imp = b_->mul(strength, dir[d]);
        addTo(impulse[d], imp);
        addTo(shift[d], b_->mul(early, imp));
      }
    }
    Value *next = b_->add(t, i(1));
    for (int d = 0; d < 2; ++d) {
      st(a["impulse"], {next, p, i(d)}, b_->load(impulse[d]));
      st(a["x_inc"], {next, p, i(d)}, b_->load(shift[d]));
    }
  }

  int layers_;
};

} // namespace

std::unique_ptr<Simulation> makeBilliards(SimSize size) {
  // The GPU size: 3241 balls, 16x the pairs of the large size's 821.
  return std::make_unique<Billiards>(size == SimSize::Small ? 3 : size == SimSize::Large ? 40 : 80);
}

} // namespace qdsim
