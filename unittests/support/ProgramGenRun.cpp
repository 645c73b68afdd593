//===- ProgramGenRun.cpp - Running generated programs --------------------===//
//
// Runs generated programs (ProgramGen.h): instances with their inputs and
// seeds, comparisons of their results, and the optimistic launch against
// the counting one.
//
//===----------------------------------------------------------------------===//
#include "ProgramGen.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace qd::testgen {

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<Instance>> instantiate(const GenProgram &p, const Module &m,
                                                      const std::string &kernel) {
  auto in = std::make_unique<Instance>();
  auto prog = Program::create(m);
  if (!prog.ok())
    return prog.status();
  in->program = *std::move(prog);
  if (Buffer *b = in->program->field("x")) {
    auto v = xValues(p);
    for (size_t i = 0; i < v.size() && int64_t(i) < b->numElements(); ++i)
      b->set(int64_t(i), Scalar::ofFloat(b->elementType(), v[i]));
  }
  if (Buffer *b = in->program->field("bit")) {
    auto v = bitValues(p);
    for (size_t i = 0; i < v.size() && int64_t(i) < b->numElements(); ++i)
      b->set(int64_t(i), Scalar::ofInt(b->elementType(), v[i]));
  }
  if (Buffer *b = in->program->field("cnt")) {
    auto v = cntValues(p);
    for (size_t i = 0; i < v.size() && int64_t(i) < b->numElements(); ++i)
      b->set(int64_t(i), Scalar::ofInt(b->elementType(), v[i]));
  }
  const Kernel *k = m.findKernel(kernel);
  if (!k)
    return absl::NotFoundError("no kernel @" + kernel);
  for (unsigned i = 0; i < k->numArguments(); ++i) {
    const Argument *a = k->argument(i);
    const std::string &name = a->name();
    ScalarType t = a->type().element();
    if (!a->isNdarray()) {
      if (name == "n")
        in->args.push_back(LaunchArg::scalar(Scalar::ofInt(t, nValue(p))));
      else if (name == "s")
        in->args.push_back(LaunchArg::scalar(Scalar::ofFloat(t, sValue(p))));
      else
        return absl::InvalidArgumentError("unknown scalar argument %" + name);
      continue;
    }
    std::vector<int64_t> shape;
    std::vector<double> values;
    if (name == "a") {
      shape = aShape(p);
      for (int64_t v : aValues(p))
        values.push_back(double(v));
    } else if (name == "m") {
      shape = mShape(p);
      for (int64_t v : mValues(p))
        values.push_back(double(v));
    } else if (name == "u") {
      shape = uShape(p);
      values = uValues(p);
    } else if (name == "w") {
      shape = wShape(p);
    } else {
      return absl::InvalidArgumentError("unknown ndarray argument %" + name);
    }
    auto nd = std::make_unique<NdarrayArg>();
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      if (c != Component::Primal && !a->hasComponent(c))
        continue;
      auto b = Buffer::create(t, shape);
      if (!b.ok())
        return b.status();
      auto buf = std::make_unique<Buffer>(*std::move(b));
      if (c == Component::Primal)
        for (size_t j = 0; j < values.size(); ++j)
          buf->set(int64_t(j), isFloat(t) ? Scalar::ofFloat(t, values[j])
                                          : Scalar::ofInt(t, int64_t(values[j])));
      (c == Component::Primal ? nd->primal
       : c == Component::Grad ? nd->grad
                              : nd->dual) = buf.get();
      in->buffers.push_back(std::move(buf));
    }
    in->args.push_back(LaunchArg::ndarray(nd.get()));
    in->byName["%" + name] = nd.get();
    in->ndarrays.push_back(std::move(nd));
  }
  return in;
}

void seedOutputAdjoints(const Module &m, Instance &in) {
  if (Buffer *b = in.program->field("y", Component::Grad))
    b->set(0, Scalar::ofFloat(b->elementType(), 1.0));
  for (int l = 0; l < 3; ++l)
    if (Buffer *b = in.program->field(fmt::format("z{}", l), Component::Grad))
      for (int64_t i = 0; i < b->numElements(); ++i)
        b->set(i, Scalar::ofFloat(b->elementType(), 0.5 + l - 0.25 * double(i)));
  if (auto it = in.byName.find("%w"); it != in.byName.end() && it->second->grad)
    for (int64_t i = 0; i < it->second->grad->numElements(); ++i)
      it->second->grad->set(
          i, Scalar::ofFloat(it->second->grad->elementType(), 0.75 - 0.5 * double(i)));
}

void seedInputTangents(const Module &m, Instance &in) {
  if (Buffer *b = in.program->field("x", Component::Dual))
    for (int64_t i = 0; i < b->numElements(); ++i)
      b->set(i, Scalar::ofFloat(b->elementType(), 1.0 - 0.375 * double(i)));
  if (auto it = in.byName.find("%u"); it != in.byName.end() && it->second->dual)
    for (int64_t i = 0; i < it->second->dual->numElements(); ++i)
      it->second->dual->set(
          i, Scalar::ofFloat(it->second->dual->elementType(), 0.5 + 0.25 * double(i)));
}

bool sameScalar(const Scalar &a, const Scalar &b, double rtol) {
  if (a.type != b.type)
    return false;
  if (!a.isFloat())
    return a.i == b.i;
  if (std::isnan(a.f) || std::isnan(b.f))
    return std::isnan(a.f) && std::isnan(b.f);
  if (rtol == 0)
    return a.f == b.f && std::signbit(a.f) == std::signbit(b.f);
  if (std::isinf(a.f) || std::isinf(b.f))
    return a.f == b.f;
  return std::fabs(a.f - b.f) <= rtol * std::max({std::fabs(a.f), std::fabs(b.f), 1.0});
}

std::string compareBuffers(const std::string &what, const Buffer &a, const Buffer &b, double rtol,
                           std::string_view aName, std::string_view bName) {
  if (a.shape() != b.shape() || a.elementType() != b.elementType())
    return what + ": shapes or types differ";
  for (int64_t i = 0; i < a.numElements(); ++i)
    if (!sameScalar(a.get(i), b.get(i), rtol))
      return fmt::format("{}[{}]: {}{} vs {}{}", what, i, aName, a.get(i).str(), bName,
                         b.get(i).str());
  return {};
}

namespace {

/// f32 sums in another order differ by more than f64 ones.
double tolerance(const Buffer &b, double rtol) {
  return rtol > 0 && b.elementType() == ScalarType::F32 ? std::max(rtol, 1e-5) : rtol;
}

} // namespace

std::string compareInstances(const Module &ma, Instance &a, const Module &mb, Instance &b,
                             double rtol, bool primalOnly) {
  for (const auto &f : ma.fields()) {
    if (!mb.findField(f->name()))
      continue;
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      Buffer *x = a.program->field(f->name(), c), *y = b.program->field(f->name(), c);
      if (!x || !y || (primalOnly && c != Component::Primal))
        continue;
      std::string suffix = c == Component::Primal ? "" : "." + std::string(qd::toString(c));
      if (std::string d = compareBuffers("@" + f->name() + suffix, *x, *y, tolerance(*x, rtol));
          !d.empty())
        return d;
    }
  }
  for (auto &[name, nd] : a.byName) {
    auto it = b.byName.find(name);
    if (it == b.byName.end())
      continue;
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      Buffer *x = nd->component(c), *y = it->second->component(c);
      if (!x || !y || (primalOnly && c != Component::Primal))
        continue;
      std::string suffix = c == Component::Primal ? "" : "." + std::string(qd::toString(c));
      if (std::string d = compareBuffers(name + suffix, *x, *y, tolerance(*x, rtol)); !d.empty())
        return d;
    }
  }
  return {};
}

LaunchOptions defaultLaunchOptions() {
  LaunchOptions o;
  o.boundsChecked = true;
  o.defaultAdStackCapacity = int64_t(1) << 16;
  return o;
}

std::string runAgainstInterpreter(const GenProgram &p, Module &m, bool withGrad, Backend &backend,
                                  double rtol, const LaunchOptions &options) {
  auto ref = instantiate(p, m), out = instantiate(p, m);
  if (!ref.ok() || !out.ok())
    return "instantiate: " + std::string((ref.ok() ? out.status() : ref.status()).message());
  Interpreter interp;
  std::vector<std::string> kernels{"k"};
  if (withGrad)
    kernels.push_back("k_grad");
  for (const std::string &k : kernels) {
    absl::Status a = (*ref)->program->launch(k, (*ref)->args, interp, options);
    absl::Status b = (*out)->program->launch(k, (*out)->args, backend, options);
    if (!a.ok() || !b.ok())
      return fmt::format("@{}: interp: {}; {}: {}", k, a.ToString(), backend.name(), b.ToString());
    if (k == "k") {
      seedOutputAdjoints(m, **ref);
      seedOutputAdjoints(m, **out);
    }
    if (std::string d = compareInstances(m, **ref, m, **out, rtol); !d.empty())
      return fmt::format("after @{} (interp vs {}): {}", k, backend.name(), d);
  }
  return {};
}

std::string checkOptimisticLaunch(const GenProgram &p, const Module &module,
                                  const std::string &kernel, Backend &counting, Backend &optimistic,
                                  double rtol, int64_t *reruns) {
  const KernelSizing &ks = **optimistic.adStackSizing(*module.findKernel(kernel));
  if (const OptimisticLaunch *o = ks.optimistic())
    for (const Kernel *v : {o->tryKernel.get(), o->rerunKernel.get()})
      if (absl::Status st = verify(*v); !st.ok())
        return fmt::format("@{} does not verify: {}\n{}", v->name(), std::string(st.message()),
                           printKernel(*v));
  auto counted = instantiate(p, module), tried = instantiate(p, module);
  if (!counted.ok() || !tried.ok())
    return "instantiate: " + std::string((counted.ok() ? tried : counted).status().message());
  LaunchOptions count = defaultLaunchOptions(), guess = count;
  count.optimisticAdStacks = false;
  guess.optimisticAdStacks = true;
  guess.optimisticInitialCapacity = 1;
  guess.refineAdStacksAboveBytes = 0; // refined bounds measured, however small
  if (kernel != "k") {
    for (auto [in, backend] : {std::pair{counted->get(), &counting}, {tried->get(), &optimistic}}) {
      if (absl::Status st = in->program->launch("k", in->args, *backend, count); !st.ok())
        return "@k failed: " + st.ToString();
      seedOutputAdjoints(module, *in);
    }
  }
  for (int launch = 0; launch < 2; ++launch) {
    Program &a = *(*counted)->program, &b = *(*tried)->program;
    absl::Status sa = a.launch(kernel, (*counted)->args, counting, count);
    absl::Status sb = b.launch(kernel, (*tried)->args, optimistic, guess);
    if (sa.ok() != sb.ok() || (!sa.ok() && sa.code() != sb.code()))
      return fmt::format("@{} launch {}: counted: {}; optimistic: {}", kernel, launch,
                         sa.ToString(), sb.ToString());
    if (!sa.ok())
      return {};
    using Path = Program::MeasuredLaunch::Path;
    if (ks.numCounted() > 0 &&
        b.lastMeasuredLaunch().path != (ks.optimistic() ? Path::Optimistic : Path::Counted))
      return fmt::format("@{} launch {} took the wrong path", kernel, launch);
    *reruns += b.lastMeasuredLaunch().rerunIterations;
    // A refined stack is counted only with others (else its bound is its
    // capacity, which the need it measured optimistically cannot exceed).
    bool aCounted = a.lastMeasuredLaunch().path == Path::Counted;
    for (const AdStackSize &s : ks.stacks()) {
      if (!s.measuredAtLaunch())
        continue;
      int64_t ca = a.lastAdStackCapacities().at(s.stack),
              cb = b.lastAdStackCapacities().at(s.stack);
      if (s.refined && !aCounted ? cb > ca : ca != cb)
        return fmt::format("@{} launch {}: the optimistic launch measured {}, the counting "
                           "launch gave {}: {}",
                           kernel, launch, cb, ca, ks.describe(s));
    }
    if (std::string d = compareInstances(module, **counted, module, **tried, rtol); !d.empty())
      return fmt::format("@{} launch {} (counted on {}, optimistic on {}): {}", kernel, launch,
                         counting.name(), optimistic.name(), d);
  }
  return {};
}

} // namespace qd::testgen
