//===- VerifierTest.cpp - Invalid IR built from C++ -----------------------===//
//
// Malformed IR that the text format cannot express (null operands, values
// and arguments of other kernels, out-of-range attributes set from C++) and
// the exact messages the verifier gives for it. Builder-made statements have
// no location, so messages start with `kernel @name: error:`.
//
//===----------------------------------------------------------------------===//
#include "qd/ir/Verifier.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"

#include "ProgramGen.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace qd {
namespace {

std::string verifyMessage(const Module &m) {
  absl::Status s = verify(m);
  if (s.ok())
    return "OK";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

std::string verifyMessage(const Kernel &k) {
  absl::Status s = verify(k);
  return s.ok() ? "OK" : std::string(s.message());
}

struct Fixture {
  Module module;
  Kernel *kernel = module.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b{*kernel};
};

TEST(VerifierTest, ValidBuilderKernel) {
  Fixture f;
  Argument *n = f.kernel->addArgument(std::make_unique<Argument>("n", Type::i32()));
  auto task = f.b.parallelFor(0, n);
  f.b.add(task.index(), n);
  task.close();
  EXPECT_EQ(verifyMessage(f.module), "OK");
  EXPECT_EQ(verifyMessage(*f.kernel), "OK");
}

TEST(VerifierTest, NullOperand) {
  Fixture f;
  auto task = f.b.serial();
  ConstStmt *one = f.b.i32(1);
  f.b.insert(std::make_unique<BinaryStmt>(BinaryOp::Add, nullptr, one, Type::i32()));
  f.b.insert(std::make_unique<LocalStoreStmt>(nullptr, one));
  f.b.insert(std::make_unique<IfStmt>(nullptr));
  EXPECT_EQ(verifyMessage(f.module), "kernel @k: error: operand 0 of 'add' is missing\n"
                                     "kernel @k: error: operand 0 of 'store' is missing\n"
                                     "kernel @k: error: operand 0 of 'if' is missing");
}

TEST(VerifierTest, OperandDroppedByErasingItsDefinition) {
  // Erasing a definition that still has users nulls their operands; the
  // verifier then reports the hole instead of crashing.
  Fixture f;
  auto task = f.b.serial();
  AllocaStmt *v = f.b.alloca(ScalarType::F32);
  ConstStmt *c = f.b.f32(2.0f);
  f.b.store(v, c);
  std::unique_ptr<Stmt> owned = c->remove();
  owned.reset();
  EXPECT_EQ(verifyMessage(f.module), "kernel @k: error: operand 1 of 'store' is missing");
}

TEST(VerifierTest, OperandFromAnotherKernel) {
  Fixture f;
  Kernel *other = f.module.addKernel(std::make_unique<Kernel>("other"));
  IRBuilder ob(*other);
  ConstStmt *foreign = ob.i32(5);
  foreign->setName("five");
  ConstStmt *unnamed = ob.i32(6);

  auto task = f.b.serial();
  f.b.add(foreign, foreign);
  f.b.neg(unnamed);
  EXPECT_EQ(verifyMessage(*f.kernel),
            "kernel @k: error: 'add' uses %five ('const'), which is not part of kernel @k; it "
            "belongs to kernel @other\n"
            "kernel @k: error: 'neg' uses an unnamed value ('const'), which is not part of "
            "kernel @k; it belongs to kernel @other");
  // The other kernel itself is fine.
  EXPECT_EQ(verifyMessage(*other), "OK");
}

TEST(VerifierTest, OperandNotInAnyKernel) {
  Fixture f;
  auto detached = ConstStmt::getInt(ScalarType::I32, 1);
  detached->setName("loose");
  auto task = f.b.serial();
  f.b.neg(detached.get());
  EXPECT_EQ(verifyMessage(f.module), "kernel @k: error: 'neg' uses %loose ('const'), which is "
                                     "not part of kernel @k; it is not inserted in any kernel");
}

TEST(VerifierTest, ArgumentOfAnotherKernel) {
  Fixture f;
  Kernel *other = f.module.addKernel(std::make_unique<Kernel>("other"));
  Argument *n = other->addArgument(std::make_unique<Argument>("n", Type::i32()));
  auto task = f.b.parallelFor(0, n);
  task.close();
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: 'parallel for' uses argument %n of another kernel");
}

TEST(VerifierTest, NegativeAdStackCapacity) {
  Fixture f;
  auto task = f.b.serial();
  AdStackAllocaStmt *st = f.b.adstackAlloca(ScalarType::F32, 4);
  EXPECT_EQ(verifyMessage(f.module), "OK");
  st->setCapacity(-1);
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: adstack capacity must be non-negative, got -1");
  st->setCapacity(0); // 0 = "to be sized": valid
  EXPECT_EQ(verifyMessage(f.module), "OK");
}

TEST(VerifierTest, KnownLocationsReplaceTheKernelPrefix) {
  Fixture f;
  auto file = std::make_shared<const std::string>("gen.qd");
  auto task = f.b.serial();
  f.b.setLocation(Location(file, 12, 5));
  f.b.adstackAlloca(ScalarType::F32, -3);
  f.b.setLocation(Location());
  f.b.adstackAlloca(ScalarType::F64, -4);
  EXPECT_EQ(verifyMessage(f.module),
            "gen.qd:12:5: error: adstack capacity must be non-negative, got -3\n"
            "kernel @k: error: adstack capacity must be non-negative, got -4");
}

TEST(VerifierTest, TypeErrorsNameTheValues) {
  Fixture f;
  auto task = f.b.serial();
  ConstStmt *x = f.b.f32(1.0f);
  x->setName("x");
  ConstStmt *n = f.b.i32(1);
  n->setName("n");
  f.b.insert(std::make_unique<BinaryStmt>(BinaryOp::Add, x, n, Type::f32()));
  f.b.insert(std::make_unique<BinaryStmt>(BinaryOp::Shl, x, x, Type::f32()));
  f.b.insert(std::make_unique<UnaryStmt>(UnaryOp::Sin, n, Type::i32()));
  f.b.insert(std::make_unique<CastStmt>(n, ScalarType::I64, ScalarType::F32));
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: 'add' operand %n has type i32, expected f32 (the result type)\n"
            "kernel @k: error: 'shl' is not defined on f32; it needs an integer or i1 type\n"
            "kernel @k: error: 'sin' needs a float type (f32 or f64), got i32\n"
            "kernel @k: error: 'cast' operand %n has type i32, expected i64 (the source type)");
}

TEST(VerifierTest, GlobalAccessArityAndCompanions) {
  Fixture f;
  Field *x = f.module.addField(
      std::make_unique<Field>("x", ScalarType::F32, std::vector<int64_t>{4, 4}, false, false));
  Argument *a = f.kernel->addArgument(
      std::make_unique<Argument>("a", Type::ndarray(ScalarType::F32, 1), false, false));
  auto task = f.b.parallelFor(0, 4);
  Value *i = task.index();
  f.b.load(GlobalRef::ofField(x), {i});
  f.b.load(GlobalRef::ofField(x, Component::Grad), {i, i});
  f.b.load(GlobalRef::ofNdarray(a, Component::Dual), {i});
  ConstStmt *d = f.b.f64(1.0);
  d->setName("d");
  f.b.store(GlobalRef::ofNdarray(a), {i}, d);
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: '@x' has 2 dimensions but 1 index was given\n"
            "kernel @k: error: field '@x' has no grad companion; declare it as 'field @x : ... "
            "grad'\n"
            "kernel @k: error: ndarray argument %a has no dual companion; declare it with "
            "'dual'\n"
            "kernel @k: error: 'store' operand %d has type f64, expected f32 (the element type "
            "of '%a')");
}

TEST(VerifierTest, TaskStructure) {
  Fixture f;
  f.b.alloca(ScalarType::F32);
  {
    auto task = f.b.serial();
    auto nested = f.b.parallelFor(0, 2);
  }
  {
    auto task = f.b.parallelFor(0, 2);
    f.b.brk();
  }
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: 'alloca' cannot appear at the kernel's top level, which holds "
            "only tasks ('parallel for', 'serial') and launch-time scalar statements; move it "
            "into a task\n"
            "kernel @k: error: 'parallel for' is a task and must be at the kernel's top level; "
            "use 'for' inside a task\n"
            "kernel @k: error: 'break' cannot leave a 'parallel for' (its iterations run "
            "independently); use 'continue' to end an iteration early");
}

TEST(VerifierTest, BreakMustEndItsBlock) {
  Fixture f;
  auto task = f.b.serial();
  auto loop = f.b.whileLoop();
  f.b.brk();
  f.b.i32(1);
  loop.close();
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: 'break' must be the last statement of its block");
}

TEST(VerifierTest, LiteralLoopBoundsMustFitInI32) {
  // The text form (and every backend) has i32 loop bounds; a literal set from
  // C++ beyond that range would print as text that does not parse.
  Fixture f;
  auto task = f.b.parallelFor(int64_t{1} << 40, -(int64_t{1} << 33));
  task.close();
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: loop bound 1099511627776 does not fit in i32\n"
            "kernel @k: error: loop bound -8589934592 does not fit in i32");
  task.stmt()->setBegin(Bound(std::numeric_limits<int32_t>::min()));
  task.stmt()->setEnd(Bound(std::numeric_limits<int32_t>::max()));
  EXPECT_EQ(verifyMessage(f.module), "OK");
}

TEST(VerifierTest, ArgumentTypes) {
  Fixture f;
  f.kernel->addArgument(std::make_unique<Argument>("v", Type::local(ScalarType::F32)));
  f.kernel->addArgument(std::make_unique<Argument>("z", Type::ndarray(ScalarType::F32, 0)));
  f.kernel->addArgument(std::make_unique<Argument>("w", Type::ndarray(ScalarType::F64, 9)));
  f.kernel->addArgument(std::make_unique<Argument>("s", Type::f32(), true, false));
  f.kernel->addArgument(
      std::make_unique<Argument>("ia", Type::ndarray(ScalarType::I32, 1), false, true));
  f.kernel->addArgument(
      std::make_unique<Argument>("ok", Type::ndarray(ScalarType::F32, 8), true, true));
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: argument %v has type local<f32>; arguments are scalars or "
            "ndarrays\n"
            "kernel @k: error: ndarray argument %z has rank 0; the rank must be between 1 and 8\n"
            "kernel @k: error: ndarray argument %w has rank 9; the rank must be between 1 and 8\n"
            "kernel @k: error: argument %s of type f32 cannot have grad/dual companions; only "
            "float ndarrays can\n"
            "kernel @k: error: argument %ia of type ndarray<i32, 1> cannot have grad/dual "
            "companions; only float ndarrays can");
}

TEST(VerifierTest, FieldsAndGlobalNames) {
  Module m;
  m.addField(std::make_unique<Field>("ok", ScalarType::F32, std::vector<int64_t>{2}, true, true));
  m.addField(std::make_unique<Field>("n", ScalarType::I32, std::vector<int64_t>{}, true, false));
  m.addField(
      std::make_unique<Field>("e", ScalarType::F32, std::vector<int64_t>{3, 0}, false, false));
  m.addField(std::make_unique<Field>("a.b", ScalarType::F32, std::vector<int64_t>{}, false, false));
  m.addField(std::make_unique<Field>("ok", ScalarType::F64, std::vector<int64_t>{}, false, false));
  m.addKernel(std::make_unique<Kernel>("k"));
  m.addKernel(std::make_unique<Kernel>("k"));
  m.addKernel(std::make_unique<Kernel>("bad name"));
  m.addKernel(std::make_unique<Kernel>("k.ok_2"));
  EXPECT_EQ(verifyMessage(m),
            "field @n: error: field '@n' of type i32 cannot have grad/dual companions; only "
            "float fields can\n"
            "field @e: error: field '@e' has extent 0; extents must be positive\n"
            "field @a.b: error: field name '@a.b' is not a valid name; use letters, digits and "
            "'_'\n"
            "field @ok: error: redefinition of field '@ok'\n"
            "kernel @k: error: redefinition of kernel '@k'\n"
            "kernel @bad name: error: kernel name '@bad name' is not a valid name; use letters, "
            "digits, '_' and '.'");
}

TEST(VerifierTest, FieldErrorsUseTheFieldLocation) {
  auto m = parseModule("field @n : i32 grad\n", {"f.qd", 1});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(verifyMessage(**m), "f.qd:1:1: error: field '@n' of type i32 cannot have grad/dual "
                                "companions; only float fields can");
}

TEST(VerifierTest, EveryErrorOnItsOwnLine) {
  // Several violations in several kernels are all reported, in order.
  Module m;
  for (const char *name : {"a", "b"}) {
    Kernel *k = m.addKernel(std::make_unique<Kernel>(name));
    IRBuilder b(*k);
    auto task = b.serial();
    b.adstackAlloca(ScalarType::F32, -1);
    b.cont();
  }
  EXPECT_EQ(verifyMessage(m),
            "kernel @a: error: adstack capacity must be non-negative, got -1\n"
            "kernel @a: error: 'continue' must be inside a 'for' or 'while' loop\n"
            "kernel @b: error: adstack capacity must be non-negative, got -1\n"
            "kernel @b: error: 'continue' must be inside a 'for' or 'while' loop");
}

TEST(VerifierTest, DominanceFromCpp) {
  // A use placed before its definition, and a use of a loop-local value
  // after the loop.
  Fixture f;
  auto task = f.b.serial();
  ConstStmt *late = ConstStmt::getInt(ScalarType::I32, 1).release();
  late->setName("late");
  f.b.neg(late);
  f.b.insert(std::unique_ptr<ConstStmt>(late));
  Value *inner;
  Value *index;
  {
    auto loop = f.b.forRange(0, 3);
    index = loop.index();
    index->setName("j");
    inner = f.b.i32(2);
    inner->setName("inner");
  }
  f.b.neg(inner);
  f.b.neg(index);
  EXPECT_EQ(verifyMessage(f.module),
            "kernel @k: error: %late is used before its definition at <unknown>\n"
            "kernel @k: error: %inner is not visible here: it is defined at <unknown> inside a "
            "block that does not enclose this use\n"
            "kernel @k: error: loop index %j (of the loop at <unknown>) is used outside its loop");
}

TEST(VerifierTest, VerifiedBuilderIRPrintsParseableText) {
  // Name hints set from C++ may contain characters the text form does not
  // allow after '%'; the printer replaces them, so verified IR round-trips.
  Fixture f;
  Argument *n = f.kernel->addArgument(std::make_unique<Argument>("num items", Type::i32()));
  auto task = f.b.parallelFor(0, n);
  task.index()->setName("i-th");
  Value *c = f.b.add(task.index(), n);
  c->setName("x+y");
  task.close();
  ASSERT_EQ(verifyMessage(f.module), "OK");
  EXPECT_EQ(printModule(f.module), R"(kernel @k(%num_items: i32) {
  parallel for %i_th = 0 to %num_items {
    %x_y = add %i_th, %num_items : i32
  }
}
)");
  EXPECT_TRUE(parseModule(printModule(f.module)).ok());
}

//===----------------------------------------------------------------------===//
// Generated programs (unittests/support/ProgramGen.h)
//===----------------------------------------------------------------------===//

std::string verifyText(const std::string &text) {
  auto m = parseModule(text, {"gen.qd", 1});
  if (!m.ok())
    return "does not parse: " + std::string(m.status().message());
  if (absl::Status v = verify(**m); !v.ok())
    return "does not verify: " + std::string(v.message());
  return "";
}

// The verifier accepts every generated program of every preset, and every
// shrink of it (a sample of at most 16): shrinking never leaves the grammar,
// so a counterexample of any property is always a well-formed program.
QD_PROPERTY(VerifierTest, GeneratedProgramsAndTheirShrinksVerify, 100) {
  testgen::GenProgram p = *testgen::genAnyProgram();
  if (std::string e = verifyText(testgen::print(p).text); !e.empty())
    testgen::fail(p, e);
  std::vector<testgen::GenProgram> shrunk = testgen::shrinks(p);
  size_t step = std::max<size_t>(1, shrunk.size() / 16);
  for (size_t i = 0; i < shrunk.size(); i += step)
    if (std::string e = verifyText(testgen::print(shrunk[i]).text); !e.empty())
      testgen::fail(shrunk[i], "a shrink " + e);
  RC_CLASSIFY(shrunk.size() > 100, "more than 100 shrinks");
}

// Nesting beyond kMaxBlockNesting (built through the API, which has no
// limit of its own) is one error, found without recursion: the verifier's
// other checks and every pass recurse over blocks.
TEST(VerifierTest, NestingBeyondTheLimitIsOneErrorNotACrash) {
  for (unsigned depth : {kMaxBlockNesting, kMaxBlockNesting + 1, 12'000u}) {
    Fixture f;
    std::vector<IRBuilder::LoopScope> loops;
    auto task = f.b.serial(); // depth 1
    loops.reserve(depth);
    for (unsigned d = 1; d < depth; ++d)
      loops.push_back(f.b.forRange(0, 2));
    EXPECT_EQ(firstStmtNestedBeyond(*f.kernel, depth) == nullptr, true) << depth;
    EXPECT_NE(firstStmtNestedBeyond(*f.kernel, depth - 1), nullptr) << depth;
    if (depth <= kMaxBlockNesting) {
      EXPECT_EQ(verifyMessage(f.module), "OK") << depth;
    } else {
      EXPECT_EQ(verifyMessage(*f.kernel),
                fmt::format("kernel @k: error: kernel '@k' nests blocks more than {} deep (the "
                            "limit of qd's IR, kMaxBlockNesting); flatten the nesting or split "
                            "the kernel",
                            kMaxBlockNesting))
          << depth;
    }
    while (!loops.empty())
      loops.pop_back(); // close the innermost first
    task.close();
  }
}

} // namespace
} // namespace qd
