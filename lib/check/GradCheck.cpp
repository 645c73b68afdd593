//===- GradCheck.cpp - Reverse, forward and finite differences ------------===//
//
// See qd/check/GradCheck.h for the scheme and Internal.h for the steps.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace qd {
using namespace gradcheck;

namespace {

/// A Richardson-extrapolated central difference and its estimated error.
struct FiniteDifference {
  double value = GradCheckEntry::kNone;
  double error = GradCheckEntry::kNone;
  double step = GradCheckEntry::kNone;
  bool reliable = false;
};

class Checker {
public:
  Checker(const Plan &plan, const Modules &modules, Backend &backend,
          const GradCheckOptions &options)
      : plan_(plan), modules_(modules), backend_(backend), options_(options) {}

  absl::StatusOr<GradCheckReport> run();

private:
  absl::Status checkGlobalAccesses();
  absl::Status runReverse();
  absl::StatusOr<double> forwardAlong(const Global &g, const Direction &d);
  absl::StatusOr<std::vector<double>> outputsAt(const Global &g, const Direction &d, double delta);
  absl::StatusOr<FiniteDifference> finiteDifference(const Global &g, const Direction &d,
                                                    double scale, double atol);
  double roundingAllowance(size_t input, const Direction &d) const;
  absl::StatusOr<GradCheckEntry> check(size_t input, const Direction &d, GradCheckEntry e);
  double initial(const Global &g, int64_t flat) const;
  /// sum_j w_j * values_j over the outputs, values concatenated.
  double weighted(const std::vector<double> &values) const;
  double weightedDifference(const std::vector<double> &a, const std::vector<double> &b) const;
  std::vector<double> outputs(Instance &in, Component c) const;
  void summarize(GradCheckReport &r) const;

  const Plan &plan_;
  const Modules &modules_;
  Backend &backend_;
  const GradCheckOptions &options_;
  /// Reverse-mode dJ/dx of every element of every input (parallel to
  /// plan_.inputs), and the outputs after the kernel ran.
  std::vector<std::vector<double>> reverse_;
  std::vector<double> primal_;
  /// The outputs of the f64 copy, unperturbed.
  std::vector<double> base_;
};

absl::Status withContext(absl::Status s, const std::string &context) {
  return absl::Status(s.code(), std::string(s.message()) + " (" + context + ")");
}

double Checker::weighted(const std::vector<double> &values) const {
  double sum = 0;
  size_t at = 0;
  for (const std::vector<double> &w : plan_.weights)
    for (double x : w)
      sum += x * values[at++];
  return sum;
}

std::vector<double> Checker::outputs(Instance &in, Component c) const {
  std::vector<double> out;
  for (size_t o : plan_.outputs) {
    std::vector<double> v = in.all(plan_.globals[o], c);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double Checker::initial(const Global &g, int64_t flat) const {
  if (g.kind != Global::Kind::Field)
    return plan_.argValues[g.arg][static_cast<size_t>(flat)].asDouble();
  auto it = plan_.fieldValues.find(g.name);
  return it == plan_.fieldValues.end() ? 0.0 : it->second[static_cast<size_t>(flat)].asDouble();
}

absl::Status Checker::checkGlobalAccesses() {
  Interpreter local;
  auto *interp = dynamic_cast<Interpreter *>(&backend_);
  absl::StatusOr<std::unique_ptr<Instance>> in = Instance::create(*modules_.ad, plan_);
  if (!in.ok())
    return in.status();
  LaunchOptions checked = options_.launch;
  checked.checkGlobalAccesses = true;
  return (*in)->launch(plan_.kernel, interp ? *interp : local, checked);
}

absl::Status Checker::runReverse() {
  absl::StatusOr<std::unique_ptr<Instance>> in = Instance::create(*modules_.ad, plan_);
  if (!in.ok())
    return in.status();
  Instance &inst = **in;
  for (size_t i = 0; i < plan_.outputs.size(); ++i)
    for (size_t e = 0; e < plan_.weights[i].size(); ++e)
      inst.set(plan_.globals[plan_.outputs[i]], Component::Grad, static_cast<int64_t>(e),
               plan_.weights[i][e]);
  if (absl::Status s = inst.launch(plan_.kernel, backend_, options_.launch); !s.ok())
    return s;
  primal_ = outputs(inst, Component::Primal);
  if (modules_.gradient.empty())
    return absl::OkStatus();
  if (absl::Status s = inst.launch(modules_.gradient, backend_, options_.launch); !s.ok())
    return withContext(s, "launching the gradient kernel @" + modules_.gradient);
  for (size_t i : plan_.inputs)
    reverse_.push_back(inst.all(plan_.globals[i], Component::Grad));
  return absl::OkStatus();
}

absl::StatusOr<double> Checker::forwardAlong(const Global &g, const Direction &d) {
  absl::StatusOr<std::unique_ptr<Instance>> in = Instance::create(*modules_.ad, plan_);
  if (!in.ok())
    return in.status();
  for (auto [flat, coefficient] : d)
    (*in)->set(g, Component::Dual, flat, coefficient);
  if (absl::Status s = (*in)->launch(modules_.dual, backend_, options_.launch); !s.ok())
    return withContext(s, "launching the dual kernel @" + modules_.dual);
  return weighted(outputs(**in, Component::Dual));
}

absl::StatusOr<std::vector<double>> Checker::outputsAt(const Global &g, const Direction &d,
                                                       double delta) {
  absl::StatusOr<std::unique_ptr<Instance>> in = Instance::create(*modules_.wide, plan_);
  if (!in.ok())
    return in.status();
  (*in)->perturb(g, d, delta);
  if (absl::Status s = (*in)->launch(plan_.kernel, backend_, options_.launch); !s.ok())
    return withContext(s, fmt::format("the f64 copy of @{} with {} moved by {:g}, for finite "
                                      "differences",
                                      plan_.kernel, g.display(), delta));
  return outputs(**in, Component::Primal);
}

double Checker::weightedDifference(const std::vector<double> &a,
                                   const std::vector<double> &b) const {
  // Per output element first: outputs the step does not reach cancel
  // exactly instead of adding their rounding to the sum.
  std::vector<double> delta(a.size());
  for (size_t j = 0; j < delta.size(); ++j)
    delta[j] = a[j] - b[j];
  return weighted(delta);
}

/// Two Richardson steps over differences at h, h/2 and h/4 of error
/// c1 h + c2 h^2 + ... (`order` 1, one-sided) or c2 h^2 + c4 h^4 + ...
/// (`order` 2, central): the extrapolation from the two finer levels and
/// the one from the two coarser ones.
std::pair<double, double> richardson(const double (&d)[3], int order) {
  if (order == 2)
    return {(4 * d[2] - d[1]) / 3, (4 * d[1] - d[0]) / 3};
  double fine = 2 * d[2] - d[1], coarse = 2 * d[1] - d[0];
  return {(4 * fine - coarse) / 3, coarse};
}

absl::StatusOr<FiniteDifference> Checker::finiteDifference(const Global &g, const Direction &d,
                                                           double scale, double atol) {
  FiniteDifference best;
  for (int attempt = 0; attempt < 3; ++attempt) {
    double h = options_.fdStep * scale * std::pow(10.0, -attempt);
    double central[3], ahead[3], behind[3];
    for (int level = 0; level < 3; ++level) {
      double step = h / (1 << level);
      absl::StatusOr<std::vector<double>> plus = outputsAt(g, d, step);
      if (!plus.ok())
        return plus.status();
      absl::StatusOr<std::vector<double>> minus = outputsAt(g, d, -step);
      if (!minus.ok())
        return minus.status();
      central[level] = weightedDifference(*plus, *minus) / (2 * step);
      ahead[level] = weightedDifference(*plus, base_) / step;
      behind[level] = weightedDifference(base_, *minus) / step;
    }
    // The central estimate, with two checks of it: its coarser
    // extrapolation (smoothness at the scale of the step), and the
    // one-sided estimates from each side, which differ at a kink where the
    // symmetric central difference cannot tell (|x| at 0).
    auto [value, coarse] = richardson(central, 2);
    double right = richardson(ahead, 1).first, left = richardson(behind, 1).first;
    FiniteDifference fd;
    fd.value = value;
    fd.error = std::max(std::abs(value - coarse), std::abs(right - left));
    fd.step = h;
    // Trusted when the estimates agree well within the tolerance.
    fd.reliable = std::isfinite(fd.value) && std::isfinite(fd.error) &&
                  fd.error <= 0.25 * std::max(atol, plan_.rtol * std::abs(fd.value));
    if (fd.reliable)
      return fd;
    if (std::isfinite(fd.value) && !(best.error <= fd.error))
      best = fd;
  }
  return best;
}

/// |a - b| relative to the larger of them (or `floor`).
double symmetricError(double a, double b, double floor) {
  return gradCheckRelativeError(a, b, std::max(floor, std::abs(a)));
}

/// The rounding error a sum of the terms t_k = c_k * dJ/dx_k of direction
/// `d` may carry in the kernel's precision, with reverse mode's dJ/dx:
/// gamma_n * sum |t_k|, gamma_n = n u / (1 - n u), the bound of a recursive
/// sum of n terms (Higham, "Accuracy and Stability of Numerical
/// Algorithms", 4.2), u the unit roundoff. 0 without reverse mode.
double Checker::roundingAllowance(size_t input, const Direction &d) const {
  if (reverse_.empty())
    return 0;
  double u = plan_.precision == ScalarType::F32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
  double nu = static_cast<double>(d.size()) * u;
  if (nu >= 1)
    return std::numeric_limits<double>::infinity();
  double terms = 0;
  for (auto [flat, coefficient] : d)
    terms += std::abs(coefficient * reverse_[input][static_cast<size_t>(flat)]);
  return nu / (1 - nu) * terms;
}

absl::StatusOr<GradCheckEntry> Checker::check(size_t input, const Direction &d, GradCheckEntry e) {
  const Global &g = plan_.globals[plan_.inputs[input]];
  double scale = 1;
  for (auto [flat, coefficient] : d)
    scale = std::max(scale, std::abs(initial(g, flat)));
  if (!modules_.gradient.empty()) {
    e.reverse = 0;
    for (auto [flat, coefficient] : d)
      e.reverse += coefficient * reverse_[input][static_cast<size_t>(flat)];
  }
  if (!modules_.dual.empty()) {
    absl::StatusOr<double> t = forwardAlong(g, d);
    if (!t.ok())
      return t.status();
    e.forward = *t;
  }
  e.roundingAllowance = roundingAllowance(input, d);
  double atol = std::max(plan_.atol, e.roundingAllowance);
  absl::StatusOr<FiniteDifference> fd = finiteDifference(g, d, scale, atol);
  if (!fd.ok())
    return fd.status();
  e.finiteDifference = fd->value;
  e.fdError = fd->error;
  e.fdStep = fd->step;
  e.fdReliable = fd->reliable;
  double floor = atol / plan_.rtol;
  if (!modules_.gradient.empty() && !modules_.dual.empty()) {
    e.modesError = symmetricError(e.reverse, e.forward, floor);
    e.modesAgree = e.modesError <= plan_.rtol;
  }
  if (e.fdReliable && !modules_.gradient.empty()) {
    e.reverseError = gradCheckRelativeError(e.reverse, e.finiteDifference, floor);
    e.reverseAgrees = e.reverseError <= plan_.rtol;
  }
  if (e.fdReliable && !modules_.dual.empty()) {
    e.forwardError = gradCheckRelativeError(e.forward, e.finiteDifference, floor);
    e.forwardAgrees = e.forwardError <= plan_.rtol;
  }
  return e;
}

void Checker::summarize(GradCheckReport &r) const {
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const GradCheckEntry &e = r.entries[i];
    r.unreliable += !e.fdReliable;
    r.failures += !e.ok();
    if (e.fdReliable && e.reverseError >= r.worstReverseError) {
      r.worstReverseError = e.reverseError;
      r.worstReverseEntry = static_cast<int>(i);
    }
    if (e.fdReliable && e.forwardError >= r.worstForwardError) {
      r.worstForwardError = e.forwardError;
      r.worstForwardEntry = static_cast<int>(i);
    }
  }
  int64_t compared = static_cast<int64_t>(r.entries.size()) - r.unreliable;
  std::string modes = r.reverseChecked && r.forwardChecked ? "reverse and forward mode"
                      : r.reverseChecked                   ? "reverse mode"
                                                           : "forward mode";
  r.passed = r.failures == 0 && compared > 0;
  if (r.failures > 0)
    r.verdict = fmt::format("FAIL: {} of {} derivatives disagree", r.failures, r.entries.size());
  else if (compared == 0)
    r.verdict = "FAIL: no derivative could be compared with finite differences (they are not "
                "smooth at any checked point: a kink, a jump or a non-finite value within the "
                "step)";
  else
    r.verdict =
        fmt::format("PASS: {} agree{} with finite differences at {} of {} derivatives", modes,
                    r.reverseChecked && r.forwardChecked ? "" : "s", compared, r.entries.size());
}

absl::StatusOr<GradCheckReport> Checker::run() {
  GradCheckReport r;
  r.kernel = plan_.kernel;
  r.backend = std::string(backend_.name());
  r.precision = plan_.precision;
  r.rtol = plan_.rtol;
  r.atol = plan_.atol;
  r.seed = options_.seed;
  r.reverseChecked = !modules_.gradient.empty();
  r.forwardChecked = !modules_.dual.empty();
  for (size_t o = 0; o < plan_.outputs.size(); ++o)
    r.outputs.push_back({plan_.globals[plan_.outputs[o]].display(), plan_.weights[o]});
  if (options_.checkGlobalAccesses)
    if (absl::Status s = checkGlobalAccesses(); !s.ok())
      return s;
  if (absl::Status s = runReverse(); !s.ok())
    return s;

  // The kernel's outputs against its f64 copy's.
  absl::StatusOr<std::vector<double>> wide = outputsAt(plan_.globals[plan_.inputs[0]], {}, 0);
  if (!wide.ok())
    return wide.status();
  base_ = *std::move(wide);
  for (size_t j = 0; j < primal_.size(); ++j)
    r.primalDifference = std::max(
        r.primalDifference, gradCheckRelativeError(primal_[j], base_[j], plan_.atol / plan_.rtol));

  for (size_t i = 0; i < plan_.inputs.size(); ++i) {
    const Global &g = plan_.globals[plan_.inputs[i]];
    r.inputs.push_back({g.display(), g.type, g.shape, g.elements,
                        static_cast<int64_t>(plan_.checked[i].size()),
                        reverse_.empty() ? std::vector<double>() : reverse_[i]});
    for (int64_t flat : plan_.checked[i]) {
      GradCheckEntry e;
      e.input = g.display();
      for (size_t dim = g.shape.size(), rest = static_cast<size_t>(flat); dim-- > 0;) {
        e.index.insert(e.index.begin(), static_cast<int64_t>(rest % g.shape[dim]));
        rest /= static_cast<size_t>(g.shape[dim]);
      }
      absl::StatusOr<GradCheckEntry> checked = check(i, {{flat, 1.0}}, std::move(e));
      if (!checked.ok())
        return checked.status();
      r.entries.push_back(*std::move(checked));
    }
    if (!plan_.directions[i].empty()) {
      GradCheckEntry e;
      e.input = g.display();
      e.direction = true;
      absl::StatusOr<GradCheckEntry> checked = check(i, plan_.directions[i], std::move(e));
      if (!checked.ok())
        return checked.status();
      r.entries.push_back(*std::move(checked));
    }
  }
  summarize(r);
  return r;
}

} // namespace

absl::StatusOr<GradCheckReport> checkGradient(const Module &module, std::string_view kernel,
                                              const GradCheckInputs &inputs,
                                              const GradCheckOptions &options) {
  if (absl::Status v = verify(module); !v.ok())
    return v;
  const Kernel *k = module.findKernel(kernel);
  if (!k) {
    return absl::NotFoundError(fmt::format("no kernel named '@{}' in the module (kernels: {})",
                                           kernel, kernelList(module)));
  }
  if (!options.reverse && !options.forward)
    return absl::InvalidArgumentError("neither reverse nor forward mode is to be checked");
  absl::StatusOr<Plan> plan = makePlan(module, *k, inputs, options);
  if (!plan.ok())
    return plan.status();
  absl::StatusOr<Modules> modules = prepareModules(module, *plan, options);
  if (!modules.ok())
    return modules.status();
  Interpreter interp;
  Backend &backend = options.backend ? *options.backend : interp;
  return Checker(*plan, *modules, backend, options).run();
}

} // namespace qd
