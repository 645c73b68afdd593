//===- ForwardAD.cpp - Forward-mode automatic differentiation -------------===//
//
// The dual kernel is a copy of the kernel in which every float value that
// depends on a dual companion gets a tangent computed right after it; float
// locals get tangent locals. Stores and atomic adds also write the tangent
// into the destination's dual companion (when it has one).
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

namespace qd {
namespace {

bool hasDual(const GlobalAccessStmt &g) {
  if (g.isField())
    return g.field()->hasDual();
  auto *a = dyn_cast<Argument>(g.ndarray());
  return a && a->hasDual();
}

bool isFloatValue(const Value *v) {
  return v && v->type().isFloatScalar();
}

class DualBuilder {
public:
  explicit DualBuilder(Kernel &k) : k_(k) {}

  absl::Status run() {
    std::vector<Stmt *> stmts;
    walk(k_.body(), [&](Stmt &s) { stmts.push_back(&s); });
    computeVaried(stmts);
    for (Stmt *s : stmts) {
      if (absl::Status st = visit(*s); !st.ok())
        return st;
    }
    return absl::OkStatus();
  }

private:
  /// Which float values depend on a dual companion (varied) and which
  /// flow into a store or atomic add to a global with a dual companion
  /// (useful), as reverse mode's activity analysis does for grad companions.
  void computeVaried(const std::vector<Stmt *> &stmts) {
    bool changed = true;
    auto mark = [&](const Value *v) {
      if (varied_.insert(v).second)
        changed = true;
    };
    auto markUseful = [&](const Value *v) {
      if (v && useful_.insert(v).second)
        changed = true;
    };
    while (changed) {
      changed = false;
      for (Stmt *s : stmts) {
        if (auto *ld = dyn_cast<GlobalLoadStmt>(s)) {
          if (isFloatValue(s) && hasDual(*ld))
            mark(s);
        } else if (auto *st = dyn_cast<LocalStoreStmt>(s)) {
          if (varied_.count(st->value()))
            mark(st->local());
          if (useful_.count(st->local()))
            markUseful(st->value());
        } else if (auto *ll = dyn_cast<LocalLoadStmt>(s)) {
          if (varied_.count(ll->local()) && isFloatValue(s))
            mark(s);
          if (useful_.count(s))
            markUseful(ll->local());
        } else if (auto *g = dyn_cast<GlobalAccessStmt>(s);
                   g && (s->kind() == StmtKind::GlobalStore || s->kind() == StmtKind::AtomicAdd)) {
          Value *v = s->operand(s->numOperands() - 1);
          if (isFloatValue(v) && hasDual(*g) && g->component() == Component::Primal)
            markUseful(v);
        } else if (isFloatValue(s) && (isa<BinaryStmt>(s) || isa<UnaryStmt>(s) ||
                                       isa<SelectStmt>(s) || isa<CastStmt>(s))) {
          if (auto *c = dyn_cast<CastStmt>(s); c && !isFloat(c->from()))
            continue;
          for (unsigned i = isa<SelectStmt>(s) ? 1 : 0; i < s->numOperands(); ++i) {
            if (varied_.count(s->operand(i)))
              mark(s);
            if (useful_.count(s) && isFloatValue(s->operand(i)))
              markUseful(s->operand(i));
          }
        }
      }
    }
  }

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
      if (varied_.count(&s) && isFloat(cast<AllocaStmt>(s).elementType()))
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
      if (!varied_.count(&s))
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
      if (!isFloatValue(v) || !hasDual(g) || g.component() != Component::Primal)
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
    if (!varied_.count(&s))
      return absl::OkStatus();
    ScalarType ty = s.type().element();
    auto c = [&](double x) { return b.constFloat(ty, x); };
    auto t = [&](const Value *v) { return tangent(v); };
    // a + b where either may be null (zero).
    auto plus = [&](Value *x, Value *y) -> Value * {
      if (!x)
        return y;
      if (!y)
        return x;
      return b.add(x, y);
    };
    Value *r = nullptr;
    switch (s.kind()) {
    case StmtKind::Select: {
      auto &sel = cast<SelectStmt>(s);
      Value *tt = t(sel.trueValue()), *tf = t(sel.falseValue());
      r = b.select(sel.cond(), tt ? tt : c(0), tf ? tf : c(0));
      break;
    }
    case StmtKind::Cast: {
      auto &cs = cast<CastStmt>(s);
      if (Value *ta = t(cs.input()))
        r = b.cast(ta, cs.to());
      break;
    }
    case StmtKind::Unary: {
      auto &u = cast<UnaryStmt>(s);
      Value *x = u.input(), *tx = t(x);
      if (!tx)
        break;
      switch (u.op()) {
      case UnaryOp::Neg:
        r = b.neg(tx);
        break;
      case UnaryOp::Abs:
        r = b.select(b.cmp(CmpPredicate::Lt, x, c(0)), b.neg(tx), tx);
        break;
      case UnaryOp::Sin:
        r = b.mul(tx, b.cos(x));
        break;
      case UnaryOp::Cos:
        r = b.neg(b.mul(tx, b.sin(x)));
        break;
      case UnaryOp::Tan: {
        Value *cx = b.cos(x);
        r = b.div(tx, b.mul(cx, cx));
        break;
      }
      case UnaryOp::Exp:
        r = b.mul(tx, &s);
        break;
      case UnaryOp::Log:
        r = b.div(tx, x);
        break;
      case UnaryOp::Sqrt:
        r = b.div(tx, b.mul(c(2), &s));
        break;
      case UnaryOp::Tanh:
        r = b.mul(tx, b.sub(c(1), b.mul(&s, &s)));
        break;
      default:
        // Like reverse mode, only an error when the tangent reaches an
        // output (not, e.g., under a float -> int cast).
        if (!useful_.count(&s))
          break;
        return error(s, fmt::format("'{}' is not differentiable; cast the value to an integer to "
                                    "stop its tangent explicitly",
                                    toString(u.op())));
      }
      break;
    }
    case StmtKind::Binary: {
      auto &bin = cast<BinaryStmt>(s);
      Value *x = bin.lhs(), *y = bin.rhs(), *tx = t(x), *ty2 = t(y);
      switch (bin.op()) {
      case BinaryOp::Add:
        r = plus(tx, ty2);
        break;
      case BinaryOp::Sub:
        r = ty2 ? (tx ? static_cast<Value *>(b.sub(tx, ty2)) : b.neg(ty2)) : tx;
        break;
      case BinaryOp::Mul:
        r = plus(tx ? b.mul(tx, y) : nullptr, ty2 ? b.mul(x, ty2) : nullptr);
        break;
      case BinaryOp::Div:
        r = plus(tx ? b.div(tx, y) : nullptr,
                 ty2 ? b.neg(b.div(b.mul(x, ty2), b.mul(y, y))) : nullptr);
        break;
      case BinaryOp::Min:
      case BinaryOp::Max: {
        Value *takesX =
            b.cmp(bin.op() == BinaryOp::Min ? CmpPredicate::Le : CmpPredicate::Ge, x, y);
        r = b.select(takesX, tx ? tx : c(0), ty2 ? ty2 : c(0));
        break;
      }
      case BinaryOp::Pow: {
        Value *dx = tx ? b.mul(tx, b.mul(y, b.binary(BinaryOp::Pow, x, b.sub(y, c(1))))) : nullptr;
        Value *dy = nullptr;
        if (ty2) {
          Value *pos = b.cmp(CmpPredicate::Gt, x, c(0));
          Value *safe = b.select(pos, x, c(1));
          Value *d = b.mul(b.binary(BinaryOp::Pow, safe, y), b.unary(UnaryOp::Log, safe));
          dy = b.mul(ty2, b.select(pos, d, c(0)));
        }
        r = plus(dx, dy);
        break;
      }
      case BinaryOp::Atan2: {
        Value *r2 = b.add(b.mul(x, x), b.mul(y, y));
        r = plus(tx ? b.div(b.mul(tx, y), r2) : nullptr,
                 ty2 ? b.neg(b.div(b.mul(x, ty2), r2)) : nullptr);
        break;
      }
      default:
        if (!useful_.count(&s))
          break;
        return error(s, fmt::format("'{}' is not differentiable; compute it from values without "
                                    "a tangent",
                                    toString(bin.op())));
      }
      break;
    }
    default:
      break;
    }
    if (r)
      tangents_[&s] = r;
    return absl::OkStatus();
  }

  Kernel &k_;
  std::unordered_set<const Value *> varied_, useful_;
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
