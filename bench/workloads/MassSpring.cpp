//===- MassSpring.cpp - A mass-spring robot and its controller ----------===//
//
// DiffTaichi's mass_spring: a robot of point masses joined by springs on a
// ground line; a two-layer controller (sine waves and the masses' offsets
// from their centre -> tanh hidden layer -> tanh actuation per spring)
// lengthens and shortens the actuated springs. The robot here is a grid
// of cols x rows masses with horizontal, vertical and diagonal springs
// (the horizontal ones actuated). @step(t), five tasks:
//
//   center    each mass adds x[t, i] / N into center[t]        (atomic add)
//   nn1       each hidden unit: tanh of its weighted inputs    (two loops)
//   nn2       each spring: act[t, s] = tanh(w2 hidden + b2)    (a loop)
//   springs   each spring adds its impulse to both ends' v_inc[t + 1]
//   advance   each mass: damped velocity + gravity + v_inc, stopped at
//             the ground (select), x[t + 1] = x[t] + dt v[t + 1]
//
// Loss: minus the x coordinate of the head (the last mass) at step T.
//
//===----------------------------------------------------------------------===//
#include "SimEmitter.h"
#include "Simulation.h"

#include <cmath>
#include <numbers>

namespace qdsim {
namespace {

using qd::Value;

constexpr double kDt = 0.004, kDamping = 15, kGravity = -4.8, kGround = 0.1, kOmega = 10;
constexpr double kSpacing = 0.05, kStiffness = 3e4, kActuation = 0.15;

class MassSpring final : public Simulation, SimEmitter {
public:
  MassSpring(int cols, int rows, int hidden, int waves)
      : cols_(cols), rows_(rows), hidden_(hidden), waves_(waves) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        if (c + 1 < cols)
          springs_.push_back({node(c, r), node(c + 1, r), 1});
        if (r + 1 < rows)
          springs_.push_back({node(c, r), node(c, r + 1), 0});
        if (c + 1 < cols && r + 1 < rows) {
          springs_.push_back({node(c, r), node(c + 1, r + 1), 0});
          springs_.push_back({node(c + 1, r), node(c, r + 1), 0});
        }
      }
  }

  std::string_view name() const override { return "mass_spring"; }
  std::string_view parameter() const override { return "w1"; }
  std::vector<int64_t> checkedElements() const override { return {0, 3, inputs() + 1}; }

  std::vector<SimArray> arrays(int steps) const override {
    const int64_t n = cols_ * rows_, s = int64_t(springs_.size()), t1 = steps + 1;
    std::vector<double> x0, anchors, spring, w1, w2;
    for (int r = 0; r < rows_; ++r)
      for (int c = 0; c < cols_; ++c)
        x0.insert(x0.end(), {0.1 + c * kSpacing, kGround + 0.01 + r * kSpacing});
    for (const Spring &sp : springs_) {
      anchors.insert(anchors.end(), {double(sp.a), double(sp.b)});
      spring.insert(spring.end(), {length(sp), kStiffness, sp.actuated ? kActuation : 0.0});
    }
    const double scale1 = std::sqrt(2.0 / (hidden_ + inputs())) * 2;
    for (int64_t k = 0; k < hidden_ * inputs(); ++k)
      w1.push_back(scale1 * hashUniform(k, 1));
    const double scale2 = std::sqrt(2.0 / double(hidden_ + s)) * 3;
    for (int64_t k = 0; k < s * hidden_; ++k)
      w2.push_back(scale2 * hashUniform(k, 2));
    using qd::ScalarType;
    return {{"x", ScalarType::F32, {t1, n, 2}, true, x0},
            {"v", ScalarType::F32, {t1, n, 2}, true, {}},
            {"v_inc", ScalarType::F32, {t1, n, 2}, true, {}},
            {"center", ScalarType::F32, {t1, 2}, true, {}},
            {"hidden", ScalarType::F32, {t1, hidden_}, true, {}},
            {"act", ScalarType::F32, {t1, s}, true, {}},
            {"anchors", ScalarType::I32, {s, 2}, false, anchors},
            {"spring", ScalarType::F32, {s, 3}, false, spring},
            {"w1", ScalarType::F32, {hidden_, inputs()}, true, w1},
            {"b1", ScalarType::F32, {hidden_}, true, {}},
            {"w2", ScalarType::F32, {s, hidden_}, true, w2},
            {"b2", ScalarType::F32, {s}, true, {}},
            {"goal", ScalarType::F32, {2}, false, {0.9, 0.2}},
            lossArray()};
  }

protected:
  void emitStep(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    center(a);
    nn1(a);
    nn2(a);
    springForces(a);
    advance(a);
  }

  void emitLoss(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    auto task = b.serial();
    st(a["loss"], {i(0)}, b.neg(ld(a["x"], {a.t(), i(cols_ * rows_ - 1), i(0)})));
  }

private:
  struct Spring {
    int a, b;
    bool actuated;
  };
  int node(int c, int r) const { return r * cols_ + c; }
  int64_t inputs() const { return waves_ + 4 * int64_t(cols_) * rows_ + 2; }
  double length(const Spring &s) const {
    auto pos = [&](int k) { return std::pair{(k % cols_) * kSpacing, (k / cols_) * kSpacing}; };
    auto [ax, ay] = pos(s.a);
    auto [bx, by] = pos(s.b);
    return std::hypot(ax - bx, ay - by);
  }

  void center(const SimKernelArgs &a) {
    auto task = b_->parallelFor(0, b_->shape(a["x"], 1));
    for (int d = 0; d < 2; ++d)
      acc(a["center"], {a.t(), i(d)},
          b_->mul(ld(a["x"], {a.t(), task.index(), i(d)}), f(1.0 / (cols_ * rows_))));
  }

  void nn1(const SimKernelArgs &a) {
    auto task = b_->parallelFor(0, hidden_);
    Value *h = task.index(), *t = a.t();
    qd::AllocaStmt *sum = local(ld(a["b1"], {h}));
    Value *phase = b_->mul(b_->cast(t, qd::ScalarType::F32), f(kOmega * kDt));
    {
      auto k = b_->forRange(0, waves_);
      Value *shift =
          b_->mul(b_->cast(k.index(), qd::ScalarType::F32), f(2 * std::numbers::pi / waves_));
      addTo(sum, b_->mul(ld(a["w1"], {h, k.index()}), b_->sin(b_->add(phase, shift))));
    }
    std::array<Value *, 2> c = {ld(a["center"], {t, i(0)}), ld(a["center"], {t, i(1)})};
    {
      auto j = b_->forRange(0, b_->shape(a["x"], 1));
      Value *col = b_->add(i(waves_), b_->mul(j.index(), i(4)));
      for (int d = 0; d < 2; ++d) {
        Value *offset = b_->sub(ld(a["x"], {t, j.index(), i(d)}), c[d]);
        Value *vel = ld(a["v"], {t, j.index(), i(d)});
        Value *term = b_->add(b_->mul(ld(a["w1"], {h, b_->add(col, i(d))}), offset),
                              b_->mul(ld(a["w1"], {h, b_->add(col, i(2 + d))}), vel));
        addTo(sum, b_->mul(term, f(0.05)));
      }
    }
    for (int d = 0; d < 2; ++d) {
      Value *w = ld(a["w1"], {h, i(int(inputs()) - 2 + d)});
      addTo(sum, b_->mul(w, b_->sub(ld(a["goal"], {i(d)}), c[d])));
    }
    st(a["hidden"], {t, h}, b_->tanh(b_->load(sum)));
  }

  void nn2(const SimKernelArgs &a) {
    auto task = b_->parallelFor(0, b_->shape(a["act"], 1));
    Value *s = task.index(), *t = a.t();
    qd::AllocaStmt *sum = local(ld(a["b2"], {s}));
    {
      auto h = b_->forRange(0, hidden_);
      addTo(sum, b_->mul(ld(a["w2"], {s, h.index()}), ld(a["hidden"], {t, h.index()})));
    }
    st(a["act"], {t, s}, b_->tanh(b_->load(sum)));
  }

  void springForces(const SimKernelArgs &a) {
    auto task = b_->parallelFor(0, b_->shape(a["act"], 1));
    Value *s = task.index(), *t = a.t(), *next = b_->add(t, i(1));
    Value *ia = ld(a["anchors"], {s, i(0)}), *ib = ld(a["anchors"], {s, i(1)});
    std::array<Value *, 2> dist;
    for (int d = 0; d < 2; ++d)
      dist[d] = b_->sub(ld(a["x"], {t, ia, i(d)}), ld(a["x"], {t, ib, i(d)}));
    Value *len = b_->add(b_->sqrt(b_->add(sq(dist[0]), sq(dist[1]))), f(1e-4));
    Value *rest = ld(a["spring"], {s, i(0)}), *actuation = ld(a["spring"], {s, i(2)});
    Value *target = b_->mul(rest, madd(f(1), actuation, ld(a["act"], {t, s})));
    Value *k = ld(a["spring"], {s, i(1)});
    Value *scale = b_->div(b_->mul(b_->mul(f(kDt), b_->sub(len, target)), k), len);
    for (int d = 0; d < 2; ++d) {
      Value *impulse = b_->mul(scale, dist[d]);
      acc(a["v_inc"], {next, ia, i(d)}, b_->neg(impulse));
      acc(a["v_inc"], {next, ib, i(d)}, impulse);
    }
  }

  void advance(const SimKernelArgs &a) {
    auto task = b_->parallelFor(0, b_->shape(a["x"], 1));
    Value *p = task.index(), *t = a.t(), *next = b_->add(t, i(1));
    std::array<Value *, 2> v;
    for (int d = 0; d < 2; ++d) {
      v[d] = madd(ld(a["v_inc"], {next, p, i(d)}), f(std::exp(-kDt * kDamping)),
                  ld(a["v"], {t, p, i(d)}));
      if (d == 1)
        v[d] = b_->add(v[d], f(kDt * kGravity));
    }
    // On the ground and moving into it: the mass stops (friction).
    Value *below = b_->lt(ld(a["x"], {t, p, i(1)}), f(kGround));
    Value *stop = b_->bitAnd(below, b_->lt(v[1], f(0)));
    for (int d = 0; d < 2; ++d) {
      Value *vd = b_->select(stop, f(0), v[d]);
      st(a["v"], {next, p, i(d)}, vd);
      st(a["x"], {next, p, i(d)}, madd(ld(a["x"], {t, p, i(d)}), f(kDt), vd));
    }
  }

  int cols_, rows_, hidden_, waves_;
  std::vector<Spring> springs_;
};

} // namespace

std::unique_ptr<Simulation> makeMassSpring(SimSize size) {
  switch (size) {
  case SimSize::Small:
    return std::make_unique<MassSpring>(4, 2, 8, 4);
  case SimSize::Large:
    return std::make_unique<MassSpring>(32, 8, 32, 10);
  case SimSize::Gpu: // 16x the masses and springs of the large robot
    break;
  }
  return std::make_unique<MassSpring>(128, 32, 32, 10);
}

} // namespace qdsim
