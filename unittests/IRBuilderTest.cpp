//===- IRBuilderTest.cpp - Building IR from C++ ---------------------------===//
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <iterator>
#include <set>

namespace qd {
namespace {

template <typename T> T *named(T *v, const char *name) {
  v->setName(name);
  return v;
}

/// A module using every statement kind, every component of fields and
/// ndarrays, and every scope guard.
std::unique_ptr<Module> buildEverything() {
  auto m = std::make_unique<Module>();
  Field *fx = m->addField(
      std::make_unique<Field>("x", ScalarType::F32, std::vector<int64_t>{16}, true, true));
  Field *fs = m->addField(
      std::make_unique<Field>("s", ScalarType::F32, std::vector<int64_t>{}, true, false));
  Field *fn = m->addField(
      std::make_unique<Field>("n", ScalarType::I32, std::vector<int64_t>{}, false, false));
  Kernel *k = m->addKernel(std::make_unique<Kernel>("every"));
  Argument *a = k->addArgument(
      std::make_unique<Argument>("a", Type::ndarray(ScalarType::F32, 2), true, true));
  Argument *steps = k->addArgument(std::make_unique<Argument>("steps", Type::i32()));

  IRBuilder b(*k);
  // Launch-time scalars.
  Value *rows = named(b.shape(a, 0), "rows");
  named(b.shape(a, 1, ScalarType::I64), "cols");
  Value *lim = named(b.load(GlobalRef::ofField(fn), {}), "lim");
  Value *end = named(b.min(rows, lim), "end");
  {
    auto task = b.parallelFor(0, end);
    Value *i = named(task.index(), "i");
    Value *xi = named(b.load(GlobalRef::ofField(fx), {i}), "xi");
    Value *xg = named(b.load(GlobalRef::ofField(fx, Component::Grad), {i}), "xg");
    Value *xd = named(b.load(GlobalRef::ofField(fx, Component::Dual), {i}), "xd");
    Value *v = named(b.alloca(ScalarType::F32), "v");
    b.store(v, xi);
    Value *st = named(b.adstackAlloca(ScalarType::F32), "st");
    Value *half = b.f32(0.5f); // left unnamed: prints as %0
    {
      auto loop = b.forRange(1, steps);
      Value *j = named(loop.index(), "j");
      Value *cur = named(b.load(v), "cur");
      Value *s = named(b.sin(cur), "s");
      b.adstackPush(st, s);
      Value *t = named(b.adstackLoadTop(st), "t");
      b.store(v, named(b.mul(t, half), "p"));
      Value *three = named(b.i32(3), "three");
      auto big = b.ifThen(named(b.cmp(CmpPredicate::Gt, j, three), "big"));
      b.brk();
    }
    Value *w = named(b.alloca(ScalarType::I32), "w");
    {
      auto loop = b.whileLoop();
      Value *wc = named(b.load(w), "wc");
      Value *one = named(b.i32(1), "one");
      Value *wn = named(b.add(wc, one), "wn");
      b.store(w, wn);
      auto done = b.ifThen(named(b.cmp(CmpPredicate::Ge, wn, steps), "done"));
      b.brk();
      done.otherwise();
      b.cont();
    }
    Value *adj = named(b.adstackLoadTopAdj(st), "adj");
    b.adstackAccAdjoint(st, adj);
    b.adstackPop(st);
    Value *ai = named(b.load(GlobalRef::ofNdarray(a), {i, i}), "ai");
    Value *ag = named(b.load(GlobalRef::ofNdarray(a, Component::Grad), {i, i}), "ag");
    Value *ad = named(b.load(GlobalRef::ofNdarray(a, Component::Dual), {i, i}), "ad");
    Value *sum = named(b.add(ai, ag), "sum");
    Value *neg = named(b.neg(sum), "neg");
    Value *lt = named(b.cmp(CmpPredicate::Lt, neg, xd), "lt");
    Value *sel = named(b.select(lt, neg, xg), "sel");
    Value *ci = named(b.cast(sel, ScalarType::I64), "ci");
    Value *cd = named(b.cast(ci, ScalarType::F64), "cd");
    Value *cf = named(b.cast(cd, ScalarType::F32), "cf");
    b.store(GlobalRef::ofField(fx), {i}, cf);
    b.store(GlobalRef::ofNdarray(a, Component::Dual), {i, ci}, ad);
    b.atomicAdd(GlobalRef::ofField(fs, Component::Grad), {}, sel);
    b.atomicAdd(GlobalRef::ofNdarray(a, Component::Grad), {i, i}, xi);
    b.atomicMax(GlobalRef::ofField(fn), {}, i);
    named(b.i64(-123456789012), "big");
    named(b.f64(1e-300), "tiny");
    Value *flag = named(b.i1(true), "flag");
    Value *x = named(b.binary(BinaryOp::Xor, flag, flag), "x");
    Value *nx = named(b.unary(UnaryOp::Not, x), "nx");
    auto skip = b.ifThen(nx);
    b.cont();
  }
  {
    Bound begins[] = {Bound(0), Bound(1)}, ends[] = {Bound(steps), Bound(4)};
    auto band = b.parallelBand(begins, ends);
    named(band.index(), "r");
    named(band.index(1), "c");
    b.store(GlobalRef::ofField(fn), {}, band.index(1));
  }
  {
    auto task = b.serial();
    b.store(GlobalRef::ofField(fs), {}, b.f32(1.0f));
  }
  return m;
}

constexpr const char *kEverything = R"(field @x : f32[16] grad dual
field @s : f32 grad
field @n : i32

kernel @every(%a: ndarray<f32, 2> grad dual, %steps: i32) {
  %rows = shape %a, 0 : i32
  %cols = shape %a, 1 : i64
  %lim = load @n[] : i32
  %end = min %rows, %lim : i32
  parallel for %i = 0 to %end {
    %xi = load @x[%i] : f32
    %xg = load @x.grad[%i] : f32
    %xd = load @x.dual[%i] : f32
    %v = alloca f32
    store %v, %xi
    %st = adstack.alloca f32, capacity 0
    %0 = const 0.5 : f32
    for %j = 1 to %steps {
      %cur = load %v : f32
      %s = sin %cur : f32
      adstack.push %st, %s
      %t = adstack.load_top %st : f32
      %p = mul %t, %0 : f32
      store %v, %p
      %three = const 3 : i32
      %big = cmp gt %j, %three : i32
      if %big {
        break
      }
    }
    %w = alloca i32
    while {
      %wc = load %w : i32
      %one = const 1 : i32
      %wn = add %wc, %one : i32
      store %w, %wn
      %done = cmp ge %wn, %steps : i32
      if %done {
        break
      } else {
        continue
      }
    }
    %adj = adstack.load_top_adj %st : f32
    adstack.acc_adjoint %st, %adj
    adstack.pop %st
    %ai = load %a[%i, %i] : f32
    %ag = load %a.grad[%i, %i] : f32
    %ad = load %a.dual[%i, %i] : f32
    %sum = add %ai, %ag : f32
    %neg = neg %sum : f32
    %lt = cmp lt %neg, %xd : f32
    %sel = select %lt, %neg, %xg : f32
    %ci = cast %sel : f32 to i64
    %cd = cast %ci : i64 to f64
    %cf = cast %cd : f64 to f32
    store @x[%i], %cf
    store %a.dual[%i, %ci], %ad
    atomic_add @s.grad[], %sel : f32
    atomic_add %a.grad[%i, %i], %xi : f32
    atomic_max @n[], %i : i32
    %big.1 = const -123456789012 : i64
    %tiny = const 1e-300 : f64
    %flag = const true : i1
    %x = xor %flag, %flag : i1
    %nx = not %x : i1
    if %nx {
      continue
    }
  }
  parallel for (%r, %c) = (0, 1) to (%steps, 4) {
    store @n[], %c
  }
  serial {
    %1 = const 1.0 : f32
    store @s[], %1
  }
}
)";

TEST(IRBuilderTest, EveryStatementKindVerifiesAndPrints) {
  std::unique_ptr<Module> m = buildEverything();
  absl::Status v = verify(*m);
  ASSERT_TRUE(v.ok()) << v;
  EXPECT_EQ(printModule(*m), kEverything);

  // The kernel really contains every statement kind.
  std::set<StmtKind> kinds;
  walk(*m->kernels()[0], [&](Stmt &s) { kinds.insert(s.kind()); });
  EXPECT_EQ(kinds.size(), kNumStmtKinds);
}

TEST(IRBuilderTest, InfersResultTypes) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *arr =
      k->addArgument(std::make_unique<Argument>("a", Type::ndarray(ScalarType::F64, 3)));
  IRBuilder b(*k);
  auto task = b.serial();
  ConstStmt *f = b.f32(1.5f);
  EXPECT_EQ(f->type(), Type::f32());
  EXPECT_EQ(b.i1(true)->intValue(), 1);
  EXPECT_EQ(b.i64(-7)->type(), Type::i64());
  EXPECT_EQ(b.add(f, f)->type(), Type::f32());
  EXPECT_EQ(b.cmp(CmpPredicate::Eq, f, f)->type(), Type::i1());
  EXPECT_EQ(b.cmp(CmpPredicate::Eq, f, f)->operandType(), ScalarType::F32);
  EXPECT_EQ(b.cast(f, ScalarType::I64)->type(), Type::i64());
  EXPECT_EQ(b.cast(f, ScalarType::I64)->from(), ScalarType::F32);
  AllocaStmt *v = b.alloca(ScalarType::I64);
  EXPECT_EQ(v->type(), Type::local(ScalarType::I64));
  EXPECT_EQ(b.load(v)->type(), Type::i64());
  EXPECT_EQ(b.load(GlobalRef::ofNdarray(arr), {b.i32(0), b.i32(0), b.i32(0)})->type(), Type::f64());
  EXPECT_EQ(b.shape(arr, 2)->type(), Type::i32());
  EXPECT_EQ(b.shape(arr, 2, ScalarType::I64)->type(), Type::i64());
  EXPECT_EQ(b.shape(arr, 2)->axis(), 2u);
  AdStackAllocaStmt *st = b.adstackAlloca(ScalarType::F64, 3);
  EXPECT_EQ(b.adstackLoadTop(st)->type(), Type::f64());
  EXPECT_EQ(b.adstackLoadTopAdj(st)->type(), Type::f64());
  EXPECT_TRUE(b.adstackPush(st, b.f64(1.0))->type().isVoid());
  EXPECT_EQ(b.select(b.i1(false), f, f)->type(), Type::f32());
  EXPECT_EQ(b.unary(UnaryOp::Abs, b.i32(-1))->type(), Type::i32());
  EXPECT_EQ(b.max(b.i64(1), b.i64(2))->op(), BinaryOp::Max);
}

// Every row of Ops.def has its shorthand, and it builds that operator on
// operands of the row's domain; the kernel verifies and prints each one.
TEST(IRBuilderTest, EveryOperatorHasAShorthand) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *n = k->addScalarArgument("n", ScalarType::I32);
  IRBuilder b(*k);
  auto task = b.serial();
  Value *x = b.f32(0.5f), *i = b.add(n, b.i32(1));
  auto operand = [&](OpDomain d) { return d == OpDomain::Integer ? i : x; };
  size_t built = 0;
#define QD_BINARY_OP(NAME, SPELLING, DOMAIN, BUILDER, ...)                                         \
  {                                                                                                \
    BinaryStmt *s = b.BUILDER(operand(OpDomain::DOMAIN), operand(OpDomain::DOMAIN));               \
    EXPECT_EQ(s->op(), BinaryOp::NAME) << SPELLING;                                                \
    ++built;                                                                                       \
  }
#define QD_UNARY_OP(NAME, SPELLING, DOMAIN, BUILDER, ...)                                          \
  {                                                                                                \
    UnaryStmt *s = b.BUILDER(operand(OpDomain::DOMAIN));                                           \
    EXPECT_EQ(s->op(), UnaryOp::NAME) << SPELLING;                                                 \
    ++built;                                                                                       \
  }
#define QD_CMP_PREDICATE(NAME, SPELLING, BUILDER)                                                  \
  {                                                                                                \
    CmpStmt *s = b.BUILDER(x, x);                                                                  \
    EXPECT_EQ(s->predicate(), CmpPredicate::NAME) << SPELLING;                                     \
    EXPECT_EQ(s->type(), Type::i1());                                                              \
    ++built;                                                                                       \
  }
#include "qd/ir/Ops.def"
  EXPECT_GE(built, 30u);
  absl::Status v = verify(m);
  EXPECT_TRUE(v.ok()) << v << "\n" << printModule(m);
  std::string text = printModule(m);
  for (const char *spelled : {"bitAnd", "bitNot"})
    EXPECT_EQ(text.find(spelled), std::string::npos);
  for (const char *spelled : {"= and %", "= not %", "= atan2 %", "= cmp ge %"})
    EXPECT_NE(text.find(spelled), std::string::npos) << spelled << " in\n" << text;
}

// What a front-end writes: one line per parameter and per statement.
TEST(IRBuilderTest, NdarrayAndScalarArgumentShorthands) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *a = k->addNdarrayArgument("a", ScalarType::F32, 2, /*grad=*/true);
  Argument *o = k->addNdarrayArgument("o", ScalarType::F64, 1, false, /*dual=*/true);
  Argument *s = k->addScalarArgument("s", ScalarType::F32);
  EXPECT_EQ(a->type(), Type::ndarray(ScalarType::F32, 2));
  EXPECT_TRUE(a->hasGrad());
  EXPECT_FALSE(a->hasDual());
  EXPECT_TRUE(o->hasDual());
  EXPECT_EQ(s->type(), Type::f32());
  EXPECT_EQ(k->findArgument("o"), o);
  EXPECT_EQ(s->index(), 2u);
  IRBuilder b(*k);
  Value *rows = b.shape(a, 0);
  {
    auto task = b.parallelFor(0, rows);
    Value *v = b.load(GlobalRef::ofNdarray(a), {task.index(), b.i32(0)});
    Value *w = b.sqrt(b.abs(b.mul(v, s)));
    b.store(GlobalRef::ofNdarray(a, Component::Grad), {task.index(), b.i32(0)}, w);
  }
  absl::Status v = verify(m);
  ASSERT_TRUE(v.ok()) << v;
  EXPECT_NE(
      printModule(m).find("kernel @k(%a: ndarray<f32, 2> grad, %o: ndarray<f64, 1> dual, %s: f32)"),
      std::string::npos)
      << printModule(m);
}

TEST(IRBuilderTest, ScopeGuardsRestoreTheInsertionPoint) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  ForStmt *task;
  ForStmt *inner;
  Stmt *afterInner;
  Stmt *first;
  {
    auto t = b.parallelFor(0, 4);
    task = t.stmt();
    EXPECT_EQ(&b.block(), &task->body());
    first = b.i32(1);
    {
      auto l = b.forRange(0, 2);
      inner = l.stmt();
      EXPECT_EQ(&b.block(), &inner->body());
      b.i32(2);
    }
    EXPECT_EQ(&b.block(), &task->body());
    afterInner = b.i32(3);
  }
  EXPECT_EQ(&b.block(), &k->body());
  EXPECT_EQ(b.insertionPoint(), k->body().end());
  Stmt *afterTask = b.i32(4);

  // Statements after a scope land after the container, in the outer block.
  EXPECT_EQ(&*std::next(Block::iteratorTo(first)), inner);
  EXPECT_EQ(&*std::next(Block::iteratorTo(inner)), afterInner);
  EXPECT_EQ(afterInner->parent(), &task->body());
  EXPECT_EQ(inner->body().size(), 1u);
  EXPECT_EQ(&*std::next(Block::iteratorTo(task)), afterTask);
  EXPECT_EQ(afterTask->parent(), &k->body());
  EXPECT_EQ(k->body().size(), 2u);
}

TEST(IRBuilderTest, ScopeInTheMiddleOfABlock) {
  // A scope opened while inserting before an existing statement returns to
  // that position, not to the end of the block.
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  auto t = b.serial();
  Stmt *c1 = b.i32(1);
  Stmt *c9 = b.i32(9);
  IRBuilder mid = IRBuilder::before(*c9);
  Stmt *loop;
  {
    auto w = mid.whileLoop();
    loop = w.stmt();
    mid.brk();
  }
  Stmt *c5 = mid.i32(5);
  std::vector<Stmt *> order;
  for (Stmt &s : t.stmt()->block(0))
    order.push_back(&s);
  EXPECT_EQ(order, (std::vector<Stmt *>{c1, loop, c5, c9}));
}

TEST(IRBuilderTest, IfScopeOtherwiseAndClose) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  auto task = b.serial();
  Value *c = b.i1(true);
  auto ifs = b.ifThen(c);
  Stmt *inThen = b.i32(1);
  ifs.otherwise();
  Stmt *inElse = b.i32(2);
  ifs.close();
  Stmt *after = b.i32(3);
  // Closing twice (explicitly, then by the destructor) is harmless.
  ifs.close();
  EXPECT_EQ(inThen->parent(), &ifs.stmt()->thenBlock());
  EXPECT_EQ(inElse->parent(), &ifs.stmt()->elseBlock());
  EXPECT_EQ(after->parent(), &task.stmt()->block(0));
  EXPECT_EQ(&*std::next(Block::iteratorTo(ifs.stmt())), after);
}

TEST(IRBuilderTest, MovedScopeRestoresOnce) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  auto task = b.serial();
  Stmt *loopStmt;
  {
    auto outer = b.forRange(0, 3);
    loopStmt = outer.stmt();
    IRBuilder::LoopScope moved(std::move(outer));
    EXPECT_EQ(moved.stmt(), loopStmt);
    EXPECT_EQ(&b.block(), &moved.stmt()->body());
    // `outer` is now inert; only `moved` restores.
  }
  EXPECT_EQ(&b.block(), &task.stmt()->block(0));
  Stmt *after = b.i32(0);
  EXPECT_EQ(&*std::next(Block::iteratorTo(loopStmt)), after);
}

TEST(IRBuilderTest, BeforeAndAfter) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  auto task = b.serial();
  auto file = std::make_shared<const std::string>("t.qd");
  b.setLocation(Location(file, 7, 3));
  Stmt *anchor = b.i32(10);
  b.setLocation(Location());
  Stmt *last = b.i32(20);
  EXPECT_EQ(anchor->loc().str(), "t.qd:7:3");
  EXPECT_FALSE(last->loc().isKnown());

  // before/after insert next to the statement and inherit its location.
  IRBuilder before = IRBuilder::before(*anchor);
  EXPECT_EQ(&before.block(), &task.stmt()->block(0));
  EXPECT_EQ(before.location(), anchor->loc());
  Stmt *b1 = before.i32(1);
  Stmt *b2 = before.i32(2);
  IRBuilder after = IRBuilder::after(*anchor);
  Stmt *a1 = after.i32(11);
  Stmt *a2 = after.i32(12);
  IRBuilder atEnd = IRBuilder::after(*last);
  Stmt *e1 = atEnd.i32(21);

  std::vector<Stmt *> order;
  for (Stmt &s : task.stmt()->block(0))
    order.push_back(&s);
  EXPECT_EQ(order, (std::vector<Stmt *>{b1, b2, anchor, a1, a2, last, e1}));
  EXPECT_EQ(b1->loc().str(), "t.qd:7:3");
  EXPECT_EQ(a2->loc().str(), "t.qd:7:3");
  EXPECT_FALSE(e1->loc().isKnown());

  // An explicitly located statement keeps its own location on insert.
  auto own = ConstStmt::getInt(ScalarType::I32, 5);
  own->setLoc(Location(file, 1, 1));
  EXPECT_EQ(before.insert(std::move(own))->loc().str(), "t.qd:1:1");
}

TEST(IRBuilderTest, SetInsertionPoint) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  IRBuilder b(*k);
  auto task = b.serial();
  Block &body = task.stmt()->block(0);
  Stmt *c1 = b.i32(1);
  Stmt *c3 = b.i32(3);
  b.setInsertionPoint(body, Block::iteratorTo(c3));
  Stmt *c2 = b.i32(2);
  b.setInsertionPointToEnd(body);
  Stmt *c4 = b.i32(4);
  b.setInsertionPoint(body, body.begin());
  Stmt *c0 = b.i32(0);
  std::vector<Stmt *> order;
  for (Stmt &s : body)
    order.push_back(&s);
  EXPECT_EQ(order, (std::vector<Stmt *>{c0, c1, c2, c3, c4}));

  // A builder made from a block appends to it.
  IRBuilder onBlock(body);
  Stmt *c5 = onBlock.i32(5);
  EXPECT_EQ(&body.back(), c5);
}

} // namespace
} // namespace qd
