//===- Mpm.cpp - 2-D MLS-MPM, one kernel per step -----------------------===//
//
// DiffTaichi's diffmpm pattern: a block of N particles thrown at a target.
// @step(t) has four tasks (MpmEmitter.h): clear the grid of step t, P2G
// (atomic adds into the grid), the grid update, G2P; @loss(T) sums the
// squared distance of the particles at step T to the target. The gradient
// is with respect to the initial velocities v[0].
//
//===----------------------------------------------------------------------===//
#include "MpmEmitter.h"
#include "Simulation.h"

#include <cmath>

namespace qdsim {
namespace {

class Mpm final : public Simulation {
public:
  Mpm(int side, int grid) : side_(side), grid_(grid) {}

  std::string_view name() const override { return "mpm"; }
  std::string_view parameter() const override { return "v"; }
  std::vector<int64_t> checkedElements() const override {
    return {0, 1, int64_t(side_) * side_ + 1};
  }

  std::vector<SimArray> arrays(int steps) const override {
    const int64_t t1 = steps + 1, n = int64_t(side_) * side_, g = grid_;
    std::vector<double> x0, v0, f0;
    for (int r = 0; r < side_; ++r)
      for (int c = 0; c < side_; ++c) {
        // Off the node lines (a particle on one is at a kink of the cast).
        x0.insert(x0.end(), {0.3 + 0.2 * (c + 0.37) / side_, 0.3 + 0.2 * (r + 0.41) / side_});
        int64_t k = int64_t(r) * side_ + c;
        v0.insert(v0.end(), {1.0 + 0.2 * hashUniform(k, 21), 0.5 + 0.2 * hashUniform(k, 22)});
        f0.insert(f0.end(), {1, 0, 0, 1});
      }
    using qd::ScalarType;
    return {{"x", ScalarType::F32, {t1, n, 2}, true, x0},
            {"v", ScalarType::F32, {t1, n, 2}, true, v0},
            {"C", ScalarType::F32, {t1, n, 4}, true, {}},
            {"F", ScalarType::F32, {t1, n, 4}, true, f0},
            {"grid_v", ScalarType::F32, {t1, g, g, 2}, true, {}},
            {"grid_m", ScalarType::F32, {t1, g, g}, true, {}},
            {"grid_o", ScalarType::F32, {t1, g, g, 2}, true, {}},
            {"target", ScalarType::F32, {2}, false, {0.7, 0.6}},
            lossArray()};
  }

protected:
  void emitStep(qd::IRBuilder &b, const SimKernelArgs &a) override {
    qd::Value *n = b.shape(a["x"], 1);
    MpmEmitter e(b, args(a), grid_, a.t());
    e.clearGrid(0);
    e.p2g(0, n);
    e.gridUpdate(0);
    e.g2p(0, n);
  }

  void emitLoss(qd::IRBuilder &b, const SimKernelArgs &a) override {
    qd::Value *n = b.shape(a["x"], 1);
    MpmEmitter(b, args(a), grid_, a.t()).loss(0, n);
  }

private:
  static MpmArgs args(const SimKernelArgs &a) {
    return {a["x"],      a["v"],      a["C"],      a["F"],   a["grid_v"],
            a["grid_m"], a["grid_o"], a["target"], a["loss"]};
  }

  int side_, grid_;
};

} // namespace

std::unique_ptr<Simulation> makeMpm(SimSize size) {
  switch (size) {
  case SimSize::Small:
    return std::make_unique<Mpm>(8, 32);
  case SimSize::Large:
    return std::make_unique<Mpm>(128, 64);
  case SimSize::Gpu: // 16x the particles of the large size, on a grid of 256^2
    break;
  }
  return std::make_unique<Mpm>(512, 256);
}

} // namespace qdsim
