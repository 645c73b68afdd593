//===- Printer.cpp - Text form of the IR ----------------------------------===//
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

namespace qd {

std::string formatFloat(double value, ScalarType type) {
  if (std::isnan(value))
    return std::signbit(value) ? "-nan" : "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char buf[64];
  std::to_chars_result r = type == ScalarType::F32
                               ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(value))
                               : std::to_chars(buf, buf + sizeof(buf), value);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

namespace {

/// Exhaustive: a new statement kind does not compile until it prints.
class Printer : public ExhaustiveStmtVisitor<Printer> {
public:
  Printer(std::ostream &os, const ValueNamer &names, bool elideBlocks = false)
      : os_(os), names_(names), elideBlocks_(elideBlocks) {}

  void printBlock(const Block &block, unsigned indent) {
    for (Stmt &s : const_cast<Block &>(block)) {
      if (names_.namedInBandHeader(&s))
        continue;
      indent_ = indent;
      os_ << std::string(indent * 2, ' ');
      visit(s);
      os_ << '\n';
    }
  }

  void printBraced(const Block &block) {
    if (elideBlocks_) {
      os_ << "{ ... }";
      return;
    }
    unsigned indent = indent_;
    os_ << "{\n";
    printBlock(block, indent + 1);
    os_ << std::string(indent * 2, ' ') << '}';
    indent_ = indent;
  }

  // --- statements --------------------------------------------------------
  void visitConstStmt(ConstStmt &s) {
    head(s);
    ScalarType t = s.scalarType();
    if (t == ScalarType::I1)
      os_ << (s.intValue() ? "true" : "false");
    else if (isInteger(t))
      os_ << s.intValue();
    else
      os_ << formatFloat(s.floatValue(), t);
    os_ << " : " << toString(t);
  }
  void visitBinaryStmt(BinaryStmt &s) {
    def(s);
    os_ << toString(s.op()) << ' ' << n(s.lhs()) << ", " << n(s.rhs()) << " : " << s.type().str();
  }
  void visitUnaryStmt(UnaryStmt &s) {
    def(s);
    os_ << toString(s.op()) << ' ' << n(s.input()) << " : " << s.type().str();
  }
  void visitCmpStmt(CmpStmt &s) {
    head(s);
    os_ << toString(s.predicate()) << ' ' << n(s.lhs()) << ", " << n(s.rhs()) << " : "
        << toString(s.operandType());
  }
  void visitSelectStmt(SelectStmt &s) {
    head(s);
    os_ << n(s.cond()) << ", " << n(s.trueValue()) << ", " << n(s.falseValue()) << " : "
        << s.type().str();
  }
  void visitCastStmt(CastStmt &s) {
    head(s);
    os_ << n(s.input()) << " : " << toString(s.from()) << " to " << toString(s.to());
  }
  void visitAllocaStmt(AllocaStmt &s) {
    head(s);
    os_ << toString(s.elementType());
  }
  void visitLocalLoadStmt(LocalLoadStmt &s) {
    head(s);
    os_ << n(s.local()) << " : " << s.type().str();
  }
  void visitLocalStoreStmt(LocalStoreStmt &s) {
    head(s);
    os_ << n(s.local()) << ", " << n(s.value());
  }
  void visitGlobalLoadStmt(GlobalLoadStmt &s) {
    head(s);
    access(s);
    os_ << " : " << s.type().str();
  }
  void visitGlobalStoreStmt(GlobalStoreStmt &s) {
    head(s);
    access(s);
    os_ << ", " << n(s.value());
  }
  void visitAtomicAddStmt(AtomicAddStmt &s) { visitAtomicRmwStmt(s); }
  void visitAtomicMaxStmt(AtomicMaxStmt &s) { visitAtomicRmwStmt(s); }
  void visitAtomicRmwStmt(AtomicRmwStmt &s) {
    head(s);
    access(s);
    os_ << ", " << n(s.value()) << " : " << toString(s.valueType());
  }
  void visitShapeStmt(ShapeStmt &s) {
    head(s);
    os_ << n(s.ndarray()) << ", " << s.axis() << " : " << s.type().str();
  }
  void visitForStmt(ForStmt &s) {
    if (s.isParallel())
      os_ << "parallel ";
    head(s);
    if (s.numDims() == 1) {
      os_ << n(&s) << " = ";
      bound(s.begin());
      os_ << " to ";
      bound(s.end());
    } else {
      auto list = [&](auto &&item) {
        os_ << '(';
        for (unsigned d = 0; d < s.numDims(); ++d) {
          os_ << (d ? ", " : "");
          item(d);
        }
        os_ << ')';
      };
      list([&](unsigned d) { os_ << (d ? names_.bandIndex(s, d) : n(&s)); });
      os_ << " = ";
      list([&](unsigned d) { bound(s.begin(d)); });
      os_ << " to ";
      list([&](unsigned d) { bound(s.end(d)); });
    }
    os_ << ' ';
    printBraced(s.body());
  }
  void visitTaskIndexStmt(TaskIndexStmt &s) {
    head(s);
    os_ << s.dim();
  }
  void visitSerialStmt(SerialStmt &s) {
    head(s);
    printBraced(s.body());
  }
  void visitWhileStmt(WhileStmt &s) {
    head(s);
    printBraced(s.body());
  }
  void visitBreakStmt(BreakStmt &s) { os_ << mnemonic(s.kind()); }
  void visitContinueStmt(ContinueStmt &s) { os_ << mnemonic(s.kind()); }
  void visitIfStmt(IfStmt &s) {
    head(s);
    os_ << n(s.cond()) << ' ';
    printBraced(s.thenBlock());
    if (!s.elseBlock().empty()) {
      os_ << " else ";
      printBraced(s.elseBlock());
    }
  }
  void visitAdStackAllocaStmt(AdStackAllocaStmt &s) {
    head(s);
    os_ << toString(s.elementType()) << ", capacity ";
    if (Value *arg = s.capacityArgument())
      os_ << n(arg);
    else
      os_ << s.capacity();
  }
  void visitAdStackPushStmt(AdStackPushStmt &s) {
    head(s);
    os_ << n(s.stack()) << ", " << n(s.value());
  }
  void visitAdStackPopStmt(AdStackPopStmt &s) {
    head(s);
    os_ << n(s.stack());
  }
  void visitAdStackLoadTopStmt(AdStackLoadTopStmt &s) {
    head(s);
    os_ << n(s.stack()) << " : " << s.type().str();
  }
  void visitAdStackLoadTopAdjStmt(AdStackLoadTopAdjStmt &s) {
    head(s);
    os_ << n(s.stack()) << " : " << s.type().str();
  }
  void visitAdStackAccAdjointStmt(AdStackAccAdjointStmt &s) {
    head(s);
    os_ << n(s.stack()) << ", " << n(s.value());
  }

private:
  const std::string &n(const Value *v) const { return names_[v]; }
  void def(const Stmt &s) { os_ << n(&s) << " = "; }
  /// `%name = ` for kinds that print a result, then the mnemonic.
  void head(const Stmt &s) {
    if (printsResult(s.kind()))
      def(s);
    os_ << mnemonic(s.kind()) << ' ';
  }
  void bound(Bound b) {
    if (b.value)
      os_ << n(b.value);
    else
      os_ << b.constant;
  }
  void access(const GlobalAccessStmt &s) {
    if (s.isField())
      os_ << '@' << s.field()->name();
    else
      os_ << n(s.ndarray());
    if (s.component() != Component::Primal)
      os_ << '.' << toString(s.component());
    os_ << '[';
    for (unsigned i = 0; i < s.numIndices(); ++i)
      os_ << (i ? ", " : "") << n(s.index(i));
    os_ << ']';
  }

  std::ostream &os_;
  const ValueNamer &names_;
  bool elideBlocks_; // printStmtHeader
  unsigned indent_ = 0;
};

void printCompanions(std::ostream &os, bool grad, bool dual) {
  if (grad)
    os << " grad";
  if (dual)
    os << " dual";
}

void printKernelTo(const Kernel &kernel, std::ostream &os) {
  ValueNamer names(kernel);
  os << "kernel @" << kernel.name() << '(';
  for (unsigned i = 0; i < kernel.numArguments(); ++i) {
    const Argument *a = kernel.argument(i);
    os << (i ? ", " : "") << names[a] << ": " << a->type().str();
    printCompanions(os, a->hasGrad(), a->hasDual());
  }
  os << ") ";
  Printer p(os, names);
  p.printBraced(kernel.body());
  os << '\n';
}

} // namespace

ValueNamer::ValueNamer(const Kernel &kernel) {
  size_t values = kernel.numArguments();
  walk(const_cast<Kernel &>(kernel), [&](Stmt &s) { values += !s.type().isVoid(); });
  names_.reserve(values);
  nameAll(kernel);
}

ValueNamer::ValueNamer(const Kernel &kernel, const std::unordered_set<const Value *> &wanted)
    : wanted_(&wanted) {
  names_.reserve(wanted.size());
  nameAll(kernel);
  wanted_ = nullptr;
}

void ValueNamer::nameAll(const Kernel &kernel) {
  for (unsigned i = 0; i < kernel.numArguments(); ++i)
    assign(kernel.argument(i));
  std::vector<const ForStmt *> bands;
  walk(const_cast<Kernel &>(kernel), [&](Stmt &s) {
    if (!s.type().isVoid())
      assign(&s);
    if (auto *f = dyn_cast<ForStmt>(&s); f && f->numDims() > 1)
      bands.push_back(f);
  });
  for (const ForStmt *band : bands) {
    std::vector<std::string> &names = bandNames_[band];
    names.resize(band->numDims());
    for (Stmt &s : band->body())
      if (auto *ti = dyn_cast<TaskIndexStmt>(&s);
          ti && ti->dim() > 0 && ti->dim() < names.size() && names[ti->dim()].empty()) {
        names[ti->dim()] = names_.at(ti);
        inHeader_.insert(ti);
      }
    for (unsigned d = 1; d < names.size(); ++d)
      if (names[d].empty())
        names[d] = "%" + fresh(fmt::format("{}.dim{}", names_.at(band).substr(1), d));
  }
}

const std::string &ValueNamer::operator[](const Value *v) const {
  static const std::string unknown = "<null>";
  auto it = names_.find(v);
  return it == names_.end() ? unknown : it->second;
}

const std::string &ValueNamer::bandIndex(const ForStmt &task, unsigned dim) const {
  static const std::string unknown = "<null>";
  auto it = bandNames_.find(&task);
  return it == bandNames_.end() || dim >= it->second.size() ? unknown : it->second[dim];
}

const ValueNamer &LazyValueNamer::get() const {
  std::call_once(built_, [&] {
    names_ = some_ ? std::make_unique<ValueNamer>(kernel_, wanted_)
                   : std::make_unique<ValueNamer>(kernel_);
  });
  return *names_;
}

void ValueNamer::assign(const Value *v) {
  // A band's dimensions are named after it and its task_index statements.
  bool wanted = !wanted_ || wanted_->count(v) || isa<TaskIndexStmt>(v) ||
                (isa<ForStmt>(v) && cast<ForStmt>(v)->numDims() > 1);
  if (v->name().empty()) { // numbered (the common case: no text to build)
    unsigned n = nextNumber();
    if (wanted)
      names_[v] = "%" + std::to_string(n);
    return;
  }
  // Name hints set from C++ may hold characters the parser does not accept
  // after '%' (letters, digits, '_' and '.'); replace them.
  std::string base = v->name();
  for (char &c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.')
      c = '_';
  std::string name = "%" + fresh(std::move(base));
  if (wanted)
    names_[v] = std::move(name);
}

namespace {

/// Numbers below this are kept in ValueNamer's bit set (2 MiB at most).
constexpr uint32_t kNumberedLimit = uint32_t(1) << 24;

/// The number a name spells in the decimal form of std::to_string (no sign,
/// no leading zero), if it is below kNumberedLimit: the names ValueNamer
/// gives values without a name of their own.
std::optional<uint32_t> canonicalNumber(const std::string &name) {
  if (name.empty() || name.size() > 8 || (name[0] == '0' && name.size() > 1))
    return std::nullopt;
  uint32_t n = 0;
  for (char c : name) {
    if (c < '0' || c > '9')
      return std::nullopt;
    n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  return n < kNumberedLimit ? std::optional<uint32_t>(n) : std::nullopt;
}

} // namespace

bool ValueNamer::used(const std::string &name) const {
  if (std::optional<uint32_t> n = canonicalNumber(name))
    return numberUsed(*n);
  return used_.count(name) != 0;
}

void ValueNamer::markUsed(const std::string &name) {
  if (std::optional<uint32_t> n = canonicalNumber(name))
    markNumber(*n);
  else
    used_.insert(name);
}

void ValueNamer::markNumber(uint32_t n) {
  if (n >= usedNumbers_.size())
    usedNumbers_.resize(
        std::min<size_t>(std::max<size_t>(n + 1, usedNumbers_.size() * 2), kNumberedLimit));
  usedNumbers_[n] = true;
}

unsigned ValueNamer::nextNumber() {
  // Numbers are kept apart from other names, without building and hashing
  // each one's text.
  while (counter_ < kNumberedLimit ? numberUsed(counter_)
                                   : used_.count(std::to_string(counter_)) != 0)
    ++counter_;
  unsigned n = counter_++;
  if (n < kNumberedLimit)
    markNumber(n);
  else
    used_.insert(std::to_string(n));
  return n;
}

std::string ValueNamer::fresh(std::string base) {
  if (base.empty())
    return std::to_string(nextNumber());
  std::string candidate = base;
  if (used(candidate)) {
    // Every suffix up to the last one this hint got is taken already.
    unsigned &n = lastSuffix_[base];
    do
      candidate = fmt::format("{}.{}", base, ++n);
    while (used(candidate));
  }
  markUsed(candidate);
  return candidate;
}

void printModule(const Module &module, std::ostream &os) {
  for (const auto &f : module.fields()) {
    os << "field @" << f->name() << " : " << toString(f->elementType());
    if (!f->shape().empty()) {
      os << '[';
      for (size_t i = 0; i < f->shape().size(); ++i)
        os << (i ? ", " : "") << f->shape()[i];
      os << ']';
    }
    printCompanions(os, f->hasGrad(), f->hasDual());
    os << '\n';
  }
  bool first = module.fields().empty();
  for (const auto &k : module.kernels()) {
    if (!first)
      os << '\n';
    first = false;
    printKernelTo(*k, os);
  }
}

std::string printModule(const Module &module) {
  std::ostringstream os;
  printModule(module, os);
  return os.str();
}

std::string printKernel(const Kernel &kernel) {
  std::ostringstream os;
  printKernelTo(kernel, os);
  return os.str();
}

std::string printStmt(const Stmt &stmt) {
  std::ostringstream os;
  Kernel *k = stmt.kernel();
  if (!k) {
    os << "<detached " << mnemonic(stmt.kind()) << '>';
    return os.str();
  }
  return printStmt(stmt, ValueNamer(*k));
}

std::string printStmt(const Stmt &stmt, const ValueNamer &names) {
  std::ostringstream os;
  Printer p(os, names);
  p.visit(const_cast<Stmt &>(stmt));
  return os.str();
}

std::string printStmtHeader(const Stmt &stmt) {
  Kernel *k = stmt.kernel();
  if (!k)
    return printStmt(stmt);
  std::ostringstream os;
  ValueNamer names(*k);
  Printer p(os, names, /*elideBlocks=*/true);
  p.visit(const_cast<Stmt &>(stmt));
  return os.str();
}

} // namespace qd
