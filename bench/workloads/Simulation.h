//===- Simulation.h - Differentiable simulations as a front-end emits them -*- C++ -*-===//
//
// Six time-stepped simulations in the shapes a DSL front-end (DiffTaichi)
// lowers to qd with IRBuilder: ndarray arguments, several tasks per
// kernel, one kernel launch per time step, and a scalar loss.
//
//   mass_spring  a robot of springs driven by a two-layer controller
//   mpm          2-D MLS-MPM: P2G scatter (atomic adds), grid update, G2P
//   wave         the 2-D wave equation on a grid (finite differences)
//   smoke        advection, divergence, Jacobi pressure iterations, projection
//   billiards    balls colliding (branches on their distance)
//   newton       a per-element implicit step solved by Newton's method in a
//                data-dependent `while` (adstacks sized at launch)
//
// Every simulation's module has two kernels, @step and @loss, with the same
// arguments: `t: i32` (the step), then its scalars(), then its arrays() in
// order. As in DiffTaichi, each time step's state lives in its own slice
// (x[t, i]): @step(t) reads slice t (and t - 1) and writes slice t + 1,
// so no launch writes what an earlier launch of the sequence read, and the
// gradient of the whole run is the gradient kernels launched in reverse
// step order (SimRun). @loss(T) writes the loss into `loss[0]` (or adds
// into it, from zero).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/IRBuilder.h"
#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qdsim {

/// Test sizes (seconds per test on the interpreter), the CPU benchmark's
/// large sizes, or the GPU benchmark's (16 to 64 times the large work).
enum class SimSize { Small, Large, Gpu };

/// "small", "large", "gpu".
std::string_view sizeName(SimSize size);
/// The size `name` names, or nullopt.
std::optional<SimSize> parseSimSize(std::string_view name);

/// One ndarray argument of a simulation and its contents at the start.
struct SimArray {
  std::string name;
  qd::ScalarType type = qd::ScalarType::F32;
  std::vector<int64_t> shape;
  bool grad = true;
  /// The first elements (row-major) at the start, e.g. slice 0 of a state
  /// array; the others start at zero.
  std::vector<double> init;
};

/// `loss`: f32[1] with a grad companion, what @loss adds into.
inline SimArray lossArray() {
  return {"loss", qd::ScalarType::F32, {1}, true, {}};
}

/// A scalar argument: its value in the f32 kernels and in their f64 copy
/// (a tolerance can be tighter in f64).
struct SimScalar {
  std::string name;
  double f32 = 0;
  double f64 = 0;
};

/// The arguments of the kernel being built.
class SimKernelArgs {
public:
  explicit SimKernelArgs(qd::Kernel &k) : kernel_(&k) {}
  qd::Kernel &kernel() const { return *kernel_; }
  /// The step, `t`.
  qd::Argument *t() const { return (*this)["t"]; }
  /// The argument `name` (a simulation names only its own arguments).
  qd::Argument *operator[](std::string_view name) const;

private:
  qd::Kernel *kernel_;
};

class Simulation {
public:
  virtual ~Simulation() = default;
  virtual std::string_view name() const = 0;
  /// The ndarray arguments for a run of `steps` steps, `loss` (f32[1]) among them.
  virtual std::vector<SimArray> arrays(int steps) const = 0;
  virtual std::vector<SimScalar> scalars() const { return {}; }
  /// The input the tests differentiate with respect to (an array name).
  virtual std::string_view parameter() const = 0;
  /// Elements of the parameter the tests check one by one (flat indices).
  virtual std::vector<int64_t> checkedElements() const = 0;

  /// A module with @step and @loss, verified (the verifier's error names
  /// the statement otherwise).
  absl::StatusOr<std::unique_ptr<qd::Module>> buildModule();

protected:
  /// The bodies of @step and @loss (the builder inserts into the kernel;
  /// a simulation may keep it while it emits).
  virtual void emitStep(qd::IRBuilder &b, const SimKernelArgs &args) = 0;
  virtual void emitLoss(qd::IRBuilder &b, const SimKernelArgs &args) = 0;
};

/// A pseudo-random value in [-1, 1) for element `k` of a stream `salt`
/// (the initial data of the simulations; bench/torch_sims.py computes the
/// same values).
double hashUniform(int64_t k, int salt);

/// The simulations, by name: mass_spring, mpm, wave, smoke, billiards, newton.
std::vector<std::string> simulationNames();
/// The simulation `name` at `size`, or null for an unknown name.
std::unique_ptr<Simulation> makeSimulation(std::string_view name, SimSize size);

std::unique_ptr<Simulation> makeMassSpring(SimSize size);
std::unique_ptr<Simulation> makeMpm(SimSize size);
std::unique_ptr<Simulation> makeWave(SimSize size);
std::unique_ptr<Simulation> makeSmoke(SimSize size);
std::unique_ptr<Simulation> makeBilliards(SimSize size);
std::unique_ptr<Simulation> makeNewton(SimSize size);

} // namespace qdsim
