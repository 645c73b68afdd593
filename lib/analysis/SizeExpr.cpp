//===- SizeExpr.cpp - Launch-time adstack bounds --------------------------===//
#include "qd/analysis/SizeExpr.h"

#include "CheckedInt.h"
#include "qd/ir/Module.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <utility>

namespace qd {

namespace {

using detail::checkedAdd;
using detail::checkedMul;
using detail::checkedSub;

constexpr unsigned kMaxDepth = 4096;

unsigned arity(SizeExprKind k) {
  switch (k) {
  case SizeExprKind::Add:
  case SizeExprKind::Sub:
  case SizeExprKind::Mul:
  case SizeExprKind::Max:
  case SizeExprKind::Min:
  case SizeExprKind::Div:
  case SizeExprKind::Rem:
    return 2;
  case SizeExprKind::Trunc32:
    return 1;
  case SizeExprKind::MaxOverRange:
  case SizeExprKind::SumOverRange:
    return 3;
  default:
    return 0;
  }
}

} // namespace

std::string_view toString(SizeExprKind kind) {
  switch (kind) {
  case SizeExprKind::Const:
    return "const";
  case SizeExprKind::ScalarArg:
    return "scalar_arg";
  case SizeExprKind::FieldLoad:
    return "field_load";
  case SizeExprKind::NdarrayShape:
    return "ndarray_shape";
  case SizeExprKind::NdarrayRead:
    return "ndarray_read";
  case SizeExprKind::BoundVar:
    return "bound_var";
  case SizeExprKind::Add:
    return "add";
  case SizeExprKind::Sub:
    return "sub";
  case SizeExprKind::Mul:
    return "mul";
  case SizeExprKind::Max:
    return "max";
  case SizeExprKind::MaxOverRange:
    return "max_over_range";
  case SizeExprKind::SumOverRange:
    return "sum_over_range";
  case SizeExprKind::Min:
    return "min";
  case SizeExprKind::Div:
    return "div";
  case SizeExprKind::Rem:
    return "rem";
  case SizeExprKind::Trunc32:
    return "trunc32";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Construction
//===----------------------------------------------------------------------===//

SizeExprRef SizeExpr::make(SizeExprKind kind, std::vector<SizeExprRef> operands, int64_t value,
                           unsigned index, unsigned axis, std::string field) {
  // One allocation for the node and its reference count (the constructor
  // is private; a local class has the member function's access).
  struct Node : SizeExpr {};
  std::shared_ptr<SizeExpr> e = std::make_shared<Node>();
  e->kind_ = kind;
  e->value_ = value;
  e->index_ = index;
  e->axis_ = axis;
  e->field_ = std::move(field);
  e->operands_ = std::move(operands);
  size_t size = 1;
  std::vector<unsigned> vars;
  for (size_t i = 0; i < e->operands_.size(); ++i) {
    const SizeExpr &op = *e->operands_[i];
    size = op.size_ > std::numeric_limits<size_t>::max() - size ? std::numeric_limits<size_t>::max()
                                                                : size + op.size_;
    for (unsigned v : op.freeVars_)
      if (!(isRange(kind) && i == 2 && v == index))
        vars.push_back(v);
  }
  if (kind == SizeExprKind::BoundVar)
    vars.push_back(index);
  std::sort(vars.begin(), vars.end());
  vars.erase(std::unique(vars.begin(), vars.end()), vars.end());
  e->freeVars_ = std::move(vars);
  e->size_ = size;
  const auto &ops = e->operands_;
  switch (kind) {
  case SizeExprKind::Const:
    e->nonNegative_ = value >= 0;
    break;
  case SizeExprKind::NdarrayShape:
    e->nonNegative_ = true;
    break;
  case SizeExprKind::Add:
  case SizeExprKind::Mul:
  case SizeExprKind::Min:
  case SizeExprKind::Div:
    e->nonNegative_ = ops[0]->nonNegative_ && ops[1]->nonNegative_;
    break;
  case SizeExprKind::Rem: // the sign of the dividend, or 0
    e->nonNegative_ = ops[0]->nonNegative_;
    break;
  case SizeExprKind::Max:
    e->nonNegative_ = ops[0]->nonNegative_ || ops[1]->nonNegative_;
    break;
  case SizeExprKind::MaxOverRange:
  case SizeExprKind::SumOverRange:
    e->nonNegative_ = ops[2]->nonNegative_; // an empty range gives 0
    break;
  default:
    e->nonNegative_ = false;
  }
  auto neg = [](const SizeExpr &x) { return x.nonPositive_; };
  auto pos = [](const SizeExpr &x) { return x.nonNegative_; };
  switch (kind) {
  case SizeExprKind::Const:
    e->nonPositive_ = value <= 0;
    break;
  case SizeExprKind::Add:
  case SizeExprKind::Max:
    e->nonPositive_ = neg(*ops[0]) && neg(*ops[1]);
    break;
  case SizeExprKind::Sub:
    e->nonPositive_ = neg(*ops[0]) && pos(*ops[1]);
    break;
  case SizeExprKind::Mul:
  case SizeExprKind::Div:
    e->nonPositive_ = (neg(*ops[0]) && pos(*ops[1])) || (pos(*ops[0]) && neg(*ops[1]));
    break;
  case SizeExprKind::Min:
    e->nonPositive_ = neg(*ops[0]) || neg(*ops[1]);
    break;
  case SizeExprKind::Rem:
    e->nonPositive_ = neg(*ops[0]);
    break;
  case SizeExprKind::MaxOverRange:
  case SizeExprKind::SumOverRange:
    e->nonPositive_ = neg(*ops[2]);
    break;
  default:
    break;
  }
  return e;
}

SizeExprRef SizeExpr::constant(int64_t value) {
  return make(SizeExprKind::Const, {}, value);
}
SizeExprRef SizeExpr::scalarArg(unsigned argIndex) {
  return make(SizeExprKind::ScalarArg, {}, 0, argIndex);
}
SizeExprRef SizeExpr::fieldLoad(std::string field, std::vector<SizeExprRef> indices) {
  return make(SizeExprKind::FieldLoad, std::move(indices), 0, 0, 0, std::move(field));
}
SizeExprRef SizeExpr::ndarrayShape(unsigned argIndex, unsigned axis) {
  return make(SizeExprKind::NdarrayShape, {}, 0, argIndex, axis);
}
SizeExprRef SizeExpr::ndarrayRead(unsigned argIndex, std::vector<SizeExprRef> indices) {
  return make(SizeExprKind::NdarrayRead, std::move(indices), 0, argIndex);
}
SizeExprRef SizeExpr::boundVar(unsigned var) {
  return make(SizeExprKind::BoundVar, {}, 0, var);
}

SizeExprRef SizeExpr::add(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    if (auto r = checkedAdd(a->value(), b->value()))
      return constant(*r);
  if (a->isConst() && a->value() == 0)
    return b;
  if (b->isConst() && b->value() == 0)
    return a;
  if (a->isConst()) // constants go right: x + c
    std::swap(a, b);
  return make(SizeExprKind::Add, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::sub(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    if (auto r = checkedSub(a->value(), b->value()))
      return constant(*r);
  if (b->isConst() && b->value() == 0)
    return a;
  if (a->equals(*b))
    return constant(0);
  return make(SizeExprKind::Sub, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::mul(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    if (auto r = checkedMul(a->value(), b->value()))
      return constant(*r);
  if (b->isConst())
    std::swap(a, b); // constants go left: c * x
  if (a->isConst() && a->value() == 0)
    return a;
  if (a->isConst() && a->value() == 1)
    return b;
  return make(SizeExprKind::Mul, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::max(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    return constant(std::max(a->value(), b->value()));
  if (a->equals(*b))
    return a;
  if (a->isConst())
    std::swap(a, b); // constants go right: max(x, c)
  if (b->isConst() && b->value() <= 0 && a->isNonNegative())
    return a;
  // max(x, x + y) = x + y for y >= 0 (sequences of pushes stay linear).
  auto absorbs = [](const SizeExpr &sum, const SizeExpr &x) {
    return sum.kind() == SizeExprKind::Add && sum.operands()[1]->isNonNegative() &&
           sum.operands()[0]->equals(x);
  };
  if (absorbs(*b, *a))
    return b;
  if (absorbs(*a, *b))
    return a;
  return make(SizeExprKind::Max, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::min(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    return constant(std::min(a->value(), b->value()));
  if (a->equals(*b))
    return a;
  if (a->isConst())
    std::swap(a, b); // constants go right: min(x, c)
  return make(SizeExprKind::Min, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::div(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    return constant(detail::truncatingDiv(a->value(), b->value()));
  if (b->isConst() && b->value() == 1)
    return a;
  if (b->isConst() && b->value() == 0)
    return constant(0);
  return make(SizeExprKind::Div, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::rem(SizeExprRef a, SizeExprRef b) {
  if (a->isConst() && b->isConst())
    return constant(detail::truncatingRem(a->value(), b->value()));
  if (b->isConst() && (b->value() == 1 || b->value() == -1 || b->value() == 0))
    return constant(0);
  return make(SizeExprKind::Rem, {std::move(a), std::move(b)});
}

SizeExprRef SizeExpr::trunc32(SizeExprRef a) {
  if (a->isConst())
    return constant(static_cast<int32_t>(a->value()));
  if (a->kind() == SizeExprKind::Trunc32)
    return a;
  return make(SizeExprKind::Trunc32, {std::move(a)});
}

SizeExprRef SizeExpr::maxOverRange(unsigned var, SizeExprRef begin, SizeExprRef end,
                                   SizeExprRef body) {
  bool constRange = begin->isConst() && end->isConst();
  if (constRange && begin->value() >= end->value())
    return constant(0);
  if (body->isConst() && body->value() == 0)
    return body; // 0 whether or not the range is empty
  if (!body->usesVar(var)) {
    if (constRange)
      return body;
    // The range may be empty; the body is evaluated once when it is not.
  }
  return make(SizeExprKind::MaxOverRange, {std::move(begin), std::move(end), std::move(body)}, 0,
              var);
}

SizeExprRef SizeExpr::sumOverRange(unsigned var, SizeExprRef begin, SizeExprRef end,
                                   SizeExprRef body) {
  if (begin->isConst() && end->isConst() && begin->value() >= end->value())
    return constant(0);
  if (body->isConst() && body->value() == 0)
    return body;
  // A body without the variable over a constant range is trip * body. (Not
  // over a launch-time range: max(end - begin, 0) saturates for extreme
  // bounds that the sum, empty there, never subtracts.)
  if (!body->usesVar(var) && begin->isConst() && end->isConst())
    if (auto trip = detail::checkedSub(end->value(), begin->value()))
      return mul(constant(*trip), std::move(body));
  return make(SizeExprKind::SumOverRange, {std::move(begin), std::move(end), std::move(body)}, 0,
              var);
}

SizeExprRef SizeExpr::tripCount(SizeExprRef begin, SizeExprRef end) {
  return max(sub(std::move(end), std::move(begin)), constant(0));
}

bool SizeExpr::usesVar(unsigned var) const {
  return std::binary_search(freeVars_.begin(), freeVars_.end(), var);
}

bool SizeExpr::isNonNegative() const {
  return nonNegative_;
}

bool SizeExpr::equals(const SizeExpr &o) const {
  if (this == &o)
    return true;
  if (kind_ != o.kind_ || value_ != o.value_ || index_ != o.index_ || axis_ != o.axis_ ||
      field_ != o.field_ || operands_.size() != o.operands_.size() || size_ != o.size_)
    return false;
  for (size_t i = 0; i < operands_.size(); ++i)
    if (!operands_[i]->equals(*o.operands_[i]))
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

SizeExprNames SizeExprNames::forKernel(const Kernel &kernel) {
  SizeExprNames n;
  n.argName = [&kernel](unsigned i) -> std::string {
    if (i < kernel.numArguments() && !kernel.argument(i)->name().empty())
      return "%" + kernel.argument(i)->name();
    return fmt::format("%arg{}", i);
  };
  return n;
}

namespace {

class SizeExprPrinter {
public:
  explicit SizeExprPrinter(const SizeExprNames &names) : names_(names) {}

  // Precedence: 0 = top, 1 = sum operand (+,-), 2 = product operand.
  std::string print(const SizeExpr &e, int prec) {
    const auto &ops = e.operands();
    switch (e.kind()) {
    case SizeExprKind::Const:
      return std::to_string(e.value());
    case SizeExprKind::ScalarArg:
      return arg(e.argIndex());
    case SizeExprKind::FieldLoad:
      return "@" + e.fieldName() + indices(e);
    case SizeExprKind::NdarrayShape:
      return fmt::format("shape({}, {})", arg(e.argIndex()), e.axis());
    case SizeExprKind::NdarrayRead:
      return arg(e.argIndex()) + indices(e);
    case SizeExprKind::BoundVar:
      return var(e.var());
    case SizeExprKind::Add:
    case SizeExprKind::Sub: {
      // The right operand of `-` needs parentheses around a sum.
      std::string s = print(*ops[0], 1) + (e.kind() == SizeExprKind::Add ? " + " : " - ") +
                      print(*ops[1], e.kind() == SizeExprKind::Sub ? 2 : 1);
      return prec >= 2 ? "(" + s + ")" : s;
    }
    case SizeExprKind::Mul: {
      std::string s = print(*ops[0], 2) + " * " + print(*ops[1], 2);
      return prec > 2 ? "(" + s + ")" : s;
    }
    case SizeExprKind::Max:
    case SizeExprKind::Min:
      return std::string(toString(e.kind())) + "(" + print(*ops[0], 0) + ", " + print(*ops[1], 0) +
             ")";
    case SizeExprKind::Div:
    case SizeExprKind::Rem: {
      // Like C: the right operand of `/` and `%` needs parentheses around a
      // product or quotient.
      std::string s =
          print(*ops[0], 2) + (e.kind() == SizeExprKind::Div ? " / " : " % ") + print(*ops[1], 3);
      return prec >= 2 ? "(" + s + ")" : s;
    }
    case SizeExprKind::Trunc32:
      return "trunc32(" + print(*ops[0], 0) + ")";
    case SizeExprKind::MaxOverRange:
    case SizeExprKind::SumOverRange:
      return fmt::format("{}({} in [{}, {}): {})",
                         e.kind() == SizeExprKind::MaxOverRange ? "max" : "sum", var(e.var()),
                         print(*ops[0], 0), print(*ops[1], 0), print(*ops[2], 0));
    }
    return "?";
  }

private:
  std::string indices(const SizeExpr &e) {
    std::string s = "[";
    for (size_t i = 0; i < e.operands().size(); ++i)
      s += (i ? ", " : "") + print(*e.operands()[i], 0);
    return s + "]";
  }
  std::string arg(unsigned i) {
    return names_.argName ? names_.argName(i) : fmt::format("%arg{}", i);
  }
  std::string var(unsigned v) {
    return names_.varName ? names_.varName(v) : fmt::format("%v{}", v);
  }
  const SizeExprNames &names_;
};

} // namespace

std::string printSizeExpr(const SizeExpr &e, const SizeExprNames &names) {
  return SizeExprPrinter(names).print(e, 0);
}

//===----------------------------------------------------------------------===//
// Serialisation
//===----------------------------------------------------------------------===//

namespace {

constexpr uint8_t kMagic[4] = {'Q', 'D', 'S', 'X'};

void putVarint(std::vector<uint8_t> &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

class Writer {
public:
  /// Writes `root` and every node below it not written yet, in post-order
  /// (operands left to right). An explicit stack, not recursion: a chain
  /// nests thousands of nodes deep, past the stack of a sanitized build.
  uint64_t emit(const SizeExpr &root) {
    std::vector<std::pair<const SizeExpr *, size_t>> stack;
    if (!ids_.contains(&root))
      stack.emplace_back(&root, 0);
    while (!stack.empty()) {
      auto [e, next] = stack.back();
      if (next < e->operands().size()) {
        ++stack.back().second;
        const SizeExpr *op = e->operands()[next].get();
        if (!ids_.contains(op))
          stack.emplace_back(op, 0);
        continue;
      }
      stack.pop_back();
      if (!ids_.contains(e))
        write(*e);
    }
    return ids_.at(&root);
  }
  std::vector<uint8_t> finish() {
    std::vector<uint8_t> out(kMagic, kMagic + 4);
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<uint8_t>(kSizeExprFormatVersion >> (8 * i)));
    putVarint(out, count_);
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

private:
  /// Writes one node whose operands are all written.
  void write(const SizeExpr &e) {
    std::vector<uint64_t> refs;
    for (const auto &op : e.operands())
      refs.push_back(ids_.at(op.get()));
    body_.push_back(static_cast<uint8_t>(e.kind()));
    switch (e.kind()) {
    case SizeExprKind::Const: {
      uint64_t u = static_cast<uint64_t>(e.value());
      putVarint(body_, (u << 1) ^ (e.value() < 0 ? ~uint64_t(0) : 0)); // zigzag
      break;
    }
    case SizeExprKind::ScalarArg:
      putVarint(body_, e.argIndex());
      break;
    case SizeExprKind::FieldLoad:
      putVarint(body_, e.fieldName().size());
      body_.insert(body_.end(), e.fieldName().begin(), e.fieldName().end());
      putVarint(body_, refs.size());
      break;
    case SizeExprKind::NdarrayShape:
      putVarint(body_, e.argIndex());
      putVarint(body_, e.axis());
      break;
    case SizeExprKind::NdarrayRead:
      putVarint(body_, e.argIndex());
      putVarint(body_, refs.size());
      break;
    case SizeExprKind::BoundVar:
    case SizeExprKind::MaxOverRange:
    case SizeExprKind::SumOverRange:
      putVarint(body_, e.var());
      break;
    default:
      break;
    }
    for (uint64_t r : refs)
      putVarint(body_, r);
    ids_.emplace(&e, count_++);
  }

  std::unordered_map<const SizeExpr *, uint64_t> ids_;
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

class Reader {
public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  bool atEnd() const { return pos_ == b_.size(); }
  size_t pos() const { return pos_; }
  /// A canonical LEB128 varint (what the writer produces): no redundant
  /// trailing zero groups, no bits past 64. Anything else is malformed, so
  /// that every expression has exactly one encoding.
  std::optional<uint64_t> varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size())
        return std::nullopt;
      uint8_t byte = b_[pos_++];
      uint64_t bits = byte & 0x7f;
      if (shift == 63 && bits > 1)
        return std::nullopt; // past 64 bits
      v |= bits << shift;
      if (!(byte & 0x80))
        return shift > 0 && bits == 0 ? std::nullopt : std::optional<uint64_t>(v);
    }
    return std::nullopt;
  }
  std::optional<uint8_t> byte() {
    if (pos_ >= b_.size())
      return std::nullopt;
    return b_[pos_++];
  }
  std::optional<std::string> string(uint64_t n) {
    if (n > b_.size() - pos_)
      return std::nullopt;
    std::string s(reinterpret_cast<const char *>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }

private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

} // namespace

std::vector<uint8_t> serializeSizeExpr(const SizeExpr &e) {
  Writer w;
  w.emit(e);
  return w.finish();
}

absl::StatusOr<SizeExprRef> deserializeSizeExpr(std::span<const uint8_t> bytes) {
  auto bad = [](size_t at, std::string what) {
    return absl::InvalidArgumentError(
        fmt::format("malformed serialised SizeExpr at byte {}: {}", at, what));
  };
  if (bytes.size() < 8 || !std::equal(kMagic, kMagic + 4, bytes.begin()))
    return bad(0, "missing the 'QDSX' header");
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i)
    version |= uint32_t(bytes[4 + i]) << (8 * i);
  if (version < 1 || version > kSizeExprFormatVersion)
    return absl::InvalidArgumentError(
        fmt::format("serialised SizeExpr has format version {}, but this library reads versions "
                    "1 to {}; recompile the kernel",
                    version, kSizeExprFormatVersion));
  // The last kind each version knows.
  SizeExprKind lastKind = version == 1   ? SizeExprKind::MaxOverRange
                          : version == 2 ? SizeExprKind::SumOverRange
                                         : SizeExprKind::Trunc32;
  Reader r(bytes.subspan(8));
  auto count = r.varint();
  if (!count || *count == 0)
    return bad(8, "missing node count");
  if (*count > bytes.size())
    return bad(8, fmt::format("{} nodes cannot fit in {} bytes", *count, bytes.size()));
  std::vector<SizeExprRef> nodes;
  std::vector<unsigned> depth;
  nodes.reserve(*count);
  for (uint64_t n = 0; n < *count; ++n) {
    size_t at = 8 + r.pos();
    auto kindByte = r.byte();
    if (!kindByte)
      return bad(at, "truncated");
    if (*kindByte > static_cast<uint8_t>(lastKind))
      return bad(at, fmt::format("unknown node kind {} in format version {}", *kindByte, version));
    auto kind = static_cast<SizeExprKind>(*kindByte);
    int64_t value = 0;
    uint64_t index = 0, axis = 0, numOps = arity(kind);
    std::string field;
    auto need = [&](std::optional<uint64_t> v, uint64_t limit, uint64_t &out) {
      if (!v || *v > limit)
        return false;
      out = *v;
      return true;
    };
    constexpr uint64_t kIdxLimit = 1u << 20;
    bool ok = true;
    switch (kind) {
    case SizeExprKind::Const: {
      auto z = r.varint();
      ok = z.has_value();
      if (ok)
        value = static_cast<int64_t>((*z >> 1) ^ (~(*z & 1) + 1));
      break;
    }
    case SizeExprKind::ScalarArg:
      ok = need(r.varint(), kIdxLimit, index);
      break;
    case SizeExprKind::FieldLoad: {
      uint64_t len = 0;
      ok = need(r.varint(), 1u << 16, len);
      if (ok) {
        auto s = r.string(len);
        ok = s.has_value();
        if (ok)
          field = *s;
      }
      ok = ok && need(r.varint(), 64, numOps);
      break;
    }
    case SizeExprKind::NdarrayShape:
      ok = need(r.varint(), kIdxLimit, index) && need(r.varint(), 64, axis);
      break;
    case SizeExprKind::NdarrayRead:
      ok = need(r.varint(), kIdxLimit, index) && need(r.varint(), 64, numOps);
      break;
    case SizeExprKind::BoundVar:
    case SizeExprKind::MaxOverRange:
    case SizeExprKind::SumOverRange:
      ok = need(r.varint(), kIdxLimit, index);
      break;
    default:
      break;
    }
    if (!ok)
      return bad(at, fmt::format("bad or truncated payload for a {} node", toString(kind)));
    std::vector<SizeExprRef> ops;
    unsigned d = 0;
    for (uint64_t i = 0; i < numOps; ++i) {
      auto ref = r.varint();
      if (!ref)
        return bad(at, "truncated operand list");
      if (*ref >= n)
        return bad(at,
                   fmt::format("node {} refers to node {}, which does not precede it", n, *ref));
      ops.push_back(nodes[*ref]);
      d = std::max(d, depth[*ref]);
    }
    if (d + 1 > kMaxDepth)
      return bad(at, fmt::format("expression nesting exceeds {}", kMaxDepth));
    nodes.push_back(SizeExpr::make(kind, std::move(ops), value, static_cast<unsigned>(index),
                                   static_cast<unsigned>(axis), std::move(field)));
    depth.push_back(d + 1);
  }
  if (!r.atEnd())
    return bad(8 + r.pos(), "trailing bytes after the last node");
  SizeExprRef root = nodes.back();
  // A variable free in the root has no binding range.
  for (const auto &node : nodes)
    if (node->kind() == SizeExprKind::BoundVar && root->usesVar(node->var()))
      return absl::InvalidArgumentError(
          fmt::format("malformed serialised SizeExpr: variable %v{} is used outside a "
                      "range that binds it",
                      node->var()));
  return root;
}

} // namespace qd
