//===- IRCoreFieldsTest.cpp - Fields, arguments and global accesses -------===//
//
// The object model of what kernels read and write: fields and arguments
// with their companions, shapes and indices, and the operand layout of
// global accesses (IRCoreTest.cpp holds the rest of the object model).
//
//===----------------------------------------------------------------------===//
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Module.h"

#include <gtest/gtest.h>

#include <vector>

namespace qd {
namespace {

//===----------------------------------------------------------------------===//
// Fields, arguments and companions
//===----------------------------------------------------------------------===//

TEST(IRCoreTest, FieldCompanionsAndShape) {
  Module m;
  Field *x = m.addField(
      std::make_unique<Field>("x", ScalarType::F32, std::vector<int64_t>{4, 5}, true, false));
  Field *s = m.addField(
      std::make_unique<Field>("s", ScalarType::F64, std::vector<int64_t>{}, false, true));
  EXPECT_EQ(x->name(), "x");
  EXPECT_EQ(x->module(), &m);
  EXPECT_EQ(x->ndim(), 2u);
  EXPECT_EQ(x->numElements(), 20);
  EXPECT_EQ(x->elementType(), ScalarType::F32);
  EXPECT_TRUE(x->hasComponent(Component::Primal));
  EXPECT_TRUE(x->hasComponent(Component::Grad));
  EXPECT_FALSE(x->hasComponent(Component::Dual));
  EXPECT_EQ(s->ndim(), 0u);
  EXPECT_EQ(s->numElements(), 1);
  EXPECT_FALSE(s->hasComponent(Component::Grad));
  EXPECT_TRUE(s->hasComponent(Component::Dual));
  s->setHasGrad(true);
  s->setHasDual(false);
  EXPECT_TRUE(s->hasGrad());
  EXPECT_FALSE(s->hasComponent(Component::Dual));
  EXPECT_EQ(m.findField("x"), x);
  EXPECT_EQ(m.findField("s"), s);
  EXPECT_EQ(m.findField("y"), nullptr);
  EXPECT_EQ(m.fields().size(), 2u);
}

TEST(IRCoreTest, ArgumentCompanionsAndIndices) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *n = k->addArgument(std::make_unique<Argument>("n", Type::i32()));
  Argument *a = k->addArgument(
      std::make_unique<Argument>("a", Type::ndarray(ScalarType::F32, 2), true, true));
  Argument *g = k->addArgument(
      std::make_unique<Argument>("g", Type::ndarray(ScalarType::F64, 1), false, true));
  EXPECT_EQ(k->numArguments(), 3u);
  EXPECT_EQ(n->index(), 0u);
  EXPECT_EQ(a->index(), 1u);
  EXPECT_EQ(g->index(), 2u);
  EXPECT_EQ(k->argument(1), a);
  EXPECT_EQ(a->kernel(), k);
  EXPECT_EQ(k->findArgument("g"), g);
  EXPECT_EQ(k->findArgument("zz"), nullptr);
  EXPECT_FALSE(n->isNdarray());
  EXPECT_TRUE(a->isNdarray());
  EXPECT_TRUE(a->hasComponent(Component::Grad));
  EXPECT_TRUE(a->hasComponent(Component::Dual));
  EXPECT_FALSE(g->hasComponent(Component::Grad));
  EXPECT_TRUE(g->hasComponent(Component::Dual));
  EXPECT_TRUE(n->hasComponent(Component::Primal));
  EXPECT_FALSE(n->hasComponent(Component::Grad));
  g->setHasGrad(true);
  EXPECT_TRUE(g->hasComponent(Component::Grad));
  EXPECT_EQ(a->name(), "a");
  EXPECT_TRUE(isa<Argument>(a));
  EXPECT_FALSE(isa<Stmt>(a));
  EXPECT_EQ(m.findKernel("k"), k);
}

TEST(IRCoreTest, GlobalAccessLayout) {
  Module m;
  Field *fx = m.addField(
      std::make_unique<Field>("x", ScalarType::F32, std::vector<int64_t>{4, 4}, true, false));
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *arr = k->addArgument(
      std::make_unique<Argument>("a", Type::ndarray(ScalarType::F64, 2), true, false));
  IRBuilder b(*k);
  auto task = b.parallelFor(0, 4);
  Value *i = task.index();
  ConstStmt *j = b.i64(1);

  GlobalLoadStmt *lf = b.load(GlobalRef::ofField(fx, Component::Grad), {i, j});
  EXPECT_TRUE(lf->isField());
  EXPECT_EQ(lf->field(), fx);
  EXPECT_EQ(lf->ndarray(), nullptr);
  EXPECT_EQ(lf->component(), Component::Grad);
  EXPECT_EQ(lf->numIndices(), 2u);
  EXPECT_EQ(lf->numOperands(), 2u);
  EXPECT_EQ(lf->indices(), (std::vector<Value *>{i, j}));
  EXPECT_EQ(lf->elementType(), ScalarType::F32);
  EXPECT_EQ(lf->type(), Type::f32());

  ConstStmt *val = b.f64(2.0);
  GlobalStoreStmt *sa = b.store(GlobalRef::ofNdarray(arr), {j, i}, val);
  EXPECT_FALSE(sa->isField());
  EXPECT_EQ(sa->ndarray(), arr);
  EXPECT_EQ(sa->numOperands(), 4u);
  EXPECT_EQ(sa->index(0), j);
  EXPECT_EQ(sa->index(1), i);
  EXPECT_EQ(sa->value(), val);
  EXPECT_EQ(sa->elementType(), ScalarType::F64);
  EXPECT_EQ(sa->ref().ndarray, arr);
  EXPECT_EQ(sa->ref().field, nullptr);

  AtomicAddStmt *aa = b.atomicAdd(GlobalRef::ofNdarray(arr, Component::Grad), {i, i}, val);
  EXPECT_EQ(aa->valueType(), ScalarType::F64);
  EXPECT_EQ(aa->value(), val);
  EXPECT_EQ(aa->component(), Component::Grad);
  EXPECT_EQ(arr->numUses(), 2u);
  EXPECT_TRUE(isa<GlobalAccessStmt>(aa));
  EXPECT_TRUE(isa<GlobalAccessStmt>(lf));
  EXPECT_FALSE(isa<GlobalAccessStmt>(val));
  EXPECT_EQ(dyn_cast<GlobalStoreStmt>(static_cast<Stmt *>(aa)), nullptr);
}

} // namespace
} // namespace qd
