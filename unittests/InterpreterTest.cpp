//===- InterpreterTest.cpp - Runtime data model and reference interpreter -===//
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/ScalarOps.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace qd {
namespace {

/// Parses and verifies a module, instantiates it and runs kernels on the
/// interpreter.
class Harness {
public:
  explicit Harness(std::string_view text) {
    auto m = parseModule(text, {"t.qd", 1});
    EXPECT_TRUE(m.ok()) << m.status().message();
    module = *std::move(m);
    absl::Status v = verify(*module);
    EXPECT_TRUE(v.ok()) << v.message();
    auto p = Program::create(*module);
    EXPECT_TRUE(p.ok());
    program = *std::move(p);
  }

  absl::Status run(std::string_view kernel, std::vector<LaunchArg> args = {},
                   const LaunchOptions &options = {}) {
    return program->launch(kernel, args, interp, options);
  }

  Scalar get(std::string_view field, int64_t flat = 0, Component c = Component::Primal) {
    return program->field(field, c)->get(flat);
  }
  double getF(std::string_view field, int64_t flat = 0, Component c = Component::Primal) {
    return get(field, flat, c).f;
  }
  int64_t getI(std::string_view field, int64_t flat = 0) { return get(field, flat).i; }
  void setF(std::string_view field, std::vector<double> values, Component c = Component::Primal) {
    Buffer *b = program->field(field, c);
    for (size_t i = 0; i < values.size(); ++i)
      b->set(static_cast<int64_t>(i), Scalar::ofFloat(b->elementType(), values[i]));
  }
  void setI(std::string_view field, std::vector<int64_t> values) {
    Buffer *b = program->field(field);
    for (size_t i = 0; i < values.size(); ++i)
      b->set(static_cast<int64_t>(i), Scalar::ofInt(b->elementType(), values[i]));
  }

  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;
  Interpreter interp;
};

std::string message(const absl::Status &s) {
  return std::string(s.message());
}

const AdStackAllocaStmt *findStack(Module &m) {
  const AdStackAllocaStmt *found = nullptr;
  for (auto &k : m.kernels())
    walk(*k, [&](Stmt &s) {
      if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
        found = a;
    });
  return found;
}

//===----------------------------------------------------------------------===//
// Scalar semantics
//===----------------------------------------------------------------------===//

Scalar i32(int64_t v) {
  return Scalar::ofInt(ScalarType::I32, v);
}
Scalar i64(int64_t v) {
  return Scalar::ofInt(ScalarType::I64, v);
}
Scalar f32(double v) {
  return Scalar::ofFloat(ScalarType::F32, v);
}
Scalar f64(double v) {
  return Scalar::ofFloat(ScalarType::F64, v);
}
Scalar ok(const ScalarResult &r) {
  EXPECT_TRUE(std::holds_alternative<Scalar>(r)) << std::get<std::string>(r);
  return std::get<Scalar>(r);
}

TEST(Semantics, IntegerArithmeticWraps) {
  EXPECT_EQ(ok(evalBinary(BinaryOp::Add, i32(INT32_MAX), i32(1))).i, INT32_MIN);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Mul, i32(65536), i32(65536))).i, 0);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Sub, i64(INT64_MIN), i64(1))).i, INT64_MAX);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Div, i32(-7), i32(2))).i, -3);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Rem, i32(-7), i32(2))).i, -1);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Div, i32(INT32_MIN), i32(-1))).i, INT32_MIN);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Rem, i32(INT32_MIN), i32(-1))).i, 0);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Shr, i32(-8), i32(1))).i, -4);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Shl, i32(1), i32(31))).i, INT32_MIN);
  EXPECT_EQ(evalUnary(UnaryOp::Neg, i32(INT32_MIN)).i, INT32_MIN);
  EXPECT_EQ(evalUnary(UnaryOp::Abs, i64(-5)).i, 5);
  EXPECT_EQ(evalUnary(UnaryOp::Not, Scalar::ofInt(ScalarType::I1, 1)).i, 0);
}

TEST(Semantics, UndefinedIntegerOperationsAreErrors) {
  auto div = evalBinary(BinaryOp::Div, i32(1), i32(0));
  ASSERT_TRUE(std::holds_alternative<std::string>(div));
  EXPECT_EQ(std::get<std::string>(div), "integer division by zero");
  auto shl = evalBinary(BinaryOp::Shl, i32(1), i32(32));
  ASSERT_TRUE(std::holds_alternative<std::string>(shl));
  EXPECT_EQ(std::get<std::string>(shl), "shift amount 32 is outside [0, 32)");
  EXPECT_TRUE(std::holds_alternative<std::string>(evalBinary(BinaryOp::Shr, i64(1), i64(-1))));
}

TEST(Semantics, FloatOperationsUseTheirOwnPrecision) {
  // 0.1f + 0.2f rounds in f32 (0.3f is the nearest float; double 0.1+0.2 is not 0.3).
  EXPECT_EQ(ok(evalBinary(BinaryOp::Add, f32(0.1), f32(0.2))).f, static_cast<double>(0.1f + 0.2f));
  EXPECT_EQ(ok(evalBinary(BinaryOp::Add, f64(0.1), f64(0.2))).f, 0.1 + 0.2);
  EXPECT_EQ(evalUnary(UnaryOp::Sin, f32(1.0)).f, static_cast<double>(std::sin(1.0f)));
  EXPECT_EQ(evalUnary(UnaryOp::Exp, f64(1.0)).f, std::exp(1.0));
  EXPECT_TRUE(std::isinf(ok(evalBinary(BinaryOp::Div, f32(1), f32(0))).f));
  EXPECT_EQ(ok(evalBinary(BinaryOp::Rem, f64(7.5), f64(2))).f, 1.5);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Pow, f32(2), f32(10))).f, 1024.0);
}

TEST(Semantics, FloatMinMaxAreDeterministic) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ok(evalBinary(BinaryOp::Min, f64(nan), f64(2))).f, 2);
  EXPECT_EQ(ok(evalBinary(BinaryOp::Max, f64(3), f64(nan))).f, 3);
  EXPECT_TRUE(std::signbit(ok(evalBinary(BinaryOp::Min, f64(0.0), f64(-0.0))).f));
  EXPECT_FALSE(std::signbit(ok(evalBinary(BinaryOp::Max, f64(-0.0), f64(0.0))).f));
  EXPECT_EQ(ok(evalBinary(BinaryOp::Min, f32(-1), f32(4))).f, -1);
}

TEST(Semantics, ComparisonsAreOrderedExceptNe) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(evalCmp(CmpPredicate::Eq, f64(nan), f64(nan)));
  EXPECT_TRUE(evalCmp(CmpPredicate::Ne, f64(nan), f64(nan)));
  EXPECT_FALSE(evalCmp(CmpPredicate::Lt, f64(nan), f64(1)));
  EXPECT_FALSE(evalCmp(CmpPredicate::Ge, f64(nan), f64(1)));
  EXPECT_TRUE(evalCmp(CmpPredicate::Lt, i32(-1), i32(0)));
  EXPECT_TRUE(evalCmp(CmpPredicate::Eq, f64(0.0), f64(-0.0)));
}

TEST(Semantics, Casts) {
  EXPECT_EQ(evalCast(f32(-2.7), ScalarType::I32).i, -2);
  EXPECT_EQ(evalCast(f64(1e20), ScalarType::I32).i, INT32_MAX);
  EXPECT_EQ(evalCast(f64(-1e20), ScalarType::I32).i, INT32_MIN);
  EXPECT_EQ(evalCast(f64(std::nan("")), ScalarType::I64).i, 0);
  EXPECT_EQ(evalCast(i64(0x100000001LL), ScalarType::I32).i, 1);
  EXPECT_EQ(evalCast(i32(-1), ScalarType::I64).i, -1);
  EXPECT_EQ(evalCast(i32(2), ScalarType::I1).i, 1);
  EXPECT_EQ(evalCast(f32(0.5), ScalarType::I1).i, 1);
  EXPECT_EQ(evalCast(Scalar::ofInt(ScalarType::I1, 1), ScalarType::I32).i, 1);
  EXPECT_EQ(evalCast(i32((1 << 24) + 1), ScalarType::F32).f, 16777216.0);
  EXPECT_EQ(evalCast(f64(0.1), ScalarType::F32).f, static_cast<double>(0.1f));
}

//===----------------------------------------------------------------------===//
// Program and buffers
//===----------------------------------------------------------------------===//

TEST(Program, FieldsAreZeroedAndCompanionsMatchDeclarations) {
  Harness h("field @x : f32[3, 2] grad\nfield @n : i32\n");
  Buffer *x = h.program->field("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->numElements(), 6);
  EXPECT_EQ(x->shape(), (std::vector<int64_t>{3, 2}));
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(x->get(i).f, 0.0);
  EXPECT_NE(h.program->field("x", Component::Grad), nullptr);
  EXPECT_EQ(h.program->field("x", Component::Dual), nullptr);
  EXPECT_EQ(h.program->field("n", Component::Grad), nullptr);
  EXPECT_EQ(h.program->field("n")->numElements(), 1);
  EXPECT_EQ(h.program->field("missing"), nullptr);
}

TEST(Buffer, IndexingAndBorrowing) {
  float storage[6] = {0, 1, 2, 3, 4, 5};
  auto b = Buffer::borrow(ScalarType::F32, {2, 3}, storage);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->isBorrowed());
  int64_t idx[] = {1, 2};
  ASSERT_EQ(b->flatIndex(idx), 5);
  EXPECT_EQ(b->get(5).f, 5.0);
  b->set(0, f32(9.5));
  EXPECT_EQ(storage[0], 9.5f);
  int64_t bad[] = {2, 0};
  EXPECT_FALSE(b->flatIndex(bad).has_value());
  int64_t negative[] = {0, -1};
  EXPECT_FALSE(b->flatIndex(negative).has_value());
  EXPECT_FALSE(Buffer::create(ScalarType::F32, {-1}).ok());
  EXPECT_FALSE(Buffer::create(ScalarType::F64, {1LL << 40, 1LL << 40}).ok());
  EXPECT_FALSE(Buffer::borrow(ScalarType::F32, {4}, nullptr).ok());
}

//===----------------------------------------------------------------------===//
// Launch argument validation
//===----------------------------------------------------------------------===//

constexpr std::string_view kArgsModule = R"(
kernel @k(%n: i32, %a: ndarray<f32, 2> grad) {
  serial {
  }
}
)";

TEST(LaunchArgs, WrongArityTypeRankAndCompanions) {
  Harness h(kArgsModule);
  auto a = Buffer::create(ScalarType::F32, {2, 2});
  auto g = Buffer::create(ScalarType::F32, {2, 2});
  auto g3 = Buffer::create(ScalarType::F32, {3, 2});
  auto v = Buffer::create(ScalarType::F32, {4});
  auto d = Buffer::create(ScalarType::F64, {2, 2});
  NdarrayArg good{&*a, &*g, nullptr};
  NdarrayArg noGrad{&*a, nullptr, nullptr};
  NdarrayArg badGrad{&*a, &*g3, nullptr};
  NdarrayArg rank1{&*v, &*v, nullptr};
  NdarrayArg f64s{&*d, &*d, nullptr};

  EXPECT_TRUE(h.run("k", {LaunchArg::i32(1), LaunchArg::ndarray(&good)}).ok());
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(1)})),
            "kernel @k takes 2 arguments but 1 was given");
  EXPECT_EQ(message(h.run("k", {LaunchArg::f32(1), LaunchArg::ndarray(&good)})),
            "argument 0 (%n) of kernel @k has type i32, but a f32 value was given");
  EXPECT_EQ(message(h.run("k", {LaunchArg::ndarray(&good), LaunchArg::ndarray(&good)})),
            "argument 0 (%n) of kernel @k is a scalar of type i32, but an ndarray was given");
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(1), LaunchArg::i32(2)})),
            "argument 1 (%a) of kernel @k is an ndarray<f32, 2>, but a scalar was given");
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(1), LaunchArg::ndarray(&rank1)})),
            "argument 1 (%a) of kernel @k is an ndarray<f32, 2>, but the buffer given holds f32 "
            "with 1 dimension");
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(1), LaunchArg::ndarray(&f64s)})),
            "argument 1 (%a) of kernel @k is an ndarray<f32, 2>, but the buffer given holds f64 "
            "with 2 dimensions");
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(1), LaunchArg::ndarray(&noGrad)})),
            "argument 1 (%a) of kernel @k declares a grad companion, but no grad buffer was "
            "given");
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(1), LaunchArg::ndarray(&badGrad)})),
            "the grad buffer of argument 1 (%a) of kernel @k must have the primal's element "
            "type and shape");
  EXPECT_EQ(message(h.run("missing")), "no kernel named '@missing' in the module");
}

// Arguments by name, in any order, run as the same arguments by position;
// an unknown, repeated or missing name is an error naming it.
TEST(LaunchArgs, ByNameInAnyOrder) {
  Harness h(R"(field @y : f32[4]
kernel @k(%n: i32, %a: ndarray<f32, 1>, %s: f32) {
  parallel for %i = 0 to %n {
    %v = load %a[%i] : f32
    %w = mul %v, %s : f32
    store @y[%i], %w
  }
})");
  auto a = Buffer::create(ScalarType::F32, {4});
  for (int i = 0; i < 4; ++i)
    a->set(i, Scalar::ofFloat(ScalarType::F32, i + 1));
  NdarrayArg nd{&*a, nullptr, nullptr};
  NamedLaunchArg named[] = {
      {"s", LaunchArg::f32(0.5f)}, {"a", LaunchArg::ndarray(&nd)}, {"n", LaunchArg::i32(3)}};
  ASSERT_TRUE(h.program->launchByName("k", named, h.interp).ok());
  EXPECT_EQ(h.getF("y", 0), 0.5);
  EXPECT_EQ(h.getF("y", 2), 1.5);
  EXPECT_EQ(h.getF("y", 3), 0.0); // %n = 3
  auto fails = [&](std::vector<NamedLaunchArg> args) {
    return message(h.program->launchByName("k", args, h.interp));
  };
  EXPECT_EQ(fails({{"n", LaunchArg::i32(3)}, {"m", LaunchArg::i32(3)}}),
            "kernel @k has no argument named %m; it takes %n, %a, %s");
  EXPECT_EQ(fails({{"n", LaunchArg::i32(3)}, {"n", LaunchArg::i32(4)}}),
            "argument %n of kernel @k is given twice");
  EXPECT_EQ(fails({{"n", LaunchArg::i32(3)}, {"s", LaunchArg::f32(1)}}),
            "argument %a of kernel @k is missing");
  // Types are checked as for arguments by position.
  EXPECT_EQ(
      fails({{"n", LaunchArg::f32(3)}, {"a", LaunchArg::ndarray(&nd)}, {"s", LaunchArg::f32(1)}}),
      "argument 0 (%n) of kernel @k has type i32, but a f32 value was given");
  EXPECT_EQ(message(h.program->launchByName("nope", {}, h.interp)),
            "no kernel named '@nope' in the module");
}

TEST(LaunchArgs, NdarraysOfDifferentTypesMustNotShareMemory) {
  Harness h(R"(kernel @k(%a: ndarray<f32, 1>, %b: ndarray<i32, 1>, %c: ndarray<f32, 1>) {
  parallel for %i = 0 to 4 {
    %v = load %b[%i] : i32
    %f = cast %v : i32 to f32
    store %a[%i], %f
  }
})");
  std::vector<float> storage(12, 0.f);
  auto a = Buffer::borrow(ScalarType::F32, {4}, storage.data());
  auto b = Buffer::borrow(ScalarType::I32, {4}, storage.data() + 2); // overlaps a
  auto c = Buffer::borrow(ScalarType::F32, {4}, storage.data() + 1); // overlaps a: same type
  auto far = Buffer::borrow(ScalarType::I32, {4}, storage.data() + 8);
  NdarrayArg na{&*a}, nb{&*b}, nc{&*c}, nfar{&*far};
  EXPECT_EQ(message(h.run(
                "k", {LaunchArg::ndarray(&na), LaunchArg::ndarray(&nb), LaunchArg::ndarray(&nc)})),
            "kernel @k: the buffers given for '%a' (ndarray<f32, 1>) and '%b' (ndarray<i32, 1>) "
            "overlap; ndarrays of different element types or ranks must not share memory (qd's "
            "analyses take them to be distinct)");
  // Same element type and rank may overlap; disjoint buffers are fine.
  EXPECT_TRUE(
      h.run("k", {LaunchArg::ndarray(&na), LaunchArg::ndarray(&nfar), LaunchArg::ndarray(&nc)})
          .ok());
}

// Fields never share storage with ndarrays (docs/analyses.md): a launch
// that gives a field the kernel accesses as an ndarray argument (or
// companion) is refused, naming both; a field the kernel does not touch
// may be passed, and so may a copy.
TEST(LaunchArgs, AFieldTheKernelAccessesIsNoNdarrayArgument) {
  Harness h(R"(field @w : f32[4] grad
field @other : f32[4]
kernel @k(%a: ndarray<f32, 1> grad) {
  parallel for %i = 0 to 4 {
    %v = load @w[%i] : f32
    %one = const 1 : f32
    %x = add %v, %one : f32
    store %a[%i], %x
  }
})");
  Buffer &w = *h.program->field("w");
  Buffer &wGrad = *h.program->field("w", Component::Grad);
  Buffer &other = *h.program->field("other");
  for (int64_t i = 0; i < 4; ++i)
    w.set(i, Scalar::ofFloat(ScalarType::F32, double(i)));
  auto copy = *Buffer::create(ScalarType::F32, {4});
  NdarrayArg same{&w, &other}, asGrad{&other, &w}, untouched{&other, &copy};
  EXPECT_EQ(message(h.run("k", {LaunchArg::ndarray(&same)})),
            "kernel @k: the buffer given for '%a' is the storage of field '@w', which the kernel "
            "accesses; qd's analyses take fields and ndarrays to be distinct memory, so pass a "
            "copy of the field (Buffer::create and copy its contents) instead");
  EXPECT_NE(message(h.run("k", {LaunchArg::ndarray(&asGrad)}))
                .find("'%a.grad' is the storage "
                      "of field '@w'"),
            std::string::npos);
  ASSERT_TRUE(h.run("k", {LaunchArg::ndarray(&untouched)}).ok());
  EXPECT_EQ(other.get(3).f, 4.0f);
  // @w.grad is not accessed: passing it is fine.
  NdarrayArg gradOk{&wGrad, &copy};
  EXPECT_TRUE(h.run("k", {LaunchArg::ndarray(&gradOk)}).ok());
  EXPECT_EQ(wGrad.get(2).f, 3.0f);
}

// ndarrayBuffersOverlap (which picks the distinct-ndarray code) against
// every pair, for buffers at random places in one allocation and some
// disjoint ones, in random argument order.
TEST(LaunchArgs, OverlappingBuffersAreFoundWhereverTheyLie) {
  std::vector<float> storage(64, 0.f), other(16, 0.f);
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  int overlapping = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<Buffer> buffers;
    std::vector<std::pair<const float *, int64_t>> spans;
    const int count = 1 + int(next(6));
    for (int i = 0; i < count; ++i) {
      bool far = next(4) == 0;
      int64_t len = 1 + int64_t(next(8));
      const float *at = far ? other.data() + next(8) : storage.data() + next(56);
      buffers.push_back(*Buffer::borrow(ScalarType::F32, {len}, const_cast<float *>(at)));
      spans.push_back({at, len});
    }
    bool expected = false;
    for (int x = 0; x < count; ++x)
      for (int y = x + 1; y < count; ++y)
        expected |= spans[x].first < spans[y].first + spans[y].second &&
                    spans[y].first < spans[x].first + spans[x].second;
    overlapping += expected;
    std::vector<NdarrayArg> nd;
    for (Buffer &b : buffers)
      nd.push_back({&b});
    std::vector<LaunchArg> args;
    for (NdarrayArg &a : nd)
      args.push_back(LaunchArg::ndarray(&a));
    EXPECT_EQ(ndarrayBuffersOverlap(args), expected) << "trial " << trial;
  }
  EXPECT_GT(overlapping, 50); // both outcomes are exercised
  EXPECT_LT(overlapping, 250);
}

TEST(Interpreter, NarrowOffsetsNeedEveryComponentBelow2To31Elements) {
  // Borrowed over one float: only the shapes are read.
  float cell = 0;
  auto borrowed = [&](std::vector<int64_t> shape) {
    return *Buffer::borrow(ScalarType::F32, std::move(shape), &cell);
  };
  Buffer small = borrowed({1024, 1024}), edge = borrowed({65536, 32767}),
         past = borrowed({65536, 32768}), scalar = borrowed({});
  auto fits = [](std::vector<NdarrayArg> nd) {
    std::vector<LaunchArg> args = {LaunchArg::i32(3)};
    for (NdarrayArg &a : nd)
      args.push_back(LaunchArg::ndarray(&a));
    return ndarraysFitNarrowOffsets(args);
  };
  EXPECT_TRUE(fits({}));
  EXPECT_TRUE(fits({{&small}, {&scalar}}));
  EXPECT_TRUE(fits({{&edge, &small}})) << "65536 x 32767 = 2^31 - 65536 elements";
  EXPECT_FALSE(fits({{&past}})) << "2^31 elements";
  EXPECT_FALSE(fits({{&small, &past}})) << "a gradient component past the limit";
  EXPECT_FALSE(fits({{&small}, {&small, nullptr, &past}})) << "a dual component";
}

//===----------------------------------------------------------------------===//
// Statements
//===----------------------------------------------------------------------===//

TEST(Interpreter, ParallelForLocalsAndArithmetic) {
  Harness h(R"(
field @x : f32[4]
field @y : f32[4]
kernel @k(%scale: f32) {
  parallel for %i = 0 to 4 {
    %xi = load @x[%i] : f32
    %v = alloca f32
    %m = mul %xi, %scale : f32
    store %v, %m
    %l = load %v : f32
    %one = const 1.0 : f32
    %r = add %l, %one : f32
    store @y[%i], %r
  }
}
)");
  h.setF("x", {1, 2, 3, 4});
  ASSERT_TRUE(h.run("k", {LaunchArg::f32(0.5f)}).ok());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(h.getF("y", i), (i + 1) * 0.5 + 1) << i;
}

TEST(Interpreter, DynamicBoundsFromFieldsArgumentsShapesAndIndices) {
  Harness h(R"(
field @n : i32
field @count : i32
kernel @k(%m: i32, %a: ndarray<f32, 1>) {
  %len = shape %a, 0 : i32
  %n = load @n[] : i32
  %total = add %len, %n : i32
  parallel for %i = 0 to %total {
    for %j = 0 to %i {
      %one = const 1 : i32
      atomic_add @count[], %one : i32
    }
    for %k = %m to %i {
      %two = const 2 : i32
      atomic_add @count[], %two : i32
    }
  }
}
)");
  h.setI("n", {2});
  auto a = Buffer::create(ScalarType::F32, {3});
  NdarrayArg nd{&*a, nullptr, nullptr};
  ASSERT_TRUE(h.run("k", {LaunchArg::i32(3), LaunchArg::ndarray(&nd)}).ok());
  // total = 5; sum_{i<5} i = 10; sum_{i<5} 2*max(0, i-3) = 2.
  EXPECT_EQ(h.getI("count"), 12);
}

TEST(Interpreter, WhileBreakContinueAndIf) {
  Harness h(R"(
field @out : i32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %c = alloca i32
    %steps = alloca i32
    store %c, %i
    while {
      %v = load %c : i32
      %one = const 1 : i32
      %le = cmp le %v, %one : i32
      if %le {
        break
      }
      %s = load %steps : i32
      %s1 = add %s, %one : i32
      store %steps, %s1
      %two = const 2 : i32
      %r = rem %v, %two : i32
      %zero = const 0 : i32
      %even = cmp eq %r, %zero : i32
      if %even {
        %h = div %v, %two : i32
        store %c, %h
        continue
      }
      %three = const 3 : i32
      %t = mul %v, %three : i32
      %t1 = add %t, %one : i32
      store %c, %t1
    }
    %res = load %steps : i32
    %odd = const 1 : i32
    %bit = and %i, %odd : i32
    %isodd = cast %bit : i32 to i1
    if %isodd {
      %neg = neg %res : i32
      store @out[%i], %neg
    } else {
      store @out[%i], %res
    }
  }
}
)");
  ASSERT_TRUE(h.run("k").ok());
  // Collatz step counts of 0..7, negated for odd i.
  int64_t expected[] = {0, -0, 1, -7, 2, -5, 8, -16};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(h.getI("out", i), expected[i]) << i;
}

TEST(Interpreter, ContinueInParallelForAndBreakInFor) {
  Harness h(R"(
field @out : i32[6]
kernel @k() {
  parallel for %i = 0 to 6 {
    %three = const 3 : i32
    %small = cmp lt %i, %three : i32
    if %small {
      continue
    }
    for %j = 0 to 100 {
      %stop = cmp eq %j, %i : i32
      if %stop {
        break
      }
      %one = const 1 : i32
      atomic_add @out[%i], %one : i32
    }
  }
}
)");
  ASSERT_TRUE(h.run("k").ok());
  int64_t expected[] = {0, 0, 0, 3, 4, 5};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(h.getI("out", i), expected[i]) << i;
}

TEST(Interpreter, NdarraysWithCompanionsSelectAndCasts) {
  Harness h(R"(
kernel @k(%a: ndarray<f64, 2> grad, %out: ndarray<i64, 1>) {
  %rows = shape %a, 0 : i32
  %cols = shape %a, 1 : i32
  parallel for %i = 0 to %rows {
    for %j = 0 to %cols {
      %v = load %a[%i, %j] : f64
      %zero = const 0.0 : f64
      %pos = cmp gt %v, %zero : f64
      %abs = neg %v : f64
      %m = select %pos, %v, %abs : f64
      store %a.grad[%i, %j], %m
      %t = cast %v : f64 to i64
      atomic_add %out[%i], %t : i64
    }
  }
}
)");
  auto a = Buffer::create(ScalarType::F64, {2, 3});
  auto g = Buffer::create(ScalarType::F64, {2, 3});
  auto out = Buffer::create(ScalarType::I64, {2});
  double values[] = {1.5, -2.5, 3.9, -0.5, 7.0, -8.2};
  for (int i = 0; i < 6; ++i)
    a->set(i, f64(values[i]));
  NdarrayArg na{&*a, &*g, nullptr}, no{&*out, nullptr, nullptr};
  ASSERT_TRUE(h.run("k", {LaunchArg::ndarray(&na), LaunchArg::ndarray(&no)}).ok());
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(g->get(i).f, std::fabs(values[i])) << i;
  EXPECT_EQ(out->get(0).i, 1 - 2 + 3);
  EXPECT_EQ(out->get(1).i, 0 + 7 - 8);
}

TEST(Interpreter, LaunchTimeStatementsSeeEarlierTasks) {
  Harness h(R"(
field @n : i32
field @hits : i32
kernel @k() {
  serial {
    %five = const 5 : i32
    store @n[], %five
  }
  %n = load @n[] : i32
  parallel for %i = 0 to %n {
    %one = const 1 : i32
    atomic_add @hits[], %one : i32
  }
}
)");
  ASSERT_TRUE(h.run("k").ok());
  EXPECT_EQ(h.getI("hits"), 5);
}

TEST(Interpreter, OutOfRangeIndexIsAnErrorNamingTheStatement) {
  Harness h(R"(
field @x : f32[4]
kernel @k() {
  parallel for %i = 0 to 5 {
    %v = load @x[%i] : f32
  }
}
)");
  EXPECT_EQ(message(h.run("k")),
            "t.qd:5:5: error: index [4] is out of range for '@x' of shape [4] (in kernel @k, task "
            "at t.qd:4:3: %v = load @x[%i] : f32)");
}

TEST(Interpreter, DivisionByZeroIsAnError) {
  Harness h(R"(
field @x : i32
kernel @k(%d: i32) {
  serial {
    %one = const 1 : i32
    %q = div %one, %d : i32
    store @x[], %q
  }
}
)");
  EXPECT_TRUE(h.run("k", {LaunchArg::i32(1)}).ok());
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(0)})),
            "t.qd:6:5: error: integer division by zero (in kernel @k, task at t.qd:4:3: %q = div "
            "%one, %d : i32)");
}

//===----------------------------------------------------------------------===//
// Adstacks
//===----------------------------------------------------------------------===//

constexpr std::string_view kStackModule = R"(
field @x : f32[2]
field @y : f32[2]
field @adj : f32[2]
kernel @k(%n: i32) {
  parallel for %i = 0 to 2 {
    %xi = load @x[%i] : f32
    %s = adstack.alloca f32, capacity 0
    %v = alloca f32
    store %v, %xi
    for %j = 0 to %n {
      %a = load %v : f32
      adstack.push %s, %a
      %sa = sin %a : f32
      store %v, %sa
    }
    %one = const 1.0 : f32
    for %j2 = 0 to %n {
      %t = adstack.load_top %s : f32
      adstack.acc_adjoint %s, %one
      adstack.acc_adjoint %s, %t
      %g = adstack.load_top_adj %s : f32
      atomic_add @adj[%i], %g : f32
      adstack.pop %s
    }
    %r = load %v : f32
    store @y[%i], %r
  }
}
)";

TEST(AdStack, PushPopTopAdjointAndDepthTracking) {
  Harness h(kStackModule);
  h.setF("x", {0.5, 1.0});
  LaunchOptions options;
  options.defaultAdStackCapacity = 3;
  ASSERT_TRUE(h.run("k", {LaunchArg::i32(3)}, options).ok());
  for (int i = 0; i < 2; ++i) {
    float v = i ? 1.0f : 0.5f, adj = 0;
    float vs[3];
    for (int j = 0; j < 3; ++j) {
      vs[j] = v;
      v = std::sin(v);
    }
    for (int j = 2; j >= 0; --j)
      adj += 1.0f + vs[j];
    EXPECT_EQ(h.getF("y", i), static_cast<double>(v)) << i;
    EXPECT_FLOAT_EQ(static_cast<float>(h.getF("adj", i)), adj) << i;
  }
  const AdStackAllocaStmt *stack = findStack(*h.module);
  ASSERT_NE(stack, nullptr);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(stack), 3);
  EXPECT_EQ(h.interp.adStackCapacities().at(stack), 3);
}

TEST(AdStack, OverflowFailsTheLaunchWithTheRealNeed) {
  Harness h(kStackModule);
  LaunchOptions options;
  options.sizeAdStacks = false; // the interpreter's own check, without sizing
  options.defaultAdStackCapacity = 2;
  EXPECT_EQ(message(h.run("k", {LaunchArg::i32(3)}, options)),
            "t.qd:8:5: error: adstack overflow: the adstack declared at t.qd:8:5 (kernel @k, task "
            "at t.qd:6:3) has capacity 2 and this launch needed 3; give it a larger capacity or "
            "let Program::launch size it");
  // The pushes that do not fit are counted, not stored: the need is the
  // depth the launch reached, the same number a compiled backend reports.
  absl::Status five = h.run("k", {LaunchArg::i32(5)}, options);
  EXPECT_EQ(five.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(message(five).find("has capacity 2 and this launch needed 5"), std::string::npos)
      << message(five);
  EXPECT_EQ(h.interp.adStackMaxDepths().at(findStack(*h.module)), 5);
  // The program stays usable: a later launch within capacity succeeds.
  EXPECT_TRUE(h.run("k", {LaunchArg::i32(2)}, options).ok());
  EXPECT_EQ(h.interp.adStackMaxDepths().at(findStack(*h.module)), 2);
}

TEST(AdStack, PerLaunchCapacitiesOverrideDeclarations) {
  Harness h(kStackModule);
  LaunchOptions options;
  options.adStackCapacities[findStack(*h.module)] = 50;
  ASSERT_TRUE(h.run("k", {LaunchArg::i32(50)}, options).ok());
  EXPECT_EQ(h.interp.adStackMaxDepths().at(findStack(*h.module)), 50);
  EXPECT_FALSE(h.run("k", {LaunchArg::i32(51)}, options).ok());
}

TEST(AdStack, UnsizedStackWithoutDefaultIsAnError) {
  Harness h(kStackModule);
  LaunchOptions options;
  options.sizeAdStacks = false;
  std::string m = message(h.run("k", {LaunchArg::i32(1)}, options));
  EXPECT_NE(m.find("t.qd:8:5: error: adstack has no capacity"), std::string::npos) << m;
}

TEST(AdStack, UnderflowIsAnError) {
  Harness h(R"(
kernel @k() {
  serial {
    %s = adstack.alloca i32, capacity 4
    %one = const 1 : i32
    adstack.push %s, %one
    adstack.pop %s
    adstack.pop %s
  }
}
)");
  EXPECT_EQ(message(h.run("k")),
            "t.qd:8:5: error: adstack underflow: the adstack declared at t.qd:4:5 is empty (in "
            "kernel @k, task at t.qd:3:3: adstack.pop %s)");
}

TEST(AdStack, AllocaRestartsTheStackEachIteration) {
  Harness h(R"(
field @depth : i32
kernel @k() {
  parallel for %i = 0 to 10 {
    %s = adstack.alloca i1, capacity 2
    %t = const true : i1
    adstack.push %s, %t
    adstack.push %s, %t
  }
}
)");
  EXPECT_TRUE(h.run("k").ok());
  EXPECT_EQ(h.interp.adStackMaxDepths().at(findStack(*h.module)), 2);
}

} // namespace
} // namespace qd
