//===- Modules.cpp - The modules the gradient checker launches ------------===//
//
// The checker never changes the caller's module. It differentiates a copy
// in which every float global the kernel touches has grad and dual
// companions (also those it only writes or only reads: a field written and
// read back carries derivatives through memory), and in which each float
// scalar argument that is an input is read from a 0-d field instead, so
// that both modes give its derivative in that field's companions. Finite
// differences run on a second copy with every f32 widened to f64.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace qd::gradcheck {
namespace {

/// `base`, or `base` with the smallest number from 2 that `taken` rejects
/// not.
template <typename Taken> std::string fresh(const std::string &base, Taken taken) {
  if (!taken(base))
    return base;
  for (int i = 2;; ++i)
    if (std::string name = base + std::to_string(i); !taken(name))
      return name;
}

/// Makes `k` read scalar argument `g` from a new 0-d field (with grad and
/// dual companions) wherever a task uses it: a load of the field before
/// each such use. A launch-time (top-level) float computation from the
/// argument cannot be differentiated and is an error; a top-level integer
/// use (a cast to a bound, a comparison) keeps the argument.
absl::Status liftScalarArgument(Module &m, Kernel &k, Global &g) {
  Argument *a = k.argument(g.arg);
  std::string name = fresh(k.name() + "_arg_" + a->name(),
                           [&](const std::string &n) { return m.findField(n) != nullptr; });
  auto field = std::make_unique<Field>(name, g.type, std::vector<int64_t>{}, true, true);
  field->setLoc(a->loc());
  Field *f = m.addField(std::move(field));
  std::vector<Use *> uses;
  for (Use &u : a->uses())
    uses.push_back(&u);
  for (Use *u : uses) {
    Stmt *user = u->user();
    if (!user->parentStmt()) {
      if (user->type().isFloatScalar())
        return absl::InvalidArgumentError(fmt::format(
            "{}: error: scalar argument %{} of @{} is used by the launch-time float computation "
            "'{}' "
            "at the kernel's top level, which reverse mode cannot differentiate; compute it "
            "inside the task that uses it, or leave %{} out of the inputs",
            user->loc().str(), a->name(), k.name(), printStmt(*user), a->name()));
      continue;
    }
    IRBuilder b = IRBuilder::before(*user);
    b.setLocation(user->loc());
    u->set(b.load(GlobalRef::ofField(f), std::span<Value *const>()));
  }
  g.lifted = name;
  return absl::OkStatus();
}

/// Checks that kernel `name` of `m` can stand for the `what` kernel of `k`.
absl::Status checkGivenKernel(const Module &m, const Kernel &k, const std::string &name,
                              const char *what) {
  const Kernel *given = m.findKernel(name);
  if (!given)
    return absl::NotFoundError(fmt::format("no {} kernel named '@{}' in the module (kernels: {})",
                                           what, name, kernelList(m)));
  if (given == &k)
    return absl::InvalidArgumentError(
        fmt::format("the {} kernel of @{} cannot be @{} itself", what, k.name(), name));
  bool same = given->numArguments() == k.numArguments();
  for (unsigned i = 0; same && i < k.numArguments(); ++i)
    same = given->argument(i)->name() == k.argument(i)->name() &&
           given->argument(i)->type() == k.argument(i)->type();
  if (!same)
    return absl::InvalidArgumentError(
        fmt::format("the {} kernel @{} must take the arguments of @{} (same names and types, in "
                    "the same order)",
                    what, name, k.name()));
  return absl::OkStatus();
}

/// The gradient or dual kernel: `given` after checking it, else built by
/// `build` under a name no kernel has; then `edit`.
absl::StatusOr<std::string>
differentiatedKernel(Module &m, Kernel &k, const std::string &given, const char *what,
                     const std::string &suffix,
                     const std::function<absl::StatusOr<Kernel *>(const std::string &)> &build,
                     const std::function<absl::Status(Module &, Kernel &)> &edit) {
  std::string name = given;
  if (!name.empty()) {
    if (absl::Status s = checkGivenKernel(m, k, name, what); !s.ok())
      return s;
  } else {
    name =
        fresh(k.name() + suffix, [&](const std::string &n) { return m.findKernel(n) != nullptr; });
    absl::StatusOr<Kernel *> built = build(name);
    if (!built.ok())
      return built.status();
  }
  if (edit)
    if (absl::Status s = edit(m, *m.findKernel(name)); !s.ok())
      return s;
  return name;
}

} // namespace

std::string kernelList(const Module &m) {
  std::vector<std::string> names;
  for (const auto &k : m.kernels())
    names.push_back("@" + k->name());
  return fmt::format("{}", fmt::join(names, ", "));
}

absl::StatusOr<Modules> prepareModules(const Module &module, Plan &plan,
                                       const GradCheckOptions &options) {
  Modules out;
  out.ad = cloneModule(module);
  Module &ad = *out.ad;
  Kernel &k = *ad.findKernel(plan.kernel);
  for (Global &g : plan.globals) {
    if (g.kind == Global::Kind::Field) {
      ad.findField(g.name)->setHasGrad(true);
      ad.findField(g.name)->setHasDual(true);
    } else if (g.kind == Global::Kind::Ndarray) {
      k.argument(g.arg)->setHasGrad(true);
      k.argument(g.arg)->setHasDual(true);
    }
  }
  for (size_t i : plan.inputs)
    if (Global &g = plan.globals[i]; g.kind == Global::Kind::Scalar)
      if (absl::Status s = liftScalarArgument(ad, k, g); !s.ok())
        return s;

  if (options.reverse) {
    absl::StatusOr<std::string> name = differentiatedKernel(
        ad, k, options.gradientKernel, "gradient", "_grad",
        [&](const std::string &n) { return buildGradientKernel(ad, k, options.reverseOptions, n); },
        options.editGradient);
    if (!name.ok())
      return name.status();
    out.gradient = *name;
  }
  if (options.forward) {
    absl::StatusOr<std::string> name = differentiatedKernel(
        ad, k, options.dualKernel, "dual", "_dual",
        [&](const std::string &n) { return buildDualKernel(ad, k, n); }, options.editDual);
    if (!name.ok())
      return name.status();
    out.dual = *name;
  }
  if (absl::Status v = verify(ad); !v.ok())
    return absl::InvalidArgumentError(
        fmt::format("the differentiated module does not verify{}: {}",
                    options.editGradient || options.editDual ? " after editGradient/editDual" : "",
                    std::string(v.message())));
  out.wide = cloneModuleWidenedToF64(module);
  return out;
}

} // namespace qd::gradcheck
