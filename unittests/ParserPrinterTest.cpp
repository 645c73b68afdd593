//===- ParserPrinterTest.cpp - Text format round trips and diagnostics ----===//
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"

#include "ProgramGen.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_set>

namespace qd {
namespace {

std::unique_ptr<Module> parseOk(std::string_view text, const ParseOptions &options = {}) {
  absl::StatusOr<std::unique_ptr<Module>> m = parseModule(text, options);
  EXPECT_TRUE(m.ok()) << m.status() << "\nwhile parsing:\n" << text;
  return m.ok() ? *std::move(m) : nullptr;
}

std::string parseError(std::string_view text, const ParseOptions &options = {}) {
  absl::StatusOr<std::unique_ptr<Module>> m = parseModule(text, options);
  EXPECT_FALSE(m.ok()) << "parsed unexpectedly:\n" << text;
  if (m.ok())
    return "";
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(m.status().message());
}

/// print -> parse -> print is the identity, and the reparsed module is
/// equivalent to the original.
void expectRoundTrip(const Module &m) {
  std::string p1 = printModule(m);
  std::unique_ptr<Module> again = parseOk(p1);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(printModule(*again), p1);
  std::string why;
  EXPECT_TRUE(isEquivalent(m, *again, &why)) << why << "\n" << p1;
}

constexpr const char *kDesignExample = R"(field @x : f32[16] grad
field @y : f32 grad
field @n : i32

kernel @compute() {
  parallel for %i = 0 to 16 {
    %xi = load @x[%i] : f32
    %v = alloca f32
    store %v, %xi
    %n = load @n[] : i32
    for %j = 0 to %n {
      %a = load %v : f32
      %s = sin %a : f32
      %c = const 0.1 : f32
      %b = add %s, %c : f32
      store %v, %b
    }
    %r = load %v : f32
    atomic_add @y[], %r : f32
  }
}
)";

constexpr const char *kReverseExample = R"(field @x : f64[8, 4] grad dual
field @loss : f64 grad

kernel @fwd(%a: ndarray<f64, 2> grad, %n: i32, %scale: f64) {
  %rows = shape %a, 0 : i32
  parallel for %i = 0 to %rows {
    %st = adstack.alloca f64, capacity 0
    %acc = alloca f64
    %zero = const 0 : i64
    %j = cast %i : i32 to i64
    for %k = -2 to %n {
      %v = load %a[%i, %zero] : f64
      %w = load @x.dual[%j, %zero] : f64
      %p = pow %v, %w : f64
      adstack.push %st, %p
      %kk = cmp ne %k, %n : i32
      if %kk {
        continue
      }
    }
    while {
      %t = adstack.load_top %st : f64
      %g = adstack.load_top_adj %st : f64
      %m = mul %t, %scale : f64
      adstack.acc_adjoint %st, %m
      adstack.pop %st
      %old = load %acc : f64
      %new = atan2 %old, %g : f64
      store %acc, %new
      %neg = cmp lt %new, %scale : f64
      %r = select %neg, %new, %scale : f64
      atomic_add %a.grad[%i, %zero], %r : f64
      break
    }
  }
  serial {
    %one = const 1.0 : f64
    store @loss.grad[], %one
  }
}

kernel @second() {
  serial {
    %a = const 2147483647 : i32
    %b = const -2147483648 : i32
    %c = shl %a, %b : i32
    %d = const 9223372036854775807 : i64
    %e = const -9223372036854775808 : i64
    %f = rem %d, %e : i64
    %g = const false : i1
    %h = or %g, %g : i1
    %i = const -0.0 : f32
    %j = const inf : f32
    %k = const -inf : f64
    %l = const nan : f64
    %m = const 1e+30 : f32
    %n = floor %m : f32
  }
}
)";

TEST(ParserPrinterTest, HandWrittenModulesRoundTrip) {
  for (const char *text : {kDesignExample, kReverseExample}) {
    std::unique_ptr<Module> m = parseOk(text);
    ASSERT_NE(m, nullptr);
    absl::Status v = verify(*m);
    EXPECT_TRUE(v.ok()) << v;
    // These are written in canonical form, so printing reproduces them.
    EXPECT_EQ(printModule(*m), text);
    expectRoundTrip(*m);
  }
}

TEST(ParserPrinterTest, NonCanonicalInputPrintsCanonically) {
  std::unique_ptr<Module> m = parseOk(R"(
// A comment before anything.
field @x:f32[4,2]   dual grad   // companions in any order
kernel @k ( %a : ndarray< f32 ,1 > , %n:i32 ) {   serial{
  %c = const +1.50 : f32    // explicit plus sign, trailing zero
  %d = const 1 : i1
  %e = const +7 : i32
  %f = const 1E3 : f64
}})");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(printModule(*m), R"(field @x : f32[4, 2] grad dual

kernel @k(%a: ndarray<f32, 1>, %n: i32) {
  serial {
    %c = const 1.5 : f32
    %d = const true : i1
    %e = const 7 : i32
    %f = const 1000.0 : f64
  }
}
)");
}

TEST(ParserPrinterTest, EmptyModuleAndEmptyKernels) {
  std::unique_ptr<Module> m = parseOk("");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(printModule(*m), "");
  m = parseOk("kernel @a() {\n}\n\nkernel @b() {\n}\n");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(printModule(*m), "kernel @a() {\n}\n\nkernel @b() {\n}\n");
  m = parseOk("field @f : i64[3]\n");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(printModule(*m), "field @f : i64[3]\n");
}

TEST(ParserPrinterTest, ParsedLocations) {
  ParseOptions options;
  options.filename = "loc.qd";
  std::unique_ptr<Module> m = parseOk("field @f : f32\nkernel @k(%n: i32) {\n  serial {\n"
                                      "    %c = const 1 : i32\n    break\n  }\n}\n",
                                      options);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->findField("f")->loc().str(), "loc.qd:1:1");
  Kernel *k = m->findKernel("k");
  EXPECT_EQ(k->loc().str(), "loc.qd:2:1");
  EXPECT_EQ(k->argument(0)->loc().str(), "loc.qd:2:11");
  Stmt &serial = k->body().front();
  EXPECT_EQ(serial.loc().str(), "loc.qd:3:3");
  EXPECT_EQ(serial.block(0).front().loc().str(), "loc.qd:4:5");
  EXPECT_EQ(serial.block(0).back().loc().str(), "loc.qd:5:5");
  // The verifier reports at those locations.
  absl::Status v = verify(*m);
  EXPECT_EQ(std::string(v.message()),
            "loc.qd:5:5: error: 'break' must be inside a 'for' or 'while' loop");
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

/// Builds `kernel @k() { %c = const <value> : <type> }`.
std::unique_ptr<Module> constModule(std::unique_ptr<ConstStmt> c) {
  auto m = std::make_unique<Module>();
  Kernel *k = m->addKernel(std::make_unique<Kernel>("k"));
  c->setName("c");
  IRBuilder(*k).insert(std::move(c));
  return m;
}

/// Prints a constant, parses it back and returns the reparsed constant's
/// module (null on failure, with a test failure recorded).
std::unique_ptr<Module> reparse(const Module &m) {
  std::string p1 = printModule(m);
  absl::StatusOr<std::unique_ptr<Module>> again = parseModule(p1);
  if (!again.ok()) {
    ADD_FAILURE() << again.status() << "\n" << p1;
    return nullptr;
  }
  EXPECT_EQ(printModule(**again), p1);
  return *std::move(again);
}

const ConstStmt &onlyConst(const Module &m) {
  return cast<ConstStmt>(m.kernels()[0]->body().front());
}

/// Checks that `value` survives print -> parse bit for bit.
void checkFloatRoundTrip(ScalarType type, double value) {
  auto m = constModule(ConstStmt::getFloat(type, value));
  double stored = onlyConst(*m).floatValue();
  std::unique_ptr<Module> again = reparse(*m);
  if (!again)
    return;
  double parsed = onlyConst(*again).floatValue();
  EXPECT_EQ(std::bit_cast<uint64_t>(parsed), std::bit_cast<uint64_t>(stored))
      << toString(type) << " " << printModule(*m);
  std::string why;
  EXPECT_TRUE(isEquivalent(*m, *again, &why)) << why;
}

TEST(ParserPrinterTest, SpecialFloatConstantsRoundTrip) {
  using D = std::numeric_limits<double>;
  using F = std::numeric_limits<float>;
  for (double d : {0.0,
                   -0.0,
                   1.0,
                   -1.0,
                   0.1,
                   1.0 / 3,
                   1e300,
                   -1e-300,
                   D::infinity(),
                   -D::infinity(),
                   D::quiet_NaN(),
                   -D::quiet_NaN(),
                   D::max(),
                   D::lowest(),
                   D::min(),
                   D::denorm_min(),
                   -D::denorm_min(),
                   D::min() - D::denorm_min(),
                   D::epsilon(),
                   9007199254740993.0,
                   123456789.0})
    checkFloatRoundTrip(ScalarType::F64, d);
  for (float f : {0.0f,
                  -0.0f,
                  1.0f,
                  0.1f,
                  0.2f,
                  1.0f / 3,
                  16777217.0f,
                  F::infinity(),
                  -F::infinity(),
                  F::quiet_NaN(),
                  -F::quiet_NaN(),
                  F::max(),
                  F::lowest(),
                  F::min(),
                  F::denorm_min(),
                  -F::denorm_min(),
                  F::min() - F::denorm_min(),
                  F::epsilon(),
                  1e30f,
                  3.4028235e38f})
    checkFloatRoundTrip(ScalarType::F32, f);
}

TEST(ParserPrinterTest, FloatConstantSpellings) {
  auto text = [](ScalarType t, double v) {
    auto m = constModule(ConstStmt::getFloat(t, v));
    std::string p = printModule(*m);
    size_t start = p.find("const ") + 6;
    return p.substr(start, p.find(" :", start) - start);
  };
  EXPECT_EQ(text(ScalarType::F32, 0.1), "0.1");
  EXPECT_EQ(text(ScalarType::F64, 0.1), "0.1");
  EXPECT_EQ(text(ScalarType::F64, static_cast<double>(0.1f)), "0.10000000149011612");
  EXPECT_EQ(text(ScalarType::F32, 1.0), "1.0");
  EXPECT_EQ(text(ScalarType::F32, -0.0), "-0.0");
  EXPECT_EQ(text(ScalarType::F64, 1e30), "1e+30");
  EXPECT_EQ(text(ScalarType::F64, std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(text(ScalarType::F32, -std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(text(ScalarType::F64, std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(text(ScalarType::F64, -std::numeric_limits<double>::quiet_NaN()), "-nan");
  EXPECT_EQ(text(ScalarType::F32, std::numeric_limits<float>::denorm_min()), "1e-45");
  EXPECT_EQ(formatFloat(100.0, ScalarType::F64), "100.0");
  EXPECT_EQ(formatFloat(2.5, ScalarType::F32), "2.5");
}

TEST(ParserPrinterTest, NanPayloadsAreCanonical) {
  // The text form cannot spell NaN payloads, so constants never carry one:
  // a NaN constant is the quiet NaN with the same sign.
  double payload = std::bit_cast<double>(uint64_t{0x7ff0000000000123});
  double negPayload = std::bit_cast<double>(uint64_t{0xfff8000000abcdef});
  ASSERT_TRUE(std::isnan(payload));
  auto p = ConstStmt::getFloat(ScalarType::F64, payload);
  auto n = ConstStmt::getFloat(ScalarType::F64, negPayload);
  auto q = ConstStmt::getFloat(ScalarType::F64, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(p->sameValue(*q));
  EXPECT_FALSE(n->sameValue(*q));
  EXPECT_TRUE(std::signbit(n->floatValue()));
  checkFloatRoundTrip(ScalarType::F64, payload);
  checkFloatRoundTrip(ScalarType::F64, negPayload);
  checkFloatRoundTrip(ScalarType::F32, std::bit_cast<float>(uint32_t{0x7f800001}));
  checkFloatRoundTrip(ScalarType::F32, std::bit_cast<float>(uint32_t{0xffc00123}));
}

RC_GTEST_PROP(ParserPrinterTest, F64ConstantsRoundTripExactly, (uint64_t bits)) {
  checkFloatRoundTrip(ScalarType::F64, std::bit_cast<double>(bits));
  RC_ASSERT(!::testing::Test::HasFailure());
}

RC_GTEST_PROP(ParserPrinterTest, F32ConstantsRoundTripExactly, (uint32_t bits)) {
  checkFloatRoundTrip(ScalarType::F32, std::bit_cast<float>(bits));
  RC_ASSERT(!::testing::Test::HasFailure());
}

RC_GTEST_PROP(ParserPrinterTest, SubnormalAndExtremeFloatsRoundTrip, ()) {
  // Random bits rarely hit the interesting exponents; force them.
  uint64_t mantissa = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 52);
  uint64_t sign = *rc::gen::inRange<uint64_t>(0, 2) << 63;
  uint64_t exponent = *rc::gen::elementOf(std::vector<uint64_t>{0, 1, 2, 0x7fe, 0x7ff});
  checkFloatRoundTrip(ScalarType::F64, std::bit_cast<double>(sign | exponent << 52 | mantissa));
  uint32_t m32 = *rc::gen::inRange<uint32_t>(0, uint32_t{1} << 23);
  uint32_t e32 = *rc::gen::elementOf(std::vector<uint32_t>{0, 1, 2, 0xfe, 0xff});
  checkFloatRoundTrip(ScalarType::F32,
                      std::bit_cast<float>(static_cast<uint32_t>(sign >> 32) | e32 << 23 | m32));
  RC_ASSERT(!::testing::Test::HasFailure());
}

RC_GTEST_PROP(ParserPrinterTest, IntegerConstantsRoundTrip, (int32_t v32, int64_t v64, bool b)) {
  const std::pair<ScalarType, int64_t> cases[] = {
      {ScalarType::I32, v32}, {ScalarType::I64, v64}, {ScalarType::I1, b ? 1 : 0}};
  for (auto [type, value] : cases) {
    auto m = constModule(ConstStmt::getInt(type, value));
    RC_ASSERT(verify(*m).ok());
    std::unique_ptr<Module> again = reparse(*m);
    RC_ASSERT(again != nullptr);
    RC_ASSERT(onlyConst(*again).scalarType() == type);
    RC_ASSERT(onlyConst(*again).intValue() == value);
  }
  RC_ASSERT(!::testing::Test::HasFailure());
}

TEST(ParserPrinterTest, IntegerConstantLimits) {
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const 2147483648 : i32\n}\n"),
            "<stdin>:2:14: error: constant 2147483648 does not fit in i32");
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const 9223372036854775808 : i64\n}\n"),
            "<stdin>:2:14: error: constant 9223372036854775808 does not fit in i64");
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const 2 : i1\n}\n"),
            "<stdin>:2:14: error: expected true or false for an i1 constant, found '2'");
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const true : i32\n}\n"),
            "<stdin>:2:14: error: 'true' is only valid for i1 constants");
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const 1.5 : i32\n}\n"),
            "<stdin>:2:14: error: expected an integer constant for i32, found '1.5'");
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const 1e39 : f32\n}\n"),
            "<stdin>:2:14: error: constant 1e39 is out of range for f32");
  EXPECT_EQ(parseError("kernel @k() {\n  %c = const 1.5x : f64\n}\n"),
            "<stdin>:2:14: error: expected a floating-point constant, found '1.5x'");
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(ParserPrinterTest, ParseErrorMessages) {
  struct Case {
    const char *text;
    const char *message;
  };
  const Case cases[] = {
      {"kernel @k( {", "<stdin>:1:12: error: expected argument name '%name', found '{'"},
      {"kernel k() {}", "<stdin>:1:8: error: expected kernel name '@name', found 'k'"},
      {"func @k() {}", "<stdin>:1:1: error: expected 'field' or 'kernel', found 'func'"},
      {"kernel @k() {\n  serial {\n", "<stdin>:3:1: error: expected '}' to close the block, "
                                      "found end of input"},
      {"kernel @k() {\n  %x = frobnicate %y : f32\n}",
       "<stdin>:2:8: error: unknown operation 'frobnicate'"},
      {"kernel @k() {\n  add %a, %b : f32\n}",
       "<stdin>:2:3: error: 'add' produces a value; write '%name = add ...'"},
      {"kernel @k() {\n  jump\n}", "<stdin>:2:3: error: unknown statement 'jump'"},
      {"kernel @k() {\n  serial {\n    %x = neg %y : i32\n  }\n}",
       "<stdin>:3:14: error: use of undefined value '%y'"},
      {"kernel @k(%a: i32, %a: i32) {}",
       "<stdin>:1:20: error: redefinition of '%a' (first defined at <stdin>:1:11)"},
      {"field @f : f32\nfield @f : f32",
       "<stdin>:2:7: error: redefinition of field '@f' (first defined at <stdin>:1:1)"},
      {"kernel @k() {}\nkernel @k() {}",
       "<stdin>:2:8: error: redefinition of kernel '@k' (first defined at <stdin>:1:1)"},
      {"field @f.g : f32", "<stdin>:1:7: error: field name '@f.g' must not contain '.'"},
      {"field @f : f32[0]", "<stdin>:1:16: error: field extent must be positive, got 0"},
      {"field @f : f16", "<stdin>:1:12: error: expected a scalar type (i1, i32, i64, f32, f64), "
                         "found 'f16'"},
      {"field @f : f32 grad grad", "<stdin>:1:21: error: duplicate 'grad' companion"},
      {"kernel @k(%a: ndarray<f32, 9>) {}",
       "<stdin>:1:28: error: ndarray rank must be between 1 and 8, got 9"},
      {"kernel @k() {\n  serial {\n    %x = load @nope[] : f32\n  }\n}",
       "<stdin>:3:15: error: unknown field '@nope'"},
      {"kernel @k() {\n  parallel for %i = 0 to 4294967296 {\n  }\n}",
       "<stdin>:2:26: error: loop bound 4294967296 does not fit in i32"},
      {"kernel @k() {\n  %s = adstack.alloca f32, capacity -1\n}",
       "<stdin>:2:37: error: capacity must be non-negative, got -1"},
      {"kernel @k(%a: ndarray<f32, 1>) {\n  %s = shape %a, 8 : i32\n}",
       "<stdin>:2:18: error: axis must be between 0 and 7, got 8"},
      {"kernel @k() {\n  %c = cmp lq %a, %b : i32\n}",
       "<stdin>:2:12: error: expected a comparison predicate (eq, ne, lt, le, gt, ge), found "
       "'lq'"},
      {"kernel @k() {\n  serial {\n    %v = alloca f32\n    atomic_add %v, %v : f32\n  }\n}",
       "<stdin>:4:16: error: atomic_add needs a field or ndarray element, e.g. '@x[%i]'"},
      {"kernel @k() {\n  $\n}", "<stdin>:2:3: error: expected a statement, found '$'"},
      {"kernel @k() {\n  % = const 1 : i32\n}",
       "<stdin>:2:3: error: expected a statement, found '%'"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(parseError(c.text), c.message) << c.text;
}

// A name or number may have 256 bytes; a longer one is an error whose
// message shows its first bytes and its length, never the whole token
// (a file of one 2 GiB line must not print 2 GiB).
TEST(ParserPrinterTest, LongTokensAreCutInDiagnostics) {
  std::string name(256, 'v');
  parseOk("kernel @k(%" + name + ": i32) {}");
  std::string head = std::string(40, 'v');
  EXPECT_EQ(parseError("kernel @k(%" + name + "w: i32) {}"),
            "<stdin>:1:11: error: expected argument name '%name', found '%" + head.substr(0, 39) +
                "...' (a token of 258 bytes), longer than the 256 bytes a name or number may have");
  std::string huge(1 << 20, 'a');
  std::string message = parseError(huge);
  EXPECT_EQ(message, "<stdin>:1:1: error: expected 'field' or 'kernel', found '" +
                         std::string(40, 'a') +
                         "...' (a token of 1048576 bytes), longer than the 256 bytes a name or "
                         "number may have");
  // Numbers too, and tokens short enough to accept but too long to echo.
  EXPECT_EQ(parseError("field @f : f32[" + std::string(300, '9') + "]"),
            "<stdin>:1:16: error: expected field extent, found '" + std::string(40, '9') +
                "...' (a token of 300 bytes), longer than the 256 bytes a name or number may have");
  EXPECT_EQ(parseError("field @f : f32[" + std::string(100, '9') + "]"),
            "<stdin>:1:16: error: integer '" + std::string(40, '9') +
                "...' (a token of 100 bytes) does not fit in 64 bits");
}

// A diagnostic prints a statement with blocks by its header only.
TEST(ParserPrinterTest, StatementHeadersElideBlocks) {
  auto m = parseOk(R"(field @y : f32
kernel @k() {
  parallel for %i = 0 to 4 {
    for %j = 0 to 8 {
      %c = const 1.0 : f32
      atomic_add @y[], %c : f32
    }
  }
})");
  ASSERT_NE(m, nullptr);
  Stmt &task = m->kernels()[0]->body().front();
  EXPECT_EQ(printStmtHeader(task), "parallel for %i = 0 to 4 { ... }");
  Stmt &loop = cast<ForStmt>(task).body().front();
  EXPECT_EQ(printStmtHeader(loop), "for %j = 0 to 8 { ... }");
  EXPECT_EQ(printStmt(loop).find("for %j = 0 to 8 {\n"), 0u);
}

TEST(ParserPrinterTest, UndefinedValueReportsTheFirstUse) {
  // Several undefined names: the earliest use is reported, deterministically.
  EXPECT_EQ(parseError("kernel @k() {\n  serial {\n    %x = add %zz, %aa : i32\n"
                       "    %y = add %bb, %x : i32\n  }\n}"),
            "<stdin>:3:14: error: use of undefined value '%zz'");
}

TEST(ParserPrinterTest, ForwardReferencesParseAndTheVerifierRejectsThem) {
  std::unique_ptr<Module> m =
      parseOk("kernel @k() {\n  serial {\n    %y = neg %x : i32\n    %x = const 1 : i32\n"
              "  }\n}\n");
  ASSERT_NE(m, nullptr);
  absl::Status v = verify(*m);
  EXPECT_EQ(std::string(v.message()),
            "<stdin>:3:5: error: %x is used before its definition at <stdin>:4:5");
}

TEST(ParserPrinterTest, FirstLineShiftsLineNumbers) {
  ParseOptions options;
  options.filename = "split.qd";
  options.firstLine = 10;
  EXPECT_EQ(parseError("kernel @k() {\n  %x = bogus\n}", options),
            "split.qd:11:8: error: unknown operation 'bogus'");
  EXPECT_EQ(parseError("\n\n\nkernel", options),
            "split.qd:13:7: error: expected kernel name '@name', found end of input");
  std::unique_ptr<Module> m = parseOk("kernel @k() {\n  serial {\n    break\n  }\n}\n", options);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(std::string(verify(*m).message()),
            "split.qd:12:5: error: 'break' must be inside a 'for' or 'while' loop");
}

/// `file:line:col: error: <something>`. (No std::regex: GCC 12 warns inside
/// it under the sanitizers.)
bool isLocatedError(std::string_view message, std::string_view file) {
  if (!message.starts_with(file) || !message.substr(file.size()).starts_with(':'))
    return false;
  message.remove_prefix(file.size() + 1);
  for (int field = 0; field < 2; ++field) {
    size_t digits = 0;
    while (digits < message.size() && message[digits] >= '0' && message[digits] <= '9')
      ++digits;
    if (digits == 0 || digits >= message.size() || message[digits] != ':')
      return false;
    message.remove_prefix(digits + 1);
  }
  return message.starts_with(" error: ") && message.size() > 8;
}

TEST(ParserPrinterTest, TruncatedInputNeverCrashes) {
  // Every prefix of a valid module parses or fails cleanly with a located
  // message; whatever parses can be verified and printed.
  ParseOptions options;
  options.filename = "t.qd";
  for (const char *text : {kDesignExample, kReverseExample}) {
    std::string_view full(text);
    size_t parsed = 0;
    for (size_t len = 0; len <= full.size(); ++len) {
      absl::StatusOr<std::unique_ptr<Module>> m = parseModule(full.substr(0, len), options);
      if (m.ok()) {
        ++parsed;
        (void)verify(**m);
        (void)printModule(**m);
        continue;
      }
      EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
      std::string message(m.status().message());
      EXPECT_TRUE(isLocatedError(message, "t.qd")) << "prefix " << len << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
    // The empty prefix, the full text and every cut right after a top-level
    // declaration parse.
    EXPECT_GE(parsed, 2u);
  }
}

RC_GTEST_PROP(ParserPrinterTest, MutatedInputNeverCrashes, ()) {
  // Random byte edits of a valid module: parse, verify and print must not
  // crash, and errors are always located.
  std::string text = kReverseExample;
  int edits = *rc::gen::inRange(1, 6);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    size_t pos = *rc::gen::inRange<size_t>(0, text.size());
    char c = *rc::gen::element('%', '@', '{', '}', '(', ')', '[', ']', ',', ':', '=', '<', '>', '-',
                               '0', '9', 'e', '.', ' ', '\n', 'x', '$');
    switch (*rc::gen::inRange(0, 3)) {
    case 0:
      text[pos] = c;
      break;
    case 1:
      text.insert(text.begin() + static_cast<std::ptrdiff_t>(pos), c);
      break;
    default:
      text.erase(pos, 1);
      break;
    }
  }
  ParseOptions options;
  options.filename = "m.qd";
  absl::StatusOr<std::unique_ptr<Module>> m = parseModule(text, options);
  if (m.ok()) {
    absl::Status v = verify(**m);
    if (v.ok()) {
      // Valid mutants still round-trip.
      std::string p1 = printModule(**m);
      auto again = parseModule(p1);
      RC_ASSERT(again.ok());
      RC_ASSERT(printModule(**again) == p1);
      RC_ASSERT(isEquivalent(**m, **again));
    }
  } else {
    RC_ASSERT(m.status().code() == absl::StatusCode::kInvalidArgument);
    RC_ASSERT(isLocatedError(std::string(m.status().message()), "m.qd"));
  }
}

//===----------------------------------------------------------------------===//
// Value naming
//===----------------------------------------------------------------------===//

TEST(ParserPrinterTest, ValueNamerRenamesUnnamedAndDuplicates) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *a1 = k->addArgument(std::make_unique<Argument>("x", Type::i32()));
  Argument *a2 = k->addArgument(std::make_unique<Argument>("", Type::i32()));
  IRBuilder b(*k);
  auto task = b.serial();
  Value *c0 = b.i32(0);      // unnamed -> next number
  Value *c1 = b.add(a1, a2); // named "x" like the argument -> x.1
  c1->setName("x");
  Value *c2 = b.add(c1, c0); // named "1", which the counter also wants
  c2->setName("1");
  Value *c3 = b.add(c2, c0); // unnamed -> skips the taken "1"
  Value *c4 = b.add(c3, c0); // named "x" again -> x.2
  c4->setName("x");
  Value *c5 = b.add(c4, c0); // literally named "x.1", already taken -> x.1.1
  c5->setName("x.1");
  task.close();

  ValueNamer names(*k);
  EXPECT_EQ(names[a1], "%x");
  EXPECT_EQ(names[a2], "%0");
  EXPECT_EQ(names[task.stmt()], "<null>"); // void statements have no name
  EXPECT_EQ(names[c0], "%1");
  EXPECT_EQ(names[c1], "%x.1");
  EXPECT_EQ(names[c2], "%1.1");
  EXPECT_EQ(names[c3], "%2");
  EXPECT_EQ(names[c4], "%x.2");
  EXPECT_EQ(names[c5], "%x.1.1");
  EXPECT_EQ(names[nullptr], "<null>");

  EXPECT_EQ(printKernel(*k), R"(kernel @k(%x: i32, %0: i32) {
  serial {
    %1 = const 0 : i32
    %x.1 = add %x, %0 : i32
    %1.1 = add %x.1, %1 : i32
    %2 = add %1.1, %1 : i32
    %x.2 = add %2, %1 : i32
    %x.1.1 = add %x.2, %1 : i32
  }
}
)");
  ASSERT_TRUE(verify(m).ok());
  expectRoundTrip(m);

  // A value of another kernel has no name here.
  Kernel other("other");
  EXPECT_EQ(ValueNamer(other)[c0], "<null>");

  // Naming some values only gives them the names of the whole kernel's
  // namer; the others have none.
  std::unordered_set<const Value *> some = {a2, c2, c3, c5};
  ValueNamer few(*k, some);
  for (const Value *v : some)
    EXPECT_EQ(few[v], names[v]);
  EXPECT_EQ(few[a1], "<null>");
  EXPECT_EQ(few[c4], "<null>");
  LazyValueNamer lazy(*k), lazyFew(*k, some);
  EXPECT_EQ(lazy[c4], "%x.2");
  EXPECT_EQ(lazyFew[c3], "%2");
  EXPECT_EQ(lazyFew[c4], "<null>");
}

TEST(ParserPrinterTest, ValueNamerKeepsNumbersApartFromOtherNames) {
  // Names that look like numbers but are not spelt as the counter spells
  // them ("01") do not block its numbers; those spelt so ("3") do.
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  auto task = b.serial();
  std::vector<Value *> v;
  for (const char *hint : {"01", "", "3", "", "", "", "3", "00"}) {
    v.push_back(b.i32(static_cast<int32_t>(v.size())));
    v.back()->setName(hint);
  }
  task.close();
  ValueNamer names(*k);
  std::vector<std::string> got;
  for (const Value *x : v)
    got.push_back(names[x]);
  EXPECT_EQ(got, (std::vector<std::string>{"%01", "%0", "%3", "%1", "%2", "%4", "%3.1", "%00"}));
}

TEST(ParserPrinterTest, PrintStmt) {
  std::unique_ptr<Module> m = parseOk(kDesignExample);
  ASSERT_NE(m, nullptr);
  Stmt &task = m->kernels()[0]->body().front();
  Stmt &load = task.block(0).front();
  EXPECT_EQ(printStmt(load), "%xi = load @x[%i] : f32");
  EXPECT_EQ(printStmt(task).substr(0, 28), "parallel for %i = 0 to 16 {\n");
  auto detached = ConstStmt::getInt(ScalarType::I32, 1);
  EXPECT_EQ(printStmt(*detached), "<detached const>");
}

TEST(ParserPrinterTest, NdarrayComponentNamesAreNotConfusedWithValues) {
  // `%a.grad` is the grad companion of %a unless a value of ndarray type is
  // literally named `a.grad`.
  std::unique_ptr<Module> m =
      parseOk(R"(kernel @k(%a: ndarray<f32, 1> grad, %a.grad: ndarray<f32, 1>) {
  parallel for %i = 0 to 4 {
    %x = load %a.grad[%i] : f32
    %y = load %a.grad.grad[%i] : f32
  }
}
)");
  ASSERT_NE(m, nullptr);
  Kernel &k = *m->kernels()[0];
  Stmt &task = k.body().front();
  auto &x = cast<GlobalLoadStmt>(task.block(0).front());
  auto &y = cast<GlobalLoadStmt>(task.block(0).back());
  EXPECT_EQ(x.ndarray(), k.argument(1));
  EXPECT_EQ(x.component(), Component::Primal);
  EXPECT_EQ(y.ndarray(), k.argument(1));
  EXPECT_EQ(y.component(), Component::Grad);
}

//===----------------------------------------------------------------------===//
// Generated programs (unittests/support/ProgramGen.h)
//===----------------------------------------------------------------------===//

// Every generated program parses, the printer reproduces the generated text
// exactly, and print -> parse -> print is the identity with an equivalent
// module.
QD_PROPERTY(ParserPrinterTest, GeneratedProgramsRoundTrip, 200) {
  testgen::GenProgram p = *testgen::genAnyProgram();
  testgen::Printed text = testgen::print(p);
  auto m = parseModule(text.text, {"gen.qd", 1});
  if (!m.ok())
    testgen::fail(p, "does not parse: " + std::string(m.status().message()));
  std::string printed = printModule(**m);
  if (printed != text.text)
    testgen::fail(p, "the printer does not reproduce the text; it prints:\n" + printed);
  auto again = parseModule(printed, {"printed.qd", 1});
  if (!again.ok())
    testgen::fail(p, "the printed module does not parse: " + std::string(again.status().message()));
  std::string why;
  if (!isEquivalent(**m, **again, &why))
    testgen::fail(p, "the reparsed module differs: " + why);
  if (printModule(**again) != printed)
    testgen::fail(p, "print(parse(print(m))) != print(m)");
  RC_CLASSIFY(text.hasStacks, "adstacks");
  RC_CLASSIFY(text.hasWhile, "while");
  // QD_GEN_DUMP_DIR=<dir>: keep every generated program (e.g. to seed the
  // fuzzers' corpora, or to look at what the generator makes).
  if (const char *dir = std::getenv("QD_GEN_DUMP_DIR"); dir && *dir) {
    static int n = 0;
    std::filesystem::create_directories(dir);
    std::ofstream(std::filesystem::path(dir) / ("gen-" + std::to_string(n++) + ".qd")) << text.text;
  }
}

} // namespace
} // namespace qd
