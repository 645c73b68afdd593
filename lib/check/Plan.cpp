//===- Plan.cpp - What the gradient checker differentiates ----------------===//
//
// Finds the float globals and scalar arguments a kernel reads and writes,
// picks the inputs and outputs (restricted by name), converts the launch
// values to their declared types and draws the weights, the sampled
// elements and the directions.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace qd::gradcheck {

std::string Global::display() const {
  return (kind == Kind::Field ? "@" : "%") + name;
}

uint64_t Random::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Random::weight() {
  uint64_t r = next();
  double magnitude = 0.5 + static_cast<double>(r & 255) / 256;
  return (r & 256) ? -magnitude : magnitude;
}

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

/// `v` in type `t`, or an error naming `what`.
absl::StatusOr<Scalar> convert(const Scalar &v, ScalarType t, const std::string &what) {
  if (isFloat(t))
    return Scalar::ofFloat(t, v.asDouble());
  if (v.isFloat() && (v.f != std::trunc(v.f) || !std::isfinite(v.f)))
    return absl::InvalidArgumentError(
        fmt::format("{} is {} but the value {} is not an integer", what, toString(t), v.f));
  int64_t i = v.isFloat() ? static_cast<int64_t>(v.f) : v.i;
  if ((t == ScalarType::I32 && static_cast<int32_t>(i) != i) ||
      (t == ScalarType::I1 && i != 0 && i != 1))
    return absl::InvalidArgumentError(
        fmt::format("{} is {} but the value {} does not fit", what, toString(t), i));
  return Scalar::ofInt(t, i);
}

absl::StatusOr<std::vector<Scalar>> convertAll(const GradCheckValue &value, ScalarType t,
                                               const std::string &what) {
  int64_t n = 1;
  for (int64_t e : value.shape)
    n *= e;
  if (n != static_cast<int64_t>(value.elements.size()))
    return absl::InvalidArgumentError(fmt::format("the value of {} has shape {} ({} elements) but "
                                                  "{} elements",
                                                  what, shapeText(value.shape), n,
                                                  value.elements.size()));
  std::vector<Scalar> out;
  for (const Scalar &s : value.elements) {
    absl::StatusOr<Scalar> c = convert(s, t, what);
    if (!c.ok())
      return c.status();
    out.push_back(*c);
  }
  return out;
}

/// True when any type the kernel uses is f32.
bool usesF32(const Kernel &k) {
  bool f32 = false;
  for (unsigned i = 0; i < k.numArguments(); ++i)
    f32 |= k.argument(i)->type().element() == ScalarType::F32;
  walk(const_cast<Kernel &>(k), [&](Stmt &s) {
    f32 |= !s.type().isVoid() && s.type().element() == ScalarType::F32;
    if (auto *c = dyn_cast<CmpStmt>(&s))
      f32 |= c->operandType() == ScalarType::F32;
    if (auto *c = dyn_cast<CastStmt>(&s))
      f32 |= c->from() == ScalarType::F32;
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s))
      f32 |= g->elementType() == ScalarType::F32;
  });
  return f32;
}

/// The float globals `k` accesses (primal components) and the float scalar
/// arguments it uses, fields first, in declaration order.
std::vector<Global> discover(const Module &module, const Kernel &k) {
  std::map<const Field *, Global> fields;
  std::map<unsigned, Global> args;
  walk(const_cast<Kernel &>(k), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g || g->component() != Component::Primal || !isFloat(g->elementType()))
      return;
    Global *entry;
    if (g->isField()) {
      entry = &fields[g->field()];
      entry->kind = Global::Kind::Field;
      entry->name = g->field()->name();
      entry->shape = g->field()->shape();
    } else {
      auto *a = cast<Argument>(g->ndarray());
      entry = &args[a->index()];
      entry->kind = Global::Kind::Ndarray;
      entry->name = a->name();
      entry->arg = a->index();
    }
    entry->type = g->elementType();
    (isa<GlobalLoadStmt>(g) ? entry->read : entry->written) = true;
  });
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    const Argument *a = k.argument(i);
    if (a->isNdarray() || !a->type().isFloatScalar() || !a->hasUses())
      continue;
    Global &g = args[i];
    g.kind = Global::Kind::Scalar;
    g.name = a->name();
    g.arg = i;
    g.type = a->type().element();
    g.read = true;
  }
  std::vector<Global> out;
  for (const auto &f : module.fields())
    if (auto it = fields.find(f.get()); it != fields.end())
      out.push_back(it->second);
  for (auto &[index, g] : args)
    out.push_back(g);
  return out;
}

/// Why `name` is not one of the check's inputs (or outputs): a reason when
/// it is a field (`field`) or an argument (`!field`) of `k`, else "".
std::string whyNot(const Module &module, const Kernel &k, const std::string &name, bool input,
                   bool field) {
  std::string role = input ? "an input" : "an output";
  std::string access = input ? "reads" : "stores or atomically adds to";
  if (const Field *f = field ? module.findField(name) : nullptr) {
    if (!isFloat(f->elementType()))
      return fmt::format("@{} is {}: only float fields have derivatives", name,
                         toString(f->elementType()));
    return fmt::format("@{} is not {} of @{}: the kernel never {} it", name, role, k.name(),
                       access);
  }
  if (const Argument *a = field ? nullptr : k.findArgument(name)) {
    if (!isFloat(a->type().element()))
      return fmt::format("%{} is {}: only float arguments have derivatives", name, a->type().str());
    if (!input && !a->isNdarray())
      return fmt::format("%{} is a scalar argument: it cannot be an output", name);
    return fmt::format("%{} is not {} of @{}: the kernel never {} it", name, role, k.name(),
                       access);
  }
  return "";
}

/// The entries of `candidates` (indices into `globals`) that `names`
/// select, in the order of `candidates`; all of them when `names` is empty.
absl::StatusOr<std::vector<size_t>> select(const Module &module, const Kernel &k,
                                           const std::vector<Global> &globals,
                                           const std::vector<size_t> &candidates,
                                           const std::vector<std::string> &names, bool input) {
  if (names.empty())
    return candidates;
  std::set<size_t> chosen;
  std::vector<std::string> known;
  for (size_t c : candidates)
    known.push_back(globals[c].display());
  for (const std::string &raw : names) {
    char sigil = raw.starts_with('@') || raw.starts_with('%') ? raw[0] : 0;
    std::string name = sigil ? raw.substr(1) : raw;
    std::vector<size_t> matches;
    for (size_t c : candidates) {
      const Global &g = globals[c];
      bool isField = g.kind == Global::Kind::Field;
      if (g.name == name && (sigil == 0 || (sigil == '@') == isField))
        matches.push_back(c);
    }
    if (matches.size() > 1)
      return absl::InvalidArgumentError(
          fmt::format("'{}' names both field @{} and argument %{} of @{}; write @{} or %{}", raw,
                      name, name, k.name(), name, name));
    if (matches.empty()) {
      std::string why = sigil != '%' ? whyNot(module, k, name, input, true) : "";
      if (why.empty() && sigil != '@')
        why = whyNot(module, k, name, input, false);
      if (why.empty())
        why = fmt::format("@{} has no field or argument named '{}'", k.name(), name);
      return absl::InvalidArgumentError(fmt::format(
          "{} (the {} are: {})", why, input ? "inputs" : "outputs", fmt::join(known, ", ")));
    }
    chosen.insert(matches[0]);
  }
  std::vector<size_t> out;
  for (size_t c : candidates)
    if (chosen.count(c))
      out.push_back(c);
  return out;
}

/// `count` distinct elements of [0, n) (the first and the last among
/// them), sorted.
std::vector<int64_t> sample(int64_t n, int64_t count, Random &random) {
  std::set<int64_t> picked;
  if (count >= 1)
    picked.insert(0);
  if (count >= 2)
    picked.insert(n - 1);
  while (static_cast<int64_t>(picked.size()) < count)
    picked.insert(static_cast<int64_t>(random.below(static_cast<uint64_t>(n))));
  return {picked.begin(), picked.end()};
}

// Launch values: every field value names a field of its shape; every
// argument has a value of its rank. Fills the plan's values and the shapes
// and sizes of its globals.
absl::Status bindLaunchValues(const Module &module, const Kernel &k, const GradCheckInputs &inputs,
                              Plan &plan) {
  for (auto &[name, value] : inputs.fields) {
    const Field *f = module.findField(name);
    if (!f)
      return absl::InvalidArgumentError(
          fmt::format("a value is given for field @{}, but the module has no such field", name));
    if (value.shape != f->shape())
      return absl::InvalidArgumentError(
          fmt::format("field @{} has shape {}, but its value has shape {}", name,
                      shapeText(f->shape()), shapeText(value.shape)));
    absl::StatusOr<std::vector<Scalar>> v = convertAll(value, f->elementType(), "field @" + name);
    if (!v.ok())
      return v.status();
    plan.fieldValues[name] = *std::move(v);
  }
  for (auto &[name, value] : inputs.args)
    if (!k.findArgument(name))
      return absl::InvalidArgumentError(fmt::format(
          "a value is given for argument %{}, but @{} has no such argument", name, k.name()));
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    const Argument *a = k.argument(i);
    auto it = inputs.args.find(a->name());
    if (it == inputs.args.end())
      return absl::InvalidArgumentError(fmt::format("argument %{} ({}) of @{} has no value",
                                                    a->name(), a->type().str(), k.name()));
    unsigned rank = a->isNdarray() ? a->type().ndim() : 0;
    if (it->second.shape.size() != rank)
      return absl::InvalidArgumentError(
          fmt::format("argument %{} is {}, but its value has shape {}", a->name(), a->type().str(),
                      shapeText(it->second.shape)));
    absl::StatusOr<std::vector<Scalar>> v =
        convertAll(it->second, a->type().element(), "argument %" + a->name());
    if (!v.ok())
      return v.status();
    plan.argValues.push_back(*std::move(v));
    plan.argShapes.push_back(it->second.shape);
  }
  for (Global &g : plan.globals) {
    if (g.kind == Global::Kind::Ndarray)
      g.shape = plan.argShapes[g.arg];
    g.elements = 1;
    for (int64_t e : g.shape)
      g.elements *= e;
  }
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<Plan> makePlan(const Module &module, const Kernel &k, const GradCheckInputs &inputs,
                              const GradCheckOptions &options) {
  if (options.maxElements < 0 || !(options.fdStep > 0) || options.rtol < 0 || options.atol < 0)
    return absl::InvalidArgumentError(
        "maxElements, rtol and atol must not be negative, and fdStep must be positive");
  Plan plan;
  plan.kernel = k.name();
  plan.globals = discover(module, k);
  bool explicitKernel = !options.gradientKernel.empty() || !options.dualKernel.empty();

  if (absl::Status st = bindLaunchValues(module, k, inputs, plan); !st.ok())
    return st;

  // Inputs and outputs.
  std::vector<size_t> readable, writable;
  for (size_t i = 0; i < plan.globals.size(); ++i) {
    const Global &g = plan.globals[i];
    if (g.read && !(explicitKernel && g.kind == Global::Kind::Scalar))
      readable.push_back(i);
    if (g.written)
      writable.push_back(i);
  }
  if (readable.empty())
    return absl::InvalidArgumentError(fmt::format(
        "@{} reads no float field, ndarray or scalar argument{}: there is nothing to "
        "differentiate with respect to",
        k.name(), explicitKernel ? " (scalar arguments are not inputs with a given kernel)" : ""));
  if (writable.empty())
    return absl::InvalidArgumentError(fmt::format(
        "@{} writes no float field or ndarray: it has no output to differentiate", k.name()));
  for (const std::string &name : options.wrt) {
    std::string bare = name.starts_with('%') ? name.substr(1) : name;
    const Argument *a = name.starts_with('@') ? nullptr : k.findArgument(bare);
    if (explicitKernel && a && !a->isNdarray() && isFloat(a->type().element()) &&
        (name.starts_with('%') || !module.findField(bare)))
      return absl::InvalidArgumentError(fmt::format(
          "%{} is a scalar argument: a given gradient or dual kernel has no companion to return "
          "its derivative in; leave it out of the inputs or let the checker build the kernels",
          bare));
  }
  absl::StatusOr<std::vector<size_t>> in =
      select(module, k, plan.globals, readable, options.wrt, true);
  if (!in.ok())
    return in.status();
  absl::StatusOr<std::vector<size_t>> out =
      select(module, k, plan.globals, writable, options.outputs, false);
  if (!out.ok())
    return out.status();
  plan.inputs = *std::move(in);
  plan.outputs = *std::move(out);
  for (size_t i : plan.inputs)
    if (plan.globals[i].elements == 0)
      return absl::InvalidArgumentError(
          fmt::format("input {} has no elements", plan.globals[i].display()));

  // Precision and tolerances.
  plan.precision = usesF32(k) ? ScalarType::F32 : ScalarType::F64;
  bool f32 = plan.precision == ScalarType::F32;
  plan.rtol = options.rtol > 0 ? options.rtol : f32 ? 1e-3 : 1e-6;
  plan.atol = options.atol > 0 ? options.atol : f32 ? 1e-5 : 1e-9;

  // Weights, then per input the checked elements and the direction.
  Random random(options.seed);
  for (size_t o : plan.outputs) {
    std::vector<double> w(static_cast<size_t>(plan.globals[o].elements));
    for (double &x : w)
      x = random.weight();
    plan.weights.push_back(std::move(w));
  }
  for (size_t i : plan.inputs) {
    const Global &g = plan.globals[i];
    Direction direction;
    if (g.elements <= options.maxElements) {
      std::vector<int64_t> all(static_cast<size_t>(g.elements));
      for (int64_t e = 0; e < g.elements; ++e)
        all[static_cast<size_t>(e)] = e;
      plan.checked.push_back(std::move(all));
    } else {
      plan.checked.push_back(sample(g.elements, options.maxElements, random));
      for (int64_t e = 0; e < g.elements; ++e)
        direction.emplace_back(e, random.weight());
    }
    plan.directions.push_back(std::move(direction));
  }
  return plan;
}

} // namespace qd::gradcheck
