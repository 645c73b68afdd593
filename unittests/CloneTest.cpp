//===- CloneTest.cpp - Deep copies and structural equality ----------------===//
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace qd {
namespace {

constexpr const char *kModule = R"(field @x : f32[16] grad dual
field @s : f32 grad

kernel @k(%a: ndarray<f32, 2> grad, %n: i32) {
  %rows = shape %a, 0 : i32
  parallel for %i = 0 to %rows {
    %xi = load @x[%i] : f32
    %v = alloca f32
    store %v, %xi
    %st = adstack.alloca f32, capacity 3
    for %j = 0 to %n {
      %cur = load %v : f32
      adstack.push %st, %cur
      %s = sin %cur : f32
      store %v, %s
      %big = cmp gt %j, %n : i32
      if %big {
        break
      } else {
        continue
      }
    }
    while {
      %t = adstack.load_top %st : f32
      %g = adstack.load_top_adj %st : f32
      adstack.acc_adjoint %st, %t
      adstack.pop %st
      %r = select %big2, %t, %g : f32
      atomic_add %a.grad[%i, %i], %r : f32
      break
    }
    %big2 = const true : i1
    %xd = load @x.dual[%i] : f32
    %c = cast %xd : f32 to f64
  }
  serial {
    %one = const 1.0 : f32
    store @s.grad[], %one
  }
}

kernel @other() {
  serial {
    %z = const 0 : i32
  }
}
)";

std::unique_ptr<Module> parse(std::string_view text) {
  auto m = parseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

/// Every value defined in a kernel (arguments and statements).
std::unordered_set<const Value *> valuesOf(Kernel &k) {
  std::unordered_set<const Value *> out;
  for (unsigned i = 0; i < k.numArguments(); ++i)
    out.insert(k.argument(i));
  walk(k, [&](Stmt &s) { out.insert(&s); });
  return out;
}

/// No operand of `k` refers to a value in `foreign`, and no use of a value
/// of `k` comes from a statement outside `k`.
void expectDisjoint(Kernel &k, const std::unordered_set<const Value *> &foreign) {
  std::unordered_set<const Value *> own = valuesOf(k);
  walk(k, [&](Stmt &s) {
    for (unsigned i = 0; i < s.numOperands(); ++i)
      EXPECT_EQ(foreign.count(s.operand(i)), 0u) << printStmt(s);
  });
  for (const Value *v : own)
    for (Use &u : v->uses())
      EXPECT_EQ(u.user()->kernel(), &k);
}

TEST(CloneTest, CloneModuleIsEquivalentAndPrintsIdentically) {
  // The verifier rejects %big2 (used before its definition), but clone and
  // equivalence work on any IR, including forward uses.
  std::unique_ptr<Module> m = parse(kModule);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<Module> c = cloneModule(*m);
  std::string why;
  EXPECT_TRUE(isEquivalent(*m, *c, &why)) << why;
  EXPECT_TRUE(isEquivalent(*c, *m, &why)) << why;
  EXPECT_EQ(printModule(*c), printModule(*m));
  EXPECT_EQ(verify(*c).message(), verify(*m).message());

  // Fields are copied, and accesses point at the copies.
  ASSERT_EQ(c->fields().size(), 2u);
  EXPECT_NE(c->findField("x"), m->findField("x"));
  EXPECT_TRUE(c->findField("x")->hasDual());
  EXPECT_EQ(c->findField("x")->module(), c.get());
  walk(*c->findKernel("k"), [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s); g && g->isField()) {
      EXPECT_EQ(g->field()->module(), c.get()) << printStmt(s);
    }
  });
  // Locations are kept.
  EXPECT_EQ(c->findKernel("k")->body().front().loc().str(),
            m->findKernel("k")->body().front().loc().str());
  for (size_t i = 0; i < m->kernels().size(); ++i)
    expectDisjoint(*c->kernels()[i], valuesOf(*m->kernels()[i]));
}

/// `text` with every `f32` spelled `f64`.
std::string spelledF64(std::string text) {
  for (size_t at = text.find("f32"); at != std::string::npos; at = text.find("f32", at))
    text.replace(at, 3, "f64");
  return text;
}

TEST(CloneTest, WidenedCloneTurnsEveryF32IntoF64) {
  // Every place a type is written (fields, ndarray and scalar arguments,
  // loads, locals, adstacks, constants, casts, comparisons, selects,
  // atomics) changes, and nothing else does.
  std::unique_ptr<Module> m = parse(kModule);
  ASSERT_NE(m, nullptr);
  std::string before = printModule(*m);
  std::unique_ptr<Module> w = cloneModuleWidenedToF64(*m);
  EXPECT_EQ(printModule(*w), spelledF64(before));
  EXPECT_EQ(printModule(*m), before); // the original is untouched
  EXPECT_EQ(w->findField("x")->elementType(), ScalarType::F64);
  EXPECT_TRUE(w->findField("x")->hasGrad());
  EXPECT_TRUE(w->findField("x")->hasDual());
  EXPECT_EQ(w->findKernel("k")->argument(0)->type(), Type::ndarray(ScalarType::F64, 2));
  EXPECT_EQ(w->findKernel("k")->argument(1)->type(), Type::i32());
  walk(*w->findKernel("k"), [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s); g && g->isField()) {
      EXPECT_EQ(g->field()->module(), w.get()) << printStmt(s);
    }
  });
  for (size_t i = 0; i < m->kernels().size(); ++i)
    expectDisjoint(*w->kernels()[i], valuesOf(*m->kernels()[i]));
}

TEST(CloneTest, WidenedCloneKeepsTheValueOfF32ConstantsAndVerifies) {
  // 0.1 as an f32 is 0.100000001490116...: the widened constant is that
  // value, not the double nearest to 0.1, so the copy computes the same
  // function without rounding.
  std::unique_ptr<Module> m = parse(R"(field @y : f32
field @z : f64
kernel @k(%s: f32) {
  serial {
    %c = const 0.1 : f32
    %p = mul %c, %s : f32
    %lt = cmp lt %p, %c : f32
    %q = select %lt, %p, %c : f32
    store @y[], %q
    %w = cast %q : f32 to f64
    store @z[], %w
  }
}
)");
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(verify(*m).ok());
  std::unique_ptr<Module> w = cloneModuleWidenedToF64(*m);
  ASSERT_TRUE(verify(*w).ok()) << verify(*w).message() << "\n" << printModule(*w);
  const ConstStmt *c = nullptr;
  walk(*w->findKernel("k"), [&](Stmt &s) {
    if (auto *k = dyn_cast<ConstStmt>(&s))
      c = k;
  });
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->scalarType(), ScalarType::F64);
  EXPECT_EQ(c->floatValue(), static_cast<double>(0.1f));
  EXPECT_NE(c->floatValue(), 0.1);
  EXPECT_EQ(w->findKernel("k")->argument(0)->type(), Type::f64());
  EXPECT_EQ(w->findField("z")->elementType(), ScalarType::F64);
}

TEST(CloneTest, CloneKernelKeepsFieldsAndRenames) {
  std::unique_ptr<Module> m = parse(kModule);
  ASSERT_NE(m, nullptr);
  Kernel &k = *m->findKernel("k");
  std::unique_ptr<Kernel> copy = cloneKernel(k, "k_copy");
  EXPECT_EQ(copy->name(), "k_copy");
  EXPECT_EQ(copy->module(), nullptr);

  // Printed text is identical except for the kernel name.
  std::string original = printKernel(k);
  std::string cloned = printKernel(*copy);
  ASSERT_TRUE(cloned.starts_with("kernel @k_copy("));
  EXPECT_EQ("kernel @k(" + cloned.substr(std::string("kernel @k_copy(").size()), original);

  // Different names make kernels different; with the same name they match.
  std::string why;
  EXPECT_FALSE(isEquivalent(k, *copy, &why));
  EXPECT_EQ(why, "kernel names differ: @k vs @k_copy");
  std::unique_ptr<Kernel> same = cloneKernel(k, "k");
  EXPECT_TRUE(isEquivalent(k, *same, &why)) << why;

  // Field references are shared with the original module.
  walk(*copy, [&](Stmt &s) {
    if (auto *g = dyn_cast<GlobalAccessStmt>(&s); g && g->isField()) {
      EXPECT_EQ(g->field()->module(), m.get());
    }
  });
  expectDisjoint(*copy, valuesOf(k));
  EXPECT_EQ(copy->argument(0)->kernel(), copy.get());
  EXPECT_TRUE(copy->argument(0)->hasGrad());
  EXPECT_EQ(copy->argument(1)->name(), "n");

  // Adding the clone to the module gives a valid second kernel.
  m->addKernel(std::move(copy));
  EXPECT_EQ(m->findKernel("k_copy")->module(), m.get());
}

TEST(CloneTest, CloneKernelOfSomeTopLevelStatements) {
  std::unique_ptr<Module> m = parse(kModule);
  ASSERT_NE(m, nullptr);
  Kernel &k = *m->findKernel("k");
  // The launch-time statement and the serial task, not the parallel one.
  ValueMap map;
  std::unique_ptr<Kernel> copy = cloneKernel(
      k, "k_some", [](const Stmt &top) { return !isa<ForStmt>(top); }, map);
  ASSERT_EQ(copy->numArguments(), k.numArguments());
  EXPECT_EQ(copy->argument(0)->name(), "a");
  std::vector<Stmt *> tops;
  for (Stmt &s : copy->body())
    tops.push_back(&s);
  ASSERT_EQ(tops.size(), 2u);
  Stmt &rows = k.body().front(), &serial = k.body().back();
  EXPECT_EQ(map.at(&rows), tops[0]);
  EXPECT_EQ(map.at(&serial), tops[1]);
  EXPECT_EQ(map.count(&*std::next(k.body().begin())), 0u); // the parallel task
  // The shape reads the copy's argument; statements nested in a copied one
  // are mapped too.
  EXPECT_EQ(tops[0]->operand(0), copy->argument(0));
  EXPECT_EQ(map.at(k.argument(0)), copy->argument(0));
  Stmt &one = serial.block(0).front();
  EXPECT_EQ(cast<Stmt>(map.at(&one))->parentStmt(), tops[1]);
  expectDisjoint(*copy, valuesOf(k));
}

TEST(CloneTest, CloneIsIndependent) {
  std::unique_ptr<Module> m = parse(kModule);
  ASSERT_NE(m, nullptr);
  std::string before = printModule(*m);
  std::unique_ptr<Module> c = cloneModule(*m);
  Kernel &ck = *c->findKernel("k");

  // Mutate the clone heavily: rename, change constants and capacities,
  // rewire operands, erase a whole task and a kernel.
  walk(ck, [&](Stmt &s) {
    s.setName(s.name() + "_c");
    if (auto *st = dyn_cast<AdStackAllocaStmt>(&s))
      st->setCapacity(99);
  });
  ck.argument(1)->replaceAllUsesWith(ck.body().begin().operator->()); // %n -> %rows
  ck.body().back().erase();
  c->eraseKernel(c->findKernel("other"));
  c->findField("x")->setHasDual(false);

  EXPECT_EQ(printModule(*m), before);
  std::string why;
  EXPECT_FALSE(isEquivalent(*m, *c, &why));

  // And the other way round: destroying the original leaves the clone intact.
  std::string clonePrinted = printModule(*c);
  m.reset();
  EXPECT_EQ(printModule(*c), clonePrinted);
}

TEST(CloneTest, CloneStmtRemapsOperands) {
  Module m;
  Kernel *k = m.addKernel(std::make_unique<Kernel>("k"));
  Argument *n = k->addArgument(std::make_unique<Argument>("n", Type::i32()));
  IRBuilder b(*k);
  auto task = b.serial();
  ConstStmt *one = b.i32(1);
  ConstStmt *two = b.i32(2);
  ForStmt *loop;
  BinaryStmt *inner;
  {
    auto l = b.forRange(0, n);
    loop = l.stmt();
    inner = b.add(l.index(), one);
    b.mul(inner, n);
  }

  // Unmapped operands are kept; mapped ones are replaced; cloned values are
  // added to the map (including the loop index, remapped inside the body).
  ValueMap map{{one, two}};
  std::unique_ptr<Stmt> copy = cloneStmt(*loop, map);
  auto *cl = cast<ForStmt>(copy.get());
  EXPECT_EQ(map.at(loop), cl);
  ASSERT_EQ(cl->body().size(), 2u);
  auto &cadd = cast<BinaryStmt>(cl->body().front());
  auto &cmul = cast<BinaryStmt>(cl->body().back());
  EXPECT_EQ(map.at(inner), &cadd);
  EXPECT_EQ(cadd.lhs(), cl);  // the cloned loop's index
  EXPECT_EQ(cadd.rhs(), two); // remapped through the map
  EXPECT_EQ(cmul.lhs(), &cadd);
  EXPECT_EQ(cmul.rhs(), n); // outside value, kept
  EXPECT_EQ(cl->endValue(), n);
  EXPECT_EQ(one->numUses(), 1u);
  EXPECT_EQ(two->numUses(), 1u);
  EXPECT_EQ(n->numUses(), 4u);
  EXPECT_EQ(cl->parent(), nullptr);

  // Insert the copy after the original: the kernel still verifies.
  IRBuilder::after(*loop).insert(std::move(copy));
  EXPECT_TRUE(verify(m).ok()) << verify(m);
  EXPECT_EQ(task.stmt()->block(0).size(), 4u);
}

TEST(CloneTest, CloneBlockInto) {
  std::unique_ptr<Module> m = parse(R"(kernel @k(%n: i32) {
  serial {
    %a = add %n, %n : i32
    %b = mul %a, %n : i32
  }
  serial {
  }
}
)");
  ASSERT_NE(m, nullptr);
  Kernel &k = *m->kernels()[0];
  Block &from = k.body().front().block(0);
  Block &to = k.body().back().block(0);
  ValueMap map;
  cloneBlockInto(from, to, map);
  cloneBlockInto(from, to, map); // a second copy: %a maps to the latest clone
  EXPECT_EQ(printKernel(k), R"(kernel @k(%n: i32) {
  serial {
    %a = add %n, %n : i32
    %b = mul %a, %n : i32
  }
  serial {
    %a.1 = add %n, %n : i32
    %b.1 = mul %a.1, %n : i32
    %a.2 = add %n, %n : i32
    %b.2 = mul %a.2, %n : i32
  }
}
)");
  EXPECT_TRUE(verify(*m).ok());
}

//===----------------------------------------------------------------------===//
// isEquivalent
//===----------------------------------------------------------------------===//

/// Parses two modules and returns isEquivalent's verdict and reason.
std::pair<bool, std::string> compare(std::string_view a, std::string_view b) {
  std::unique_ptr<Module> ma = parse(a), mb = parse(b);
  if (!ma || !mb)
    return {false, "parse error"};
  std::string why;
  bool eq = isEquivalent(*ma, *mb, &why);
  return {eq, why};
}

TEST(CloneTest, EquivalenceIgnoresNamesAndLocations) {
  auto [eq, why] = compare("kernel @k(%n: i32) {\n  serial {\n    %a = add %n, %n : i32\n  }\n}",
                           "// a comment shifts every location\n"
                           "kernel @k(%m: i32) { serial { %zz = add %m, %m : i32 } }");
  EXPECT_TRUE(eq) << why;
}

TEST(CloneTest, EquivalenceDetectsDifferences) {
  const char *base = R"(field @x : f32[4]
kernel @k(%n: i32) {
  serial {
    %a = const 1.5 : f32
    %b = add %a, %a : f32
    %c = load @x[%n] : f32
    %d = mul %b, %c : f32
  }
})";
  struct Case {
    const char *variant;
    const char *why;
  };
  const Case cases[] = {
      // Constant value.
      {R"(field @x : f32[4]
kernel @k(%n: i32) {
  serial {
    %a = const 2.5 : f32
    %b = add %a, %a : f32
    %c = load @x[%n] : f32
    %d = mul %b, %c : f32
  }
})",
       "kernel @k: statement at <stdin>:4:5 differs: '%a = const 1.5 : f32' vs '%a = const 2.5 "
       ": f32'"},
      // Op.
      {R"(field @x : f32[4]
kernel @k(%n: i32) {
  serial {
    %a = const 1.5 : f32
    %b = sub %a, %a : f32
    %c = load @x[%n] : f32
    %d = mul %b, %c : f32
  }
})",
       "kernel @k: statement at <stdin>:5:5 differs: '%b = add %a, %a : f32' vs '%b = sub %a, "
       "%a : f32'"},
      // Operand wiring: %d uses %a instead of %b.
      {R"(field @x : f32[4]
kernel @k(%n: i32) {
  serial {
    %a = const 1.5 : f32
    %b = add %a, %a : f32
    %c = load @x[%n] : f32
    %d = mul %a, %c : f32
  }
})",
       "kernel @k: statement at <stdin>:7:5 differs: operand 0 refers to different values"},
      // Field name (of the access and the declaration).
      {R"(field @y : f32[4]
kernel @k(%n: i32) {
  serial {
    %a = const 1.5 : f32
    %b = add %a, %a : f32
    %c = load @y[%n] : f32
    %d = mul %b, %c : f32
  }
})",
       "field '@x' differs"},
      // Statement count.
      {R"(field @x : f32[4]
kernel @k(%n: i32) {
  serial {
    %a = const 1.5 : f32
    %b = add %a, %a : f32
    %c = load @x[%n] : f32
  }
})",
       "kernel @k: a block has 4 statements on one side and 3 on the other"},
      // Argument type.
      {R"(field @x : f32[4]
kernel @k(%n: i64) {
  serial {
    %a = const 1.5 : f32
    %b = add %a, %a : f32
    %c = load @x[%n] : f32
    %d = mul %b, %c : f32
  }
})",
       "kernel @k: argument 0 differs"},
  };
  for (const Case &c : cases) {
    auto [eq, why] = compare(base, c.variant);
    EXPECT_FALSE(eq) << c.variant;
    EXPECT_EQ(why, c.why) << c.variant;
  }
}

TEST(CloneTest, EquivalenceComparesFieldAccessByName) {
  // Same declarations, but the access goes to a different field.
  auto [eq, why] = compare(R"(field @x : f32
field @y : f32
kernel @k() {
  serial {
    %a = load @x[] : f32
  }
})",
                           R"(field @x : f32
field @y : f32
kernel @k() {
  serial {
    %a = load @y[] : f32
  }
})");
  EXPECT_FALSE(eq);
  EXPECT_EQ(why, "kernel @k: statement at <stdin>:5:5 differs: '%a = load @x[] : f32' vs '%a = "
                 "load @y[] : f32'");
}

TEST(CloneTest, EquivalenceOfSignedZerosAndNaNs) {
  auto [eq1, why1] = compare("kernel @k() {\n  %a = const 0.0 : f64\n}",
                             "kernel @k() {\n  %a = const -0.0 : f64\n}");
  EXPECT_FALSE(eq1);
  auto [eq2, why2] = compare("kernel @k() {\n  %a = const nan : f64\n}",
                             "kernel @k() {\n  %a = const nan : f64\n}");
  EXPECT_TRUE(eq2) << why2;
  auto [eq3, why3] = compare("kernel @k() {\n  %a = const nan : f32\n}",
                             "kernel @k() {\n  %a = const -nan : f32\n}");
  EXPECT_FALSE(eq3);
}

TEST(CloneTest, EquivalenceOfLoopBoundsAndContainers) {
  auto [eq1, why1] = compare("kernel @k(%n: i32) {\n  parallel for %i = 0 to %n {\n  }\n}",
                             "kernel @k(%n: i32) {\n  parallel for %i = 0 to 4 {\n  }\n}");
  EXPECT_FALSE(eq1);
  EXPECT_EQ(why1, "kernel @k: statement at <stdin>:2:3 differs: 'parallel for %i = 0 to %n' vs "
                  "'parallel for %i = 0 to 4'");
  auto [eq2, why2] = compare("kernel @k() {\n  parallel for %i = 0 to 4 {\n  }\n}",
                             "kernel @k() {\n  serial {\n  }\n}");
  EXPECT_FALSE(eq2);
  EXPECT_EQ(why2, "kernel @k: statement at <stdin>:2:3 differs: 'parallel for %i = 0 to 4' vs "
                  "'serial'");
  auto [eq3, why3] = compare("kernel @k() {\n  parallel for %i = 0 to 4 {\n  }\n}",
                             "kernel @k() {\n  parallel for %i = 1 to 4 {\n  }\n}");
  EXPECT_FALSE(eq3);
  auto [eq4, why4] = compare("kernel @a() {\n}\nkernel @b() {\n}", "kernel @a() {\n}");
  EXPECT_FALSE(eq4);
  EXPECT_EQ(why4, "modules have different numbers of kernels");
}

} // namespace
} // namespace qd
