//===- Newton.cpp - A per-element implicit step solved by Newton's method ---===//
//
// A chain of N stiff cubic decays, dy/dt = -k y^3 + forcing, coupled by
// diffusion. Each step solves the backward-Euler equation of every
// element, g(z) = z + dt k z^3 - rhs = 0, by Newton's method in a `while`
// loop that ends when |g| <= tol (1 + |rhs|) or after kMaxIterations: the
// trip count depends on the data, so the gradient's adstacks (z per
// iteration) are sized at launch. @step(t), two tasks:
//
//   solve    each element: Newton from z = y[t, i]; z[t, i], and the
//            iterations it took in iters[t, i]
//   diffuse  y[t + 1, i] = z + D (z[i - 1] - 2 z + z[i + 1]) (periodic)
//
// The tolerance `tol` is a scalar argument (tighter in the f64 copy, so
// that its finite differences see the solution, not the stopping rule).
// Loss: the mean squared distance of y[T] to a target.
//
//===----------------------------------------------------------------------===//
#include "SimEmitter.h"
#include "Simulation.h"

#include <cmath>

namespace qdsim {
namespace {

using qd::Value;

constexpr double kDt = 0.1, kDiffusion = 0.2, kOmega = 3;
constexpr int kMaxIterations = 30;

class Newton final : public Simulation, SimEmitter {
public:
  explicit Newton(int n) : n_(n) {}

  std::string_view name() const override { return "newton"; }
  std::string_view parameter() const override { return "k"; }
  std::vector<int64_t> checkedElements() const override { return {0, n_ / 2, n_ - 1}; }
  std::vector<SimScalar> scalars() const override { return {{"tol", 1e-5, 1e-13}}; }

  std::vector<SimArray> arrays(int steps) const override {
    const int64_t t1 = steps + 1, n = n_;
    std::vector<double> y0, k, amp, target;
    for (int e = 0; e < n_; ++e) {
      y0.push_back(1.0 + 0.5 * hashUniform(e, 11));
      k.push_back(27.5 + 22.5 * hashUniform(e, 12));
      amp.push_back(0.5 + 0.5 * hashUniform(e, 13));
      target.push_back(0.3 + 0.1 * hashUniform(e, 14));
    }
    using qd::ScalarType;
    return {{"y", ScalarType::F32, {t1, n}, true, y0},
            {"z", ScalarType::F32, {t1, n}, true, {}},
            {"iters", ScalarType::I32, {t1, n}, false, {}},
            {"k", ScalarType::F32, {n}, true, k},
            {"amp", ScalarType::F32, {n}, true, amp},
            {"target", ScalarType::F32, {n}, false, target},
            lossArray()};
  }

protected:
  void emitStep(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    solve(a);
    auto task = b.parallelFor(0, n_);
    Value *e = task.index(), *t = a.t();
    Value *z = ld(a["z"], {t, e});
    Value *left = ld(a["z"], {t, wrapIndex(b.sub(e, i(1)), n_)});
    Value *right = ld(a["z"], {t, wrapIndex(b.add(e, i(1)), n_)});
    Value *lap = b.sub(b.add(left, right), b.mul(f(2), z));
    st(a["y"], {b.add(t, i(1)), e}, madd(z, f(kDiffusion), lap));
  }

  void emitLoss(qd::IRBuilder &b, const SimKernelArgs &a) override {
    b_ = &b;
    auto task = b.parallelFor(0, n_);
    Value *e = sq(b.sub(ld(a["y"], {a.t(), task.index()}), ld(a["target"], {task.index()})));
    acc(a["loss"], {i(0)}, b.mul(f(1.0 / n_), e));
  }

private:
  void solve(const SimKernelArgs &a) {
    auto task = b_->parallelFor(0, n_);
    Value *e = task.index(), *t = a.t();
    Value *y = ld(a["y"], {t, e}), *k = ld(a["k"], {e});
    Value *phase = madd(b_->mul(b_->cast(t, qd::ScalarType::F32), f(kOmega * kDt)), f(0.7),
                        b_->cast(e, qd::ScalarType::F32));
    Value *rhs = madd(y, b_->mul(f(kDt), ld(a["amp"], {e})), b_->sin(phase));
    Value *tol = b_->mul(a["tol"], b_->add(f(1), b_->abs(rhs)));
    Value *dtk = b_->mul(f(kDt), k);
    qd::AllocaStmt *z = local(y);
    qd::AllocaStmt *iterations = b_->alloca(qd::ScalarType::I32);
    b_->store(iterations, i(0));
    {
      auto loop = b_->whileLoop();
      Value *zv = b_->load(z), *it = b_->load(iterations);
      Value *g = b_->sub(madd(zv, dtk, b_->mul(zv, sq(zv))), rhs);
      Value *converged = b_->le(b_->abs(g), tol);
      {
        auto done = b_->ifThen(b_->bitOr(converged, b_->ge(it, i(kMaxIterations))));
        b_->brk();
      }
      Value *slope = madd(f(1), b_->mul(f(3), dtk), sq(zv));
      b_->store(z, b_->sub(zv, b_->div(g, slope)));
      b_->store(iterations, b_->add(it, i(1)));
    }
    st(a["z"], {t, e}, b_->load(z));
    st(a["iters"], {t, e}, b_->load(iterations));
  }

  int n_;
};

} // namespace

std::unique_ptr<Simulation> makeNewton(SimSize size) {
  // The GPU size: 64x the elements of the large one.
  return std::make_unique<Newton>(size == SimSize::Small   ? 16
                                  : size == SimSize::Large ? 65536
                                                           : 1 << 22);
}

} // namespace qdsim
