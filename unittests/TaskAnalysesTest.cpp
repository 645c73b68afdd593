//===- TaskAnalysesTest.cpp - Ownership, uniformity, aliasing checks ------===//
#include "qd/analysis/ElementOwnership.h"
#include "qd/analysis/GlobalAccess.h"
#include "qd/analysis/StopChecks.h"
#include "qd/analysis/TaskVectorPlan.h"
#include "qd/analysis/Uniformity.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <unordered_map>

namespace qd {
namespace {

struct Parsed {
  std::unique_ptr<Module> module;
  Kernel *kernel = nullptr;
  ForStmt *task = nullptr;
};

Parsed parse(std::string_view text) {
  ParseOptions options;
  options.filename = "t.qd";
  auto m = parseModule(text, options);
  EXPECT_TRUE(m.ok()) << m.status();
  Parsed p;
  if (!m.ok())
    return p;
  p.module = std::move(*m);
  p.kernel = p.module->kernels().front().get();
  p.task = dyn_cast<ForStmt>(&p.kernel->body().front());
  return p;
}

/// The statement whose value is named `%name`, or the `nth` statement of
/// kind `kind` (pre-order).
Stmt *find(Kernel &k, std::string_view name) {
  Stmt *out = nullptr;
  walk(k.body(), [&](Stmt &s) {
    if (s.name() == name)
      out = &s;
  });
  EXPECT_NE(out, nullptr) << name;
  return out;
}
Stmt *nth(Kernel &k, StmtKind kind, unsigned n) {
  Stmt *out = nullptr;
  walk(k.body(), [&](Stmt &s) {
    if (s.kind() == kind && n-- == 0 && !out)
      out = &s;
  });
  EXPECT_NE(out, nullptr);
  return out;
}
const GlobalAccessStmt &access(Stmt *s) {
  return *cast<GlobalAccessStmt>(s);
}

TEST(ElementOwnershipTest, AnIndexPositionHoldingTheTaskIndexEverywhereOwnsTheElements) {
  Parsed p = parse(R"(
field @y : f32[8, 2]
field @n : f32[8, 2]
kernel @k() {
  parallel for %i = 0 to 8 {
    %z = const 0 : i32
    %o = const 1 : i32
    %a = load @y[%i, %z] : f32
    store @y[%o, %i], %a
    store @y[%i, %o], %a
    %b = load @n[%i, %z] : f32
    store @n[%z, %i], %b
    atomic_add @n[%i, %o], %b : f32
  }
}
)");
  ElementOwnership own = ElementOwnership::compute(*p.task);
  ASSERT_EQ(own.classes().size(), 2u);
  // @y: index 0 of the store @y[%o, %i] is not the task index, but the
  // positions need not be the same in one access; they must be in all.
  EXPECT_FALSE(own.owns(access(find(*p.kernel, "a"))));
  EXPECT_EQ(own.classes()[0].ownedPositions, 0u);
  EXPECT_FALSE(own.owns(access(find(*p.kernel, "b"))));
  EXPECT_FALSE(own.isPrivateAtomic(nth(*p.kernel, StmtKind::AtomicAdd, 0)));
  EXPECT_NE(own.lanesRefused().find("is stored to at an element that is not the iteration's own"),
            std::string::npos)
      << own.lanesRefused();
  // The first store of the first class that breaks the rule, with its
  // location; printed with a namer of the kernel, with its operands.
  EXPECT_NE(own.lanesRefused().find("'store @y[...]' at t.qd:9:5"), std::string::npos)
      << own.lanesRefused();
  EXPECT_NE(own.lanesRefused(ValueNamer(*p.kernel)).find("'store @y[%o, %i], %a' at t.qd:9:5"),
            std::string::npos)
      << own.lanesRefused(ValueNamer(*p.kernel));

  Parsed q = parse(R"(
field @y : f32[8, 2]
field @t : f32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %z = const 0 : i32
    %o = const 1 : i32
    %a = load @y[%i, %z] : f32
    store @y[%i, %o], %a
    atomic_add @t[%i], %a : f32
  }
}
)");
  ElementOwnership own2 = ElementOwnership::compute(*q.task);
  EXPECT_TRUE(own2.owns(access(find(*q.kernel, "a"))));
  EXPECT_EQ(own2.classes()[0].ownedPositions, 1u);
  EXPECT_TRUE(own2.isPrivateAtomic(nth(*q.kernel, StmtKind::AtomicAdd, 0)));
  EXPECT_EQ(own2.lanesRefused(), "");
}

TEST(ElementOwnershipTest, NdarraysOfOneElementTypeAndRankMayAlias) {
  Parsed p = parse(R"(
kernel @k(%a: ndarray<f32, 1> grad, %b: ndarray<f32, 1>, %c: ndarray<i32, 1>,
          %d: ndarray<f32, 2>) {
  parallel for %i = 0 to 8 {
    %z = const 0 : i32
    %x = load %a[%i] : f32
    %y = load %b[%z] : f32
    %w = load %c[%z] : i32
    %v = load %d[%z, %z] : f32
    atomic_add %a.grad[%i], %x : f32
  }
}
)");
  auto &x = access(find(*p.kernel, "x"));
  auto &y = access(find(*p.kernel, "y"));
  auto &w = access(find(*p.kernel, "w"));
  auto &v = access(find(*p.kernel, "v"));
  auto &add = access(nth(*p.kernel, StmtKind::AtomicAdd, 0));
  EXPECT_TRUE(mayAlias(x, y));
  EXPECT_TRUE(mayAlias(x, add)); // a buffer may be one's primal and another's grad
  EXPECT_FALSE(mayAlias(x, w));  // another element type
  EXPECT_FALSE(mayAlias(x, v));  // another rank
  EXPECT_EQ(describe(aliasClassOf(x)), "ndarrays of f32, rank 1");
  ElementOwnership own = ElementOwnership::compute(*p.task);
  // %b[0] may be %a[i] of another iteration: the f32 rank-1 class is not owned.
  EXPECT_FALSE(own.owns(x));
  EXPECT_FALSE(own.isPrivateAtomic(&add));
  EXPECT_TRUE(own.mayBeWritten(y));
  EXPECT_FALSE(own.mayBeWritten(w));
  EXPECT_NE(own.lanesRefused().find("both atomically updated and loaded"), std::string::npos)
      << own.lanesRefused();
}

// WrittenAliasClasses: a kernel's written classes, across its tasks. With
// MayAlias a read-only ndarray shares the class of a written one of its
// type and rank (and of an adjoint); with Distinct each component of each
// argument is its own. A field's grad is another class than the field.
TEST(ElementOwnershipTest, TheClassesAKernelWrites) {
  Parsed p = parse(R"(
field @f : f32[8] grad
kernel @k(%a: ndarray<f32, 1> grad, %b: ndarray<f32, 1>, %c: ndarray<i32, 1>) {
  parallel for %i = 0 to 8 {
    %x = load %a[%i] : f32
    %y = load @f[%i] : f32
    %w = load %c[%i] : i32
    store %b[%i], %x
  }
  parallel for %j = 0 to 8 {
    %u = load %b[%j] : f32
    atomic_add @f.grad[%j], %u : f32
  }
}
)");
  auto &x = access(find(*p.kernel, "x"));
  auto &y = access(find(*p.kernel, "y"));
  auto &w = access(find(*p.kernel, "w"));
  auto &u = access(find(*p.kernel, "u"));
  WrittenAliasClasses may(*p.kernel, NdarrayAliasing::MayAlias);
  EXPECT_TRUE(may.written(x)); // %b, of its type and rank, is stored to
  EXPECT_TRUE(may.written(u));
  EXPECT_FALSE(may.written(y)); // @f.grad is another buffer than @f
  EXPECT_FALSE(may.written(w)); // no i32 ndarray is written
  EXPECT_TRUE(may.written(access(nth(*p.kernel, StmtKind::AtomicAdd, 0))));
  WrittenAliasClasses distinct(*p.kernel, NdarrayAliasing::Distinct);
  EXPECT_FALSE(distinct.written(x)); // %a is its own buffer
  EXPECT_TRUE(distinct.written(u));  // written by the first task
  EXPECT_FALSE(distinct.written(y));
  EXPECT_FALSE(distinct.written(w));
}

/// "<store's class>@<top-level position it sinks to, or end> ..." for the
/// stores sunkStores moves in `task`.
std::string sinkPlan(ForStmt &task, NdarrayAliasing aliasing) {
  std::unordered_map<const Stmt *, size_t> position;
  for (Stmt &s : task.body())
    position.emplace(&s, position.size());
  std::string out;
  for (const SunkStore &k : sunkStores(task, aliasing))
    out += describe(aliasClassOf(*k.store, NdarrayAliasing::Distinct)) + "@" +
           (k.before ? std::to_string(position.at(k.before)) : "end") + " ";
  return out;
}

TEST(ElementOwnershipTest, StoresOfConstantsSinkToWhatMayTouchTheirMemory) {
  // The shape of a gradient iteration: read an output's adjoint, zero it,
  // then the reverse loop and the input's adjoint.
  Parsed p = parse(R"(
field @f : f32[8]
field @g : f32[8]
kernel @k(%x: ndarray<f32, 1> grad, %y: ndarray<f32, 1> grad, %m: ndarray<i32, 1>) {
  parallel for %i = 0 to 8 {
    %zero = const 0.0 : f32
    %one = const 1 : i32
    %a = load %y.grad[%i] : f32
    store %y.grad[%i], %zero
    store %m[%i], %one
    store @f[%i], %zero
    store @g[%i], %a
    for %j = 0 to 4 {
      %t = load %x[%j] : f32
      if %one {
        continue
      }
      atomic_add %x.grad[%i], %t : f32
    }
    store @f[%i], %a
  }
}
)");
  // May alias: %y.grad shares a class with %x and %x.grad, which the loop
  // (7) touches; @f is stored again (8); %m is of its own class.
  EXPECT_EQ(sinkPlan(*p.task, NdarrayAliasing::MayAlias), "%y.grad@7 %m@end @f@8 ");
  // Distinct buffers: %y.grad to the end too (only %x and %x.grad follow).
  EXPECT_EQ(sinkPlan(*p.task, NdarrayAliasing::Distinct), "%y.grad@end %m@end @f@8 ");

  // A break or continue of the iteration itself keeps the stores before
  // it where they are; one of a nested loop (above) does not.
  Parsed q = parse(R"(
kernel @k(%y: ndarray<f32, 1> grad) {
  parallel for %i = 0 to 8 {
    %zero = const 0.0 : f32
    %c = const 1 : i32
    store %y.grad[%i], %zero
    if %c {
      continue
    }
    %z = const 0 : i32
  }
}
)");
  EXPECT_EQ(sinkPlan(*q.task, NdarrayAliasing::Distinct), "");
}

TEST(ElementOwnershipTest, StoresSinkPastOtherSlicesOfTheirArray) {
  // A time step's gradient: zero p.grad[t + 1] after reading it, update
  // slice t (never the same element), then the clamped slice max(t - 1, 0),
  // which may be t + 1 (t = -1) and so stops the store.
  Parsed p = parse(R"(
kernel @k(%t: i32, %p: ndarray<f32, 2> grad) {
  parallel for %i = 0 to 8 {
    %zero = const 0.0 : f32
    %one = const 1 : i32
    %t1 = add %t, %one : i32
    %a = load %p.grad[%t1, %i] : f32
    store %p.grad[%t1, %i], %zero
    %b = load %p.grad[%t, %i] : f32
    %c = add %a, %b : f32
    store %p.grad[%t, %i], %c
    %u = sub %t, %one : i32
    %n = const 0 : i32
    %m = max %u, %n : i32
    atomic_add %p.grad[%m, %i], %a : f32
  }
}
)");
  EXPECT_EQ(sinkPlan(*p.task, NdarrayAliasing::Distinct), "%p.grad@11 ");

  // A store that stops at another store of a constant stays right before
  // it, and that one stays where it is: sinking it past the load of x[t + 1]
  // (apart from x[t], not from x[i]) would carry the first along.
  Parsed q = parse(R"(
kernel @k(%t: i32, %x: ndarray<f32, 1>) {
  parallel for %i = 0 to 8 {
    %zero = const 0.0 : f32
    %one = const 1 : i32
    %t1 = add %t, %one : i32
    store %x[%i], %zero
    %w = const 2 : i32
    store %x[%t], %zero
    %v = load %x[%t1] : f32
    store %x[%i], %v
  }
}
)");
  EXPECT_EQ(sinkPlan(*q.task, NdarrayAliasing::Distinct), "%x@5 ");
}

TEST(UniformityTest, VaryingValuesDivergentArmsAndMaskedLoops) {
  Parsed p = parse(R"(
field @m : i32[8]
field @x : f32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %n = load @m[%i] : i32
    %z = const 0 : i32
    %c = load @m[%z] : i32
    %p = cmp gt %n, %z : i32
    if %p {
      %s = adstack.alloca f32, capacity 4
      %one = const 1.0 : f32
      adstack.push %s, %one
    }
    for %j = 0 to %c {
      %q = cmp gt %j, %n : i32
      if %q {
        break
      }
    }
    for %k = 0 to %c {
    }
  }
}
)");
  Uniformity u = Uniformity::compute(*p.task);
  Kernel &k = *p.kernel;
  EXPECT_TRUE(u.isVarying(p.task));
  EXPECT_TRUE(u.isVarying(find(k, "n")));
  EXPECT_FALSE(u.isVarying(find(k, "c"))); // uniform index, @m is not written
  EXPECT_TRUE(u.isVarying(find(k, "p")));
  EXPECT_FALSE(u.isDivergent(nth(k, StmtKind::If, 0)));
  EXPECT_TRUE(u.isDivergent(find(k, "one")));
  EXPECT_TRUE(u.isLaneStack(find(k, "s")));
  // A break in a varying if masks the loop it leaves (jumpTarget), not the
  // one after it.
  EXPECT_TRUE(u.isMaskedLoop(find(k, "j")));
  EXPECT_TRUE(u.isDivergent(find(k, "q")));
  EXPECT_FALSE(u.isMaskedLoop(find(k, "k")));
  EXPECT_FALSE(u.isMaskedLoop(p.task));

  TaskVectorPlan plan = planTaskVectorization(*p.task);
  EXPECT_TRUE(plan.ok()) << plan.refused();
  EXPECT_TRUE(plan.isMaskedLoop(find(k, "j")));
}

TEST(UniformityTest, PrinterTagsEveryStatementOfEveryTask) {
  Parsed p = parse(R"(
field @x : f32[8]
kernel @k() {
  parallel for %i = 0 to 8 {
    %a = load @x[%i] : f32
    %z = const 0 : i32
  }
}
)");
  std::ostringstream os;
  printUniformity(*p.kernel, os);
  EXPECT_EQ(os.str(), "uniformity of task %i in @k at t.qd:4:3:\n"
                      "  4:3 parallel for %i = 0 to 8  [varying]\n"
                      "  5:5 %a = load @x[%i] : f32  [varying]\n"
                      "  6:5 %z = const 0 : i32  [uniform]\n");
}

TEST(GlobalAccessTest, TwoNdarraysThatMayAliasConflict) {
  Parsed p = parse(R"(
kernel @k(%a: ndarray<f32, 1>, %b: ndarray<f32, 1>) {
  parallel for %i = 0 to 8 {
    %v = load %a[%i] : f32
    store %b[%i], %v
  }
}
)");
  auto conflicts = findGlobalAccessConflicts(*p.kernel);
  ASSERT_EQ(conflicts.size(), 1u);
  const GlobalAccessConflict &c = conflicts[0];
  EXPECT_TRUE(c.throughAliases());
  EXPECT_EQ(c.readGlobal, "%a");
  EXPECT_EQ(c.global, "%b");
  EXPECT_EQ(c.read, find(*p.kernel, "v"));
  EXPECT_EQ(c.write, nth(*p.kernel, StmtKind::GlobalStore, 0));
  std::string text = describe(c, *p.kernel);
  EXPECT_NE(text.find("t.qd:5:5: error: %b may be written here ('store %b[%i], %v') after %a is "
                      "read at t.qd:4:5 ('%v = load %a[%i] : f32')"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("the ndarrays %a and %b may alias"), std::string::npos) << text;
}

TEST(GlobalAccessTest, NdarraysProvedDistinctOrUsedAtOwnElementsPass) {
  // Another element type and another rank: distinct buffers.
  Parsed p = parse(R"(
kernel @k(%a: ndarray<f32, 1>, %b: ndarray<f64, 1>, %c: ndarray<f32, 2>) {
  parallel for %i = 0 to 8 {
    %v = load %a[%i] : f32
    %w = cast %v : f32 to f64
    store %b[%i], %w
    %z = const 0 : i32
    store %c[%i, %z], %v
  }
}
)");
  EXPECT_TRUE(findGlobalAccessConflicts(*p.kernel).empty());
  // One ndarray, written before it is read at the iteration's own element.
  Parsed q = parse(R"(
kernel @k(%a: ndarray<f32, 1>) {
  parallel for %i = 0 to 8 {
    %one = const 1.0 : f32
    store %a[%i], %one
    %v = load %a[%i] : f32
  }
}
)");
  EXPECT_TRUE(findGlobalAccessConflicts(*q.kernel).empty());
}

TEST(GlobalAccessTest, AConflictThroughTheGlobalItselfIsPreferred) {
  Parsed p = parse(R"(
kernel @k(%a: ndarray<f32, 1>, %b: ndarray<f32, 1>) {
  parallel for %i = 0 to 8 {
    %v = load %a[%i] : f32
    store %b[%i], %v
    store %a[%i], %v
  }
}
)");
  auto conflicts = findGlobalAccessConflicts(*p.kernel);
  ASSERT_EQ(conflicts.size(), 1u);
  EXPECT_FALSE(conflicts[0].throughAliases());
  EXPECT_EQ(conflicts[0].global, "%a");
  EXPECT_EQ(describe(conflicts[0], *p.kernel).find("may alias"), std::string::npos);
}

// Which loops read the stop word: every while and every loop with a
// run-time trip count; a loop with constant bounds when its nest of
// unchecked loops runs at least minWork iterations (here 100).
TEST(TaskAnalysesTest, StopCheckPlanChecksTheLoopsThatCanRunLong) {
  Parsed p = parse(R"(field @x : f32[64]
kernel @k(%n: i32) {
  parallel for %i = 0 to 4 {
    for %a = 0 to %n {
      for %b = 0 to 3 {
        %c1 = const 1.0 : f32
      }
    }
    for %d = 0 to 10 {
      for %e = 0 to 9 {
        %c2 = const 1.0 : f32
      }
    }
    for %f = 0 to 100 {
      %c3 = const 1.0 : f32
    }
    while {
      break
    }
  }
  parallel for %g = 0 to 20 {
    for %h = 0 to 4 {
      %c4 = const 1.0 : f32
    }
  }
  parallel for %m = 0 to 19 {
    for %o = 0 to 4 {
      %c5 = const 1.0 : f32
    }
  }
  parallel for (%q, %r) = (0, 0) to (2147483647, 2147483647) {
    %c6 = const 1.0 : f32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  StopCheckPlan plan(*p.kernel, 100);
  Kernel &k = *p.kernel;
  // %a: run-time bound. %b: 3 iterations. %d: 10 x (1 + 9) = 100. %f: 100.
  // The first task: 4 x 1 (the loops in it check: they add nothing).
  // %g: 20 x (1 + 4) = 100; %m: 19 x 5.
  EXPECT_TRUE(plan.checks(*find(k, "a")));
  EXPECT_FALSE(plan.checks(*find(k, "b")));
  EXPECT_TRUE(plan.checks(*find(k, "d")));
  EXPECT_FALSE(plan.checks(*find(k, "e")));
  EXPECT_TRUE(plan.checks(*find(k, "f")));
  EXPECT_TRUE(plan.checks(*nth(k, StmtKind::While, 0)));
  EXPECT_FALSE(plan.checks(*find(k, "i")));
  EXPECT_TRUE(plan.checks(*find(k, "g")));
  EXPECT_FALSE(plan.checks(*find(k, "h")));
  EXPECT_FALSE(plan.checks(*find(k, "m")));
  EXPECT_FALSE(plan.checks(*find(k, "o")));
  // About 2^62 points: counted in 64 bits.
  EXPECT_TRUE(plan.checks(*find(k, "q")));
  EXPECT_EQ(plan.size(), 6u);
  // At the largest limit only loops without a constant trip count check.
  StopCheckPlan most(*p.kernel, UINT64_MAX);
  EXPECT_FALSE(most.checks(*find(k, "q")));
  EXPECT_TRUE(most.checks(*find(k, "a")));
  EXPECT_TRUE(most.checks(*nth(k, StmtKind::While, 0)));
  EXPECT_EQ(most.size(), 2u);
}

} // namespace
} // namespace qd
