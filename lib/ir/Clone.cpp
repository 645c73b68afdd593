//===- Clone.cpp - Deep copies and structural equality --------------------===//
#include "qd/ir/Clone.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <bit>
#include <functional>
#include <vector>

namespace qd {
namespace {

using FieldMap = std::unordered_map<const Field *, Field *>;

/// f32 becomes f64 (cloneModuleWidenedToF64); every other type stays.
ScalarType widenedType(ScalarType e) {
  return e == ScalarType::F32 ? ScalarType::F64 : e;
}
Type widenedType(Type ty) {
  switch (ty.kind()) {
  case Type::Kind::Void:
    return ty;
  case Type::Kind::Scalar:
    return Type::scalar(widenedType(ty.element()));
  case Type::Kind::Local:
    return Type::local(widenedType(ty.element()));
  case Type::Kind::AdStack:
    return Type::adstack(widenedType(ty.element()));
  case Type::Kind::Ndarray:
    return Type::ndarray(widenedType(ty.element()), ty.ndim());
  }
  return ty;
}

/// Exhaustive: a new statement kind does not compile until it clones.
class Cloner : public ExhaustiveStmtVisitor<Cloner, std::unique_ptr<Stmt>> {
public:
  Cloner(ValueMap &map, const FieldMap *fields, bool widen = false)
      : map_(map), fields_(fields), widen_(widen) {}

  std::unique_ptr<Stmt> clone(const Stmt &s) {
    std::unique_ptr<Stmt> c = visit(const_cast<Stmt &>(s));
    c->setName(s.name());
    c->setLoc(s.loc());
    map_[&s] = c.get();
    for (unsigned i = 0; i < s.numBlocks(); ++i)
      cloneInto(s.block(i), c->block(i));
    return c;
  }

  void cloneInto(const Block &from, Block &to) {
    for (Stmt &s : const_cast<Block &>(from))
      to.push_back(clone(s));
  }

  std::unique_ptr<Stmt> visitConstStmt(ConstStmt &s) {
    return isInteger(s.scalarType())
               ? std::unique_ptr<Stmt>(ConstStmt::getInt(s.scalarType(), s.intValue()))
               : std::unique_ptr<Stmt>(ConstStmt::getFloat(t(s.scalarType()), s.floatValue()));
  }
  std::unique_ptr<Stmt> visitBinaryStmt(BinaryStmt &s) {
    return std::make_unique<BinaryStmt>(s.op(), m(s.lhs()), m(s.rhs()), t(s.type()));
  }
  std::unique_ptr<Stmt> visitUnaryStmt(UnaryStmt &s) {
    return std::make_unique<UnaryStmt>(s.op(), m(s.input()), t(s.type()));
  }
  std::unique_ptr<Stmt> visitCmpStmt(CmpStmt &s) {
    return std::make_unique<CmpStmt>(s.predicate(), m(s.lhs()), m(s.rhs()), t(s.operandType()));
  }
  std::unique_ptr<Stmt> visitSelectStmt(SelectStmt &s) {
    return std::make_unique<SelectStmt>(m(s.cond()), m(s.trueValue()), m(s.falseValue()),
                                        t(s.type()));
  }
  std::unique_ptr<Stmt> visitCastStmt(CastStmt &s) {
    return std::make_unique<CastStmt>(m(s.input()), t(s.from()), t(s.to()));
  }
  std::unique_ptr<Stmt> visitAllocaStmt(AllocaStmt &s) {
    return std::make_unique<AllocaStmt>(t(s.elementType()));
  }
  std::unique_ptr<Stmt> visitLocalLoadStmt(LocalLoadStmt &s) {
    return std::make_unique<LocalLoadStmt>(m(s.local()), t(s.type()));
  }
  std::unique_ptr<Stmt> visitLocalStoreStmt(LocalStoreStmt &s) {
    return std::make_unique<LocalStoreStmt>(m(s.local()), m(s.value()));
  }
  std::unique_ptr<Stmt> visitGlobalLoadStmt(GlobalLoadStmt &s) {
    auto idx = indices(s);
    return std::make_unique<GlobalLoadStmt>(ref(s), idx, t(s.type()));
  }
  std::unique_ptr<Stmt> visitGlobalStoreStmt(GlobalStoreStmt &s) {
    auto idx = indices(s);
    return std::make_unique<GlobalStoreStmt>(ref(s), idx, m(s.value()));
  }
  std::unique_ptr<Stmt> visitAtomicAddStmt(AtomicAddStmt &s) {
    auto idx = indices(s);
    return std::make_unique<AtomicAddStmt>(ref(s), idx, m(s.value()), t(s.valueType()));
  }
  std::unique_ptr<Stmt> visitAtomicMaxStmt(AtomicMaxStmt &s) {
    auto idx = indices(s);
    return std::make_unique<AtomicMaxStmt>(ref(s), idx, m(s.value()), t(s.valueType()));
  }
  std::unique_ptr<Stmt> visitShapeStmt(ShapeStmt &s) {
    return std::make_unique<ShapeStmt>(m(s.ndarray()), s.axis(), s.type());
  }
  std::unique_ptr<Stmt> visitForStmt(ForStmt &s) {
    if (s.numDims() == 1)
      return std::make_unique<ForStmt>(bound(s.begin()), bound(s.end()), s.isParallel());
    std::vector<Bound> begins, ends;
    for (unsigned d = 0; d < s.numDims(); ++d) {
      begins.push_back(bound(s.begin(d)));
      ends.push_back(bound(s.end(d)));
    }
    return std::make_unique<ForStmt>(begins, ends);
  }
  std::unique_ptr<Stmt> visitTaskIndexStmt(TaskIndexStmt &s) {
    return std::make_unique<TaskIndexStmt>(s.dim());
  }
  std::unique_ptr<Stmt> visitSerialStmt(SerialStmt &) { return std::make_unique<SerialStmt>(); }
  std::unique_ptr<Stmt> visitWhileStmt(WhileStmt &) { return std::make_unique<WhileStmt>(); }
  std::unique_ptr<Stmt> visitBreakStmt(BreakStmt &) { return std::make_unique<BreakStmt>(); }
  std::unique_ptr<Stmt> visitContinueStmt(ContinueStmt &) {
    return std::make_unique<ContinueStmt>();
  }
  std::unique_ptr<Stmt> visitIfStmt(IfStmt &s) { return std::make_unique<IfStmt>(m(s.cond())); }
  std::unique_ptr<Stmt> visitAdStackAllocaStmt(AdStackAllocaStmt &s) {
    if (Value *arg = s.capacityArgument())
      return std::make_unique<AdStackAllocaStmt>(t(s.elementType()), m(arg));
    return std::make_unique<AdStackAllocaStmt>(t(s.elementType()), s.capacity());
  }
  std::unique_ptr<Stmt> visitAdStackPushStmt(AdStackPushStmt &s) {
    return std::make_unique<AdStackPushStmt>(m(s.stack()), m(s.value()));
  }
  std::unique_ptr<Stmt> visitAdStackPopStmt(AdStackPopStmt &s) {
    return std::make_unique<AdStackPopStmt>(m(s.stack()));
  }
  std::unique_ptr<Stmt> visitAdStackLoadTopStmt(AdStackLoadTopStmt &s) {
    return std::make_unique<AdStackLoadTopStmt>(m(s.stack()), t(s.type()));
  }
  std::unique_ptr<Stmt> visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &s) {
    return std::make_unique<AdStackLoadTopAdjStmt>(m(s.stack()), t(s.type()));
  }
  std::unique_ptr<Stmt> visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &s) {
    return std::make_unique<AdStackAccAdjointStmt>(m(s.stack()), m(s.value()));
  }

private:
  /// The type of the copy: f32 becomes f64 when widening.
  ScalarType t(ScalarType e) const { return widen_ ? widenedType(e) : e; }
  Type t(Type ty) const { return widen_ ? widenedType(ty) : ty; }
  Value *m(Value *v) const {
    if (!v)
      return nullptr;
    auto it = map_.find(v);
    return it == map_.end() ? v : it->second;
  }
  Bound bound(Bound b) const { return b.value ? Bound(m(b.value)) : b; }
  std::vector<Value *> indices(const GlobalAccessStmt &s) const {
    std::vector<Value *> out;
    for (unsigned i = 0; i < s.numIndices(); ++i)
      out.push_back(m(s.index(i)));
    return out;
  }
  GlobalRef ref(const GlobalAccessStmt &s) const {
    if (!s.isField())
      return GlobalRef::ofNdarray(m(s.ndarray()), s.component());
    Field *f = s.field();
    if (fields_) {
      auto it = fields_->find(f);
      if (it != fields_->end())
        f = it->second;
    }
    return GlobalRef::ofField(f, s.component());
  }

  ValueMap &map_;
  const FieldMap *fields_;
  bool widen_;
};

/// `keep`: the top-level statements to copy (null: all); `map`: where to
/// record the copies (null: a map of its own).
std::unique_ptr<Kernel> cloneKernelImpl(const Kernel &kernel, std::string newName,
                                        const FieldMap *fields, bool widen = false,
                                        const std::function<bool(const Stmt &)> *keep = nullptr,
                                        ValueMap *mapOut = nullptr) {
  auto k = std::make_unique<Kernel>(std::move(newName));
  k->setLoc(kernel.loc());
  ValueMap own;
  ValueMap &map = mapOut ? *mapOut : own;
  for (unsigned i = 0; i < kernel.numArguments(); ++i) {
    const Argument *a = kernel.argument(i);
    Type type = widen ? widenedType(a->type()) : a->type();
    auto copy = std::make_unique<Argument>(a->name(), type, a->hasGrad(), a->hasDual());
    copy->setLoc(a->loc());
    map[a] = k->addArgument(std::move(copy));
  }
  Cloner cloner(map, fields, widen);
  if (!keep)
    cloner.cloneInto(kernel.body(), k->body());
  else
    for (Stmt &s : const_cast<Kernel &>(kernel).body())
      if ((*keep)(s))
        k->body().push_back(cloner.clone(s));
  // A use before its definition (invalid, but cloned faithfully) was cloned
  // before its definition entered the map; point it at the copy too.
  walk(*k, [&](Stmt &s) {
    for (unsigned i = 0; i < s.numOperands(); ++i)
      if (auto it = map.find(s.operand(i)); it != map.end())
        s.setOperand(i, it->second);
  });
  return k;
}

//===----------------------------------------------------------------------===//
// Equivalence
//===----------------------------------------------------------------------===//

/// Compares what a statement holds besides its operands and blocks, with
/// `visit(a)` against `b` of the same kind. Exhaustive: a new statement kind
/// does not compile until equivalence knows its attributes.
class AttributeComparer : public ExhaustiveStmtVisitor<AttributeComparer, bool> {
public:
  explicit AttributeComparer(const Stmt &other) : other_(other) {}

  bool visitConstStmt(ConstStmt &s) { return s.sameValue(o(s)); }
  bool visitBinaryStmt(BinaryStmt &s) { return s.op() == o(s).op(); }
  bool visitUnaryStmt(UnaryStmt &s) { return s.op() == o(s).op(); }
  bool visitCmpStmt(CmpStmt &s) {
    return s.predicate() == o(s).predicate() && s.operandType() == o(s).operandType();
  }
  bool visitSelectStmt(SelectStmt &) { return true; }
  bool visitCastStmt(CastStmt &s) { return s.from() == o(s).from(); }
  bool visitAllocaStmt(AllocaStmt &) { return true; } // the element type is the type
  bool visitLocalLoadStmt(LocalLoadStmt &) { return true; }
  bool visitLocalStoreStmt(LocalStoreStmt &) { return true; }
  bool visitGlobalLoadStmt(GlobalLoadStmt &s) { return sameAccess(s, o(s)); }
  bool visitGlobalStoreStmt(GlobalStoreStmt &s) { return sameAccess(s, o(s)); }
  bool visitAtomicAddStmt(AtomicAddStmt &s) { return visitAtomicRmwStmt(s); }
  bool visitAtomicMaxStmt(AtomicMaxStmt &s) { return visitAtomicRmwStmt(s); }
  bool visitAtomicRmwStmt(AtomicRmwStmt &s) {
    return sameAccess(s, o(s)) && s.valueType() == o(s).valueType();
  }
  bool visitShapeStmt(ShapeStmt &s) { return s.axis() == o(s).axis(); }
  bool visitForStmt(ForStmt &s) {
    if (s.isParallel() != o(s).isParallel() || s.numDims() != o(s).numDims())
      return false;
    for (unsigned d = 0; d < s.numDims(); ++d)
      if (s.beginConstant(d) != o(s).beginConstant(d) || s.endConstant(d) != o(s).endConstant(d))
        return false;
    return true;
  }
  bool visitTaskIndexStmt(TaskIndexStmt &s) { return s.dim() == o(s).dim(); }
  bool visitSerialStmt(SerialStmt &) { return true; }
  bool visitWhileStmt(WhileStmt &) { return true; }
  bool visitBreakStmt(BreakStmt &) { return true; }
  bool visitContinueStmt(ContinueStmt &) { return true; }
  bool visitIfStmt(IfStmt &) { return true; }
  bool visitAdStackAllocaStmt(AdStackAllocaStmt &s) { return s.capacity() == o(s).capacity(); }
  bool visitAdStackPushStmt(AdStackPushStmt &) { return true; }
  bool visitAdStackPopStmt(AdStackPopStmt &) { return true; }
  bool visitAdStackLoadTopStmt(AdStackLoadTopStmt &) { return true; }
  bool visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &) { return true; }
  bool visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &) { return true; }

private:
  /// `other_` as the class of `s` (the caller checked the kinds match).
  template <typename T> const T &o(const T &) const { return cast<T>(other_); }

  static bool sameAccess(const GlobalAccessStmt &a, const GlobalAccessStmt &b) {
    if (a.isField() != b.isField() || a.component() != b.component() ||
        a.numIndices() != b.numIndices())
      return false;
    return !a.isField() || a.field()->name() == b.field()->name();
  }

  const Stmt &other_;
};

bool sameAttributes(const Stmt &a, const Stmt &b) {
  if (a.kind() != b.kind() || a.type() != b.type() || a.numOperands() != b.numOperands() ||
      a.numBlocks() != b.numBlocks())
    return false;
  return AttributeComparer(b).visit(const_cast<Stmt &>(a));
}

class KernelComparer {
public:
  KernelComparer(const Kernel &a, const Kernel &b, std::string *why) : a_(a), b_(b), why_(why) {}

  bool run() {
    if (a_.name() != b_.name())
      return fail(fmt::format("kernel names differ: @{} vs @{}", a_.name(), b_.name()));
    if (a_.numArguments() != b_.numArguments())
      return fail(fmt::format("kernel @{}: argument counts differ", a_.name()));
    for (unsigned i = 0; i < a_.numArguments(); ++i) {
      const Argument *x = a_.argument(i), *y = b_.argument(i);
      if (x->type() != y->type() || x->hasGrad() != y->hasGrad() || x->hasDual() != y->hasDual())
        return fail(fmt::format("kernel @{}: argument {} differs", a_.name(), i));
      map_[x] = y;
    }
    if (!pair(a_.body(), b_.body()))
      return false;
    for (auto [x, y] : stmts_)
      for (unsigned i = 0; i < x->numOperands(); ++i) {
        Value *ox = x->operand(i), *oy = y->operand(i);
        if (!ox || !oy) {
          if (ox != oy)
            return fail(mismatch(*x, "an operand is missing on one side"));
          continue;
        }
        auto it = map_.find(ox);
        const Value *expected = it == map_.end() ? ox : it->second;
        if (expected != oy)
          return fail(mismatch(*x, fmt::format("operand {} refers to different values", i)));
      }
    return true;
  }

private:
  bool pair(const Block &x, const Block &y) {
    if (x.size() != y.size())
      return fail(fmt::format("kernel @{}: a block has {} statements on one side and {} on the "
                              "other",
                              a_.name(), x.size(), y.size()));
    auto ix = const_cast<Block &>(x).begin();
    auto iy = const_cast<Block &>(y).begin();
    for (; ix != const_cast<Block &>(x).end(); ++ix, ++iy) {
      if (!sameAttributes(*ix, *iy))
        return fail(mismatch(*ix, fmt::format("'{}' vs '{}'", header(*ix), header(*iy))));
      map_[&*ix] = &*iy;
      stmts_.emplace_back(&*ix, &*iy);
      for (unsigned i = 0; i < ix->numBlocks(); ++i)
        if (!pair(ix->block(i), iy->block(i)))
          return false;
    }
    return true;
  }

  /// The statement as printed, without nested blocks (`for %i = 0 to %n`).
  static std::string header(const Stmt &s) {
    std::string text = printStmt(s);
    text = text.substr(0, text.find('\n'));
    if (text.ends_with(" {"))
      text.resize(text.size() - 2);
    return text;
  }

  std::string mismatch(const Stmt &s, const std::string &detail) const {
    return fmt::format("kernel @{}: statement at {} differs: {}", a_.name(), s.loc().str(), detail);
  }
  bool fail(std::string message) {
    if (why_)
      *why_ = std::move(message);
    return false;
  }

  const Kernel &a_;
  const Kernel &b_;
  std::string *why_;
  std::unordered_map<const Value *, const Value *> map_;
  std::vector<std::pair<const Stmt *, const Stmt *>> stmts_;
};

} // namespace

std::unique_ptr<Stmt> cloneStmt(const Stmt &stmt, ValueMap &map) {
  return Cloner(map, nullptr).clone(stmt);
}

void cloneBlockInto(const Block &from, Block &to, ValueMap &map) {
  Cloner(map, nullptr).cloneInto(from, to);
}

std::unique_ptr<Kernel> cloneKernel(const Kernel &kernel, std::string newName) {
  return cloneKernelImpl(kernel, std::move(newName), nullptr);
}

std::unique_ptr<Kernel> cloneKernel(const Kernel &kernel, std::string newName,
                                    const std::function<bool(const Stmt &)> &keep, ValueMap &map) {
  return cloneKernelImpl(kernel, std::move(newName), nullptr, false, &keep, &map);
}

namespace {

std::unique_ptr<Module> cloneModuleImpl(const Module &module, bool widen) {
  auto m = std::make_unique<Module>();
  FieldMap fields;
  for (const auto &f : module.fields()) {
    ScalarType elem = widen ? widenedType(f->elementType()) : f->elementType();
    auto copy = std::make_unique<Field>(f->name(), elem, f->shape(), f->hasGrad(), f->hasDual());
    copy->setLoc(f->loc());
    fields[f.get()] = m->addField(std::move(copy));
  }
  for (const auto &k : module.kernels())
    m->addKernel(cloneKernelImpl(*k, k->name(), &fields, widen));
  return m;
}

} // namespace

std::unique_ptr<Module> cloneModule(const Module &module) {
  return cloneModuleImpl(module, /*widen=*/false);
}

std::unique_ptr<Module> cloneModuleWidenedToF64(const Module &module) {
  return cloneModuleImpl(module, /*widen=*/true);
}

bool isEquivalent(const Kernel &a, const Kernel &b, std::string *why) {
  return KernelComparer(a, b, why).run();
}

bool isEquivalent(const Module &a, const Module &b, std::string *why) {
  auto fail = [&](std::string msg) {
    if (why)
      *why = std::move(msg);
    return false;
  };
  if (a.fields().size() != b.fields().size())
    return fail("modules have different numbers of fields");
  for (size_t i = 0; i < a.fields().size(); ++i) {
    const Field &x = *a.fields()[i], &y = *b.fields()[i];
    if (x.name() != y.name() || x.elementType() != y.elementType() || x.shape() != y.shape() ||
        x.hasGrad() != y.hasGrad() || x.hasDual() != y.hasDual())
      return fail(fmt::format("field '@{}' differs", x.name()));
  }
  if (a.kernels().size() != b.kernels().size())
    return fail("modules have different numbers of kernels");
  for (size_t i = 0; i < a.kernels().size(); ++i)
    if (!isEquivalent(*a.kernels()[i], *b.kernels()[i], why))
      return false;
  return true;
}

} // namespace qd
