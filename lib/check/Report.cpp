//===- Report.cpp - Values, errors and the printed report -----------------===//
#include "Internal.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <type_traits>

namespace qd {

namespace {

template <typename T>
GradCheckValue valueOf(std::vector<int64_t> shape, const std::vector<T> &values) {
  GradCheckValue out{std::move(shape), {}};
  for (T v : values)
    out.elements.push_back(std::is_floating_point_v<T> ? Scalar::ofFloat(ScalarType::F64, v)
                                                       : Scalar::ofInt(ScalarType::I64, v));
  return out;
}

} // namespace

GradCheckValue GradCheckValue::scalar(double v) {
  return valueOf<double>({}, {v});
}

GradCheckValue GradCheckValue::integer(int64_t v) {
  return valueOf<int64_t>({}, {v});
}

GradCheckValue GradCheckValue::array(std::vector<int64_t> shape,
                                     const std::vector<double> &values) {
  return valueOf(std::move(shape), values);
}

GradCheckValue GradCheckValue::integers(std::vector<int64_t> shape,
                                        const std::vector<int64_t> &values) {
  return valueOf(std::move(shape), values);
}

std::string GradCheckEntry::name() const {
  if (direction)
    return input + " . v";
  if (index.empty())
    return input;
  return fmt::format("{}[{}]", input, fmt::join(index, ", "));
}

double gradCheckRelativeError(double a, double b, double floor) {
  if (!std::isfinite(a) || !std::isfinite(b))
    return a == b ? 0.0 : std::numeric_limits<double>::infinity();
  return std::abs(a - b) / std::max(std::abs(b), floor);
}

namespace {

std::string number(double v) {
  return std::isnan(v) ? "-" : fmt::format("{:.9g}", v);
}

std::string error(double v) {
  return std::isnan(v) ? "-" : fmt::format("{:.1e}", v);
}

std::string status(const GradCheckEntry &e) {
  std::vector<std::string> wrong;
  if (!e.reverseAgrees)
    wrong.push_back("reverse");
  if (!e.forwardAgrees)
    wrong.push_back("forward");
  if (!wrong.empty())
    return fmt::format("DISAGREE ({} vs finite differences)", fmt::join(wrong, ", "));
  if (!e.modesAgree)
    return "DISAGREE (reverse vs forward)";
  if (!e.fdReliable)
    return "not compared: finite differences not smooth here";
  return "ok";
}

/// The summary line of one input.
std::string inputLine(const GradCheckReport &r, const GradCheckInput &in) {
  int64_t bad = 0, unreliable = 0;
  double worstReverse = 0, worstForward = 0;
  bool direction = false;
  for (const GradCheckEntry &e : r.entries) {
    if (e.input != in.name)
      continue;
    bad += !e.ok();
    unreliable += !e.fdReliable;
    direction |= e.direction;
    if (e.fdReliable) {
      worstReverse = std::max(worstReverse, std::isnan(e.reverseError) ? 0 : e.reverseError);
      worstForward = std::max(worstForward, std::isnan(e.forwardError) ? 0 : e.forwardError);
    }
  }
  std::string type =
      fmt::format("{}{}", toString(in.type),
                  in.shape.empty() ? "" : fmt::format("[{}]", fmt::join(in.shape, ", ")));
  std::string line =
      fmt::format("  {} ({}): {} of {} element{} checked{}", in.name, type, in.checked, in.elements,
                  in.elements == 1 ? "" : "s", direction ? " plus one random direction" : "");
  line += bad ? fmt::format(", {} DISAGREE", bad) : ", all agree";
  if (unreliable)
    line += fmt::format(" ({} not compared with finite differences)", unreliable);
  std::vector<std::string> worst;
  if (r.reverseChecked)
    worst.push_back("reverse " + error(worstReverse));
  if (r.forwardChecked)
    worst.push_back("forward " + error(worstForward));
  return line + fmt::format("; worst relative error {}\n", fmt::join(worst, ", "));
}

} // namespace

std::string formatGradCheckReport(const GradCheckReport &r, bool verbose) {
  std::string out = fmt::format("gradient check of @{}: {}\n", r.kernel, r.verdict);
  out += fmt::format("  precision {} (finite differences in f64), backend {}, seed {}\n",
                     toString(r.precision), r.backend, r.seed);
  std::vector<std::string> outputs;
  for (const GradCheckOutput &o : r.outputs)
    outputs.push_back(fmt::format("{} ({} element{})", o.name, o.weights.size(),
                                  o.weights.size() == 1 ? "" : "s"));
  out += fmt::format("  objective: J = sum of w * output over {}, weights w pseudo-random in "
                     "+-[0.5, 1.5)\n",
                     fmt::join(outputs, ", "));
  out += fmt::format("  agreement: |a - b| <= max(rtol * |b|, atol), rtol {:g}, atol {:g}\n",
                     r.rtol, r.atol);
  // Where a sum's rounding allowance (GradCheckEntry::roundingAllowance)
  // replaced atol: the largest.
  const GradCheckEntry *rounding = nullptr;
  for (const GradCheckEntry &e : r.entries)
    if (e.roundingAllowance > r.atol &&
        (!rounding || e.roundingAllowance > rounding->roundingAllowance))
      rounding = &e;
  if (rounding)
    out += fmt::format("  rounding: atol raised to the error bound of a sum in {}, n u / (1 - n u) "
                       "* sum |terms|, up to {:.2g} at {}\n",
                       toString(r.precision), rounding->roundingAllowance, rounding->name());
  for (const GradCheckInput &in : r.inputs)
    out += inputLine(r, in);
  auto at = [&](int entry) {
    return entry < 0 ? std::string() : " at " + r.entries[static_cast<size_t>(entry)].name();
  };
  std::vector<std::string> worst;
  if (r.reverseChecked)
    worst.push_back(
        fmt::format("reverse {}{}", error(r.worstReverseError), at(r.worstReverseEntry)));
  if (r.forwardChecked)
    worst.push_back(
        fmt::format("forward {}{}", error(r.worstForwardError), at(r.worstForwardEntry)));
  out += fmt::format("  worst relative error against finite differences: {}\n",
                     fmt::join(worst, ", "));
  if (r.primalDifference > r.rtol)
    out += fmt::format("  note: the kernel's outputs differ from those of its f64 copy by up to "
                       "{} (relative); the finite differences describe the f64 computation\n",
                       error(r.primalDifference));

  std::vector<const GradCheckEntry *> shown;
  for (const GradCheckEntry &e : r.entries)
    if (verbose || !e.ok() || !e.fdReliable)
      shown.push_back(&e);
  if (shown.empty())
    return out;
  size_t width = 10;
  for (const GradCheckEntry *e : shown)
    width = std::max(width, e->name().size());
  out += fmt::format("  {:<{}}  {:>16}  {:>16}  {:>16}  {:>8}  {:>8}  {:>8}  {}\n", "derivative",
                     width, "reverse", "forward", "finite diff", "fd error", "rev err", "fwd err",
                     "status");
  for (const GradCheckEntry *e : shown)
    out +=
        fmt::format("  {:<{}}  {:>16}  {:>16}  {:>16}  {:>8}  {:>8}  {:>8}  {}\n", e->name(), width,
                    number(e->reverse), number(e->forward), number(e->finiteDifference),
                    error(e->fdError), error(e->reverseError), error(e->forwardError), status(*e));
  return out;
}

} // namespace qd
