//===- OpsCoverageTest.cpp - Every row of Ops.def, end to end -------------===//
//
// Walks the rows of qd/ir/Ops.def (binary and unary operators, cmp
// predicates, atomic read-modify-writes) and checks, for every row and every
// scalar type of its domain, that each consumer implements it:
//  - the interpreter computes the value of a reference written here (the
//    C++ operator or <cmath> function) on sample inputs, exactly;
//  - the constant folder folds it to that value (FOLD Exact) or declines
//    (FOLD Libm);
//  - the CPU backend's JIT code computes it (to a few ulp where a math
//    library is involved);
//  - the SPIR-V emitter emits a module SPIRV-Tools validates, and on a
//    Vulkan device (lavapipe in CI; skipped without one) it computes it;
//  - reverse and forward mode differentiate it, matching finite
//    differences (DIFF Smooth or Piecewise), or refuse it naming it (DIFF
//    Rejected); an Integer row is one the verifier rejects on floats;
//  - ProgramGen's random programs use it.
// A row a consumer lacks fails here: the reference switches below have no
// `default:`, so a new row does not compile until it has a reference too.
//
//===----------------------------------------------------------------------===//
#include "ProgramGen.h"

#include "qd/analysis/ConstantFolding.h"
#include "qd/check/GradCheck.h"
#if QD_ENABLE_VULKAN
#include "qd/codegen/spirv/SpirvCodegen.h"
#endif
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/CpuBackend.h"
#if QD_ENABLE_VULKAN
#include "qd/runtime/VulkanBackend.h"
#endif

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace qd {
namespace {

//===----------------------------------------------------------------------===//
// The rows
//===----------------------------------------------------------------------===//

enum class RowKind { Binary, Unary, Cmp, Atomic };

/// One row of Ops.def, with its columns as the .def spells them.
struct Row {
  RowKind kind = RowKind::Binary;
  std::string spelling; // the text form's keyword: "add", "lt", "atomic_max"
  OpDomain domain = OpDomain::Any;
  OpDiff diff = OpDiff::Integer; // binary and unary rows
  OpFold fold = OpFold::Exact;   // binary and unary rows
  BinaryOp binary{};
  UnaryOp unary{};
  CmpPredicate cmp{};
  AtomicOp atomic{};
};

std::vector<Row> allRows() {
  std::vector<Row> rows;
  auto add = [&](RowKind kind, std::string_view spelling, OpDomain domain, OpDiff diff, OpFold fold,
                 const std::function<void(Row &)> &set) {
    Row r;
    r.kind = kind;
    r.spelling = spelling;
    r.domain = domain;
    r.diff = diff;
    r.fold = fold;
    set(r);
    rows.push_back(r);
  };
#define QD_BINARY_OP(NAME, SPELLING, DOMAIN, BUILDER, MATH, DIFF, FOLD)                            \
  add(RowKind::Binary, SPELLING, OpDomain::DOMAIN, OpDiff::DIFF, OpFold::FOLD,                     \
      [](Row &r) { r.binary = BinaryOp::NAME; });
#define QD_UNARY_OP(NAME, SPELLING, DOMAIN, BUILDER, MATH, DIFF, FOLD)                             \
  add(RowKind::Unary, SPELLING, OpDomain::DOMAIN, OpDiff::DIFF, OpFold::FOLD,                      \
      [](Row &r) { r.unary = UnaryOp::NAME; });
#define QD_CMP_PREDICATE(NAME, SPELLING, BUILDER)                                                  \
  add(RowKind::Cmp, SPELLING, OpDomain::Any, OpDiff::Integer, OpFold::Exact,                       \
      [](Row &r) { r.cmp = CmpPredicate::NAME; });
#define QD_ATOMIC_OP(NAME, KIND, DOMAIN)                                                           \
  add(RowKind::Atomic, mnemonic(StmtKind::KIND), OpDomain::DOMAIN, OpDiff::Integer, OpFold::Exact, \
      [](Row &r) { r.atomic = AtomicOp::NAME; });
#include "qd/ir/Ops.def"
  return rows;
}

/// The scalar types a row is checked on: those of its domain (i1 aside).
std::vector<ScalarType> typesOf(const Row &r) {
  switch (r.domain) {
  case OpDomain::Any:
    return {ScalarType::I32, ScalarType::I64, ScalarType::F32, ScalarType::F64};
  case OpDomain::Float:
    return {ScalarType::F32, ScalarType::F64};
  case OpDomain::Integer:
    return {ScalarType::I32, ScalarType::I64};
  }
  return {};
}

std::string trace(const Row &r, ScalarType t) {
  return fmt::format("'{}' on {}", r.spelling, toString(t));
}

//===----------------------------------------------------------------------===//
// References
//===----------------------------------------------------------------------===//

/// `fn(args...)` where T is a float type (`onFloat`), an integer type
/// (`onInt`) or either (`onAny`); none outside the operator's domain.
/// Integer arithmetic wraps (through the unsigned type).
template <typename T> struct Ref {
  static constexpr bool kFloat = std::is_floating_point_v<T>;
  template <typename Fn, typename... A> static std::optional<T> onFloat(Fn fn, A... args) {
    if constexpr (kFloat)
      return T(fn(args...));
    else
      return std::nullopt;
  }
  template <typename Fn, typename... A> static std::optional<T> onInt(Fn fn, A... args) {
    if constexpr (kFloat)
      return std::nullopt;
    else
      return T(fn(std::make_unsigned_t<T>(args)...));
  }
  template <typename Fn, typename... A> static std::optional<T> onAny(Fn fn, A... args) {
    if constexpr (kFloat)
      return onFloat(fn, args...);
    else
      return onInt(fn, args...);
  }
};

template <typename T> std::optional<T> refBinary(BinaryOp op, T a, T b) {
  using R = Ref<T>;
  switch (op) {
  case BinaryOp::Add:
    return R::onAny([](auto x, auto y) { return x + y; }, a, b);
  case BinaryOp::Sub:
    return R::onAny([](auto x, auto y) { return x - y; }, a, b);
  case BinaryOp::Mul:
    return R::onAny([](auto x, auto y) { return x * y; }, a, b);
  case BinaryOp::Div: // truncating on integers (signed: not through onInt)
    return T(a / b);
  case BinaryOp::Rem:
    if constexpr (R::kFloat)
      return std::fmod(a, b);
    else
      return T(a % b);
  case BinaryOp::Min:
    if constexpr (R::kFloat)
      return std::fmin(a, b);
    else
      return std::min(a, b);
  case BinaryOp::Max:
    if constexpr (R::kFloat)
      return std::fmax(a, b);
    else
      return std::max(a, b);
  case BinaryOp::Pow:
    return R::onFloat([](auto x, auto y) { return std::pow(x, y); }, a, b);
  case BinaryOp::Atan2:
    return R::onFloat([](auto x, auto y) { return std::atan2(x, y); }, a, b);
  case BinaryOp::And:
    return R::onInt([](auto x, auto y) { return x & y; }, a, b);
  case BinaryOp::Or:
    return R::onInt([](auto x, auto y) { return x | y; }, a, b);
  case BinaryOp::Xor:
    return R::onInt([](auto x, auto y) { return x ^ y; }, a, b);
  case BinaryOp::Shl:
    return R::onInt([](auto x, auto y) { return x << y; }, a, b);
  case BinaryOp::Shr: // arithmetic: on the signed value
    return R::onInt([a](auto, auto y) { return int64_t(a) >> y; }, a, b);
  }
  return std::nullopt;
}

template <typename T> std::optional<T> refUnary(UnaryOp op, T a) {
  using R = Ref<T>;
  switch (op) {
  case UnaryOp::Neg:
    return R::onAny([](auto x) { return -x; }, a);
  case UnaryOp::Abs:
    return a < 0 ? refUnary(UnaryOp::Neg, a) : a;
  case UnaryOp::Sin:
    return R::onFloat([](auto x) { return std::sin(x); }, a);
  case UnaryOp::Cos:
    return R::onFloat([](auto x) { return std::cos(x); }, a);
  case UnaryOp::Tan:
    return R::onFloat([](auto x) { return std::tan(x); }, a);
  case UnaryOp::Exp:
    return R::onFloat([](auto x) { return std::exp(x); }, a);
  case UnaryOp::Log:
    return R::onFloat([](auto x) { return std::log(x); }, a);
  case UnaryOp::Sqrt:
    return R::onFloat([](auto x) { return std::sqrt(x); }, a);
  case UnaryOp::Tanh:
    return R::onFloat([](auto x) { return std::tanh(x); }, a);
  case UnaryOp::Floor:
    return R::onFloat([](auto x) { return std::floor(x); }, a);
  case UnaryOp::Ceil:
    return R::onFloat([](auto x) { return std::ceil(x); }, a);
  case UnaryOp::Not:
    return R::onInt([](auto x) { return ~x; }, a);
  }
  return std::nullopt;
}

template <typename T> bool refCmp(CmpPredicate p, T a, T b) {
  switch (p) {
  case CmpPredicate::Eq:
    return a == b;
  case CmpPredicate::Ne:
    return a != b;
  case CmpPredicate::Lt:
    return a < b;
  case CmpPredicate::Le:
    return a <= b;
  case CmpPredicate::Gt:
    return a > b;
  case CmpPredicate::Ge:
    return a >= b;
  }
  return false;
}

/// The element after atomic `op` of `v` on an element holding `old`.
template <typename T> std::optional<T> refAtomic(AtomicOp op, T old, T v) {
  switch (op) {
  case AtomicOp::Add:
    return refBinary(BinaryOp::Add, old, v);
  case AtomicOp::Max:
    return std::max(old, v);
  }
  return std::nullopt;
}

/// The row's result on `a` and `b` (for an atomic: `a` applied to an
/// element holding `b`) in C++ arithmetic of type T; none outside T.
template <typename T> std::optional<Scalar> refTyped(const Row &r, ScalarType t, T a, T b) {
  auto wrap = [&](std::optional<T> v) -> std::optional<Scalar> {
    if (!v)
      return std::nullopt;
    if constexpr (std::is_floating_point_v<T>)
      return Scalar::ofFloat(t, double(*v));
    else
      return Scalar::ofInt(t, int64_t(*v));
  };
  switch (r.kind) {
  case RowKind::Binary:
    return wrap(refBinary(r.binary, a, b));
  case RowKind::Unary:
    return wrap(refUnary(r.unary, a));
  case RowKind::Cmp:
    return Scalar::ofInt(ScalarType::I1, refCmp(r.cmp, a, b) ? 1 : 0);
  case RowKind::Atomic:
    return wrap(refAtomic(r.atomic, b, a));
  }
  return std::nullopt;
}

std::optional<Scalar> reference(const Row &r, const Scalar &a, const Scalar &b) {
  switch (a.type) {
  case ScalarType::F32:
    return refTyped<float>(r, a.type, float(a.f), float(b.f));
  case ScalarType::F64:
    return refTyped<double>(r, a.type, a.f, b.f);
  case ScalarType::I32:
    return refTyped<int32_t>(r, a.type, int32_t(a.i), int32_t(b.i));
  case ScalarType::I64:
    return refTyped<int64_t>(r, a.type, a.i, b.i);
  case ScalarType::I1:
    return std::nullopt;
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Samples and kernels
//===----------------------------------------------------------------------===//

constexpr int kLanes = 4;

/// Sample inputs of one row and type: `a`, `b` and the expected results.
/// Floats: a of both signs, b positive and not an integer; a sample whose
/// reference is NaN (log or sqrt of a negative, pow of a negative base)
/// takes |a| instead, so every sample is in the interior of the domain.
/// Integers: b is a valid shift amount and divisor of every type.
struct Samples {
  std::vector<Scalar> a, b, expected;
};

Samples samplesOf(const Row &r, ScalarType t) {
  static constexpr double kFloatA[kLanes] = {0.75, -1.3, 2.5, -0.2};
  static constexpr double kFloatB[kLanes] = {1.5, 0.6, 0.35, 1.75};
  static constexpr int64_t kIntA[kLanes] = {7, -13, 100, -5};
  static constexpr int64_t kIntB[kLanes] = {3, 2, 7, 1};
  Samples s;
  for (int l = 0; l < kLanes; ++l) {
    bool f = isFloat(t);
    Scalar a = f ? Scalar::ofFloat(t, kFloatA[l]) : Scalar::ofInt(t, kIntA[l]);
    Scalar b = f ? Scalar::ofFloat(t, kFloatB[l]) : Scalar::ofInt(t, kIntB[l]);
    std::optional<Scalar> want = reference(r, a, b);
    if (f && want && std::isnan(want->f)) {
      a = Scalar::ofFloat(t, std::fabs(a.f));
      want = reference(r, a, b);
    }
    EXPECT_TRUE(want.has_value()) << trace(r, t) << ": no reference value";
    s.a.push_back(a);
    s.b.push_back(b);
    s.expected.push_back(want.value_or(a));
  }
  return s;
}

/// `@r[i] = row(@a[i], @b[i])` for every lane i (an atomic: `@r[i]`, which
/// starts as @b[i], updated with @a[i]).
std::string kernelText(const Row &r, ScalarType t) {
  std::string_view ty = toString(t);
  std::string_view rty = r.kind == RowKind::Cmp ? "i1" : ty;
  std::string op;
  switch (r.kind) {
  case RowKind::Binary:
    op = fmt::format("    %r = {} %a, %b : {}\n    store @r[%i], %r\n", r.spelling, ty);
    break;
  case RowKind::Unary:
    op = fmt::format("    %r = {} %a : {}\n    store @r[%i], %r\n", r.spelling, ty);
    break;
  case RowKind::Cmp:
    op = fmt::format("    %r = cmp {} %a, %b : {}\n    store @r[%i], %r\n", r.spelling, ty);
    break;
  case RowKind::Atomic:
    op = fmt::format("    {} @r[%i], %a : {}\n", r.spelling, ty);
    break;
  }
  std::string loadB =
      r.kind == RowKind::Atomic ? "" : fmt::format("    %b = load @b[%i] : {}\n", ty);
  return fmt::format("field @a : {0}[{2}]\nfield @b : {0}[{2}]\nfield @r : {1}[{2}]\n"
                     "kernel @k() {{\n  parallel for %i = 0 to {2} {{\n"
                     "    %a = load @a[%i] : {0}\n{3}{4}  }}\n}}\n",
                     ty, rty, kLanes, loadB, op);
}

/// The row's kernel, parsed and verified; null (with a failure) if either
/// fails.
std::unique_ptr<Module> kernelModule(const Row &r, ScalarType t) {
  std::string text = kernelText(r, t);
  auto m = parseModule(text, {"ops.qd", 1});
  if (!m.ok()) {
    ADD_FAILURE() << trace(r, t) << ": " << m.status() << "\n" << text;
    return nullptr;
  }
  if (absl::Status v = verify(**m); !v.ok()) {
    ADD_FAILURE() << trace(r, t) << ": " << v << "\n" << text;
    return nullptr;
  }
  return *std::move(m);
}

/// Runs the row's kernel on `backend` with the samples; @r afterwards.
absl::StatusOr<std::vector<Scalar>> runKernel(const Module &m, Backend &backend, const Row &r,
                                              const Samples &s) {
  auto program = Program::create(m);
  if (!program.ok())
    return program.status();
  Buffer *a = (*program)->field("a"), *b = (*program)->field("b"), *out = (*program)->field("r");
  for (int l = 0; l < kLanes; ++l) {
    a->set(l, s.a[size_t(l)]);
    b->set(l, s.b[size_t(l)]);
    if (r.kind == RowKind::Atomic)
      out->set(l, s.b[size_t(l)]);
  }
  if (absl::Status st = (*program)->launch("k", {}, backend, LaunchOptions()); !st.ok())
    return st;
  std::vector<Scalar> got;
  for (int l = 0; l < kLanes; ++l)
    got.push_back(out->get(l));
  return got;
}

/// Runs every row on every type of its domain that `typeOk` accepts on
/// `backend`, comparing with the references within `rtol` (0: exactly).
void expectBackendComputesEveryRow(Backend &backend, double rtolF32, double rtolF64,
                                   const std::function<bool(ScalarType)> &typeOk) {
  int checked = 0;
  for (const Row &r : allRows())
    for (ScalarType t : typesOf(r)) {
      if (!typeOk(t))
        continue;
      SCOPED_TRACE(trace(r, t));
      std::unique_ptr<Module> m = kernelModule(r, t);
      if (!m)
        continue;
      Samples s = samplesOf(r, t);
      auto got = runKernel(*m, backend, r, s);
      ASSERT_TRUE(got.ok()) << got.status() << "\n" << kernelText(r, t);
      double rtol = t == ScalarType::F32 ? rtolF32 : t == ScalarType::F64 ? rtolF64 : 0;
      for (int l = 0; l < kLanes; ++l)
        EXPECT_TRUE(testgen::sameScalar((*got)[size_t(l)], s.expected[size_t(l)], rtol))
            << backend.name() << " lane " << l << ": " << (*got)[size_t(l)].str() << ", expected "
            << s.expected[size_t(l)].str();
      ++checked;
    }
  EXPECT_GE(checked, 50);
}

//===----------------------------------------------------------------------===//
// The table itself
//===----------------------------------------------------------------------===//

TEST(OpsCoverageTest, GeneratedQueriesReturnEachRowsColumns) {
  std::vector<Row> rows = allRows();
  EXPECT_EQ(rows.size(), 14u + 12u + 6u + 2u);
  for (const Row &r : rows) {
    SCOPED_TRACE(r.spelling);
    if (r.kind == RowKind::Binary) {
      EXPECT_EQ(toString(r.binary), r.spelling);
      EXPECT_EQ(parseBinaryOp(r.spelling), r.binary);
      EXPECT_EQ(domainOf(r.binary), r.domain);
      EXPECT_EQ(diffOf(r.binary), r.diff);
      EXPECT_EQ(foldOf(r.binary), r.fold);
    } else if (r.kind == RowKind::Unary) {
      EXPECT_EQ(toString(r.unary), r.spelling);
      EXPECT_EQ(parseUnaryOp(r.spelling), r.unary);
      EXPECT_EQ(domainOf(r.unary), r.domain);
      EXPECT_EQ(diffOf(r.unary), r.diff);
      EXPECT_EQ(foldOf(r.unary), r.fold);
    } else if (r.kind == RowKind::Atomic) {
      EXPECT_EQ(mnemonic(kindOf(r.atomic)), r.spelling);
      EXPECT_EQ(domainOf(r.atomic), r.domain);
    }
    // Integer-only operators, and only they, never carry a derivative.
    if (r.kind == RowKind::Binary || r.kind == RowKind::Unary) {
      EXPECT_EQ(r.diff == OpDiff::Integer, r.domain == OpDomain::Integer);
    }
  }
  // The MATH column: one id for every backend, named as the C library does.
  EXPECT_EQ(mathFn(UnaryOp::Sin), MathFn::Sin);
  EXPECT_EQ(mathFn(BinaryOp::Atan2), MathFn::Atan2);
  EXPECT_EQ(mathFn(UnaryOp::Sqrt), std::nullopt);
  EXPECT_EQ(libmName(MathFn::Atan2), "atan2");
  EXPECT_EQ(arity(MathFn::Pow), 2u);
  EXPECT_EQ(arity(MathFn::Tanh), 1u);
}

//===----------------------------------------------------------------------===//
// Interpreter and folder
//===----------------------------------------------------------------------===//

std::optional<Scalar> fold(const Row &r, const Scalar &a, const Scalar &b) {
  switch (r.kind) {
  case RowKind::Binary:
    return foldBinary(r.binary, a, b);
  case RowKind::Unary:
    return foldUnary(r.unary, a);
  case RowKind::Cmp:
    return foldCmp(r.cmp, a, b);
  case RowKind::Atomic: // a side effect: nothing to fold
    return std::nullopt;
  }
  return std::nullopt;
}

TEST(OpsCoverageTest, InterpreterComputesEveryRow) {
  Interpreter interp;
  expectBackendComputesEveryRow(interp, 0, 0, [](ScalarType) { return true; });
}

TEST(OpsCoverageTest, FolderFoldsEveryExactRow) {
  int folded = 0;
  for (const Row &r : allRows()) {
    if (r.kind == RowKind::Atomic)
      continue;
    for (ScalarType t : typesOf(r)) {
      SCOPED_TRACE(trace(r, t));
      Samples s = samplesOf(r, t);
      for (int l = 0; l < kLanes; ++l) {
        std::optional<Scalar> f = fold(r, s.a[size_t(l)], s.b[size_t(l)]);
        if (r.fold == OpFold::Libm && isFloat(t)) {
          EXPECT_FALSE(f.has_value()) << "a Libm row is folded: " << f->str();
          continue;
        }
        ASSERT_TRUE(f.has_value()) << "lane " << l << " is not folded";
        EXPECT_TRUE(testgen::sameScalar(*f, s.expected[size_t(l)], 0))
            << "lane " << l << ": " << f->str() << ", expected " << s.expected[size_t(l)].str();
        ++folded;
      }
    }
  }
  EXPECT_GE(folded, 200);
}

//===----------------------------------------------------------------------===//
// Backends
//===----------------------------------------------------------------------===//

TEST(OpsCoverageTest, CpuBackendComputesEveryRow) {
  auto cpu = CpuBackend::create();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  // libm and libmvec are accurate to a few ulp; everything else exactly.
  expectBackendComputesEveryRow(**cpu, 1e-6, 1e-14, [](ScalarType) { return true; });
}

#if QD_ENABLE_VULKAN
TEST(OpsCoverageTest, SpirvEmitsEveryRow) {
  int emitted = 0;
  for (const Row &r : allRows())
    for (ScalarType t : typesOf(r)) {
      SCOPED_TRACE(trace(r, t));
      std::unique_ptr<Module> m = kernelModule(r, t);
      if (!m)
        continue;
      auto spirv = emitSpirv(*m->findKernel("k"));
      ASSERT_TRUE(spirv.ok()) << spirv.status();
      EXPECT_FALSE(spirv->words.empty());
      EXPECT_EQ(validateSpirv(spirv->words), "");
      ++emitted;
    }
  EXPECT_GE(emitted, 50);
}

TEST(OpsCoverageTest, VulkanComputesEveryRow) {
  auto vulkan = VulkanBackend::create();
  if (!vulkan.ok())
    GTEST_SKIP() << "no Vulkan loader or device on this machine: " << vulkan.status();
  const SpirvFeatures &f = (*vulkan)->deviceInfo().features;
  // qd's own math functions are accurate to a few ulp (docs/runtime.md).
  expectBackendComputesEveryRow(**vulkan, 1e-6, 1e-14, [&](ScalarType t) {
    return (t != ScalarType::I64 || f.int64) && (t != ScalarType::F64 || f.float64);
  });
}
#endif // QD_ENABLE_VULKAN

//===----------------------------------------------------------------------===//
// Derivatives
//===----------------------------------------------------------------------===//

GradCheckInputs gradInputs(const Row &r, const Samples &s) {
  GradCheckInputs in;
  std::vector<double> a, b;
  for (int l = 0; l < kLanes; ++l) {
    a.push_back(s.a[size_t(l)].f);
    b.push_back(s.b[size_t(l)].f);
  }
  in.fields["a"] = GradCheckValue::array({kLanes}, a);
  in.fields["b"] = GradCheckValue::array({kLanes}, b);
  if (r.kind == RowKind::Atomic)
    in.fields["r"] = GradCheckValue::array({kLanes}, b);
  return in;
}

/// Reverse and forward mode agree with finite differences on every input
/// element, and the derivative is not zero everywhere.
void expectDifferentiated(const Row &r, const Module &m, const Samples &s) {
  auto report = checkGradient(m, "k", gradInputs(r, s));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passed) << formatGradCheckReport(*report, true);
  EXPECT_TRUE(report->reverseChecked && report->forwardChecked);
  EXPECT_EQ(report->failures, 0);
  double largest = 0;
  for (const GradCheckEntry &e : report->entries) {
    EXPECT_TRUE(e.fdReliable) << e.name() << ": a kink at a sample";
    largest = std::max(largest, std::abs(e.reverse));
  }
  EXPECT_GT(largest, 0.1) << "a zero gradient";
}

/// Both modes refuse the kernel, naming the operator.
void expectRejected(const Row &r, const Module &m, const Samples &s) {
  for (bool reverse : {true, false}) {
    GradCheckOptions o;
    o.reverse = reverse;
    o.forward = !reverse;
    auto report = checkGradient(m, "k", gradInputs(r, s), o);
    ASSERT_FALSE(report.ok()) << (reverse ? "reverse" : "forward") << " mode accepts it";
    std::string want = fmt::format("{}: '{}' is not differentiable",
                                   reverse ? "reverse-ad" : "forward-ad", r.spelling);
    EXPECT_NE(report.status().message().find(want), std::string::npos) << report.status();
  }
}

TEST(OpsCoverageTest, AutodiffFollowsEveryRowsDiffColumn) {
  int rows = 0;
  for (const Row &r : allRows()) {
    SCOPED_TRACE(r.spelling);
    if (r.kind == RowKind::Cmp)
      continue; // an i1 result: no derivative flows through a comparison
    if (r.domain == OpDomain::Integer) {
      // Never asked for a derivative: the verifier rejects it on floats.
      auto m = parseModule(kernelText(r, ScalarType::F64), {"ops.qd", 1});
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_FALSE(verify(**m).ok());
      ++rows;
      continue;
    }
    for (ScalarType t : {ScalarType::F64, ScalarType::F32}) {
      SCOPED_TRACE(toString(t));
      std::unique_ptr<Module> m = kernelModule(r, t);
      ASSERT_NE(m, nullptr);
      Samples s = samplesOf(r, t);
      if (r.kind == RowKind::Atomic || r.diff == OpDiff::Smooth || r.diff == OpDiff::Piecewise)
        expectDifferentiated(r, *m, s);
      else
        expectRejected(r, *m, s);
    }
    ++rows;
  }
  EXPECT_EQ(rows, 14 + 12 + 2);
}

//===----------------------------------------------------------------------===//
// ProgramGen
//===----------------------------------------------------------------------===//

bool generated(const testgen::OperatorUse &use, const Row &r) {
  switch (r.kind) {
  case RowKind::Binary:
    return use.binary.count(r.binary) > 0;
  case RowKind::Unary:
    return use.unary.count(r.unary) > 0;
  case RowKind::Cmp:
    return use.cmp.count(r.cmp) > 0;
  case RowKind::Atomic:
    return use.atomic.count(r.atomic) > 0;
  }
  return false;
}

TEST(OpsCoverageTest, ProgramGenGeneratesEveryRow) {
  testgen::OperatorUse use = testgen::generatedOperators(300, 37);
  for (const Row &r : allRows())
    EXPECT_TRUE(generated(use, r)) << "'" << r.spelling
                                   << "' is in no random program: generate it in "
                                      "unittests/support/ProgramGen.cpp";
}

} // namespace
} // namespace qd
