//===- IRCoreTest.cpp - Values, use lists, statements, blocks -------------===//
//
// The object model under everything else: use lists, statement ownership and
// links, block surgery and destruction of IR with cross-references (these
// tests are meant to run under AddressSanitizer too).
//
//===----------------------------------------------------------------------===//
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

namespace qd {
namespace {

/// The users of `v`, with the operand slot of each use.
std::multiset<std::pair<const Stmt *, unsigned>> usersOf(const Value &v) {
  std::multiset<std::pair<const Stmt *, unsigned>> out;
  for (Use &u : v.uses()) {
    EXPECT_EQ(u.get(), &v);
    out.insert({u.user(), u.index()});
  }
  return out;
}

std::vector<Stmt *> stmtsOf(Block &b) {
  std::vector<Stmt *> out;
  for (Stmt &s : b)
    out.push_back(&s);
  return out;
}

/// A module with one kernel `@k(%n: i32)` and a serial task; the builder
/// inserts into the task body.
struct Fixture {
  Module module;
  Kernel *kernel;
  Argument *n;
  SerialStmt *task;
  IRBuilder b;

  Fixture()
      : kernel(module.addKernel(std::make_unique<Kernel>("k"))),
        n(kernel->addArgument(std::make_unique<Argument>("n", Type::i32()))),
        task(IRBuilder(*kernel).insert(std::make_unique<SerialStmt>())), b(task->body()) {}
};

//===----------------------------------------------------------------------===//
// Types and locations
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, TypeStr) {
  EXPECT_EQ(Type::getVoid().str(), "void");
  EXPECT_EQ(Type::i1().str(), "i1");
  EXPECT_EQ(Type::i32().str(), "i32");
  EXPECT_EQ(Type::i64().str(), "i64");
  EXPECT_EQ(Type::f32().str(), "f32");
  EXPECT_EQ(Type::f64().str(), "f64");
  EXPECT_EQ(Type::local(ScalarType::F32).str(), "local<f32>");
  EXPECT_EQ(Type::adstack(ScalarType::F64).str(), "adstack<f64>");
  EXPECT_EQ(Type::ndarray(ScalarType::F32, 2).str(), "ndarray<f32, 2>");
  EXPECT_EQ(Type::ndarray(ScalarType::I64, 1).str(), "ndarray<i64, 1>");
}

TEST(IRCoreTest, TypePredicatesAndEquality) {
  EXPECT_EQ(Type::f32(), Type::scalar(ScalarType::F32));
  EXPECT_NE(Type::f32(), Type::f64());
  EXPECT_NE(Type::f32(), Type::local(ScalarType::F32));
  EXPECT_NE(Type::ndarray(ScalarType::F32, 1), Type::ndarray(ScalarType::F32, 2));
  EXPECT_EQ(Type(), Type::getVoid());
  EXPECT_TRUE(Type().isVoid());
  EXPECT_TRUE(Type::f32().isFloatScalar());
  EXPECT_FALSE(Type::i32().isFloatScalar());
  EXPECT_TRUE(Type::i1().isIntegerScalar());
  EXPECT_TRUE(Type::i64().isScalar(ScalarType::I64));
  EXPECT_FALSE(Type::local(ScalarType::I64).isScalar(ScalarType::I64));
  EXPECT_TRUE(Type::adstack(ScalarType::F32).isAdStack());
  EXPECT_TRUE(Type::ndarray(ScalarType::F32, 3).isNdarray());
  EXPECT_EQ(Type::ndarray(ScalarType::F32, 3).ndim(), 3u);
  EXPECT_EQ(Type::local(ScalarType::I32).element(), ScalarType::I32);
}

TEST(IRCoreTest, ScalarTypeNamesAndWidths) {
  for (ScalarType t :
       {ScalarType::I1, ScalarType::I32, ScalarType::I64, ScalarType::F32, ScalarType::F64})
    EXPECT_EQ(parseScalarType(toString(t)), t);
  EXPECT_EQ(parseScalarType("f16"), std::nullopt);
  EXPECT_EQ(parseScalarType(""), std::nullopt);
  EXPECT_EQ(bitWidth(ScalarType::I1), 1u);
  EXPECT_EQ(bitWidth(ScalarType::I32), 32u);
  EXPECT_EQ(bitWidth(ScalarType::F64), 64u);
  EXPECT_EQ(storageBytes(ScalarType::I1), 1u);
  EXPECT_EQ(storageBytes(ScalarType::F32), 4u);
  EXPECT_EQ(storageBytes(ScalarType::I64), 8u);
  EXPECT_TRUE(isFloat(ScalarType::F64));
  EXPECT_TRUE(isInteger(ScalarType::I1));
}

TEST(IRCoreTest, LocationStr) {
  EXPECT_FALSE(Location().isKnown());
  EXPECT_EQ(Location().str(), "<unknown>");
  EXPECT_EQ(Location().file(), "");
  Location loc(std::make_shared<const std::string>("a.qd"), 3, 7);
  EXPECT_TRUE(loc.isKnown());
  EXPECT_EQ(loc.str(), "a.qd:3:7");
  EXPECT_EQ(loc, Location(std::make_shared<const std::string>("a.qd"), 3, 7));
  EXPECT_FALSE(loc == Location(std::make_shared<const std::string>("b.qd"), 3, 7));
}

TEST(IRCoreTest, EnumSpellingsRoundTrip) {
  for (int i = 0; i <= static_cast<int>(BinaryOp::Shr); ++i)
    EXPECT_EQ(parseBinaryOp(toString(static_cast<BinaryOp>(i))), static_cast<BinaryOp>(i));
  for (int i = 0; i <= static_cast<int>(UnaryOp::Not); ++i)
    EXPECT_EQ(parseUnaryOp(toString(static_cast<UnaryOp>(i))), static_cast<UnaryOp>(i));
  for (int i = 0; i <= static_cast<int>(CmpPredicate::Ge); ++i)
    EXPECT_EQ(parseCmpPredicate(toString(static_cast<CmpPredicate>(i))),
              static_cast<CmpPredicate>(i));
  EXPECT_EQ(parseBinaryOp("sin"), std::nullopt);
  EXPECT_EQ(parseUnaryOp("add"), std::nullopt);
  EXPECT_EQ(parseCmpPredicate("ult"), std::nullopt);
  EXPECT_EQ(mnemonic(StmtKind::AdStackLoadTopAdj), "adstack.load_top_adj");
  EXPECT_EQ(mnemonic(StmtKind::AtomicAdd), "atomic_add");
  EXPECT_EQ(mnemonic(StmtKind::GlobalLoad), "load");
  EXPECT_TRUE(isBitwise(BinaryOp::Shl));
  EXPECT_FALSE(isBitwise(BinaryOp::Max));
  EXPECT_TRUE(isFloatOnly(BinaryOp::Atan2));
  EXPECT_FALSE(isFloatOnly(BinaryOp::Div));
  EXPECT_TRUE(isFloatOnly(UnaryOp::Sqrt));
  EXPECT_FALSE(isFloatOnly(UnaryOp::Abs));
  EXPECT_EQ(toString(Component::Grad), "grad");
  EXPECT_EQ(toString(Component::Dual), "dual");
  EXPECT_EQ(toString(Component::Primal), "");
}

//===----------------------------------------------------------------------===//
// Use lists
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, UseListsTrackOperands) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  ConstStmt *two = f.b.i32(2);
  BinaryStmt *a = f.b.add(one, one);
  BinaryStmt *m = f.b.mul(a, two);

  EXPECT_EQ(one->numUses(), 2u);
  EXPECT_TRUE(one->hasUses());
  EXPECT_EQ(usersOf(*one), (std::multiset<std::pair<const Stmt *, unsigned>>{{a, 0}, {a, 1}}));
  EXPECT_EQ(two->numUses(), 1u);
  EXPECT_EQ(usersOf(*two), (std::multiset<std::pair<const Stmt *, unsigned>>{{m, 1}}));
  EXPECT_EQ(a->numUses(), 1u);
  EXPECT_EQ(m->numUses(), 0u);
  EXPECT_FALSE(m->hasUses());

  // setOperand moves the use from one list to the other.
  a->setOperand(1, two);
  EXPECT_EQ(a->rhs(), two);
  EXPECT_EQ(usersOf(*one), (std::multiset<std::pair<const Stmt *, unsigned>>{{a, 0}}));
  EXPECT_EQ(usersOf(*two), (std::multiset<std::pair<const Stmt *, unsigned>>{{a, 1}, {m, 1}}));

  // Setting the same value again changes nothing.
  a->setOperand(1, two);
  EXPECT_EQ(two->numUses(), 2u);

  // Clearing an operand unlinks it.
  a->setOperand(0, nullptr);
  EXPECT_EQ(a->lhs(), nullptr);
  EXPECT_EQ(one->numUses(), 0u);
  a->setOperand(0, one);
  EXPECT_EQ(one->numUses(), 1u);
}

TEST(IRCoreTest, ReplaceAllUsesWith) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  ConstStmt *two = f.b.i32(2);
  BinaryStmt *a = f.b.add(one, one);
  BinaryStmt *s = f.b.sub(one, two);
  CmpStmt *c = f.b.cmp(CmpPredicate::Lt, f.n, one);

  one->replaceAllUsesWith(two);
  EXPECT_EQ(one->numUses(), 0u);
  EXPECT_EQ(two->numUses(), 5u);
  EXPECT_EQ(a->lhs(), two);
  EXPECT_EQ(a->rhs(), two);
  EXPECT_EQ(s->lhs(), two);
  EXPECT_EQ(s->rhs(), two);
  EXPECT_EQ(c->lhs(), f.n);
  EXPECT_EQ(c->rhs(), two);

  // Arguments have use lists too.
  EXPECT_EQ(f.n->numUses(), 1u);
  f.n->replaceAllUsesWith(one);
  EXPECT_EQ(c->lhs(), one);
  EXPECT_EQ(f.n->numUses(), 0u);
  EXPECT_EQ(usersOf(*one), (std::multiset<std::pair<const Stmt *, unsigned>>{{c, 0}}));
}

TEST(IRCoreTest, UnlinkingFromTheMiddleOfAUseList) {
  Fixture f;
  ConstStmt *x = f.b.i32(7);
  std::vector<UnaryStmt *> users;
  for (int i = 0; i < 5; ++i)
    users.push_back(f.b.neg(x));
  ASSERT_EQ(x->numUses(), 5u);
  // Remove the uses in an order that hits the head, the middle and the tail.
  users[2]->erase();
  EXPECT_EQ(x->numUses(), 4u);
  users[4]->erase();
  EXPECT_EQ(x->numUses(), 3u);
  users[0]->erase();
  EXPECT_EQ(x->numUses(), 2u);
  EXPECT_EQ(usersOf(*x),
            (std::multiset<std::pair<const Stmt *, unsigned>>{{users[1], 0}, {users[3], 0}}));
  users[1]->erase();
  users[3]->erase();
  EXPECT_FALSE(x->hasUses());
  EXPECT_EQ(f.task->body().size(), 1u);
}

TEST(IRCoreTest, OperandUsesSpan) {
  Fixture f;
  ConstStmt *c = f.b.i32(1);
  SelectStmt *s = f.b.select(f.b.i1(true), c, f.n);
  ASSERT_EQ(s->numOperands(), 3u);
  std::span<Use> uses = s->operandUses();
  ASSERT_EQ(uses.size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(uses[i].user(), s);
    EXPECT_EQ(uses[i].index(), i);
    EXPECT_EQ(uses[i].get(), s->operand(i));
  }
  EXPECT_EQ(s->trueValue(), c);
  EXPECT_EQ(s->falseValue(), f.n);
}

//===----------------------------------------------------------------------===//
// Erase, remove, replace
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, EraseUnlinksOperandsAndStatement) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  BinaryStmt *a = f.b.add(one, f.n);
  ASSERT_EQ(f.task->body().size(), 2u);
  a->erase();
  EXPECT_EQ(f.task->body().size(), 1u);
  EXPECT_EQ(&f.task->body().front(), one);
  EXPECT_EQ(one->numUses(), 0u);
  EXPECT_EQ(f.n->numUses(), 0u);
}

TEST(IRCoreTest, EraseContainerDropsNestedUses) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  AllocaStmt *v = f.b.alloca(ScalarType::I32);
  ForStmt *loop;
  {
    auto scope = f.b.forRange(0, f.n);
    loop = scope.stmt();
    Value *x = f.b.add(scope.index(), one);
    f.b.store(v, x);
    auto inner = f.b.ifThen(f.b.cmp(CmpPredicate::Eq, x, one));
    f.b.brk();
  }
  EXPECT_EQ(one->numUses(), 2u);
  EXPECT_EQ(v->numUses(), 1u);
  EXPECT_EQ(f.n->numUses(), 1u);
  EXPECT_EQ(loop->numUses(), 1u); // the loop index, used by the add
  loop->erase();
  EXPECT_EQ(one->numUses(), 0u);
  EXPECT_EQ(v->numUses(), 0u);
  EXPECT_EQ(f.n->numUses(), 0u);
  EXPECT_EQ(stmtsOf(f.task->body()), (std::vector<Stmt *>{one, v}));
}

TEST(IRCoreTest, ErasingADefinitionNullsOutsideUsers) {
  // A statement nested in an erased loop that is still used outside it: the
  // outside user is left with a null operand rather than a dangling one.
  Fixture f;
  AllocaStmt *v = f.b.alloca(ScalarType::I32);
  ForStmt *loop;
  ConstStmt *inner;
  {
    auto scope = f.b.forRange(0, 4);
    loop = scope.stmt();
    inner = f.b.i32(5);
  }
  LocalStoreStmt *store = f.b.store(v, inner);
  ASSERT_EQ(store->value(), inner);
  loop->erase();
  EXPECT_EQ(store->value(), nullptr);
  EXPECT_EQ(store->local(), v);
}

TEST(IRCoreTest, ReplaceAndErase) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  BinaryStmt *a = f.b.add(f.n, one);
  UnaryStmt *neg = f.b.neg(a);
  a->replaceAndErase(f.n);
  EXPECT_EQ(neg->input(), f.n);
  EXPECT_EQ(one->numUses(), 0u);
  EXPECT_EQ(stmtsOf(f.task->body()), (std::vector<Stmt *>{one, neg}));
}

TEST(IRCoreTest, RemoveHandsBackOwnership) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  UnaryStmt *neg = f.b.neg(one);
  std::unique_ptr<Stmt> owned = neg->remove();
  ASSERT_EQ(owned.get(), neg);
  EXPECT_EQ(neg->parent(), nullptr);
  EXPECT_EQ(neg->kernel(), nullptr);
  EXPECT_EQ(neg->parentStmt(), nullptr);
  // A removed statement keeps its operands.
  EXPECT_EQ(neg->input(), one);
  EXPECT_EQ(one->numUses(), 1u);
  EXPECT_EQ(f.task->body().size(), 1u);

  // Re-insert it into a different block of another task.
  auto *task2 = IRBuilder(*f.kernel).insert(std::make_unique<SerialStmt>());
  Stmt *back = task2->body().push_back(std::move(owned));
  EXPECT_EQ(back, neg);
  EXPECT_EQ(neg->parent(), &task2->body());
  EXPECT_EQ(neg->parentStmt(), task2);
  EXPECT_EQ(neg->kernel(), f.kernel);
}

TEST(IRCoreTest, DestroyingARemovedStatementUnlinksItsUses) {
  Fixture f;
  ConstStmt *one = f.b.i32(1);
  {
    std::unique_ptr<Stmt> owned = f.b.neg(one)->remove();
    EXPECT_EQ(one->numUses(), 1u);
  }
  EXPECT_EQ(one->numUses(), 0u);
}

//===----------------------------------------------------------------------===//
// Blocks
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, BlockInsertAtPositions) {
  Fixture f;
  Block &body = f.task->body();
  ConstStmt *c1 = f.b.i32(1);
  ConstStmt *c3 = f.b.i32(3);
  Stmt *c2 = body.insert(Block::iteratorTo(c3), ConstStmt::getInt(ScalarType::I32, 2));
  Stmt *c0 = body.insert(body.begin(), ConstStmt::getInt(ScalarType::I32, 0));
  Stmt *c4 = body.push_back(ConstStmt::getInt(ScalarType::I32, 4));
  EXPECT_EQ(stmtsOf(body), (std::vector<Stmt *>{c0, c1, c2, c3, c4}));
  int64_t expected = 0;
  for (Stmt &s : body)
    EXPECT_EQ(cast<ConstStmt>(s).intValue(), expected++);
  EXPECT_EQ(&body.front(), c0);
  EXPECT_EQ(&body.back(), c4);
  EXPECT_EQ(body.size(), 5u);
  EXPECT_FALSE(body.empty());
  for (Stmt *s : stmtsOf(body)) {
    EXPECT_EQ(s->parent(), &body);
    EXPECT_EQ(s->kernel(), f.kernel);
  }
  // Iterators walk both ways.
  auto it = Block::iteratorTo(c2);
  EXPECT_EQ(&*--it, c1);
  EXPECT_EQ(&*++it, c2);
  EXPECT_EQ(&*std::prev(body.end()), c4);
}

TEST(IRCoreTest, BlockSplice) {
  Fixture f;
  ForStmt *loop;
  ConstStmt *a, *b, *x, *y;
  {
    auto scope = f.b.forRange(0, 4);
    loop = scope.stmt();
    x = f.b.i32(10);
    y = f.b.i32(11);
  }
  a = f.b.i32(1);
  b = f.b.i32(2);
  UnaryStmt *use = f.b.neg(x);

  // Hoist the loop body between a and b.
  Block &body = f.task->body();
  body.splice(Block::iteratorTo(b), loop->body());
  EXPECT_TRUE(loop->body().empty());
  EXPECT_EQ(stmtsOf(body), (std::vector<Stmt *>{loop, a, x, y, b, use}));
  EXPECT_EQ(x->parent(), &body);
  EXPECT_EQ(y->parentStmt(), f.task);
  EXPECT_EQ(x->kernel(), f.kernel);
  EXPECT_EQ(use->input(), x);

  // Iterators stay usable after the splice: erase and insert around them.
  y->erase();
  EXPECT_EQ(stmtsOf(body), (std::vector<Stmt *>{loop, a, x, b, use}));
  IRBuilder::after(*x).i32(12);
  EXPECT_EQ(body.size(), 6u);
  EXPECT_EQ(cast<ConstStmt>(*std::next(Block::iteratorTo(x))).intValue(), 12);

  // Splicing into the end of a nested block.
  ConstStmt *moved = f.b.i32(99);
  Block tmp(nullptr, nullptr);
  tmp.push_back(moved->remove());
  loop->body().splice(loop->body().end(), tmp);
  EXPECT_TRUE(tmp.empty());
  EXPECT_EQ(moved->parent(), &loop->body());
  EXPECT_EQ(moved->parentStmt(), loop);
  EXPECT_EQ(moved->kernel(), f.kernel);
}

TEST(IRCoreTest, BlockClearDropsReferences) {
  Fixture f;
  ConstStmt *outer = f.b.i32(1);
  WhileStmt *w;
  {
    auto scope = f.b.whileLoop();
    w = cast<WhileStmt>(scope.stmt());
    Value *a = f.b.add(outer, f.n);
    Value *c = f.b.cmp(CmpPredicate::Gt, a, outer);
    auto i = f.b.ifThen(c);
    f.b.brk();
  }
  EXPECT_EQ(outer->numUses(), 2u);
  EXPECT_EQ(f.n->numUses(), 1u);
  w->body().clear();
  EXPECT_TRUE(w->body().empty());
  EXPECT_EQ(outer->numUses(), 0u);
  EXPECT_EQ(f.n->numUses(), 0u);
  EXPECT_EQ(f.task->body().size(), 2u);
}

TEST(IRCoreTest, BlockIsNestedIn) {
  Fixture f;
  Block &top = f.kernel->body();
  Block &taskBody = f.task->body();
  IfStmt *ifs;
  ForStmt *loop;
  {
    auto i = f.b.ifThen(f.b.i1(true));
    ifs = i.stmt();
    auto l = f.b.forRange(0, 2);
    loop = l.stmt();
  }
  Block &then = ifs->thenBlock();
  Block &els = ifs->elseBlock();
  Block &loopBody = loop->body();

  EXPECT_TRUE(top.isNestedIn(&top));
  EXPECT_TRUE(taskBody.isNestedIn(&top));
  EXPECT_TRUE(then.isNestedIn(&taskBody));
  EXPECT_TRUE(loopBody.isNestedIn(&then));
  EXPECT_TRUE(loopBody.isNestedIn(&taskBody));
  EXPECT_TRUE(loopBody.isNestedIn(&top));
  EXPECT_TRUE(els.isNestedIn(&top));
  EXPECT_FALSE(loopBody.isNestedIn(&els));
  EXPECT_FALSE(els.isNestedIn(&then));
  EXPECT_FALSE(top.isNestedIn(&taskBody));
  EXPECT_FALSE(then.isNestedIn(&loopBody));
  EXPECT_FALSE(then.isNestedIn(nullptr));
}

TEST(IRCoreTest, ParentAndKernelLinks) {
  Fixture f;
  Block &top = f.kernel->body();
  EXPECT_EQ(top.owner(), nullptr);
  EXPECT_EQ(top.kernel(), f.kernel);
  EXPECT_EQ(f.task->parent(), &top);
  EXPECT_EQ(f.task->parentStmt(), nullptr);
  EXPECT_EQ(f.task->kernel(), f.kernel);
  EXPECT_EQ(f.task->body().owner(), f.task);
  EXPECT_EQ(f.task->body().kernel(), f.kernel);
  EXPECT_EQ(f.kernel->module(), &f.module);

  IfStmt *ifs;
  ForStmt *loop;
  ConstStmt *deep;
  ConstStmt *elseConst;
  {
    auto i = f.b.ifThen(f.b.i1(false));
    ifs = i.stmt();
    {
      auto l = f.b.forRange(0, 3);
      loop = l.stmt();
      deep = f.b.i32(4);
    }
    i.otherwise();
    elseConst = f.b.i32(5);
  }
  EXPECT_EQ(ifs->parentStmt(), f.task);
  EXPECT_EQ(loop->parent(), &ifs->thenBlock());
  EXPECT_EQ(loop->parentStmt(), ifs);
  EXPECT_EQ(deep->parent(), &loop->body());
  EXPECT_EQ(deep->parentStmt(), loop);
  EXPECT_EQ(deep->kernel(), f.kernel);
  EXPECT_EQ(elseConst->parent(), &ifs->elseBlock());
  EXPECT_EQ(elseConst->parentStmt(), ifs);
  EXPECT_EQ(ifs->thenBlock().owner(), ifs);
  EXPECT_EQ(ifs->elseBlock().kernel(), f.kernel);

  EXPECT_TRUE(f.task->isTask());
  EXPECT_TRUE(f.task->isContainer());
  EXPECT_FALSE(loop->isTask());
  EXPECT_TRUE(loop->isContainer());
  EXPECT_TRUE(ifs->isContainer());
  EXPECT_EQ(ifs->numBlocks(), 2u);
  EXPECT_FALSE(deep->isContainer());
  EXPECT_FALSE(deep->isTask());

  ForStmt *par = IRBuilder(*f.kernel).parallelFor(0, 8).stmt();
  EXPECT_TRUE(par->isTask());
  EXPECT_TRUE(par->isParallel());
  EXPECT_EQ(par->type(), Type::i32());

  // A detached statement has no links.
  auto detached = ConstStmt::getInt(ScalarType::I32, 1);
  EXPECT_EQ(detached->parent(), nullptr);
  EXPECT_EQ(detached->kernel(), nullptr);
}

//===----------------------------------------------------------------------===//
// Side effects
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, HasSideEffectsClassification) {
  Module m;
  Field *fx = m.addField(
      std::make_unique<Field>("x", ScalarType::F32, std::vector<int64_t>{4}, true, false));
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *arr =
      k->addArgument(std::make_unique<Argument>("a", Type::ndarray(ScalarType::F32, 1)));
  IRBuilder b(*k);
  auto task = b.parallelFor(0, 4);
  Value *i = task.index();

  std::vector<std::pair<Stmt *, bool>> cases;
  auto pure = [&](Stmt *s) { cases.push_back({s, false}); };
  auto effect = [&](Stmt *s) { cases.push_back({s, true}); };

  ConstStmt *x = b.f32(1.0f);
  pure(x);
  pure(b.add(x, x));
  pure(b.sin(x));
  pure(b.cmp(CmpPredicate::Lt, x, x));
  Value *cond = cases.back().first;
  pure(b.select(cond, x, x));
  pure(b.cast(x, ScalarType::I32));
  AllocaStmt *v = b.alloca(ScalarType::F32);
  pure(v);
  pure(b.load(v));
  effect(b.store(v, x));
  pure(b.load(GlobalRef::ofField(fx), {i}));
  effect(b.store(GlobalRef::ofField(fx), {i}, x));
  effect(b.atomicAdd(GlobalRef::ofField(fx, Component::Grad), {i}, x));
  Field *fm = m.addField(
      std::make_unique<Field>("m", ScalarType::I32, std::vector<int64_t>{}, false, false));
  effect(b.atomicMax(GlobalRef::ofField(fm), {}, i));
  pure(b.shape(arr, 0));
  AdStackAllocaStmt *st = b.adstackAlloca(ScalarType::F32, 4);
  pure(st);
  effect(b.adstackPush(st, x));
  pure(b.adstackLoadTop(st));
  pure(b.adstackLoadTopAdj(st));
  effect(b.adstackAccAdjoint(st, x));
  effect(b.adstackPop(st));
  {
    auto w = b.whileLoop();
    effect(w.stmt());
    effect(b.brk());
  }
  {
    auto l = b.forRange(0, 2);
    effect(l.stmt());
    effect(b.cont());
  }
  {
    auto ifs = b.ifThen(cond);
    effect(ifs.stmt());
  }
  pure(b.insert(std::make_unique<TaskIndexStmt>(0)));
  task.close();
  effect(task.stmt());
  effect(IRBuilder(*k).insert(std::make_unique<SerialStmt>()));

  // Every statement kind is covered exactly once or more.
  std::set<StmtKind> kinds;
  for (auto [s, expected] : cases) {
    kinds.insert(s->kind());
    EXPECT_EQ(s->hasSideEffects(), expected) << mnemonic(s->kind());
  }
  EXPECT_EQ(kinds.size(), kNumStmtKinds);
}

//===----------------------------------------------------------------------===//
// Destruction with cross-references
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, DestroyModuleWithCrossKernelReferences) {
  // Invalid IR (the verifier rejects it), but destroying it must be safe in
  // either order: ASan builds check for use-after-free and leaks.
  for (bool eraseFirstKernel : {false, true}) {
    auto m = std::make_unique<Module>();
    Kernel *k1 = m->addKernel(std::make_unique<Kernel>("k1"));
    Kernel *k2 = m->addKernel(std::make_unique<Kernel>("k2"));
    Argument *a1 = k1->addArgument(std::make_unique<Argument>("a", Type::i32()));
    IRBuilder b1(*k1);
    ConstStmt *c1;
    {
      auto t = b1.serial();
      c1 = b1.i32(3);
      b1.add(c1, a1);
    }
    IRBuilder b2(*k2);
    BinaryStmt *user;
    {
      auto t = b2.serial();
      user = b2.add(c1, a1); // both operands belong to k1
      b2.neg(user);
    }
    EXPECT_EQ(c1->numUses(), 2u);
    EXPECT_EQ(a1->numUses(), 2u);
    if (eraseFirstKernel) {
      m->eraseKernel(k1);
      EXPECT_EQ(m->kernels().size(), 1u);
      EXPECT_EQ(m->findKernel("k1"), nullptr);
      EXPECT_EQ(user->lhs(), nullptr);
      EXPECT_EQ(user->rhs(), nullptr);
    } else {
      m->eraseKernel(k2);
      EXPECT_EQ(c1->numUses(), 1u);
      EXPECT_EQ(a1->numUses(), 1u);
    }
    m.reset();
  }
}

TEST(IRCoreTest, DestroyKernelWhileAStatementOutsideStillUsesIt) {
  auto owner = std::make_unique<Kernel>("owner");
  Argument *a = owner->addArgument(std::make_unique<Argument>("a", Type::f32()));
  IRBuilder b(*owner);
  ConstStmt *c = b.f32(2.0f);
  // A detached statement, alive after the kernel, that uses its values.
  auto detached = std::make_unique<BinaryStmt>(BinaryOp::Mul, a, c, Type::f32());
  EXPECT_EQ(a->numUses(), 1u);
  owner.reset();
  EXPECT_EQ(detached->lhs(), nullptr);
  EXPECT_EQ(detached->rhs(), nullptr);
}

TEST(IRCoreTest, DestroyDeeplyNestedKernel) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *n = k->addArgument(std::make_unique<Argument>("n", Type::i32()));
  IRBuilder b(*k);
  auto task = b.parallelFor(0, n);
  AllocaStmt *v = b.alloca(ScalarType::I32);
  std::vector<IRBuilder::LoopScope> scopes;
  for (int d = 0; d < 50; ++d) {
    scopes.push_back(b.forRange(0, n));
    b.store(v, b.add(scopes.back().index(), task.index()));
  }
  // Closing in reverse order restores the insertion point step by step.
  while (!scopes.empty())
    scopes.pop_back();
  EXPECT_EQ(&b.block(), &task.stmt()->body());
  EXPECT_EQ(n->numUses(), 51u);
  EXPECT_EQ(v->numUses(), 50u);
}

//===----------------------------------------------------------------------===//
// Statement payloads
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, ConstStmtValues) {
  auto i = ConstStmt::getInt(ScalarType::I64, -5);
  EXPECT_EQ(i->intValue(), -5);
  EXPECT_EQ(i->type(), Type::i64());
  auto f = ConstStmt::getFloat(ScalarType::F32, 0.1);
  // f32 constants are rounded to f32 on creation.
  EXPECT_EQ(f->floatValue(), static_cast<double>(0.1f));
  EXPECT_NE(f->floatValue(), 0.1);
  auto pz = ConstStmt::getFloat(ScalarType::F64, 0.0);
  auto nz = ConstStmt::getFloat(ScalarType::F64, -0.0);
  EXPECT_TRUE(pz->isZero());
  EXPECT_TRUE(nz->isZero());
  EXPECT_FALSE(pz->sameValue(*nz));
  auto nan1 = ConstStmt::getFloat(ScalarType::F64, std::numeric_limits<double>::quiet_NaN());
  auto nan2 = ConstStmt::getFloat(ScalarType::F64, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(nan1->sameValue(*nan2));
  EXPECT_FALSE(
      ConstStmt::getInt(ScalarType::I32, 1)->sameValue(*ConstStmt::getInt(ScalarType::I64, 1)));
  EXPECT_TRUE(ConstStmt::getInt(ScalarType::I32, 1)->isOne());
  EXPECT_TRUE(ConstStmt::getFloat(ScalarType::F32, 1.0)->isOne());
  EXPECT_FALSE(ConstStmt::getInt(ScalarType::I32, 2)->isOne());
}

TEST(IRCoreTest, AdStackOps) {
  Fixture f;
  AdStackAllocaStmt *st = f.b.adstackAlloca(ScalarType::F64, 8);
  EXPECT_EQ(st->capacity(), 8);
  EXPECT_EQ(st->elementType(), ScalarType::F64);
  EXPECT_EQ(st->type(), Type::adstack(ScalarType::F64));
  st->setCapacity(16);
  EXPECT_EQ(st->capacity(), 16);
  ConstStmt *v = f.b.f64(1.0);
  AdStackPushStmt *push = f.b.adstackPush(st, v);
  AdStackLoadTopStmt *top = f.b.adstackLoadTop(st);
  AdStackLoadTopAdjStmt *adj = f.b.adstackLoadTopAdj(st);
  AdStackAccAdjointStmt *acc = f.b.adstackAccAdjoint(st, v);
  AdStackPopStmt *pop = f.b.adstackPop(st);
  EXPECT_EQ(push->stack(), st);
  EXPECT_EQ(push->value(), v);
  EXPECT_EQ(top->type(), Type::f64());
  EXPECT_EQ(adj->type(), Type::f64());
  EXPECT_EQ(acc->value(), v);
  EXPECT_EQ(pop->numOperands(), 1u);
  EXPECT_EQ(st->numUses(), 5u);
  for (Stmt *s : std::initializer_list<Stmt *>{push, top, adj, acc, pop})
    EXPECT_TRUE(isa<AdStackOpStmt>(s)) << mnemonic(s->kind());
  EXPECT_FALSE(isa<AdStackOpStmt>(st));
}

TEST(IRCoreTest, ForBounds) {
  Fixture f;
  ForStmt *loop = f.b.forRange(2, f.n).stmt();
  EXPECT_TRUE(loop->begin().isConstant());
  EXPECT_EQ(loop->beginConstant(), 2);
  EXPECT_EQ(loop->beginValue(), nullptr);
  EXPECT_FALSE(loop->end().isConstant());
  EXPECT_EQ(loop->endValue(), f.n);
  EXPECT_EQ(f.n->numUses(), 1u);
  loop->setEnd(Bound(int64_t(10)));
  EXPECT_EQ(loop->endConstant(), 10);
  EXPECT_EQ(loop->endValue(), nullptr);
  EXPECT_EQ(f.n->numUses(), 0u);
  loop->setBegin(Bound::of(f.n));
  EXPECT_EQ(loop->beginValue(), f.n);
  EXPECT_EQ(loop->beginConstant(), 0);
  EXPECT_FALSE(loop->isParallel());
}

} // namespace
} // namespace qd
