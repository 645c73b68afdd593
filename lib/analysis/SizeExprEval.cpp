//===- SizeExprEval.cpp - Launch-time evaluation of SizeExprs -------------===//
//
// `evaluateSizeExpr` runs before every launch that has a tier-2 adstack, so
// it must cost little next to the kernel: a bound such as
// `max(%i in [0, 2^20): @m[%i] * (@m[%i] - 1))` is evaluated as one scan of
// `@m` (the body grows with the element it reads), not as 2^20 tree walks.
//
//===----------------------------------------------------------------------===//
#include "CheckedInt.h"
#include "qd/analysis/SizeExpr.h"

#include <absl/container/inlined_vector.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace qd {

SizeExprInputs::~SizeExprInputs() = default;
std::optional<SizeExprBufferView> SizeExprInputs::fieldView(const std::string &) const {
  return std::nullopt;
}
std::optional<SizeExprBufferView> SizeExprInputs::ndarrayView(unsigned) const {
  return std::nullopt;
}
std::optional<int64_t> SizeExprInputs::fieldRangeMax(const std::string &, int64_t, int64_t) const {
  return std::nullopt;
}
std::optional<int64_t> SizeExprInputs::ndarrayRangeMax(unsigned, int64_t, int64_t) const {
  return std::nullopt;
}
std::optional<int64_t> SizeExprInputs::fieldExtent(const std::string &) const {
  return std::nullopt;
}

namespace {

using detail::checkedAdd;
using detail::checkedMul;
using detail::checkedSub;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

/// How a value moves as a subject grows: a bit set of "may increase" and
/// "may decrease" (constant: neither; unknown: both).
enum Dir : uint8_t { kConst = 0, kInc = 1, kDec = 2, kAny = 3 };
Dir flip(Dir d) {
  return Dir(((d & kInc) << 1) | ((d & kDec) >> 1));
}
Dir join(Dir a, Dir b) {
  return Dir(a | b);
}

bool isRead(const SizeExpr &e) {
  return e.kind() == SizeExprKind::FieldLoad || e.kind() == SizeExprKind::NdarrayRead;
}
/// Same buffer (field name or ndarray argument).
bool sameBuffer(const SizeExpr &a, const SizeExpr &b) {
  if (a.kind() != b.kind())
    return false;
  return a.kind() == SizeExprKind::FieldLoad ? a.fieldName() == b.fieldName()
                                             : a.argIndex() == b.argIndex();
}
/// `buffer[%var]` with a single index that is the variable itself.
bool isReadAt(const SizeExpr &e, unsigned var) {
  return isRead(e) && e.operands().size() == 1 &&
         e.operands()[0]->kind() == SizeExprKind::BoundVar && e.operands()[0]->var() == var;
}

int64_t loadInt(const SizeExprBufferView &v, int64_t flat) {
  const std::byte *p = v.data + flat * storageBytes(v.type);
  switch (v.type) {
  case ScalarType::I1:
    return static_cast<uint8_t>(*p) ? 1 : 0;
  case ScalarType::I32: {
    int32_t x;
    std::memcpy(&x, p, sizeof x);
    return x;
  }
  default: {
    int64_t x;
    std::memcpy(&x, p, sizeof x);
    return x;
  }
  }
}

/// Maximum of elements [begin, end) of a 1-D view (the range is inside it).
template <typename T> int64_t scanMax(const std::byte *data, int64_t begin, int64_t end) {
  T best = std::numeric_limits<T>::min();
  for (int64_t i = begin; i < end; ++i) {
    T x;
    std::memcpy(&x, data + i * sizeof(T), sizeof x);
    best = std::max(best, x);
  }
  return best;
}

/// A body that uses its variable `%t` only as `%t / D` and `%t % D` (one
/// divisor that does not use `%t`): an index flattened from two. For
/// `D > 0` and `%t >= 0`, the range of `%t` is a run of rows `q = %t / D`
/// of `D` columns `r = %t % D` (the first and last rows partial), and the
/// maximum over it is the maximum over those rectangles of the body with
/// `q` and `r` as variables of their own, which the usual plans then
/// handle (a body monotone in `r`: one evaluation per rectangle).
struct RowsPlan {
  SizeExprRef divisor;
  /// max(q in [qa, qb)): max(r in [ra, rb)): body with q and r
  SizeExprRef rectangle;
  unsigned qa, qb, ra, rb; // fresh variables: a rectangle's ranges
};

/// What evalMaxOverRange does with a node, decided once per node.
enum class Plan : uint8_t { Once, AtEnd, AtBegin, ReadMax, Rows, Iterate };
struct RangePlan {
  Plan plan;
  const SizeExpr *read = nullptr; // Plan::ReadMax: a representative read
  std::shared_ptr<const RowsPlan> rows;
};

// How evalMaxOverRange takes the maximum of each range node: the direction
// of its body in its variable, a read that stands for the body, or rows of
// a flattened index. Depends on the expression alone, not on the inputs,
// and is memoised per node.
class RangePlanner {
public:
  /// The plan of MaxOverRange `e`, decided once per node.
  const RangePlan &planFor(const SizeExpr &e) {
    if (auto it = plans_.find(&e); it != plans_.end())
      return it->second;
    const SizeExpr &body = *e.operands()[2];
    RangePlan p{Plan::Iterate, nullptr, nullptr};
    if (!body.usesVar(e.var())) {
      p.plan = Plan::Once;
    } else if (Dir d = direction(body, {e.var(), nullptr}); d == kInc || d == kConst) {
      p.plan = Plan::AtEnd;
    } else if (d == kDec) {
      p.plan = Plan::AtBegin;
    } else if (const SizeExpr *r = findReadAt(body, e.var());
               r && (direction(body, {e.var(), r}) & kDec) == 0) {
      p.plan = Plan::ReadMax;
      p.read = r;
    } else if (auto rows = rowsPlanFor(e)) {
      p.plan = Plan::Rows;
      p.rows = std::move(rows);
    }
    return plans_.emplace(&e, p).first->second;
  }

private:
  /// `e` with `%var / D` and `%var % D` replaced by variables `q` and `r`;
  /// null when `%var` is used any other way or with another divisor.
  SizeExprRef splitRows(const SizeExprRef &e, unsigned var, SizeExprRef &divisor, unsigned q,
                        unsigned r, std::unordered_map<const SizeExpr *, SizeExprRef> &memo) {
    if (!e->usesVar(var))
      return e;
    if (auto it = memo.find(e.get()); it != memo.end())
      return it->second;
    const auto &ops = e->operands();
    SizeExprRef out;
    if ((e->kind() == SizeExprKind::Div || e->kind() == SizeExprKind::Rem) &&
        ops[0]->kind() == SizeExprKind::BoundVar && ops[0]->var() == var && !ops[1]->usesVar(var) &&
        (!divisor || divisor->equals(*ops[1]))) {
      divisor = ops[1];
      out = SizeExpr::boundVar(e->kind() == SizeExprKind::Div ? q : r);
    } else if (e->kind() != SizeExprKind::BoundVar) {
      // Under a rebinding of `var` only the range bounds see the outer one.
      size_t n = isRange(e->kind()) && e->var() == var ? 2 : ops.size();
      std::vector<SizeExprRef> newOps(ops);
      bool ok = true;
      for (size_t i = 0; i < n && ok; ++i)
        ok = (newOps[i] = splitRows(ops[i], var, divisor, q, r, memo)) != nullptr;
      if (ok)
        out = SizeExpr::make(e->kind(), std::move(newOps), e->value(), e->argIndex(), e->axis(),
                             e->fieldName());
    }
    memo.emplace(e.get(), out);
    return out;
  }

  std::shared_ptr<const RowsPlan> rowsPlanFor(const SizeExpr &e) {
    auto plan = std::make_shared<RowsPlan>();
    unsigned q = freshVar_++, r = freshVar_++;
    plan->qa = freshVar_++;
    plan->qb = freshVar_++;
    plan->ra = freshVar_++;
    plan->rb = freshVar_++;
    std::unordered_map<const SizeExpr *, SizeExprRef> memo;
    SizeExprRef body = splitRows(e.operands()[2], e.var(), plan->divisor, q, r, memo);
    if (!body || !plan->divisor)
      return nullptr;
    auto var = [](unsigned v) { return SizeExpr::boundVar(v); };
    // The ranges of a rectangle are never empty (nonEmpty_ tells the
    // direction analysis, which may then see through them).
    auto range = [&](unsigned v, unsigned lo, unsigned hi, SizeExprRef b) {
      if (!b->usesVar(v))
        return b;
      SizeExprRef m = SizeExpr::make(SizeExprKind::MaxOverRange, {var(lo), var(hi), b}, 0, v);
      nonEmpty_.insert(m.get());
      return m;
    };
    plan->rectangle = range(q, plan->qa, plan->qb, range(r, plan->ra, plan->rb, std::move(body)));
    return plan;
  }

  /// The subject a direction is taken against: the variable `var` itself,
  /// or (when `read` is set) the value of `read`-like reads indexed by
  /// `var`, which must then be the only way `var` is used.
  struct Subject {
    unsigned var;
    const SizeExpr *read;
  };

  Dir direction(const SizeExpr &e, const Subject &s) {
    if (!e.usesVar(s.var))
      return kConst;
    auto key = std::make_tuple(&e, s.var, s.read);
    if (auto it = directions_.find(key); it != directions_.end())
      return it->second;
    const auto &ops = e.operands();
    Dir d = kAny;
    switch (e.kind()) {
    case SizeExprKind::BoundVar:
      d = s.read ? kAny : kInc;
      break;
    case SizeExprKind::FieldLoad:
    case SizeExprKind::NdarrayRead:
      // Data is arbitrary: a read moves with nothing but its own value.
      d = s.read && isReadAt(e, s.var) && sameBuffer(e, *s.read) ? kInc : kAny;
      break;
    case SizeExprKind::Add:
    case SizeExprKind::Max:
    case SizeExprKind::Min:
      d = join(direction(*ops[0], s), direction(*ops[1], s));
      break;
    case SizeExprKind::Div:
      // Truncating division by a fixed non-negative divisor keeps the
      // dividend's direction (by 0 it is constantly 0).
      if (direction(*ops[1], s) == kConst && ops[1]->isNonNegative())
        d = direction(*ops[0], s);
      break;
    case SizeExprKind::Sub:
      d = join(direction(*ops[0], s), flip(direction(*ops[1], s)));
      break;
    case SizeExprKind::Mul: {
      Dir a = direction(*ops[0], s), b = direction(*ops[1], s);
      bool na = ops[0]->isNonNegative(), nb = ops[1]->isNonNegative();
      // A product of non-negative factors moves with both; a constant
      // non-negative factor keeps the other's direction.
      if ((na && nb) || (a == kConst && na) || (b == kConst && nb))
        d = join(a, b);
      break;
    }
    case SizeExprKind::MaxOverRange:
    case SizeExprKind::SumOverRange:
      // The maximum or sum of a non-negative body (0 for an empty range)
      // rises when the range widens or the body rises. A body that rebinds
      // the subject's variable does not see it.
      if (ops[2]->isNonNegative() || nonEmpty_.count(&e))
        d = join(join(flip(direction(*ops[0], s)), direction(*ops[1], s)),
                 e.var() == s.var ? kConst : direction(*ops[2], s));
      break;
    default:
      break;
    }
    directions_.emplace(key, d);
    return d;
  }

  /// A read of the form `buffer[%var]` in `e` (not under a rebinding of
  /// `var`), or null. Memoised per (node, variable), like `direction`: a
  /// deserialised expression is a DAG whose shared subtrees would otherwise
  /// be visited once per path, exponentially many times.
  const SizeExpr *findReadAt(const SizeExpr &e, unsigned var) {
    if (isReadAt(e, var))
      return &e;
    auto key = std::make_pair(&e, var);
    if (auto it = readsAt_.find(key); it != readsAt_.end())
      return it->second;
    const SizeExpr *found = nullptr;
    // Under a rebinding of `var`, only the range bounds see the outer one.
    size_t n = isRange(e.kind()) && e.var() == var ? 2 : e.operands().size();
    for (size_t i = 0; i < n && !found; ++i)
      if (e.operands()[i]->usesVar(var))
        found = findReadAt(*e.operands()[i], var);
    readsAt_.emplace(key, found);
    return found;
  }

  struct KeyHash {
    size_t operator()(const std::tuple<const SizeExpr *, unsigned, const SizeExpr *> &k) const {
      return std::hash<const SizeExpr *>()(std::get<0>(k)) ^
             (size_t(std::get<1>(k)) * 0x9e3779b97f4a7c15ull) ^
             (std::hash<const SizeExpr *>()(std::get<2>(k)) << 1);
    }
  };

  /// Variables the planner introduces (RowsPlan), above every variable of
  /// a kernel or a deserialised expression (at most 2^20).
  unsigned freshVar_ = 1u << 24;
  /// Ranges the planner built that are never empty (RowsPlan).
  std::unordered_set<const SizeExpr *> nonEmpty_;
  std::unordered_map<std::tuple<const SizeExpr *, unsigned, const SizeExpr *>, Dir, KeyHash>
      directions_;
  std::unordered_map<const SizeExpr *, RangePlan> plans_;
  struct NodeVarHash {
    size_t operator()(const std::pair<const SizeExpr *, unsigned> &k) const {
      return std::hash<const SizeExpr *>()(k.first) ^ (size_t(k.second) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::unordered_map<std::pair<const SizeExpr *, unsigned>, const SizeExpr *, NodeVarHash> readsAt_;
};

// Evaluates a SizeExpr on a launch's inputs, ranges by RangePlanner's plans.
class Evaluator {
public:
  Evaluator(const SizeExprInputs &in, int64_t stepLimit) : in_(in), stepsLeft_(stepLimit) {}

  // nullopt only when the evaluation failed (see error()). The recursion
  // keeps its frame small (the rarer kinds are evaluated out of line):
  // expressions nest up to 4096 deep, and a sanitized build's frames are
  // large.
  std::optional<int64_t> eval(const SizeExpr &e) {
    if (failed_)
      return std::nullopt;
    if (--stepsLeft_ < 0)
      return stepLimitExceeded();
    switch (e.kind()) {
    case SizeExprKind::Const:
      return e.value();
    case SizeExprKind::BoundVar:
      if (const Binding *b = binding(e.var()))
        return b->value;
      return unboundVar(e);
    case SizeExprKind::Add:
    case SizeExprKind::Sub:
    case SizeExprKind::Mul:
    case SizeExprKind::Max:
    case SizeExprKind::Min:
    case SizeExprKind::Div:
    case SizeExprKind::Rem: {
      auto a = eval(*e.operands()[0]);
      if (!a)
        return std::nullopt;
      auto b = eval(*e.operands()[1]);
      if (!b)
        return std::nullopt;
      return arith(e.kind(), *a, *b);
    }
    case SizeExprKind::Trunc32: {
      auto a = eval(*e.operands()[0]);
      if (!a)
        return std::nullopt;
      return static_cast<int32_t>(*a);
    }
    case SizeExprKind::MaxOverRange:
    case SizeExprKind::SumOverRange:
      return evalRange(e);
    default:
      return evalLeaf(e);
    }
  }

  bool failed() const { return failed_; }
  bool saturated() const { return saturated_; }
  const std::string &error() const { return error_; }

private:
  /// A variable bound by an enclosing MaxOverRange. When `readMaxOf` is
  /// set, the body is being evaluated once for the whole range and every
  /// `buffer[%var]` read of that buffer stands for `readMax`.
  struct Binding {
    unsigned var;
    int64_t value;
    const SizeExpr *readMaxOf = nullptr;
    int64_t readMax = 0;
  };
  const Binding *binding(unsigned var) const {
    for (auto it = bindings_.rbegin(); it != bindings_.rend(); ++it)
      if (it->var == var)
        return &*it;
    return nullptr;
  }

  /// The maximum of the body of `e` over [begin, end) by rows (RowsPlan);
  /// nullopt with no failure when the range is not one of rows.
  std::optional<int64_t> maxByRows(const RowsPlan &p, int64_t begin, int64_t end, bool &applies) {
    auto d = eval(*p.divisor);
    if (!d)
      return std::nullopt;
    int64_t D = *d;
    applies = D > 0 && begin >= 0;
    if (!applies)
      return std::nullopt;
    int64_t q0 = begin / D, r0 = begin % D, qLast = (end - 1) / D, rLast = (end - 1) % D;
    auto rectangle = [&](int64_t qa, int64_t qb, int64_t ra, int64_t rb) {
      bindings_.push_back({p.qa, qa});
      bindings_.push_back({p.qb, qb});
      bindings_.push_back({p.ra, ra});
      bindings_.push_back({p.rb, rb});
      auto v = eval(*p.rectangle);
      bindings_.resize(bindings_.size() - 4);
      return v;
    };
    if (q0 == qLast)
      return rectangle(q0, q0 + 1, r0, rLast + 1);
    auto best = rectangle(q0, q0 + 1, r0, D);
    if (best && qLast > q0 + 1)
      if (auto middle = rectangle(q0 + 1, qLast, 0, D))
        best = std::max(*best, *middle);
    if (!best || failed_)
      return std::nullopt;
    auto last = rectangle(qLast, qLast + 1, 0, rLast + 1);
    if (!last)
      return std::nullopt;
    return std::max(*best, *last);
  }

  [[gnu::noinline]] std::optional<int64_t> stepLimitExceeded() {
    return fail("the evaluation exceeded its step limit (a huge or corrupt range)");
  }
  [[gnu::noinline]] std::optional<int64_t> unboundVar(const SizeExpr &e) {
    return fail(fmt::format("variable %v{} is not bound by an enclosing max", e.var()));
  }

  /// The view of a read's buffer, resolved once per evaluation.
  const std::optional<SizeExprBufferView> &viewOf(const SizeExpr &read) {
    auto it = views_.find(&read);
    if (it == views_.end()) {
      std::optional<SizeExprBufferView> v = read.kind() == SizeExprKind::FieldLoad
                                                ? in_.fieldView(read.fieldName())
                                                : in_.ndarrayView(read.argIndex());
      if (v && (isFloat(v->type) || !v->data))
        v.reset();
      it = views_.emplace(&read, v).first;
    }
    return it->second;
  }

  /// Element `idx` of a read's buffer; nullopt outside it.
  std::optional<int64_t> element(const SizeExpr &read, std::span<const int64_t> idx) {
    if (const auto &v = viewOf(read)) {
      if (idx.size() != v->shape.size())
        return std::nullopt;
      int64_t flat = 0;
      for (size_t a = 0; a < idx.size(); ++a) {
        if (idx[a] < 0 || idx[a] >= v->shape[a])
          return std::nullopt;
        flat = flat * v->shape[a] + idx[a];
      }
      return loadInt(*v, flat);
    }
    return read.kind() == SizeExprKind::FieldLoad ? in_.fieldElement(read.fieldName(), idx)
                                                  : in_.ndarrayElement(read.argIndex(), idx);
  }

  /// Scalar arguments, shapes and element reads.
  [[gnu::noinline]] std::optional<int64_t> evalLeaf(const SizeExpr &e) {
    switch (e.kind()) {
    case SizeExprKind::ScalarArg:
      if (auto v = in_.scalarArg(e.argIndex()))
        return v;
      return fail(fmt::format("argument {} is not an integer scalar of this launch", e.argIndex()));
    case SizeExprKind::NdarrayShape:
      if (auto v = in_.ndarrayShape(e.argIndex(), e.axis()))
        return v;
      return fail(fmt::format("argument {} has no axis {} in this launch", e.argIndex(), e.axis()));
    case SizeExprKind::FieldLoad:
    case SizeExprKind::NdarrayRead: {
      if (e.operands().size() == 1 && e.operands()[0]->kind() == SizeExprKind::BoundVar) {
        const Binding *b = binding(e.operands()[0]->var());
        if (b && b->readMaxOf && sameBuffer(e, *b->readMaxOf))
          return b->readMax;
      }
      absl::InlinedVector<int64_t, 4> idx;
      for (const auto &op : e.operands()) {
        auto v = eval(*op);
        if (!v)
          return std::nullopt;
        idx.push_back(*v);
      }
      // An element outside the buffer is never read: no valid execution
      // performs that read (the kernel guards the index, or the read itself
      // would be an error), so any fixed value keeps the bound sound: the
      // bound then covers the input extended with that value, whose valid
      // executions include every valid execution of this launch. 0 is used.
      // (Treating it as "unknown" and dropping the iteration is unsound: the
      // same iteration may push on a path that never performs the read.)
      return element(e, idx).value_or(0);
    }
    default:
      return fail("corrupt expression");
    }
  }

  /// max over i in [begin, end) of `read`'s buffer at [i], elements
  /// outside the buffer counting as 0 (see evalLeaf).
  std::optional<int64_t> rangeMax(const SizeExpr &read, int64_t begin, int64_t end) {
    if (const auto &v = viewOf(read); v && v->shape.size() == 1 && !v->rangeMaxElsewhere) {
      int64_t lo = std::max<int64_t>(begin, 0), hi = std::min(end, v->shape[0]);
      std::optional<int64_t> best;
      if (lo < hi) {
        switch (v->type) {
        case ScalarType::I1:
          best = scanMax<uint8_t>(v->data, lo, hi) ? 1 : 0;
          break;
        case ScalarType::I32:
          best = scanMax<int32_t>(v->data, lo, hi);
          break;
        default:
          best = scanMax<int64_t>(v->data, lo, hi);
          break;
        }
      }
      if (begin < lo || end > hi)
        best = std::max<int64_t>(best.value_or(0), 0);
      return best;
    }
    // Without a view, the inputs may reduce the range where the data lives.
    std::optional<int64_t> extent = read.kind() == SizeExprKind::FieldLoad
                                        ? in_.fieldExtent(read.fieldName())
                                        : in_.ndarrayShape(read.argIndex(), 0);
    if (extent && begin < end) {
      int64_t lo = std::max<int64_t>(begin, 0), hi = std::min(end, *extent);
      std::optional<int64_t> best;
      if (lo < hi)
        best = read.kind() == SizeExprKind::FieldLoad
                   ? in_.fieldRangeMax(read.fieldName(), lo, hi)
                   : in_.ndarrayRangeMax(read.argIndex(), lo, hi);
      if (best || lo >= hi) {
        if (begin < lo || end > hi)
          best = std::max<int64_t>(best.value_or(0), 0);
        return best;
      }
    }
    int64_t best = 0;
    for (int64_t i = begin; i < end; ++i) {
      if (--stepsLeft_ < 0)
        return stepLimitExceeded();
      int64_t x = element(read, std::span<const int64_t>(&i, 1)).value_or(0);
      best = i == begin ? x : std::max(best, x);
    }
    return best;
  }

  std::optional<int64_t> evalBodyAt(const SizeExpr &e, Binding b) {
    bindings_.push_back(b);
    auto v = eval(*e.operands()[2]);
    bindings_.pop_back();
    return v;
  }

  /// A MaxOverRange or SumOverRange: 0 on an empty range.
  [[gnu::noinline]] std::optional<int64_t> evalRange(const SizeExpr &e) {
    const auto &ops = e.operands();
    auto begin = eval(*ops[0]);
    auto end = eval(*ops[1]);
    if (!begin || !end)
      return std::nullopt;
    if (*begin >= *end)
      return 0;
    if (e.kind() == SizeExprKind::MaxOverRange)
      return maxOfBody(e, *begin, *end);
    return sumOfBody(e, *begin, *end);
  }

  /// The sum of the body of range `e` over [begin, end), which is not
  /// empty.
  std::optional<int64_t> sumOfBody(const SizeExpr &e, int64_t begin, int64_t end) {
    int64_t trip = saturate(checkedSub(end, begin), true);
    if (!e.operands()[2]->usesVar(e.var()) || trip > kSumIterationLimit) {
      // Every term is at most the largest one: trip * max is sound (and
      // exact for a body that does not use the variable).
      auto m = maxOfBody(e, begin, end);
      if (!m)
        return std::nullopt;
      return arith(SizeExprKind::Mul, trip, *m);
    }
    int64_t sum = 0;
    for (int64_t i = begin; i < end; ++i) {
      auto v = evalBodyAt(e, {e.var(), i});
      if (!v)
        return std::nullopt;
      sum = arith(SizeExprKind::Add, sum, *v);
    }
    return sum;
  }

  /// The largest value of the body of range `e` over [begin, end), which is
  /// not empty.
  std::optional<int64_t> maxOfBody(const SizeExpr &e, int64_t begin, int64_t end) {
    const RangePlan &p = planner_.planFor(e);
    switch (p.plan) {
    case Plan::Once:
    case Plan::AtEnd:
      return evalBodyAt(e, {e.var(), end - 1});
    case Plan::AtBegin:
      return evalBodyAt(e, {e.var(), begin});
    case Plan::ReadMax: {
      // The body grows with the element it reads: evaluate it once, at the
      // largest element of the range.
      auto m = rangeMax(*p.read, begin, end);
      if (!m)
        return std::nullopt;
      return evalBodyAt(e, {e.var(), begin, p.read, *m});
    }
    case Plan::Rows: {
      bool applies = false;
      auto m = maxByRows(*p.rows, begin, end, applies);
      if (applies || failed_)
        return m;
      break; // a negative index or divisor: iterate
    }
    case Plan::Iterate:
      break;
    }
    int64_t best = 0;
    for (int64_t i = begin; i < end; ++i) {
      auto v = evalBodyAt(e, {e.var(), i});
      if (!v)
        return std::nullopt;
      best = i == begin ? *v : std::max(best, *v);
    }
    return best;
  }

  std::optional<int64_t> fail(std::string msg) {
    if (!failed_)
      error_ = std::move(msg);
    failed_ = true;
    return std::nullopt;
  }

  int64_t saturate(std::optional<int64_t> r, bool positive) {
    if (r)
      return *r;
    saturated_ = true;
    return positive ? kMax : kMin;
  }

  int64_t arith(SizeExprKind k, int64_t a, int64_t b) {
    switch (k) {
    case SizeExprKind::Add:
      return saturate(checkedAdd(a, b), b > 0);
    case SizeExprKind::Sub:
      return saturate(checkedSub(a, b), b < 0);
    case SizeExprKind::Mul:
      return saturate(checkedMul(a, b), (a < 0) == (b < 0));
    case SizeExprKind::Min:
      return std::min(a, b);
    case SizeExprKind::Div:
      return detail::truncatingDiv(a, b);
    case SizeExprKind::Rem:
      return detail::truncatingRem(a, b);
    default:
      return std::max(a, b);
    }
  }

  const SizeExprInputs &in_;
  int64_t stepsLeft_;
  RangePlanner planner_;
  std::vector<Binding> bindings_;
  std::unordered_map<const SizeExpr *, std::optional<SizeExprBufferView>> views_;
  bool failed_ = false;
  bool saturated_ = false;
  std::string error_;
};

} // namespace

absl::StatusOr<int64_t> evaluateSizeExpr(const SizeExpr &e, const SizeExprInputs &inputs,
                                         int64_t stepLimit) {
  Evaluator ev(inputs, stepLimit);
  std::optional<int64_t> v = ev.eval(e);
  if (ev.failed() || !v)
    return absl::InvalidArgumentError(ev.error());
  if (ev.saturated())
    return absl::OutOfRangeError(
        "the bound overflows int64 for this launch (saturated arithmetic)");
  return *v;
}

} // namespace qd
