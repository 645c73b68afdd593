//===- SimRun.h - Running a simulation and its gradient ----------*- C++ -*-===//
//
// The driver every simulation shares, what a front-end does around its
// kernels: it builds the module (f32, or its copy widened to f64), the
// gradient kernels @step_grad and @loss_grad, a Program and the buffers of
// every array with their grad companions, and runs
//
//   forward:   step(0), step(1), ..., step(T - 1), loss(T)
//   gradient:  loss_grad(T), step_grad(T - 1), ..., step_grad(0)
//
// after zeroing every adjoint and seeding loss.grad with 1, so that each
// array's grad holds dLoss/d(its initial contents). The order lives in
// one function (SimRun::sequence); a launch tape can replace it. The
// module has a third kernel, @reset (the arguments of @step), which
// resetOnDevice launches: what reset() and seedAdjoints() write, written
// on the backend, so that a GPU's copies stay on the device between runs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Simulation.h"

#include "qd/runtime/LaunchTape.h"
#include "qd/runtime/Program.h"

#include <absl/status/statusor.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qdsim {

class SimRun {
public:
  /// `precision` F32 runs the kernels as built; F64 runs the module's copy
  /// with every f32 widened to f64 (qd::cloneModuleWidenedToF64).
  static absl::StatusOr<std::unique_ptr<SimRun>>
  create(Simulation &sim, int steps, qd::ScalarType precision = qd::ScalarType::F32);

  const Simulation &simulation() const { return sim_; }
  int steps() const { return steps_; }
  const qd::Module &module() const { return *module_; }
  qd::Program &program() { return *program_; }
  const qd::Kernel &kernel(std::string_view name) const;

  /// The options of every launch (default: LaunchOptions{}).
  void setLaunchOptions(qd::LaunchOptions options) { options_ = std::move(options); }

  /// Every array back to its initial contents, every adjoint to zero.
  void reset();
  /// Runs the steps and the loss from the current contents.
  absl::Status runForward(qd::Backend &backend) { return sequence(backend, false); }
  /// Zeroes every adjoint and seeds loss.grad with 1.
  void seedAdjoints();
  /// Runs the gradient kernels (after runForward and seedAdjoints).
  absl::Status runReverse(qd::Backend &backend) { return sequence(backend, true); }
  /// What reset() then seedAdjoints() write, written by @reset on `backend`
  /// (no host data changes): every array's elements past its `init` zero,
  /// every adjoint zero, loss.grad 1. The elements of `init` keep what they
  /// hold: no launch of a simulation writes them (its slice 0, or an input
  /// array), so they hold their initial contents.
  absl::Status resetOnDevice(qd::Backend &backend);
  /// seedAdjoints() then runReverse().
  absl::Status runGradient(qd::Backend &backend) {
    seedAdjoints();
    return runReverse(backend);
  }
  /// reset(), the forward launches recorded on a qd::LaunchTape, and the
  /// tape's backward seeded with loss.grad = 1 (zeroing the other
  /// adjoints): what a front-end runs; the same launches in the same order
  /// as forwardAndGradient. `memory` gets the tape's report.
  absl::Status forwardAndGradientOnTape(qd::Backend &backend, qd::TapeMemory *memory = nullptr);
  /// reset() then runForward().
  absl::Status forward(qd::Backend &backend);
  /// forward() then runGradient().
  absl::Status forwardAndGradient(qd::Backend &backend);

  double loss() const;
  /// d loss / d (the parameter's initial contents), after a gradient: the
  /// parameter's grad, over its slice 0 where its first axis is the step.
  std::vector<double> parameterGradient() const;
  /// Bytes of every array and grad companion.
  int64_t arrayBytes() const;
  /// The contents of an array or of its grad companion, as doubles.
  std::vector<double> read(std::string_view array, qd::Component c = qd::Component::Primal) const;
  /// What reset() writes into `array` (row-major; an array's `init` and
  /// zeros after it): change it to perturb an input. Null for a name the
  /// simulation does not have (read() then gives nothing).
  std::vector<double> *initial(std::string_view array);

  /// The derivative of the loss along `direction` of `array`'s initial
  /// contents, by central differences at steps h and h/2 combined by
  /// Richardson extrapolation (h = step * max(1, |the input|)); `error` gets
  /// the difference between the two levels.
  absl::StatusOr<double> lossDerivative(qd::Backend &backend, std::string_view array,
                                        std::span<const double> direction, double step,
                                        double *error = nullptr);

  /// How long the first launch of `kernel` took (on a compiled backend:
  /// its compilation and one run), in seconds; 0 before it ran. A run is
  /// meant for one backend.
  double firstLaunchSeconds(std::string_view kernel) const;
  /// The largest adstack heap (bytes) a launch of this run reported.
  int64_t maxAdStackHeapBytes() const { return maxHeapBytes_; }

private:
  struct Array {
    SimArray spec;
    std::vector<double> initial;
    std::unique_ptr<qd::Buffer> primal, grad;
    qd::NdarrayArg arg;
  };
  SimRun(Simulation &sim, int steps) : sim_(sim), steps_(steps) {}
  absl::Status init(qd::ScalarType precision);
  /// The launch sequence of a forward or a reverse pass.
  absl::Status sequence(qd::Backend &backend, bool reverse);
  absl::Status launch(const qd::Kernel &kernel, int t, qd::Backend &backend);
  /// The arguments of a launch at step `t`.
  std::vector<qd::LaunchArg> argsAt(int t) const;
  Array *array(std::string_view name);
  const Array *array(std::string_view name) const;
  absl::StatusOr<double> lossAt(qd::Backend &backend, std::string_view array,
                                std::span<const double> direction, double h);

  Simulation &sim_;
  int steps_;
  qd::ScalarType precision_ = qd::ScalarType::F32;
  std::unique_ptr<qd::Module> module_;
  std::unique_ptr<qd::Program> program_;
  const qd::Kernel *step_ = nullptr, *loss_ = nullptr, *stepGrad_ = nullptr, *lossGrad_ = nullptr,
                   *reset_ = nullptr;
  std::vector<Array> arrays_;
  std::vector<qd::LaunchArg> scalars_;
  qd::LaunchOptions options_;
  std::map<const qd::Kernel *, double> firstLaunch_;
  int64_t maxHeapBytes_ = 0;
};

} // namespace qdsim
