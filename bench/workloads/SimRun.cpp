//===- SimRun.cpp - Running a simulation and its gradient ----------------===//
#include "SimRun.h"

#include "qd/ir/Clone.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

namespace qdsim {
namespace {

using qd::Component;
using qd::Value;

/// A task storing 0 into `component` of `array` (rank >= 1) at the
/// elements whose row-major flat index is at least `first`.
void zeroFrom(qd::IRBuilder &b, qd::Argument *array, Component component, int64_t first) {
  const unsigned rank = array->type().ndim();
  const qd::ScalarType elem = array->type().element();
  std::vector<Value *> extents;
  std::vector<qd::Bound> begins(rank, qd::Bound(0)), ends;
  for (unsigned d = 0; d < rank; ++d) {
    extents.push_back(b.shape(array, d));
    ends.push_back(extents.back());
  }
  auto task = b.parallelBand(begins, ends);
  std::vector<Value *> index;
  Value *flat = nullptr;
  for (unsigned d = 0; d < rank; ++d) {
    index.push_back(task.index(d));
    flat = flat ? b.add(b.mul(flat, extents[d]), index.back()) : index.back();
  }
  Value *zero = qd::isFloat(elem) ? static_cast<Value *>(b.constFloat(elem, 0))
                                  : static_cast<Value *>(b.constInt(elem, 0));
  if (first == 0) {
    b.store(qd::GlobalRef::ofNdarray(array, component), index, zero);
    return;
  }
  auto past = b.ifThen(b.ge(flat, b.i32(static_cast<int32_t>(first))));
  b.store(qd::GlobalRef::ofNdarray(array, component), index, zero);
}

/// @reset (SimRun::resetOnDevice): the arguments of `step`; per array a
/// task zeroing its elements past its initial ones and one zeroing its
/// grad companion; then loss.grad[0] = 1.
void addResetKernel(qd::Module &module, const qd::Kernel &step,
                    const std::vector<SimArray> &specs) {
  qd::Kernel *k = module.addKernel(std::make_unique<qd::Kernel>("reset"));
  for (unsigned i = 0; i < step.numArguments(); ++i) {
    const qd::Argument *a = step.argument(i);
    if (a->isNdarray())
      k->addNdarrayArgument(std::string(a->name()), a->type().element(), a->type().ndim(),
                            a->hasGrad());
    else
      k->addScalarArgument(std::string(a->name()), a->type().element());
  }
  qd::IRBuilder b(*k);
  for (const SimArray &spec : specs) {
    qd::Argument *a = k->findArgument(spec.name);
    zeroFrom(b, a, Component::Primal, static_cast<int64_t>(spec.init.size()));
    if (spec.grad)
      zeroFrom(b, a, Component::Grad, 0);
  }
  auto task = b.serial();
  b.store(qd::GlobalRef::ofNdarray(k->findArgument("loss"), Component::Grad), {b.i32(0)},
          b.f32(1.0f));
}

} // namespace

absl::StatusOr<std::unique_ptr<SimRun>> SimRun::create(Simulation &sim, int steps,
                                                       qd::ScalarType precision) {
  if (steps < 1)
    return absl::InvalidArgumentError(
        fmt::format("simulation '{}': {} steps; a run needs at least one", sim.name(), steps));
  std::unique_ptr<SimRun> run(new SimRun(sim, steps));
  if (absl::Status status = run->init(precision); !status.ok())
    return status;
  return run;
}

absl::Status SimRun::init(qd::ScalarType precision) {
  precision_ = precision;
  absl::StatusOr<std::unique_ptr<qd::Module>> built = sim_.buildModule();
  if (!built.ok())
    return built.status();
  addResetKernel(**built, *(*built)->findKernel("step"), sim_.arrays(steps_));
  module_ =
      precision == qd::ScalarType::F64 ? qd::cloneModuleWidenedToF64(**built) : std::move(*built);
  step_ = module_->findKernel("step");
  reset_ = module_->findKernel("reset");
  loss_ = module_->findKernel("loss");
  for (auto [kernel, slot] : {std::pair{step_, &stepGrad_}, std::pair{loss_, &lossGrad_}}) {
    absl::StatusOr<qd::Kernel *> grad = qd::buildGradientKernel(*module_, *kernel);
    if (!grad.ok())
      return absl::Status(grad.status().code(),
                          fmt::format("simulation '{}': the gradient of @{}: {}", sim_.name(),
                                      kernel->name(), std::string(grad.status().message())));
    *slot = *grad;
  }
  absl::StatusOr<std::unique_ptr<qd::Program>> program = qd::Program::create(*module_);
  if (!program.ok())
    return program.status();
  program_ = std::move(*program);
  for (const SimScalar &s : sim_.scalars())
    scalars_.push_back(precision == qd::ScalarType::F64 ? qd::LaunchArg::f64(s.f64)
                                                        : qd::LaunchArg::f32(float(s.f32)));
  std::vector<SimArray> specs = sim_.arrays(steps_);
  arrays_.reserve(specs.size()); // NdarrayArg pointers stay valid
  for (SimArray &spec : specs) {
    qd::ScalarType type = spec.type == qd::ScalarType::F32 ? precision : spec.type;
    Array &a = arrays_.emplace_back();
    auto primal = qd::Buffer::create(type, spec.shape);
    if (!primal.ok())
      return primal.status();
    a.primal = std::make_unique<qd::Buffer>(std::move(*primal));
    if (spec.grad) {
      auto grad = qd::Buffer::create(type, spec.shape);
      if (!grad.ok())
        return grad.status();
      a.grad = std::make_unique<qd::Buffer>(std::move(*grad));
    }
    a.arg = qd::NdarrayArg{a.primal.get(), a.grad.get()};
    a.initial.assign(static_cast<size_t>(a.primal->numElements()), 0.0);
    if (spec.init.size() > a.initial.size())
      return absl::InternalError(fmt::format("simulation '{}': array '{}' has {} initial values "
                                             "for {} elements",
                                             sim_.name(), spec.name, spec.init.size(),
                                             a.initial.size()));
    std::copy(spec.init.begin(), spec.init.end(), a.initial.begin());
    a.spec = std::move(spec);
  }
  reset();
  return absl::OkStatus();
}

const qd::Kernel &SimRun::kernel(std::string_view name) const {
  return *module_->findKernel(name);
}

SimRun::Array *SimRun::array(std::string_view name) {
  for (Array &a : arrays_)
    if (a.spec.name == name)
      return &a;
  return nullptr;
}

const SimRun::Array *SimRun::array(std::string_view name) const {
  return const_cast<SimRun *>(this)->array(name);
}

void SimRun::reset() {
  for (Array &a : arrays_) {
    const qd::ScalarType type = a.primal->elementType();
    for (size_t k = 0; k < a.initial.size(); ++k)
      a.primal->set(static_cast<int64_t>(k),
                    qd::isFloat(type) ? qd::Scalar::ofFloat(type, a.initial[k])
                                      : qd::Scalar::ofInt(type, std::llround(a.initial[k])));
    if (a.grad)
      a.grad->fill(qd::Scalar::ofFloat(a.grad->elementType(), 0.0));
  }
}

std::vector<qd::LaunchArg> SimRun::argsAt(int t) const {
  std::vector<qd::LaunchArg> args;
  args.reserve(1 + scalars_.size() + arrays_.size());
  args.push_back(qd::LaunchArg::i32(t));
  args.insert(args.end(), scalars_.begin(), scalars_.end());
  for (const Array &a : arrays_)
    args.push_back(qd::LaunchArg::ndarray(&a.arg));
  return args;
}

absl::Status SimRun::forwardAndGradientOnTape(qd::Backend &backend, qd::TapeMemory *memory) {
  reset();
  qd::LaunchTapeOptions options;
  options.launch = options_;
  qd::LaunchTape tape(*program_, backend, options);
  for (int t = 0; t <= steps_; ++t) {
    const bool last = t == steps_;
    qd::TapeKernels kernels{last ? loss_ : step_, last ? lossGrad_ : stepGrad_};
    if (absl::Status s = tape.launch(kernels, argsAt(t)); !s.ok())
      return absl::Status(s.code(), fmt::format("simulation '{}' on a tape, step {}: {}",
                                                sim_.name(), t, std::string(s.message())));
  }
  qd::TapeSeed seed{{}, array("loss")->grad.get(), 1.0};
  absl::Status status = tape.backward({&seed, 1});
  if (memory)
    *memory = tape.memory();
  return status;
}

absl::Status SimRun::launch(const qd::Kernel &kernel, int t, qd::Backend &backend) {
  std::vector<qd::LaunchArg> args = argsAt(t);
  const bool first = !firstLaunch_.contains(&kernel);
  auto start = std::chrono::steady_clock::now();
  absl::Status status = program_->launch(kernel.name(), args, backend, options_);
  if (first)
    firstLaunch_[&kernel] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok())
    return absl::Status(status.code(),
                        fmt::format("simulation '{}', @{} at step {}: {}", sim_.name(),
                                    kernel.name(), t, std::string(status.message())));
  if (auto heap = backend.lastAdStackHeapUsage())
    maxHeapBytes_ = std::max(maxHeapBytes_, heap->bytes);
  return absl::OkStatus();
}

absl::Status SimRun::sequence(qd::Backend &backend, bool reverse) {
  if (!reverse) {
    for (int t = 0; t < steps_; ++t)
      if (absl::Status s = launch(*step_, t, backend); !s.ok())
        return s;
    return launch(*loss_, steps_, backend);
  }
  if (absl::Status s = launch(*lossGrad_, steps_, backend); !s.ok())
    return s;
  for (int t = steps_ - 1; t >= 0; --t)
    if (absl::Status s = launch(*stepGrad_, t, backend); !s.ok())
      return s;
  return absl::OkStatus();
}

void SimRun::seedAdjoints() {
  for (Array &a : arrays_)
    if (a.grad)
      a.grad->fill(qd::Scalar::ofFloat(a.grad->elementType(), 0.0));
  qd::Buffer &lossGrad = *array("loss")->grad;
  lossGrad.fill(qd::Scalar::ofFloat(lossGrad.elementType(), 1.0));
}

absl::Status SimRun::forward(qd::Backend &backend) {
  reset();
  return runForward(backend);
}

absl::Status SimRun::forwardAndGradient(qd::Backend &backend) {
  if (absl::Status s = forward(backend); !s.ok())
    return s;
  return runGradient(backend);
}

absl::Status SimRun::resetOnDevice(qd::Backend &backend) {
  return launch(*reset_, 0, backend);
}

double SimRun::loss() const {
  return array("loss")->primal->get(0).asDouble();
}

std::vector<double> SimRun::parameterGradient() const {
  std::vector<double> grad = read(sim_.parameter(), qd::Component::Grad);
  // The first axis is the step where it grows with the steps.
  auto shapeOf = [&](int steps) {
    for (const SimArray &a : sim_.arrays(steps))
      if (a.name == sim_.parameter())
        return a.shape;
    return std::vector<int64_t>{};
  };
  const std::vector<int64_t> shape = shapeOf(steps_);
  if (!shape.empty() && shape != shapeOf(steps_ + 1))
    grad.resize(grad.size() / static_cast<size_t>(shape[0]));
  return grad;
}

int64_t SimRun::arrayBytes() const {
  int64_t bytes = 0;
  for (const Array &a : arrays_)
    bytes += static_cast<int64_t>(a.primal->sizeInBytes() + (a.grad ? a.grad->sizeInBytes() : 0));
  return bytes;
}

std::vector<double> SimRun::read(std::string_view name, qd::Component c) const {
  const Array *a = array(name);
  const qd::Buffer *buffer = !a                         ? nullptr
                             : c == qd::Component::Grad ? a->grad.get()
                                                        : a->primal.get();
  std::vector<double> out;
  if (!buffer)
    return out;
  out.reserve(static_cast<size_t>(buffer->numElements()));
  for (int64_t k = 0; k < buffer->numElements(); ++k)
    out.push_back(buffer->get(k).asDouble());
  return out;
}

std::vector<double> *SimRun::initial(std::string_view name) {
  Array *a = array(name);
  return a ? &a->initial : nullptr;
}

double SimRun::firstLaunchSeconds(std::string_view kernel) const {
  const qd::Kernel *k = module_->findKernel(kernel);
  auto it = firstLaunch_.find(k);
  return it == firstLaunch_.end() ? 0.0 : it->second;
}

absl::StatusOr<double> SimRun::lossAt(qd::Backend &backend, std::string_view name,
                                      std::span<const double> direction, double h) {
  std::vector<double> &init = array(name)->initial;
  const std::vector<double> saved = init;
  for (size_t k = 0; k < init.size() && k < direction.size(); ++k)
    init[k] += h * direction[k];
  absl::Status status = forward(backend);
  init = saved;
  if (!status.ok())
    return status;
  return loss();
}

absl::StatusOr<double> SimRun::lossDerivative(qd::Backend &backend, std::string_view name,
                                              std::span<const double> direction, double step,
                                              double *error) {
  if (!array(name))
    return absl::NotFoundError(fmt::format("simulation '{}' has no array '{}'", sim_.name(), name));
  double scale = 1.0;
  const std::vector<double> &init = array(name)->initial;
  for (size_t k = 0; k < init.size() && k < direction.size(); ++k)
    if (direction[k] != 0)
      scale = std::max(scale, std::abs(init[k]));
  double central[2];
  for (int level = 0; level < 2; ++level) {
    const double h = step * scale / (1 << level);
    absl::StatusOr<double> up = lossAt(backend, name, direction, h);
    absl::StatusOr<double> down = lossAt(backend, name, direction, -h);
    if (!up.ok())
      return up.status();
    if (!down.ok())
      return down.status();
    central[level] = (*up - *down) / (2 * h);
  }
  if (error)
    *error = std::abs(central[1] - central[0]);
  return (4 * central[1] - central[0]) / 3;
}

} // namespace qdsim
