//===- SizeExprPropertyTest.cpp - SizeExpr properties ---------------------===//
//
// RapidCheck properties of SizeExprs: random expressions round-trip
// through the encoding, malformed bytes never crash the decoder, and the
// evaluator agrees with a plain reference evaluator.
//
//===----------------------------------------------------------------------===//
#include "SizeExprTestInputs.h"

namespace qd {
namespace {

using namespace sizeexprtest;

//===----------------------------------------------------------------------===//
// Properties
//===----------------------------------------------------------------------===//

/// A structural choice, uniform in [lo, hi) whatever RapidCheck's size.
template <typename T> T pick(T lo, T hi) {
  return *rc::gen::resize(100, rc::gen::inRange(lo, hi));
}

/// A random well-formed expression built with SizeExpr::make (no
/// simplification). Bound variables are only used inside a range binding
/// them; ranges may shadow an enclosing variable.
SizeExprRef genExpr(int depth, std::vector<unsigned> &bound) {
  auto small = [] { return pick<int64_t>(-3, 8); };
  int choice = pick(0, depth > 0 ? 14 : 4);
  switch (choice) {
  case 0:
    return SizeExpr::make(
        K::Const, {},
        *rc::gen::weightedOneOf<int64_t>({{4, rc::gen::inRange<int64_t>(-3, 8)},
                                          {1, rc::gen::arbitrary<int64_t>()},
                                          {1, rc::gen::element(I64::min(), I64::max())}}));
  case 1:
    return SizeExpr::make(K::ScalarArg, {}, 0, pick(0u, 4u));
  case 2:
    return SizeExpr::make(K::NdarrayShape, {}, 0, pick(0u, 4u), pick(0u, 3u));
  case 3:
    if (bound.empty())
      return SizeExpr::make(K::Const, {}, small());
    return SizeExpr::make(K::BoundVar, {}, 0, *rc::gen::elementOf(bound));
  case 4:
  case 5: {
    std::vector<SizeExprRef> idx;
    int n = pick(0, 3);
    for (int i = 0; i < n; ++i)
      idx.push_back(genExpr(depth - 1, bound));
    if (choice == 4)
      return SizeExpr::make(
          K::FieldLoad, std::move(idx), 0, 0, 0,
          *rc::gen::elementOf(std::vector<std::string>{"x", "m", "s", "no_such"}));
    return SizeExpr::make(K::NdarrayRead, std::move(idx), 0, pick(0u, 4u));
  }
  case 6:
  case 7:
  case 8:
  case 9: {
    static constexpr K ops[] = {K::Add, K::Sub, K::Mul, K::Max};
    auto a = genExpr(depth - 1, bound);
    auto b = genExpr(depth - 1, bound);
    return SizeExpr::make(ops[choice - 6], {a, b});
  }
  case 11: {
    // The IR's other integer operations; a bound variable divided by a small
    // divisor is a flattened index (the evaluator's rows plan).
    static constexpr K ops[] = {K::Min, K::Div, K::Rem};
    K op = ops[pick(0, 3)];
    if (!bound.empty() && pick(0, 2) == 0)
      return SizeExpr::make(op, {SizeExpr::make(K::BoundVar, {}, 0, *rc::gen::elementOf(bound)),
                                 SizeExpr::make(K::Const, {}, pick<int64_t>(-2, 6))});
    auto a = genExpr(depth - 1, bound);
    auto b = genExpr(depth - 1, bound);
    return SizeExpr::make(op, {a, b});
  }
  case 12:
    return SizeExpr::make(K::Trunc32, {genExpr(depth - 1, bound)});
  default: {
    unsigned v = pick(0u, 4u);
    auto begin = genExpr(depth - 1, bound);
    auto end = genExpr(depth - 1, bound);
    bound.push_back(v);
    auto body = genExpr(depth - 1, bound);
    bound.pop_back();
    return SizeExpr::make(*rc::gen::element(K::MaxOverRange, K::SumOverRange), {begin, end, body},
                          0, v);
  }
  }
}

SizeExprRef genExpr() {
  std::vector<unsigned> bound;
  return genExpr(pick(0, 6), bound);
}

RC_GTEST_PROP(SizeExprTest, SerialisationRoundTrips, ()) {
  SizeExprRef e = genExpr();
  RC_CLASSIFY(e->size() >= 10, "10+ nodes");
  std::vector<uint8_t> bytes = serializeSizeExpr(*e);
  auto back = deserializeSizeExpr(bytes);
  RC_ASSERT(back.ok());
  RC_ASSERT((*back)->equals(*e));
  RC_ASSERT(serializeSizeExpr(**back) == bytes);
  RC_ASSERT(printSizeExpr(**back) == printSizeExpr(*e));
  FakeInputs in = sampleInputs();
  RC_ASSERT(evalText(**back, in, 5000) == evalText(*e, in, 5000));
}

RC_GTEST_PROP(SizeExprTest, TruncatedEncodingsAreRejected, ()) {
  SizeExprRef e = genExpr();
  std::vector<uint8_t> bytes = serializeSizeExpr(*e);
  size_t n = pick<size_t>(0, bytes.size());
  bytes.resize(n);
  RC_ASSERT(!deserializeSizeExpr(bytes).ok());
}

/// Whatever the deserialiser accepts is a well-formed expression: it
/// evaluates without crashing and its canonical encoding is a fixed point.
void checkAccepted(const SizeExprRef &e) {
  FakeInputs in = sampleInputs();
  (void)evaluateSizeExpr(*e, in, 2000);
  std::vector<uint8_t> canonical = serializeSizeExpr(*e);
  auto again = deserializeSizeExpr(canonical);
  RC_ASSERT(again.ok());
  RC_ASSERT(serializeSizeExpr(**again) == canonical);
}

RC_GTEST_PROP(SizeExprTest, RandomBytesNeverCrash, (std::vector<uint8_t> body)) {
  // Behind a valid header, so that the node decoder sees the bytes.
  std::vector<uint8_t> bytes = {'Q', 'D', 'S', 'X', 1, 0, 0, 0};
  bytes.insert(bytes.end(), body.begin(), body.end());
  auto r = deserializeSizeExpr(bytes);
  RC_TAG(r.ok() ? "accepted" : "rejected");
  if (r.ok())
    checkAccepted(*r);
  // And as they are.
  auto raw = deserializeSizeExpr(body);
  RC_ASSERT(!raw.ok() || body.size() >= 10);
}

RC_GTEST_PROP(SizeExprTest, MutatedEncodingsNeverCrash, ()) {
  SizeExprRef e = genExpr();
  std::vector<uint8_t> bytes = serializeSizeExpr(*e);
  int edits = *rc::gen::inRange(1, 4);
  for (int i = 0; i < edits; ++i) {
    size_t pos = pick<size_t>(8, bytes.size());
    switch (*rc::gen::inRange(0, 3)) {
    case 0:
      bytes[pos] = *rc::gen::arbitrary<uint8_t>();
      break;
    case 1:
      bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(pos), *rc::gen::arbitrary<uint8_t>());
      break;
    default:
      if (bytes.size() > 9)
        bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(pos));
    }
  }
  auto r = deserializeSizeExpr(bytes);
  RC_TAG(r.ok() ? "accepted" : "rejected");
  if (r.ok())
    checkAccepted(*r);
}

/// A direct reading of the documented semantics, for comparison: every
/// iteration of every range is evaluated.
class ReferenceEvaluator {
public:
  explicit ReferenceEvaluator(const SizeExprInputs &in) : in_(in) {}
  bool error = false;     // a missing argument or axis, an unbound variable
  bool saturated = false; // some operation overflowed
  bool unknown = false;   // some read was out of range (counted as 0)
  bool tooBig = false;    // a range too long to enumerate here

  std::optional<int64_t> eval(const SizeExpr &e) {
    const auto &ops = e.operands();
    switch (e.kind()) {
    case K::Const:
      return e.value();
    case K::ScalarArg:
      return check(in_.scalarArg(e.argIndex()));
    case K::NdarrayShape:
      return check(in_.ndarrayShape(e.argIndex(), e.axis()));
    case K::BoundVar:
      for (auto it = vars_.rbegin(); it != vars_.rend(); ++it)
        if (it->first == e.var())
          return it->second;
      error = true;
      return std::nullopt;
    case K::FieldLoad:
    case K::NdarrayRead: {
      std::vector<int64_t> idx;
      for (const auto &op : ops) {
        auto v = eval(*op);
        if (!v)
          return std::nullopt;
        idx.push_back(*v);
      }
      auto v = e.kind() == K::FieldLoad ? in_.fieldElement(e.fieldName(), idx)
                                        : in_.ndarrayElement(e.argIndex(), idx);
      unknown |= !v;
      return v.value_or(0); // an element outside the buffer counts as 0
    }
    case K::MaxOverRange:
    case K::SumOverRange: {
      auto b = eval(*ops[0]);
      auto en = eval(*ops[1]);
      if (!b || !en)
        return std::nullopt;
      if (*en > *b && static_cast<uint64_t>(*en) - static_cast<uint64_t>(*b) > 64) {
        tooBig = true;
        return std::nullopt;
      }
      std::optional<int64_t> best;
      int64_t sum = 0;
      for (int64_t i = *b; i < *en; ++i) {
        vars_.emplace_back(e.var(), i);
        auto v = eval(*ops[2]);
        vars_.pop_back();
        if (!v)
          return std::nullopt;
        best = best ? std::max(*best, *v) : *v;
        if (e.kind() == K::SumOverRange && __builtin_add_overflow(sum, *v, &sum)) {
          saturated = true;
          return *v > 0 ? I64::max() : I64::min();
        }
      }
      return e.kind() == K::SumOverRange ? sum : best.value_or(0);
    }
    case K::Trunc32: {
      auto a = eval(*ops[0]);
      if (!a)
        return std::nullopt;
      return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(*a)));
    }
    default: {
      auto a = eval(*ops[0]);
      auto b = eval(*ops[1]);
      if (!a || !b)
        return std::nullopt;
      int64_t r = 0;
      bool overflow = false, positive = false;
      switch (e.kind()) {
      case K::Add:
        overflow = __builtin_add_overflow(*a, *b, &r);
        positive = *b > 0;
        break;
      case K::Sub:
        overflow = __builtin_sub_overflow(*a, *b, &r);
        positive = *b < 0;
        break;
      case K::Mul:
        overflow = __builtin_mul_overflow(*a, *b, &r);
        positive = (*a < 0) == (*b < 0);
        break;
      case K::Min:
        r = std::min(*a, *b);
        break;
      case K::Div: // the IR's: truncating, MIN / -1 wraps; by 0: 0
      case K::Rem:
        if (*b == 0)
          r = 0;
        else if (*b == -1)
          r = e.kind() == K::Div ? int64_t(0 - uint64_t(*a)) : 0;
        else
          r = e.kind() == K::Div ? *a / *b : *a % *b;
        break;
      default:
        r = std::max(*a, *b);
      }
      if (overflow) {
        saturated = true;
        return positive ? I64::max() : I64::min();
      }
      return r;
    }
    }
  }

private:
  std::optional<int64_t> check(std::optional<int64_t> v) {
    error |= !v;
    return v;
  }
  const SizeExprInputs &in_;
  std::vector<std::pair<unsigned, int64_t>> vars_;
};

/// The same tree built with the simplifying constructors.
SizeExprRef rebuild(const SizeExprRef &e) {
  std::vector<SizeExprRef> ops;
  for (const auto &op : e->operands())
    ops.push_back(rebuild(op));
  switch (e->kind()) {
  case K::Add:
    return SizeExpr::add(ops[0], ops[1]);
  case K::Sub:
    return SizeExpr::sub(ops[0], ops[1]);
  case K::Mul:
    return SizeExpr::mul(ops[0], ops[1]);
  case K::Max:
    return SizeExpr::max(ops[0], ops[1]);
  case K::Min:
    return SizeExpr::min(ops[0], ops[1]);
  case K::Div:
    return SizeExpr::div(ops[0], ops[1]);
  case K::Rem:
    return SizeExpr::rem(ops[0], ops[1]);
  case K::Trunc32:
    return SizeExpr::trunc32(ops[0]);
  case K::MaxOverRange:
    return SizeExpr::maxOverRange(e->var(), ops[0], ops[1], ops[2]);
  case K::SumOverRange:
    return SizeExpr::sumOverRange(e->var(), ops[0], ops[1], ops[2]);
  default:
    return SizeExpr::make(e->kind(), std::move(ops), e->value(), e->argIndex(), e->axis(),
                          e->fieldName());
  }
}

RC_GTEST_PROP(SizeExprTest, EvaluationMatchesTheReference, ()) {
  SizeExprRef e = genExpr();
  FakeInputs in = sampleInputs();
  in.views = *rc::gen::arbitrary<bool>();
  ReferenceEvaluator ref(in);
  std::optional<int64_t> expected = ref.eval(*e);
  RC_PRE(!ref.tooBig);
  absl::StatusOr<int64_t> got = evaluateSizeExpr(*e, in, 1 << 20);
  RC_TAG(ref.error ? "error" : ref.saturated ? "saturated" : ref.unknown ? "unknown" : "exact");
  if (ref.error) {
    // A missing argument fails the evaluation, wherever it is.
    RC_ASSERT(!got.ok());
    return;
  }
  if (ref.saturated)
    return; // a saturated iteration that a monotone range skips is fine
  RC_ASSERT(expected.has_value());
  RC_ASSERT(got.ok());
  RC_ASSERT(*got == *expected);
  if (ref.unknown)
    return; // simplification may drop a read whose index is out of range
  // The simplifying constructors preserve the value of an expression that
  // reads nothing out of range.
  SizeExprRef simple = rebuild(e);
  absl::StatusOr<int64_t> s = evaluateSizeExpr(*simple, in, 1 << 20);
  RC_ASSERT(s.ok());
  RC_ASSERT(*s == *expected);
}

// The sizing result's names come with qd::sizeexpr (this test links nothing
// else), so a runtime reports tiers without the compile-time analyses.
TEST(KernelSizingTest, TiersAndMethodsHaveNamesWithoutTheAnalyses) {
  EXPECT_EQ(toString(SizingTier::LaunchTime), "tier 2 launch-time");
  EXPECT_EQ(toString(SizingMethod::BellmanFord), "bellman-ford");
  KernelSizing empty;
  EXPECT_TRUE(empty.stacks().empty());
  EXPECT_EQ(empty.find(nullptr), nullptr);
}

} // namespace
} // namespace qd
