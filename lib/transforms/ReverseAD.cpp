//===- ReverseAD.cpp - Reverse-mode automatic differentiation -------------===//
//
// The driver: copies the kernel (the *source*), lowers its jumps, checks
// that every active statement is differentiable, plans and builds the
// gradient kernel (lib/transforms/ReverseAD/: Internal.h describes the
// steps), and rebuilds it without taping the loops whose tapes cannot be
// sized at launch.
//
//===----------------------------------------------------------------------===//
#include "DerivativeRules.h"
#include "ReverseAD/Internal.h"

#include "qd/ir/Checkpointing.h"
#include "qd/ir/Clone.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <fmt/format.h>

#include <algorithm>

namespace qd {
namespace {

absl::Status error(const Kernel &src, const Stmt &s, const std::string &what) {
  return absl::InvalidArgumentError(fmt::format("{}: error: reverse-ad: {} (in kernel @{}: {})",
                                                s.loc().str(), what, src.name(), printStmt(s)));
}

/// Fails, naming the first statement, when the kernel already has adstacks,
/// or an active value is computed at launch time or by a statement without
/// a derivative.
absl::Status checkDifferentiable(Kernel &src, const Activity &activity) {
  absl::Status status;
  walk(src.body(), [&](Stmt &s) {
    if (!status.ok())
      return;
    if (isa<AdStackOpStmt>(&s) || isa<AdStackAllocaStmt>(&s)) {
      status = error(src, s,
                     "the kernel already uses adstacks; differentiate the kernel before "
                     "adding them");
      return;
    }
    if (!activity.isActive(&s))
      return;
    if (!s.parentStmt() && !s.isTask()) {
      status = error(src, s,
                     "this launch-time statement computes a value that the gradient "
                     "flows through; load it inside the task that uses it");
      return;
    }
    if (ad::hasDerivativeRule(s) && !ad::isDifferentiable(s))
      status = error(src, s, ad::notDifferentiableMessage(s, "gradient"));
  });
  return status;
}

/// The field the checkpointed loops of `plan` read their interval from
/// (qd/ir/Checkpointing.h): added to the module, or taken where it has one
/// of that name already (a gradient built before under this name).
absl::Status addCheckpointField(Module &module, const std::string &gradName,
                                reverse::ReversePlan &plan) {
  bool any = std::any_of(plan.loops.begin(), plan.loops.end(),
                         [](const auto &l) { return l.second.checkpointed; });
  if (!any)
    return absl::OkStatus();
  std::string name = checkpointIntervalField(gradName);
  Field *f = module.findField(name);
  if (f && (f->elementType() != ScalarType::I32 || !f->shape().empty()))
    return absl::AlreadyExistsError(fmt::format(
        "reverse-ad: the module has a field '@{}' that is not a 0-d i32; the checkpointed "
        "gradient @{} reads its checkpoint interval from a field of that name; rename it",
        name, gradName));
  if (!f)
    f = module.addField(std::make_unique<Field>(name, ScalarType::I32, std::vector<int64_t>{},
                                                /*grad=*/false, /*dual=*/false));
  plan.checkpointInterval = f;
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<Kernel *> buildGradientKernel(Module &module, const Kernel &kernel,
                                             std::string gradName) {
  return buildGradientKernel(module, kernel, ReverseADOptions{}, std::move(gradName));
}

absl::StatusOr<Kernel *> buildGradientKernel(Module &module, const Kernel &kernel,
                                             const ReverseADOptions &options,
                                             std::string gradName) {
  if (gradName.empty())
    gradName = kernel.name() + "_grad";
  if (module.findKernel(gradName))
    return absl::AlreadyExistsError(fmt::format(
        "reverse-ad: the module already has a kernel named '@{}'; remove it or pick another name",
        gradName));
  std::unique_ptr<Kernel> source = cloneKernel(kernel, kernel.name());
  // A while loop with an iteration cap as a for loop: its tapes get a
  // constant bound (`bound-capped-loops`).
  boundCappedLoops(*source);
  reverse::StmtSet breaking = reverse::lowerJumps(*source);
  Activity activity(*source, ActivityMode::Reverse);
  if (absl::Status s = checkDifferentiable(*source, activity); !s.ok())
    return s;
  // A taped stack holds the iterations of its loop for a whole range of the
  // enclosing loop. Its size is a launch-time expression, or measured at
  // launch by the counting kernel (with a bound where its count reads its
  // own values): never the tier-3 default, so nothing needs recomputing
  // instead (docs/sizing.md).
  auto grad = std::make_unique<Kernel>(gradName);
  grad->setLoc(kernel.loc());
  for (unsigned i = 0; i < kernel.numArguments(); ++i) {
    const Argument *a = kernel.argument(i);
    auto copy = std::make_unique<Argument>(a->name(), a->type(), a->hasGrad(), a->hasDual());
    copy->setLoc(a->loc());
    grad->addArgument(std::move(copy));
  }
  reverse::ReversePlan plan = reverse::planReverse(*source, activity, breaking, options);
  if (absl::Status s = addCheckpointField(module, gradName, plan); !s.ok())
    return s;
  reverse::GradientBuilder builder(*source, *grad, plan, activity);
  builder.countWork(options.work);
  builder.run();
  if (!builder.internalError().empty())
    return absl::InternalError("reverse-ad: internal error: " + builder.internalError());
  return module.addKernel(std::move(grad));
}

} // namespace qd
