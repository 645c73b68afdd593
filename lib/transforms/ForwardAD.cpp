//===- ForwardAD.cpp - Forward-mode automatic differentiation -------------===//
//
// The dual kernel is a copy of the kernel in which every float value that
// depends on a dual companion (varied, qd/analysis/Activity.h) gets a
// tangent computed right after it, the sum of its operands' tangents times
// its partials (DerivativeRules.h); float locals get tangent locals. Stores and atomic adds also
// write the tangent into the destination's dual companion (when it has one).
//
//===----------------------------------------------------------------------===//
#include "DerivativeRules.h"

#include "qd/analysis/Activity.h"
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <unordered_map>

namespace qd {
namespace {

bool isFloatValue(const Value *v) {
  return v && v->type().isFloatScalar();
}

class DualBuilder {
public:
  explicit DualBuilder(Kernel &k) : k_(k), activity_(k, ActivityMode::Forward) {}

  absl::Status run() {
    std::vector<Stmt *> stmts;
    walk(k_.body(), [&](Stmt &s) { stmts.push_back(&s); });
    for (Stmt *s : stmts) {
      if (absl::Status st = visit(*s); !st.ok())
        return st;
    }
    return absl::OkStatus();
  }

private:
  absl::Status error(const Stmt &s, const std::string &what) {
    return absl::InvalidArgumentError(fmt::format("{}: error: forward-ad: {} (in kernel @{}: {})",
                                                  s.loc().str(), what, k_.name(), printStmt(s)));
  }

  Value *tangent(const Value *v) const {
    auto it = tangents_.find(v);
    return it == tangents_.end() ? nullptr : it->second;
  }

  absl::Status visit(Stmt &s) {
    IRBuilder b = IRBuilder::after(s);
    b.setLocation(s.loc());
    switch (s.kind()) {
    case StmtKind::Alloca:
      if (activity_.isVaried(&s) && isFloat(cast<AllocaStmt>(s).elementType()))
        tangentLocal_[&s] = b.alloca(cast<AllocaStmt>(s).elementType());
      return absl::OkStatus();
    case StmtKind::LocalStore: {
      auto &st = cast<LocalStoreStmt>(s);
      auto it = tangentLocal_.find(st.local());
      if (it == tangentLocal_.end())
        return absl::OkStatus();
      Value *t = tangent(st.value());
      b.store(it->second, t ? t : b.constFloat(st.value()->type().element(), 0));
      return absl::OkStatus();
    }
    case StmtKind::LocalLoad: {
      auto it = tangentLocal_.find(cast<LocalLoadStmt>(s).local());
      if (it != tangentLocal_.end())
        tangents_[&s] = b.load(it->second);
      return absl::OkStatus();
    }
    case StmtKind::GlobalLoad: {
      auto &ld = cast<GlobalLoadStmt>(s);
      if (!activity_.isVaried(&s))
        return absl::OkStatus();
      GlobalRef ref = ld.ref();
      ref.component = Component::Dual;
      tangents_[&s] = b.load(ref, ld.indices());
      return absl::OkStatus();
    }
    case StmtKind::GlobalStore:
    case StmtKind::AtomicAdd: {
      auto &g = cast<GlobalAccessStmt>(s);
      Value *v = s.operand(s.numOperands() - 1);
      if (!isFloatValue(v) || !hasDerivativeCompanion(g, ActivityMode::Forward) ||
          g.component() != Component::Primal)
        return absl::OkStatus();
      Value *t = tangent(v);
      if (!t)
        t = b.constFloat(v->type().element(), 0);
      GlobalRef ref = g.ref();
      ref.component = Component::Dual;
      if (s.kind() == StmtKind::GlobalStore)
        b.store(ref, g.indices(), t);
      else
        b.atomicAdd(ref, g.indices(), t);
      return absl::OkStatus();
    }
    default:
      break;
    }
    if (!activity_.isVaried(&s) || !ad::hasDerivativeRule(s))
      return absl::OkStatus();
    if (!ad::isDifferentiable(s)) {
      // Like reverse mode, only an error when the tangent reaches an output
      // (not, e.g., under a float -> int cast).
      if (!activity_.isUseful(&s))
        return absl::OkStatus();
      return error(s, ad::notDifferentiableMessage(s, "tangent"));
    }
    if (Value *r = ad::forwardTangent(s, b, [&](const Value *v) { return tangent(v); }))
      tangents_[&s] = r;
    return absl::OkStatus();
  }

  Kernel &k_;
  Activity activity_;
  std::unordered_map<const Value *, Value *> tangents_;
  std::unordered_map<const Value *, AllocaStmt *> tangentLocal_;
};

} // namespace

absl::StatusOr<Kernel *> buildDualKernel(Module &module, const Kernel &kernel,
                                         std::string dualName) {
  if (dualName.empty())
    dualName = kernel.name() + "_dual";
  if (module.findKernel(dualName))
    return absl::AlreadyExistsError(fmt::format(
        "forward-ad: the module already has a kernel named '@{}'; remove it or pick another name",
        dualName));
  std::unique_ptr<Kernel> dual = cloneKernel(kernel, dualName);
  if (absl::Status s = DualBuilder(*dual).run(); !s.ok())
    return s;
  return module.addKernel(std::move(dual));
}

} // namespace qd
