//===- Verifier.cpp - IR well-formedness checks ---------------------------===//
#include "qd/ir/Verifier.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <cctype>
#include <optional>
#include <unordered_map>
#include <vector>

namespace qd {
namespace {

std::string describeType(const Value *v) {
  return v ? v->type().str() : "nothing";
}

/// The mnemonic a statement prints with, for messages.
std::string opName(const Stmt &s) {
  if (auto *b = dyn_cast<BinaryStmt>(&s))
    return std::string(toString(b->op()));
  if (auto *u = dyn_cast<UnaryStmt>(&s))
    return std::string(toString(u->op()));
  if (auto *f = dyn_cast<ForStmt>(&s))
    return f->isParallel() ? "parallel for" : "for";
  return std::string(mnemonic(s.kind()));
}

/// Names the text format can spell after `@`: letters, digits, '_' and '.'
/// (field names exclude '.', which separates the grad/dual suffix).
bool isGlobalName(std::string_view name, bool allowDot) {
  if (name.empty())
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && !(allowDot && c == '.'))
      return false;
  return true;
}

bool isLaunchTimeScalar(const Stmt &s) {
  return isRecomputable(s);
}

/// Exhaustive: a new statement kind does not compile until it has a hook here
/// (an empty one says "nothing beyond operand visibility to check").
class KernelVerifier : public ExhaustiveStmtVisitor<KernelVerifier> {
public:
  KernelVerifier(const Kernel &kernel, std::vector<std::string> &errors)
      : kernel_(kernel), errors_(errors) {
    // Sized once: growing the map rehashed every statement of a huge kernel
    // again at each doubling.
    size_t statements = 0;
    walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &) { ++statements; });
    spans_.reserve(statements);
    number(const_cast<Kernel &>(kernel).body());
  }

  void run() {
    if (!isGlobalName(kernel_.name(), /*allowDot=*/true))
      error(fmt::format("kernel name '@{}' is not a valid name; use letters, digits, '_' and '.'",
                        kernel_.name()),
            kernel_.loc());
    for (unsigned i = 0; i < kernel_.numArguments(); ++i)
      checkArgument(kernel_.argument(i));
    for (Stmt &s : const_cast<Block &>(kernel_.body())) {
      current_ = &s;
      if (!s.isTask() && !isLaunchTimeScalar(s))
        error(fmt::format("'{}' cannot appear at the kernel's top level, which holds only tasks "
                          "('parallel for', 'serial') and launch-time scalar statements; move "
                          "it into a task",
                          opName(s)));
      checkStmt(s);
    }
  }

  // --- per statement -------------------------------------------------------
  void checkStmt(Stmt &s) {
    current_ = &s;
    for (unsigned i = 0; i < s.numOperands(); ++i)
      checkOperandVisible(s, i);
    if (s.isTask() && s.parentStmt())
      error(fmt::format("'{}' is a task and must be at the kernel's top level; {}", opName(s),
                        s.kind() == StmtKind::Serial
                            ? "inside a task, write its statements directly"
                            : "use 'for' inside a task"));
    visit(s);
    for (unsigned b = 0; b < s.numBlocks(); ++b)
      for (Stmt &child : s.block(b))
        checkStmt(child);
  }

  void checkOperandVisible(Stmt &user, unsigned i) {
    Value *v = user.operand(i);
    if (!v) {
      // Null operands are legal only for literal loop bounds.
      if (!isa<ForStmt>(&user))
        error(fmt::format("operand {} of '{}' is missing", i, opName(user)));
      return;
    }
    if (auto *arg = dyn_cast<Argument>(v)) {
      if (arg->kernel() != &kernel_)
        error(fmt::format("'{}' uses argument %{} of another kernel", opName(user), arg->name()));
      return;
    }
    auto *def = dyn_cast<Stmt>(v);
    if (!def) {
      error(fmt::format("'{}' uses an unresolved value", opName(user)));
      return;
    }
    if (def->type().isVoid()) {
      error(fmt::format("'{}' uses a statement without a result ('{}') as operand {}", opName(user),
                        opName(*def), i));
      return;
    }
    auto defAt = spans_.find(def);
    if (defAt == spans_.end()) {
      // This kernel's namer does not know the value: describe it by its own name.
      std::string name = def->name().empty() ? "an unnamed value" : "%" + def->name();
      Kernel *owner = def->kernel();
      error(fmt::format("'{}' uses {} ('{}'), which is not part of kernel @{}; {}", opName(user),
                        name, mnemonic(def->kind()), kernel_.name(),
                        owner ? fmt::format("it belongs to kernel @{}", owner->name())
                              : std::string("it is not inserted in any kernel")));
      return;
    }
    size_t at = spans_.at(&user).begin;
    if (auto *loop = dyn_cast<ForStmt>(def)) {
      if (!blockSpans_.at(&loop->body()).contains(at))
        error(fmt::format("loop index {} (of the loop at {}) is used outside its loop", names()[v],
                          loop->loc().str()));
      return;
    }
    // Some statement of the definition's block contains the use, and comes
    // after the definition (the use is after all of the definition).
    if (!blockSpans_.at(def->parent()).contains(at)) {
      error(fmt::format("{} is not visible here: it is defined at {} inside a block that does "
                        "not enclose this use",
                        names()[v], def->loc().str()));
      return;
    }
    if (at < defAt->second.end)
      error(fmt::format("{} is used before its definition at {}", names()[v], def->loc().str()));
  }

  // --- visitor hooks -------------------------------------------------------

  void visitConstStmt(ConstStmt &s) {
    if (!s.type().isScalar())
      return error("'const' must have a scalar type");
    if (s.scalarType() == ScalarType::I1 && s.intValue() != 0 && s.intValue() != 1)
      error(fmt::format("i1 constant must be 0 or 1, got {}", s.intValue()));
    if (s.scalarType() == ScalarType::I32 && static_cast<int32_t>(s.intValue()) != s.intValue())
      error(fmt::format("constant {} does not fit in i32", s.intValue()));
  }

  void visitBinaryStmt(BinaryStmt &s) {
    if (!requireScalarResult(s))
      return;
    ScalarType t = s.type().element();
    if (isBitwise(s.op()) && isFloat(t))
      error(fmt::format("'{}' is not defined on {}; it needs an integer or i1 type",
                        toString(s.op()), toString(t)));
    if (isFloatOnly(s.op()) && !isFloat(t))
      error(fmt::format("'{}' needs a float type (f32 or f64), got {}", toString(s.op()),
                        toString(t)));
    expectType(s, s.lhs(), s.type(), "the result type");
    expectType(s, s.rhs(), s.type(), "the result type");
  }

  void visitUnaryStmt(UnaryStmt &s) {
    if (!requireScalarResult(s))
      return;
    ScalarType t = s.type().element();
    if (isFloatOnly(s.op()) && !isFloat(t))
      error(fmt::format("'{}' needs a float type (f32 or f64), got {}", toString(s.op()),
                        toString(t)));
    if (s.op() == UnaryOp::Not && isFloat(t))
      error(fmt::format("'not' is not defined on {}; it needs an integer or i1 type", toString(t)));
    if ((s.op() == UnaryOp::Neg || s.op() == UnaryOp::Abs) && t == ScalarType::I1)
      error(fmt::format("'{}' is not defined on i1", toString(s.op())));
    expectType(s, s.input(), s.type(), "the result type");
  }

  void visitCmpStmt(CmpStmt &s) {
    Type t = Type::scalar(s.operandType());
    expectType(s, s.lhs(), t, "the compared type");
    expectType(s, s.rhs(), t, "the compared type");
  }

  void visitSelectStmt(SelectStmt &s) {
    if (!requireScalarResult(s))
      return;
    expectType(s, s.cond(), Type::i1(), "the condition type");
    expectType(s, s.trueValue(), s.type(), "the result type");
    expectType(s, s.falseValue(), s.type(), "the result type");
  }

  void visitCastStmt(CastStmt &s) {
    expectType(s, s.input(), Type::scalar(s.from()), "the source type");
  }

  void visitLocalLoadStmt(LocalLoadStmt &s) {
    if (!requireScalarResult(s))
      return;
    if (!requireKind(s, s.local(), Type::Kind::Local, "a local (from 'alloca')"))
      return;
    if (s.local()->type().element() != s.type().element())
      error(fmt::format("'load' of {} (a local<{}>) must have type {}, not {}", names()[s.local()],
                        toString(s.local()->type().element()),
                        toString(s.local()->type().element()), s.type().str()));
  }

  void visitLocalStoreStmt(LocalStoreStmt &s) {
    if (!requireKind(s, s.local(), Type::Kind::Local, "a local (from 'alloca')"))
      return;
    expectType(s, s.value(), Type::scalar(s.local()->type().element()), "the local's element type");
  }

  void visitAllocaStmt(AllocaStmt &) {}
  void visitGlobalLoadStmt(GlobalLoadStmt &s) { checkGlobalAccess(s); }
  void visitGlobalStoreStmt(GlobalStoreStmt &s) { checkGlobalAccess(s); }
  void visitAtomicAddStmt(AtomicAddStmt &s) { visitAtomicRmwStmt(s); }
  void visitAtomicMaxStmt(AtomicMaxStmt &s) { visitAtomicRmwStmt(s); }
  void visitAtomicRmwStmt(AtomicRmwStmt &s) { checkGlobalAccess(s); }

  void checkGlobalAccess(GlobalAccessStmt &s) {
    std::string target;
    unsigned ndim;
    if (s.isField()) {
      Field *f = s.field();
      target = "@" + f->name();
      ndim = f->ndim();
      if (!f->hasComponent(s.component()))
        error(fmt::format("field '{}' has no {} companion; declare it as 'field {} : ... {}'",
                          target, toString(s.component()), target, toString(s.component())));
    } else {
      Value *a = s.ndarray();
      target = names()[a];
      if (!requireKind(s, a, Type::Kind::Ndarray, "an ndarray argument"))
        return;
      ndim = a->type().ndim();
      auto *arg = dyn_cast<Argument>(a);
      if (arg && !arg->hasComponent(s.component()))
        error(fmt::format("ndarray argument {} has no {} companion; declare it with '{}'", target,
                          toString(s.component()), toString(s.component())));
    }
    if (s.numIndices() != ndim)
      error(fmt::format("'{}' has {} dimension{} but {} ind{} given", target, ndim,
                        ndim == 1 ? "" : "s", s.numIndices(),
                        s.numIndices() == 1 ? "ex was" : "ices were"));
    for (unsigned i = 0; i < s.numIndices(); ++i) {
      Value *idx = s.index(i);
      if (idx && !(idx->type().isScalar(ScalarType::I32) || idx->type().isScalar(ScalarType::I64)))
        error(fmt::format("index {} of '{}' has type {}; indices must be i32 or i64", names()[idx],
                          target, describeType(idx)));
    }
    Type elem = Type::scalar(s.elementType());
    if (auto *load = dyn_cast<GlobalLoadStmt>(&s)) {
      if (load->type() != elem)
        error(fmt::format("'load' of '{}' must have type {} (its element type), not {}", target,
                          elem.str(), load->type().str()));
    } else if (auto *store = dyn_cast<GlobalStoreStmt>(&s)) {
      expectType(s, store->value(), elem, "the element type of '" + target + "'");
    } else if (auto *rmw = dyn_cast<AtomicRmwStmt>(&s)) {
      std::string_view op = mnemonic(s.kind());
      if (Type::scalar(rmw->valueType()) != elem)
        error(fmt::format("'{}' on '{}' must have type {} (its element type), not {}", op, target,
                          elem.str(), toString(rmw->valueType())));
      else if (elem.element() == ScalarType::I1)
        error(fmt::format("'{}' is not defined on i1 ('{}')", op, target));
      else if (domainOf(rmw->op()) == OpDomain::Integer && isFloat(elem.element()))
        error(fmt::format("'{}' is defined on i32 and i64 elements, not on {} ('{}'); "
                          "keep the result in an integer field",
                          op, elem.str(), target));
      else if (domainOf(rmw->op()) == OpDomain::Float && !isFloat(elem.element()))
        error(fmt::format("'{}' is defined on f32 and f64 elements, not on {} ('{}'); "
                          "keep the result in a float field",
                          op, elem.str(), target));
      expectType(s, rmw->value(), elem, "the element type of '" + target + "'");
    }
  }

  void visitShapeStmt(ShapeStmt &s) {
    if (!requireKind(s, s.ndarray(), Type::Kind::Ndarray, "an ndarray argument"))
      return;
    unsigned ndim = s.ndarray()->type().ndim();
    if (s.axis() >= ndim)
      error(fmt::format("'shape' axis {} is out of range for {} with {} dimension{}", s.axis(),
                        names()[s.ndarray()], ndim, ndim == 1 ? "" : "s"));
    if (!(s.type().isScalar(ScalarType::I32) || s.type().isScalar(ScalarType::I64)))
      error(fmt::format("'shape' must have type i32 or i64, not {}", s.type().str()));
  }

  void visitForStmt(ForStmt &s) {
    if (s.numDims() > ForStmt::kMaxDims)
      error(fmt::format("a parallel for has at most {} dimensions, this one has {}",
                        ForStmt::kMaxDims, s.numDims()));
    for (unsigned d = 0; d < s.numDims(); ++d) {
      for (Value *b : {s.beginValue(d), s.endValue(d)})
        if (b && !b->type().isScalar(ScalarType::I32))
          error(fmt::format("loop bound {} has type {}; loop bounds must be i32 (cast it)",
                            names()[b], describeType(b)));
      for (Bound b : {s.begin(d), s.end(d)})
        if (b.isConstant() && static_cast<int32_t>(b.constant) != b.constant)
          error(fmt::format("loop bound {} does not fit in i32", b.constant));
    }
  }

  void visitTaskIndexStmt(TaskIndexStmt &s) {
    const ForStmt *task = enclosingParallelTask(s);
    if (!task)
      error("'task_index' must be inside a parallel for (it names one of the task's indices)");
    else if (s.dim() >= task->numDims())
      error(fmt::format("'task_index {}' is out of range: its parallel for has {} dimension{}",
                        s.dim(), task->numDims(), task->numDims() == 1 ? "" : "s"));
  }

  void visitSerialStmt(SerialStmt &) {}
  void visitWhileStmt(WhileStmt &) {}
  void visitIfStmt(IfStmt &s) { expectType(s, s.cond(), Type::i1(), "the condition type"); }

  void visitBreakStmt(BreakStmt &s) { checkLoopExit(s); }
  void visitContinueStmt(ContinueStmt &s) { checkLoopExit(s); }

  void visitAdStackAllocaStmt(AdStackAllocaStmt &s) {
    if (s.capacity() < 0)
      error(fmt::format("adstack capacity must be non-negative, got {}", s.capacity()));
    if (Value *v = s.capacityArgument()) {
      auto *arg = dyn_cast<Argument>(v);
      if (!arg || arg->isNdarray() || !isInteger(arg->type().element()))
        error(fmt::format("'adstack.alloca' capacity {} must be an integer scalar argument of the "
                          "kernel (a value known at launch), not {} of type {}",
                          names()[v], arg ? "an argument" : "a statement", v->type().str()));
      else if (s.capacity() != 0)
        error("'adstack.alloca' with a capacity argument has no static capacity");
    }
  }

  void visitAdStackPushStmt(AdStackPushStmt &s) { checkAdStackOp(s); }
  void visitAdStackPopStmt(AdStackPopStmt &s) { checkAdStackOp(s); }
  void visitAdStackLoadTopStmt(AdStackLoadTopStmt &s) { checkAdStackOp(s); }
  void visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &s) { checkAdStackOp(s); }
  void visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &s) { checkAdStackOp(s); }

  void checkAdStackOp(AdStackOpStmt &s) {
    if (!requireKind(s, s.stack(), Type::Kind::AdStack, "an adstack (from 'adstack.alloca')"))
      return;
    ScalarType elem = s.stack()->type().element();
    bool adjoint =
        s.kind() == StmtKind::AdStackLoadTopAdj || s.kind() == StmtKind::AdStackAccAdjoint;
    if (adjoint && !isFloat(elem))
      error(fmt::format("'{}' needs a float adstack, but {} holds {} (integer adstacks carry no "
                        "adjoint)",
                        opName(s), names()[s.stack()], toString(elem)));
    Type elemType = Type::scalar(elem);
    if (auto *push = dyn_cast<AdStackPushStmt>(&s))
      expectType(s, push->value(), elemType, "the adstack's element type");
    else if (auto *acc = dyn_cast<AdStackAccAdjointStmt>(&s))
      expectType(s, acc->value(), elemType, "the adstack's element type");
    else if (!s.type().isVoid() && s.type() != elemType)
      error(fmt::format("'{}' of {} must have type {}, not {}", opName(s), names()[s.stack()],
                        toString(elem), s.type().str()));
  }

private:
  void checkArgument(const Argument *a) {
    Type t = a->type();
    if (!t.isScalar() && !t.isNdarray())
      error(fmt::format("argument %{} has type {}; arguments are scalars or ndarrays", a->name(),
                        t.str()),
            a->loc());
    if (t.isNdarray() && (t.ndim() < 1 || t.ndim() > 8))
      error(fmt::format("ndarray argument %{} has rank {}; the rank must be between 1 and 8",
                        a->name(), t.ndim()),
            a->loc());
    if ((a->hasGrad() || a->hasDual()) && !(a->isNdarray() && isFloat(a->type().element())))
      error(fmt::format("argument %{} of type {} cannot have grad/dual companions; only float "
                        "ndarrays can",
                        a->name(), a->type().str()),
            a->loc());
  }

  void checkLoopExit(Stmt &s) {
    if (&s.parent()->back() != &s)
      error(fmt::format("'{}' must be the last statement of its block", opName(s)));
    Stmt *loop = jumpTarget(s);
    if (!loop) {
      error(fmt::format("'{}' must be inside a 'for' or 'while' loop", opName(s)));
      return;
    }
    if (auto *f = dyn_cast<ForStmt>(loop); f && f->isParallel() && s.kind() == StmtKind::Break)
      error("'break' cannot leave a 'parallel for' (its iterations run independently); "
            "use 'continue' to end an iteration early");
  }

  bool requireScalarResult(Stmt &s) {
    if (s.type().isScalar())
      return true;
    error(fmt::format("'{}' must have a scalar result type, not {}", opName(s), s.type().str()));
    return false;
  }

  bool requireKind(Stmt &s, Value *v, Type::Kind kind, std::string_view what) {
    if (!v)
      return false;
    if (v->type().kind() == kind)
      return true;
    error(fmt::format("'{}' needs {}, but {} has type {}", opName(s), what, names()[v],
                      describeType(v)));
    return false;
  }

  void expectType(Stmt &s, Value *v, Type expected, std::string_view what) {
    if (!v || v->type() == expected)
      return;
    error(fmt::format("'{}' operand {} has type {}, expected {} ({})", opName(s), names()[v],
                      describeType(v), expected.str(), what));
  }

  void error(std::string message) {
    error(std::move(message), current_ ? current_->loc() : kernel_.loc());
  }
  void error(std::string message, const Location &loc) {
    std::string line = loc.isKnown()
                           ? fmt::format("{}: error: {}", loc.str(), message)
                           : fmt::format("kernel @{}: error: {}", kernel_.name(), message);
    // `add %a, %a` with a bad %a: say it once.
    if (errors_.empty() || errors_.back() != line)
      errors_.push_back(std::move(line));
  }

  const Kernel &kernel_;
  /// Names for messages, made at the first error (naming every value of a
  /// large kernel costs more than checking it).
  const ValueNamer &names() {
    if (!names_)
      names_.emplace(kernel_);
    return *names_;
  }
  std::optional<ValueNamer> names_;
  std::vector<std::string> &errors_;
  /// Pre-order positions [begin, end) of a statement with all it holds, or
  /// of a block's statements. Visibility compares them: walking up from
  /// every use to the definition's block (and to the kernel) cost a nest
  /// of depth D a walk of up to D per operand.
  struct Span {
    size_t begin = 0, end = 0;
    bool contains(size_t at) const { return at >= begin && at < end; }
  };
  void number(Block &block) {
    Span &b = blockSpans_[&block];
    b.begin = next_;
    for (Stmt &s : block) {
      size_t at = next_++;
      for (unsigned i = 0; i < s.numBlocks(); ++i)
        number(s.block(i));
      spans_[&s] = {at, next_};
    }
    b.end = next_; // (elements of an unordered_map stay where they are)
  }
  std::unordered_map<const Stmt *, Span> spans_;
  std::unordered_map<const Block *, Span> blockSpans_;
  size_t next_ = 0;
  Stmt *current_ = nullptr;
};

absl::Status toStatus(const std::vector<std::string> &errors) {
  if (errors.empty())
    return absl::OkStatus();
  std::string message;
  for (const std::string &e : errors) {
    if (!message.empty())
      message += '\n';
    message += e;
  }
  return absl::InvalidArgumentError(message);
}

} // namespace

const Stmt *firstStmtNestedBeyond(const Kernel &kernel, unsigned limit) {
  // Depth-first over blocks with an explicit stack: (block, depth).
  std::vector<std::pair<Block *, unsigned>> work{{&const_cast<Kernel &>(kernel).body(), 0}};
  while (!work.empty()) {
    auto [block, depth] = work.back();
    work.pop_back();
    for (Stmt &s : *block) {
      if (s.numBlocks() == 0)
        continue;
      if (depth + 1 > limit)
        return &s;
      for (unsigned i = 0; i < s.numBlocks(); ++i)
        work.emplace_back(&s.block(i), depth + 1);
    }
  }
  return nullptr;
}

namespace {

/// Verifies `kernel` into `errors`; a kernel nested too deeply gets one
/// error and no further checks (they recurse over blocks).
void verifyKernel(const Kernel &kernel, std::vector<std::string> &errors) {
  if (const Stmt *deep = firstStmtNestedBeyond(kernel, kMaxBlockNesting)) {
    errors.push_back(
        fmt::format("{}: error: kernel '@{}' nests blocks more than {} deep (the limit of qd's IR, "
                    "kMaxBlockNesting); flatten the nesting or split the kernel",
                    deep->loc().isKnown() ? deep->loc().str() : "kernel @" + kernel.name(),
                    kernel.name(), kMaxBlockNesting));
    return;
  }
  KernelVerifier(kernel, errors).run();
}

} // namespace

absl::Status verify(const Kernel &kernel) {
  std::vector<std::string> errors;
  verifyKernel(kernel, errors);
  return toStatus(errors);
}

absl::Status verify(const Module &module) {
  std::vector<std::string> errors;
  for (const auto &f : module.fields()) {
    std::string where = f->loc().isKnown() ? f->loc().str() : "field @" + f->name();
    if ((f->hasGrad() || f->hasDual()) && !isFloat(f->elementType()))
      errors.push_back(fmt::format("{}: error: field '@{}' of type {} cannot have grad/dual "
                                   "companions; only float fields can",
                                   where, f->name(), toString(f->elementType())));
    for (int64_t extent : f->shape())
      if (extent < 1)
        errors.push_back(fmt::format("{}: error: field '@{}' has extent {}; extents must be "
                                     "positive",
                                     where, f->name(), extent));
    if (!isGlobalName(f->name(), /*allowDot=*/false))
      errors.push_back(fmt::format("{}: error: field name '@{}' is not a valid name; use "
                                   "letters, digits and '_'",
                                   where, f->name()));
    if (module.findField(f->name()) != f.get())
      errors.push_back(fmt::format("{}: error: redefinition of field '@{}'", where, f->name()));
  }
  for (const auto &k : module.kernels())
    if (module.findKernel(k->name()) != k.get())
      errors.push_back(fmt::format("{}: error: redefinition of kernel '@{}'",
                                   k->loc().isKnown() ? k->loc().str() : "kernel @" + k->name(),
                                   k->name()));
  for (const auto &k : module.kernels())
    verifyKernel(*k, errors);
  return toStatus(errors);
}

} // namespace qd
