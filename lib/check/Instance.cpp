//===- Instance.cpp - One launchable copy of the checker's data -----------===//
#include "Internal.h"

#include <cmath>

namespace qd::gradcheck {
namespace {

/// `v` (already of the declared type) in the type of this module's global.
Scalar typed(const Scalar &v, ScalarType t) {
  return isFloat(t) ? Scalar::ofFloat(t, v.asDouble()) : Scalar::ofInt(t, v.i);
}

} // namespace

absl::StatusOr<std::unique_ptr<Instance>> Instance::create(const Module &module, const Plan &plan) {
  std::unique_ptr<Instance> in(new Instance);
  in->module_ = &module;
  absl::StatusOr<std::unique_ptr<Program>> program = Program::create(module);
  if (!program.ok())
    return program.status();
  in->program_ = *std::move(program);
  for (auto &[name, values] : plan.fieldValues) {
    Buffer *b = in->program_->field(name);
    for (size_t i = 0; i < values.size(); ++i)
      b->set(static_cast<int64_t>(i), typed(values[i], b->elementType()));
  }
  const Kernel &k = *module.findKernel(plan.kernel);
  unsigned n = k.numArguments();
  // Sized once: launch arguments point into these vectors.
  in->primal_.resize(n);
  in->grad_.resize(n);
  in->dual_.resize(n);
  in->ndarrays_.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    const Argument *a = k.argument(i);
    ScalarType elem = a->type().element();
    const std::vector<Scalar> &values = plan.argValues[i];
    if (!a->isNdarray()) {
      in->args_.push_back(LaunchArg::scalar(typed(values[0], elem)));
      continue;
    }
    NdarrayArg &nd = in->ndarrays_[i];
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      if (!a->hasComponent(c))
        continue;
      Buffer &b = c == Component::Primal ? in->primal_[i]
                  : c == Component::Grad ? in->grad_[i]
                                         : in->dual_[i];
      absl::StatusOr<Buffer> created = Buffer::create(elem, plan.argShapes[i]);
      if (!created.ok())
        return created.status();
      b = *std::move(created);
      (c == Component::Primal ? nd.primal : c == Component::Grad ? nd.grad : nd.dual) = &b;
    }
    for (size_t e = 0; e < values.size(); ++e)
      nd.primal->set(static_cast<int64_t>(e), typed(values[e], elem));
    in->args_.push_back(LaunchArg::ndarray(&nd));
  }
  for (const Global &g : plan.globals)
    if (Buffer *b = g.lifted.empty() ? nullptr : in->program_->field(g.lifted))
      b->set(0, typed(plan.argValues[g.arg][0], b->elementType()));
  return in;
}

Buffer *Instance::buffer(const Global &g, Component c) {
  switch (g.kind) {
  case Global::Kind::Field:
    return program_->field(g.name, c);
  case Global::Kind::Ndarray:
    return ndarrays_[g.arg].component(c);
  case Global::Kind::Scalar:
    return g.lifted.empty() ? nullptr : program_->field(g.lifted, c);
  }
  return nullptr;
}

double Instance::get(const Global &g, Component c, int64_t flat) {
  if (Buffer *b = buffer(g, c))
    return b->get(flat).asDouble();
  if (g.kind == Global::Kind::Scalar && c == Component::Primal)
    return args_[g.arg].scalarValue().asDouble();
  return std::nan("");
}

void Instance::set(const Global &g, Component c, int64_t flat, double value) {
  if (Buffer *b = buffer(g, c))
    b->set(flat, Scalar::ofFloat(b->elementType(), value));
  else if (g.kind == Global::Kind::Scalar && c == Component::Primal)
    args_[g.arg] = LaunchArg::scalar(Scalar::ofFloat(args_[g.arg].scalarValue().type, value));
}

void Instance::perturb(const Global &g, const Direction &direction, double scale) {
  for (auto [flat, coefficient] : direction)
    set(g, Component::Primal, flat, get(g, Component::Primal, flat) + scale * coefficient);
}

std::vector<double> Instance::all(const Global &g, Component c) {
  std::vector<double> out;
  for (int64_t e = 0; e < g.elements; ++e)
    out.push_back(get(g, c, e));
  return out;
}

absl::Status Instance::launch(const std::string &kernel, Backend &backend,
                              const LaunchOptions &options) {
  return program_->launch(kernel, args_, backend, options);
}

} // namespace qd::gradcheck
