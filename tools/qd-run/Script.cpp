//===- Script.cpp - The launches of a qd-run run --------------------------===//
#include "Script.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace qdrun {

namespace {

constexpr const char *kScriptForm = "{\"launches\": [{\"kernel\": NAME, ...}, ...]}";

LaunchSpec readLaunch(const json &entry, const std::string &where, int index) {
  if (!entry.is_object())
    die(where + ": a launch is an object {\"kernel\": NAME, ...}, got " + brief(entry));
  LaunchSpec spec;
  spec.where = where;
  spec.index = index;
  for (const auto &[key, value] : entry.items()) {
    std::string at = where + ": \"" + key + "\"";
    if (key == "kernel") {
      if (!value.is_string() || value.get_ref<const std::string &>().empty())
        die(at + " must name a kernel (a string such as \"step\"), got " + brief(value));
      spec.kernel = value.get<std::string>();
    } else if (key == "args" || key == "set") {
      if (!value.is_object())
        die(at + " must be an object {NAME: VALUE, ...}, got " + brief(value));
      (key == "args" ? spec.args : spec.set) = value;
    } else if (key == "print") {
      if (value.is_boolean()) {
        spec.prints = spec.printAll = value.get<bool>();
        continue;
      }
      if (!value.is_array())
        die(at + " must be a list of names ([\"x\", \"y.grad\"]) or true (every field and " +
            "ndarray), got " + brief(value));
      spec.prints = true;
      for (const json &name : value) {
        if (!name.is_string() || name.get_ref<const std::string &>().empty())
          die(at + " must list fields and ndarrays by name (strings such as \"x\" or " +
              "\"x.grad\"), got " + brief(name));
        if (std::find(spec.print.begin(), spec.print.end(), name) == spec.print.end())
          spec.print.push_back(name.get<std::string>()); // each name once, as --print
      }
    } else if (key == "expect_error") {
      if (value.is_boolean() && value.get<bool>())
        spec.expectError = "";
      else if (value.is_string() && !value.get_ref<const std::string &>().empty())
        spec.expectError = value.get<std::string>();
      else if (!value.is_boolean())
        die(at + " must be true (any error) or a text the error message contains, got " +
            brief(value));
    } else if (key == "tape") {
      if (!value.is_boolean())
        die(at + " must be true (record the launch on the launch tape) or false, got " +
            brief(value));
      spec.tape = value.get<bool>();
    } else if (key == "backward") {
      if (!value.is_object() || value.empty())
        die(at + " must be an object {NAME: SEED, ...} naming the outputs whose adjoints it " +
            "seeds, got " + brief(value));
      spec.backward = value;
    } else {
      die(where + ": unknown key \"" + key +
          "\" (a launch has kernel, args, set, print, expect_error and tape; a backward entry " +
          "has backward, print and expect_error)");
    }
  }
  if (spec.backward &&
      (!spec.kernel.empty() || spec.tape || !spec.args.empty() || !spec.set.empty()))
    die(where + ": a backward entry runs the recorded launches' gradients and takes no " +
        "\"kernel\", \"tape\", \"args\" or \"set\"");
  if (spec.kernel.empty() && !spec.backward)
    die(where + ": no \"kernel\": name the kernel to launch");
  return spec;
}

} // namespace

std::vector<LaunchSpec> readScript(const std::string &path) {
  json doc = parseJson(readFile(path), "'" + path + "'");
  if (!doc.is_object())
    die(path + ": a launch script is an object " + kScriptForm + ", got " + brief(doc));
  for (const auto &[key, value] : doc.items())
    if (key != "launches")
      die(path + ": unknown key \"" + key + "\" (a launch script has only \"launches\")");
  if (!doc.contains("launches"))
    die(path + ": no \"launches\": a launch script is " + kScriptForm);
  const json &launches = doc["launches"];
  if (!launches.is_array() || launches.empty())
    die(path + ": \"launches\" must be a non-empty list of launches, got " + brief(launches));
  std::vector<LaunchSpec> specs;
  for (size_t i = 0; i < launches.size(); ++i)
    specs.push_back(
        readLaunch(launches[i], fmt::format("{}: launches[{}]", path, i), static_cast<int>(i)));
  return specs;
}

std::pair<std::string, std::string> parseArgKey(const std::string &key, const std::string &what) {
  size_t colon = key.find(':');
  if (colon == std::string::npos)
    return {"", key};
  std::string kernel = key.substr(0, colon), name = key.substr(colon + 1);
  if (kernel.empty() || name.empty() || name.find(':') != std::string::npos)
    die(what + ": '" + key + "' is neither NAME nor KERNEL:NAME");
  return {kernel, name};
}

namespace {

/// "it takes %n, %a" or "it takes no arguments", for messages.
std::string takes(const qd::Kernel &k) {
  if (k.numArguments() == 0)
    return "it takes no arguments";
  std::string list = "it takes";
  for (unsigned i = 0; i < k.numArguments(); ++i)
    list += (i ? ", %" : " %") + k.argument(i)->name();
  return list;
}

constexpr qd::Component kComponents[] = {qd::Component::Primal, qd::Component::Grad,
                                         qd::Component::Dual};

/// Walks the launches in order, keeping what the runner will hold at each
/// point: which ndarrays exist, with which element type, shape and
/// companions.
class Planner {
public:
  Planner(qd::Program &program, std::string moduleFile, const ArgDefaults &defaults)
      : program_(program), module_(program.module()), file_(std::move(moduleFile)),
        defaults_(defaults) {}

  void checkDefaults(const std::vector<const qd::Kernel *> &launched) const;
  Launch plan(const LaunchSpec &spec, const qd::Kernel *k);
  void planSets(const json &set, const std::string &prefix,
                std::vector<std::pair<Slot, Value>> &out) const;

private:
  struct NdarrayInfo {
    qd::ScalarType elem;
    std::vector<int64_t> shape;
    std::set<qd::Component> components;
    std::string origin; // where its value was given, for messages
  };

  void checkOwnArgs(const LaunchSpec &spec, const qd::Kernel &k, const std::string &prefix) const;
  void planArgs(const LaunchSpec &spec, const qd::Kernel &k, Launch &launch,
                const std::string &prefix);
  /// The seeds of a backward entry.
  void planBackward(const LaunchSpec &spec, Launch &launch, const std::string &prefix) const;
  /// The value a launch of `kernel` takes for `name` without one of its own.
  const json *defaultValue(const std::string &kernel, const std::string &name) const;
  /// A new ndarray for `p` from `values` ({NAME: JSON} holding p's name).
  NewNdarray newNdarray(const qd::Argument &p, const json &values, std::string origin,
                        const std::string &prefix);
  /// The existing ndarray named like `p`, checked to fit it.
  void reuseNdarray(NdarrayInfo &nd, const qd::Argument &p, const std::string &prefix,
                    bool script) const;
  std::optional<Slot> resolve(const std::string &name) const;
  std::vector<Slot> everything() const;

  qd::Program &program_;
  const qd::Module &module_;
  std::string file_;
  const ArgDefaults &defaults_;
  std::map<std::string, NdarrayInfo> ndarrays_;
  /// Whether an earlier launch is recorded on the tape.
  bool taped_ = false;
};

void Planner::checkDefaults(const std::vector<const qd::Kernel *> &given) const {
  std::vector<const qd::Kernel *> launched; // backward entries have none
  std::copy_if(given.begin(), given.end(), std::back_inserter(launched),
               [](const qd::Kernel *k) { return k; });
  for (const auto &[kname, values] : defaults_) {
    for (const auto &[name, value] : values.items()) {
      auto [base, comp] = splitName(name);
      std::string compName(qd::toString(comp));
      if (kname.empty()) {
        bool known = false;
        for (const qd::Kernel *k : launched) {
          const qd::Argument *p = k->findArgument(base);
          known |=
              p && (comp == qd::Component::Primal || (p->isNdarray() && p->hasComponent(comp)));
        }
        if (!known && comp == qd::Component::Primal)
          die("no kernel argument named '" + base + "' in the launched kernel(s)");
        if (!known)
          die("argument '" + name + "': no launched kernel has an ndarray argument '" + base +
              "' with a " + compName + " companion");
        continue;
      }
      std::string key = kname + ":" + name;
      const qd::Kernel *k = module_.findKernel(kname);
      if (!k)
        die("argument '" + key + "': no kernel named '@" + kname + "' in " + file_);
      if (std::find(launched.begin(), launched.end(), k) == launched.end())
        die("argument '" + key + "': kernel @" + kname + " is not launched");
      const qd::Argument *p = k->findArgument(base);
      if (!p)
        die("argument '" + key + "': kernel @" + kname + " has no argument named '" + base + "' (" +
            takes(*k) + ")");
      if (p->isNdarray())
        die("argument '" + key + "': %" + base + " of @" + kname +
            " is an ndarray, and an ndarray is shared by name by every launch; give its value " +
            "without a kernel (--arg " + name + "=[...]) or in a launch script's \"args\"");
      if (comp != qd::Component::Primal)
        die("argument '" + key + "': %" + base + " of @" + kname + " is a scalar and has no " +
            compName + " companion");
    }
  }
}

const json *Planner::defaultValue(const std::string &kernel, const std::string &name) const {
  for (const std::string &k : {kernel, std::string()}) {
    auto it = defaults_.find(k);
    if (it != defaults_.end() && it->second.contains(name))
      return &it->second.at(name);
  }
  return nullptr;
}

void Planner::checkOwnArgs(const LaunchSpec &spec, const qd::Kernel &k,
                           const std::string &prefix) const {
  for (const auto &[name, value] : spec.args.items()) {
    auto [base, comp] = splitName(name);
    const qd::Argument *p = k.findArgument(base);
    if (!p)
      die(prefix + "\"args\": kernel @" + k.name() + " has no argument named '" + base + "' (" +
          takes(k) + ")");
    if (comp == qd::Component::Primal)
      continue;
    if (!p->isNdarray() || !p->hasComponent(comp))
      die(prefix + "\"args\": '" + name + "': %" + base + " of @" + k.name() + " has no " +
          std::string(qd::toString(comp)) + " companion");
    if (!spec.args.contains(base))
      die(prefix + "\"args\": '" + name + "' needs '" + base +
          "' too: a companion comes with a new ndarray value; write into the ndarray the " +
          "launch already has with \"set\"");
  }
}

NewNdarray Planner::newNdarray(const qd::Argument &p, const json &values, std::string origin,
                               const std::string &prefix) {
  const json &value = values.at(p.name());
  std::vector<int64_t> shape = shapeOf(value);
  if (shape.size() != p.type().ndim())
    die(fmt::format("{}ndarray argument '{}' is {} but the value has {} dimension(s)", prefix,
                    p.name(), p.type().str(), shape.size()));
  qd::ScalarType elem = p.type().element();
  NewNdarray nd{&p, toValue(value, elem, shape, prefix + "argument '" + p.name() + "'"), {}};
  NdarrayInfo info{elem, shape, {qd::Component::Primal}, std::move(origin)};
  for (qd::Component c : {qd::Component::Grad, qd::Component::Dual}) {
    // A companion value is kept even when this kernel does not declare the
    // companion: a later kernel sharing the ndarray may.
    std::string name = componentName(p.name(), c);
    if (values.contains(name))
      nd.companions.emplace(
          c, toValue(values.at(name), elem, shape, prefix + "argument '" + name + "'"));
    if (p.hasComponent(c) || values.contains(name))
      info.components.insert(c);
  }
  ndarrays_[p.name()] = std::move(info);
  return nd;
}

void Planner::reuseNdarray(NdarrayInfo &nd, const qd::Argument &p, const std::string &prefix,
                           bool script) const {
  if (nd.elem != p.type().element() || nd.shape.size() != p.type().ndim())
    die(fmt::format("{}ndarray '{}' holds {} in {} dimension(s) (its value from {}) but kernel @{} "
                    "takes %{}: {}; {}",
                    prefix, p.name(), qd::toString(nd.elem), nd.shape.size(), nd.origin,
                    p.kernel()->name(), p.name(), p.type().str(),
                    script ? "give it a new value in this launch's \"args\""
                           : "kernels sharing an ndarray argument's name must agree on its type"));
  // A companion this kernel declares and the ndarray lacks starts at zero.
  for (qd::Component c : kComponents)
    if (p.hasComponent(c))
      nd.components.insert(c);
}

std::optional<Slot> Planner::resolve(const std::string &name) const {
  auto [base, comp] = splitName(name);
  if (program_.field(base, comp))
    return Slot{name, base, comp, false};
  auto it = ndarrays_.find(base);
  if (it != ndarrays_.end() && it->second.components.count(comp))
    return Slot{name, base, comp, true};
  return std::nullopt;
}

std::vector<Slot> Planner::everything() const {
  std::vector<Slot> slots;
  for (const auto &f : module_.fields())
    for (qd::Component c : kComponents)
      if (f->hasComponent(c))
        slots.push_back(Slot{componentName(f->name(), c), f->name(), c, false});
  for (const auto &[name, nd] : ndarrays_)
    for (qd::Component c : kComponents)
      if (nd.components.count(c))
        slots.push_back(Slot{componentName(name, c), name, c, true});
  return slots;
}

void Planner::planSets(const json &set, const std::string &prefix,
                       std::vector<std::pair<Slot, Value>> &out) const {
  for (const auto &[name, value] : set.items()) {
    std::optional<Slot> slot = resolve(name);
    if (!slot) {
      auto [base, comp] = splitName(name);
      std::string compName(qd::toString(comp));
      if (program_.field(base))
        die(prefix + "field '@" + base + "' has no " + compName + " companion");
      if (ndarrays_.count(base))
        die(prefix + "ndarray '" + base + "' has no " + compName + " companion");
      die(prefix + "no field '@" + name + "' in " + file_ +
          (prefix.empty() ? "" : " and no ndarray '" + name + "' at this launch"));
    }
    if (slot->ndarray) {
      const NdarrayInfo &nd = ndarrays_.at(slot->base);
      out.emplace_back(*slot, toValue(value, nd.elem, nd.shape, prefix + "ndarray '" + name + "'"));
    } else {
      const qd::Buffer &buf = *program_.field(slot->base, slot->component);
      out.emplace_back(
          *slot, toValue(value, buf.elementType(), buf.shape(), prefix + "field '@" + name + "'"));
    }
  }
}

void Planner::planArgs(const LaunchSpec &spec, const qd::Kernel &k, Launch &launch,
                       const std::string &prefix) {
  bool script = !spec.where.empty();
  std::string pass = script ? "give it in the launch's \"args\" or pass --arg " : "pass --arg ";
  checkOwnArgs(spec, k, prefix);

  launch.scalars.resize(k.numArguments());
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    const qd::Argument &p = *k.argument(i);
    bool own = spec.args.contains(p.name());
    if (!p.isNdarray()) {
      const json *value = own ? &spec.args.at(p.name()) : defaultValue(k.name(), p.name());
      if (!value)
        die(prefix + "missing argument '" + p.name() + "' of kernel @" + k.name() + " (" + pass +
            p.name() + "=VALUE)");
      launch.scalars[i] =
          toScalar(*value, p.type().element(), prefix + "argument '" + p.name() + "'");
      continue;
    }
    // An ndarray keeps its contents from launch to launch until a launch
    // gives it a new value.
    if (own) {
      launch.newNdarrays.push_back(newNdarray(p, spec.args, spec.where, prefix));
    } else if (auto it = ndarrays_.find(p.name()); it != ndarrays_.end()) {
      reuseNdarray(it->second, p, prefix, script);
    } else if (auto d = defaults_.find(""); d != defaults_.end() && d->second.contains(p.name())) {
      launch.newNdarrays.push_back(
          newNdarray(p, d->second, "--arg " + p.name() + " or --inputs", prefix));
    } else {
      die(prefix + "missing ndarray argument '" + p.name() + "' of kernel @" + k.name() + " (" +
          pass + p.name() + "=[...])");
    }
  }
  planSets(spec.set, prefix, launch.sets);
  if (spec.tape) {
    if (!module_.findKernel(k.name() + "_grad"))
      die(prefix + (script ? "\"tape\"" : "--backward") + ": the module has no gradient kernel @" +
          k.name() + "_grad to run backward (run qd-opt --passes=reverse-ad first)");
    launch.tape = taped_ = true;
  }
}

void Planner::planBackward(const LaunchSpec &spec, Launch &launch,
                           const std::string &prefix) const {
  std::string key = spec.where.empty() ? "--backward" : "\"backward\"";
  if (!taped_)
    die(prefix + key + ": no earlier launch is recorded on the tape; mark the launches " +
        "to differentiate with \"tape\": true");
  launch.backward.emplace();
  for (const auto &[name, value] : spec.backward->items()) {
    if (!value.is_number())
      die(prefix + key + ": the seed of '" + name + "' must be a number, got " + brief(value));
    auto [base, comp] = splitName(name);
    std::optional<Slot> slot = resolve(base + ".grad");
    if (comp != qd::Component::Primal || !slot)
      die(prefix + key + ": '" + name + "' must name a field or ndarray with a grad " +
          "companion (the output, such as \"loss\", whose adjoint it seeds)");
    launch.backward->emplace_back(*slot, value.get<double>());
  }
}

Launch Planner::plan(const LaunchSpec &spec, const qd::Kernel *k) {
  bool script = !spec.where.empty();
  Launch launch;
  launch.index = spec.index;
  launch.kernel = k;
  std::string what = k ? "kernel @" + k->name() : "backward";
  launch.label = script ? spec.where + " (" + what + ")" : what;
  std::string prefix = script ? launch.label + ": " : "";
  if (k)
    planArgs(spec, *k, launch, prefix);
  else
    planBackward(spec, launch, prefix);

  launch.prints = spec.prints;
  if (spec.printAll)
    launch.print = everything();
  for (const std::string &name : spec.print) {
    std::optional<Slot> slot = resolve(name);
    if (!slot)
      die(prefix + "cannot print '" + name + "': no such field or ndarray argument (or companion)");
    launch.print.push_back(*slot);
  }
  launch.expectError = spec.expectError;
  return launch;
}

} // namespace

std::vector<Launch> planLaunches(const std::vector<LaunchSpec> &specs, const json &initialSets,
                                 const ArgDefaults &defaults, qd::Program &program,
                                 const std::string &moduleFile) {
  const qd::Module &module = program.module();
  std::vector<const qd::Kernel *> kernels;
  for (const LaunchSpec &spec : specs) {
    const qd::Kernel *k = module.findKernel(spec.kernel);
    if (!k && spec.backward) {
      kernels.push_back(nullptr);
      continue;
    }
    if (!k) {
      std::string known;
      for (const auto &other : module.kernels())
        known += (known.empty() ? "@" : ", @") + other->name();
      die((spec.where.empty() ? "" : spec.where + ": ") + "no kernel named '@" + spec.kernel +
          "' in " + moduleFile + " (" + (known.empty() ? "it has no kernels" : "it has " + known) +
          ")");
    }
    kernels.push_back(k);
  }
  Planner planner(program, moduleFile, defaults);
  planner.checkDefaults(kernels);
  std::vector<std::pair<Slot, Value>> initial;
  planner.planSets(initialSets, "", initial);
  std::vector<Launch> launches;
  for (size_t i = 0; i < specs.size(); ++i)
    launches.push_back(planner.plan(specs[i], kernels[i]));
  auto &first = launches.front().sets;
  first.insert(first.begin(), std::make_move_iterator(initial.begin()),
               std::make_move_iterator(initial.end()));
  return launches;
}

} // namespace qdrun
