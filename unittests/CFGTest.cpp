//===- CFGTest.cpp - Control-flow graph of a kernel -----------------------===//
#include "qd/analysis/CFG.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Visitor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace qd {
namespace {

using Edges = std::vector<std::pair<unsigned, unsigned>>;

struct Parsed {
  std::unique_ptr<Module> module;
  Kernel *kernel = nullptr;
};

Parsed parse(std::string_view text, std::string_view filename = "cfg.qd") {
  ParseOptions options;
  options.filename = filename;
  auto m = parseModule(text, options);
  EXPECT_TRUE(m.ok()) << m.status();
  Parsed p;
  if (!m.ok())
    return p;
  p.module = std::move(*m);
  p.kernel = p.module->kernels().front().get();
  return p;
}

/// The statement named `%name` (or, for unnamed statements, the `nth`
/// statement of that kind in pre-order).
Stmt *named(Kernel &k, std::string_view name) {
  Stmt *found = nullptr;
  walk(k.body(), [&](Stmt &s) {
    if (s.name() == name)
      found = &s;
  });
  EXPECT_NE(found, nullptr) << name;
  return found;
}
Stmt *nthOfKind(Kernel &k, StmtKind kind, unsigned nth = 0) {
  std::vector<Stmt *> all;
  walk(k.body(), [&](Stmt &s) {
    if (s.kind() == kind)
      all.push_back(&s);
  });
  EXPECT_LT(nth, all.size());
  return nth < all.size() ? all[nth] : nullptr;
}

Edges edges(const ControlFlowGraph &g) {
  Edges out;
  for (unsigned u = 0; u < g.numNodes(); ++u)
    for (unsigned v : g.node(u).succs)
      out.emplace_back(u, v);
  return out;
}

std::vector<std::string> labels(const ControlFlowGraph &g) {
  std::vector<std::string> out;
  for (unsigned u = 0; u < g.numNodes(); ++u)
    out.push_back(g.node(u).label);
  return out;
}

/// Each node's statements, by name or (unnamed) mnemonic, space-separated.
std::vector<std::string> contents(const ControlFlowGraph &g) {
  std::vector<std::string> out;
  for (unsigned u = 0; u < g.numNodes(); ++u) {
    std::string s;
    for (const Stmt *st : g.node(u).stmts) {
      if (!s.empty())
        s += ' ';
      s += st->name().empty() ? std::string(mnemonic(st->kind())) : "%" + st->name();
    }
    out.push_back(s);
  }
  return out;
}

/// Structural invariants of any graph: preds mirror succs, nodeOf agrees
/// with the node lists, entry is 0 with no predecessors.
void checkConsistent(const ControlFlowGraph &g) {
  std::multiset<std::pair<unsigned, unsigned>> fromSuccs, fromPreds;
  for (unsigned u = 0; u < g.numNodes(); ++u) {
    for (unsigned v : g.node(u).succs) {
      ASSERT_LT(v, g.numNodes());
      fromSuccs.insert({u, v});
    }
    for (unsigned p : g.node(u).preds) {
      ASSERT_LT(p, g.numNodes());
      fromPreds.insert({p, u});
    }
    for (const Stmt *s : g.node(u).stmts)
      EXPECT_EQ(g.findNode(s), u);
  }
  EXPECT_EQ(fromSuccs, fromPreds);
  EXPECT_EQ(g.numEdges(), fromSuccs.size());
  EXPECT_EQ(g.entryNode(), 0u);
  EXPECT_TRUE(g.node(g.entryNode()).preds.empty());
  EXPECT_EQ(g.node(g.entryNode()).label, "entry");
  EXPECT_EQ(g.node(g.exitNode()).label, "exit");
  EXPECT_TRUE(g.node(g.exitNode()).succs.empty());
}

/// For every adstack.alloca: it starts its node, and the nodes anchored in
/// [preorder, scopeEnd) hold exactly the statements after it in its block
/// (and inside them) that the graph still holds.
void checkScopes(const ControlFlowGraph &g, Kernel &k) {
  std::set<const Stmt *> inGraph;
  for (unsigned u = 0; u < g.numNodes(); ++u)
    inGraph.insert(g.node(u).stmts.begin(), g.node(u).stmts.end());
  walk(k.body(), [&](Stmt &a) {
    if (a.kind() != StmtKind::AdStackAlloca || !inGraph.count(&a))
      return;
    const auto &node = g.node(*g.findNode(&a));
    EXPECT_EQ(node.stmts.front(), &a) << a.name();
    uint32_t lo = g.preorder(&a), hi = g.scopeEnd(&a);
    std::set<const Stmt *> viaNodes, expected;
    for (unsigned u : g.nodesInRange(lo, hi))
      viaNodes.insert(g.node(u).stmts.begin(), g.node(u).stmts.end());
    for (const Stmt *s : inGraph)
      if (lo <= g.preorder(s) && g.preorder(s) < hi)
        expected.insert(s);
    EXPECT_EQ(viaNodes, expected) << "scope of %" << a.name();
  });
}

bool hasNoNode(const ControlFlowGraph &g, const Stmt *s) {
  return !g.findNode(s).has_value();
}

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

TEST(CFGTest, StraightLineSerialTask) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    %a = const 1 : i32
    %b = add %a, %n : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  ControlFlowGraph g = ControlFlowGraph::build(*p.kernel);
  checkConsistent(g);
  EXPECT_EQ(labels(g),
            (std::vector<std::string>{"entry", "exit", "kernel", "serial", "serial.exit"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {3, 4}, {4, 1}}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "", "%a %b", ""}));
  EXPECT_EQ(g.exitNode(), 1u);
  g.simplify();
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "serial"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 1}}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "%a %b"}));
  EXPECT_EQ(g.findNode(named(*p.kernel, "b")), 2u);
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 2, 0}));
}

TEST(CFGTest, TasksRunInOrder) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  %m = add %n, %n : i32
  serial {
    %a = const 1 : i32
  }
  parallel for %i = 0 to %m {
    %b = add %i, %i : i32
  }
  serial {
    %c = const 2 : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  ControlFlowGraph g = ControlFlowGraph::build(*p.kernel);
  g.simplify();
  checkConsistent(g);
  // The launch-time statement and the first task form one chain.
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "kernel", "parallel_for.header",
                                                 "parallel_for.body", "serial"}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "%m %a", "", "%b", "%c"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {3, 4}, {3, 5}, {4, 3}, {5, 1}}));
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 5, 0, 2, 3, 3}));
}

TEST(CFGTest, IfElse) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    %z = const 0 : i32
    %p = cmp gt %n, %z : i32
    if %p {
      %t = add %n, %n : i32
    } else {
      %e = sub %n, %n : i32
    }
    %j = mul %n, %n : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "kernel", "serial", "if.join",
                                                 "if.then", "if.else", "serial.exit"}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "", "%z %p if", "%j", "%t", "%e", ""}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {3, 5}, {3, 6}, {4, 7}, {5, 4}, {6, 4}, {7, 1}}));
  Stmt *ifStmt = nthOfKind(k, StmtKind::If);
  for (unsigned u : {4u, 5u, 6u})
    EXPECT_EQ(g.node(u).owner, ifStmt);
  EXPECT_EQ(g.node(3).owner, nthOfKind(k, StmtKind::Serial));

  g.simplify();
  checkConsistent(g);
  EXPECT_EQ(labels(g),
            (std::vector<std::string>{"entry", "exit", "serial", "if.join", "if.then", "if.else"}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "%z %p if", "%j", "%t", "%e"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 4}, {2, 5}, {3, 1}, {4, 3}, {5, 3}}));
  EXPECT_EQ(g.findNode(ifStmt), 2u);
  EXPECT_EQ(g.findNode(named(k, "t")), 4u);
  EXPECT_EQ(g.findNode(named(k, "j")), 3u);
  // The join (and each arm) is dominated by the node holding the if.
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 3, 0, 2, 2, 2}));
}

TEST(CFGTest, EmptyElseArm) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    %z = const 0 : i32
    %p = cmp gt %n, %z : i32
    if %p {
      %t = add %n, %n : i32
    }
    %j = mul %n, %n : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  ControlFlowGraph g = ControlFlowGraph::build(*p.kernel);
  g.simplify();
  checkConsistent(g);
  // The empty else arm disappears: the if's node goes straight to the join.
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "serial", "if.join", "if.then"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 4}, {2, 3}, {3, 1}, {4, 3}}));
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 3, 0, 2, 2}));
}

TEST(CFGTest, ForLoop) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    %s = const 0 : i32
    for %i = 0 to %n {
      %x = add %i, %i : i32
    }
    %y = const 1 : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "kernel", "serial", "for.header",
                                                 "for.exit", "for.body", "serial.exit"}));
  // The header branches to the body and to the exit; the body goes back.
  EXPECT_EQ(g.node(4).succs, (std::vector<unsigned>{6, 5}));
  EXPECT_EQ(g.node(6).succs, (std::vector<unsigned>{4}));
  g.simplify();
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "serial", "for.header",
                                                 "for.exit", "for.body"}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "%s", "", "%y", "%x"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {3, 5}, {3, 4}, {4, 1}, {5, 3}}));
  std::vector<unsigned> headerPreds = g.node(3).preds;
  std::sort(headerPreds.begin(), headerPreds.end());
  EXPECT_EQ(headerPreds, (std::vector<unsigned>{2, 5})); // entry side and back edge
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 4, 0, 2, 3, 3}));
  EXPECT_EQ(g.node(3).owner, nthOfKind(k, StmtKind::For));
}

TEST(CFGTest, WhileWithBreak) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    %v = alloca i32
    while {
      %c = load %v : i32
      %d = cmp ge %c, %n : i32
      if %d {
        break
      }
      %one = const 1 : i32
      %c2 = add %c, %one : i32
      store %v, %c2
    }
    %after = const 7 : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{
                           "entry", "exit", "kernel", "serial", "while.header", "while.exit",
                           "while.body", "if.join", "if.then", "dead", "if.else", "serial.exit"}));
  // No header -> exit edge: the exit is reached only through the break.
  EXPECT_EQ(g.node(4).succs, (std::vector<unsigned>{6}));
  EXPECT_EQ(g.node(5).preds, (std::vector<unsigned>{8}));
  EXPECT_EQ(contents(g)[8], "break");
  EXPECT_EQ(g.findNode(nthOfKind(k, StmtKind::Break)), 8u);
  // The node after the break has no predecessor.
  EXPECT_TRUE(g.node(9).preds.empty());

  g.simplify();
  checkConsistent(g);
  // The header (one successor, no statement) is bypassed; the exit has a
  // single predecessor (the break) and merges into it.
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "serial", "while.body", "if.join",
                                                 "if.then"}));
  EXPECT_EQ(contents(g),
            (std::vector<std::string>{"", "", "%v", "%c %d if", "%one %c2 store", "break %after"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {3, 5}, {3, 4}, {4, 3}, {5, 1}}));
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 5, 0, 2, 3, 3}));
}

TEST(CFGTest, EndlessWhileLeavesTheExitUnreachable) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    while {
      %c = const 1 : i32
    }
    %after = const 7 : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  g.simplify();
  checkConsistent(g);
  // The kernel's exit stays (with no predecessor); the while's exit and
  // what follows it are gone.
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "while.body"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 2}}));
  EXPECT_TRUE(g.node(1).preds.empty());
  EXPECT_TRUE(hasNoNode(g, named(k, "after")));
  // Unreachable nodes are their own immediate dominator.
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 1, 0}));
}

TEST(CFGTest, ContinueGoesToTheHeader) {
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  parallel for %i = 0 to %n {
    %z = const 0 : i32
    %p = cmp gt %i, %z : i32
    if %p {
      continue
    }
    %q = add %i, %i : i32
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "kernel", "parallel_for.header",
                                                 "parallel_for.exit", "parallel_for.body",
                                                 "if.join", "if.then", "dead", "if.else"}));
  EXPECT_EQ(g.node(7).succs, (std::vector<unsigned>{3})); // continue -> header
  EXPECT_EQ(g.numEdges(), 11u);

  g.simplify();
  checkConsistent(g);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "parallel_for.header",
                                                 "parallel_for.body", "if.join", "if.then"}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "", "%z %p if", "%q", "continue"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {2, 1}, {3, 5}, {3, 4}, {4, 2}, {5, 2}}));
  std::vector<unsigned> headerPreds = g.node(2).preds;
  std::sort(headerPreds.begin(), headerPreds.end());
  EXPECT_EQ(headerPreds, (std::vector<unsigned>{0, 4, 5}));
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 2, 0, 2, 3, 3}));
  EXPECT_EQ(g.findNode(nthOfKind(k, StmtKind::Continue)), 5u);
}

TEST(CFGTest, CodeAfterBreakIsRemoved) {
  // Not verifier-clean (break must end its block), but the graph must still
  // treat what follows a jump as unreachable.
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    for %i = 0 to %n {
      break
      %x = add %i, %i : i32
      continue
      %y = add %i, %i : i32
    }
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  checkConsistent(g);
  Stmt *x = named(k, "x");
  Stmt *y = named(k, "y");
  EXPECT_EQ(g.node(*g.findNode(x)).label, "dead");
  EXPECT_TRUE(g.node(*g.findNode(x)).preds.empty());
  EXPECT_EQ(g.node(*g.findNode(y)).label, "dead");
  EXPECT_NE(g.findNode(x), g.findNode(y));

  g.simplify();
  checkConsistent(g);
  EXPECT_TRUE(hasNoNode(g, x));
  EXPECT_TRUE(hasNoNode(g, y));
  EXPECT_TRUE(hasNoNode(g, nthOfKind(k, StmtKind::Continue)));
  for (const std::string &label : labels(g))
    EXPECT_NE(label, "dead");
  // Only the loop is left: the empty serial and exit nodes are bypassed.
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "for.header", "for.body"}));
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "", "break"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {2, 1}, {3, 1}}));
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 2, 0, 2}));
}

//===----------------------------------------------------------------------===//
// Adstacks and scopes
//===----------------------------------------------------------------------===//

constexpr const char *kStacks = R"(
kernel @k(%n: i32) {
  serial {
    %x = const 1.0 : f32
    %s = adstack.alloca f32, capacity 0
    adstack.push %s, %x
    for %i = 0 to %n {
      %t = adstack.alloca i32, capacity 0
      adstack.push %t, %i
      adstack.pop %t
    }
    adstack.pop %s
  }
}
)";

TEST(CFGTest, EveryAllocaStartsANode) {
  Parsed p = parse(kStacks);
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  checkConsistent(g);
  checkScopes(g, k);
  g.simplify();
  checkConsistent(g);
  checkScopes(g, k);
  EXPECT_EQ(labels(g), (std::vector<std::string>{"entry", "exit", "serial", "adstack", "for.header",
                                                 "for.exit", "adstack"}));
  // %x is not merged with the stack after it, nor %t's node into the
  // (bypassed, empty) loop body's predecessor.
  EXPECT_EQ(contents(g), (std::vector<std::string>{"", "", "%x", "%s adstack.push", "",
                                                   "adstack.pop", "%t adstack.push adstack.pop"}));
  EXPECT_EQ(edges(g), (Edges{{0, 2}, {2, 3}, {3, 4}, {4, 6}, {4, 5}, {5, 1}, {6, 4}}));
  EXPECT_EQ(g.immediateDominators(), (std::vector<unsigned>{0, 5, 0, 2, 3, 4, 4}));
}

TEST(CFGTest, PreorderAndScopes) {
  Parsed p = parse(kStacks);
  ASSERT_NE(p.kernel, nullptr);
  Kernel &k = *p.kernel;
  ControlFlowGraph g = ControlFlowGraph::build(k);
  g.simplify();
  Stmt *s = named(k, "s");
  Stmt *t = named(k, "t");
  // Pre-order from 1, containers before their contents.
  EXPECT_EQ(g.preorder(nthOfKind(k, StmtKind::Serial)), 1u);
  EXPECT_EQ(g.preorder(named(k, "x")), 2u);
  EXPECT_EQ(g.preorder(s), 3u);
  EXPECT_EQ(g.preorder(nthOfKind(k, StmtKind::For)), 5u);
  EXPECT_EQ(g.preorder(t), 6u);
  EXPECT_EQ(g.preorder(nthOfKind(k, StmtKind::AdStackPop, 1)), 9u);
  // A scope runs to the end of the statement's block.
  EXPECT_EQ(g.scopeEnd(s), 10u);
  EXPECT_EQ(g.scopeEnd(t), 9u);
  EXPECT_EQ(g.scopeEnd(nthOfKind(k, StmtKind::Serial)), 10u);
  EXPECT_EQ(g.nodesInRange(3, 10), (std::vector<unsigned>{3, 4, 5, 6}));
  EXPECT_EQ(g.nodesInRange(6, 9), (std::vector<unsigned>{6}));
  EXPECT_EQ(g.nodesInRange(0, 1), (std::vector<unsigned>{0}));
  EXPECT_EQ(g.nodesInRange(10, 11), (std::vector<unsigned>{1})); // the exit's anchor
  EXPECT_EQ(g.nodesInRange(7, 9), (std::vector<unsigned>{}));
  EXPECT_EQ(g.nodesInRange(0, 100).size(), g.numNodes());
  // Anchors.
  EXPECT_EQ(g.node(*g.findNode(s)).anchor, 3u);
  EXPECT_EQ(g.node(*g.findNode(t)).anchor, 6u);
  EXPECT_EQ(g.node(g.exitNode()).anchor, 10u);
}

TEST(CFGTest, ScopesStayExactAfterSimplify) {
  // A stack whose loop or arm ends in a jump: the node after the loop (or
  // the if) has a single predecessor inside the stack's scope, but its
  // statements are outside that scope and must not be merged into it.
  const char *texts[] = {R"(
kernel @k(%n: i32) {
  serial {
    %x = const 1 : i32
    while {
      %s = adstack.alloca i32, capacity 0
      adstack.push %s, %x
      break
    }
    %after = const 2 : i32
  }
}
)",
                         R"(
kernel @k(%n: i32) {
  serial {
    %x = const 1 : i32
    for %i = 0 to %n {
      %p = cmp gt %i, %x : i32
      if %p {
        %s = adstack.alloca i32, capacity 0
        adstack.push %s, %x
        adstack.pop %s
      } else {
        continue
      }
      %after = add %i, %x : i32
    }
  }
}
)",
                         R"(
kernel @k(%n: i32) {
  serial {
    %x = const 1 : i32
    while {
      %p = cmp gt %n, %x : i32
      if %p {
        break
      } else {
        %s = adstack.alloca i32, capacity 0
        adstack.push %s, %x
        break
      }
    }
    %after = const 2 : i32
  }
}
)"};
  for (const char *text : texts) {
    Parsed p = parse(text);
    ASSERT_NE(p.kernel, nullptr);
    Kernel &k = *p.kernel;
    ControlFlowGraph g = ControlFlowGraph::build(k);
    checkScopes(g, k);
    g.simplify();
    checkConsistent(g);
    checkScopes(g, k);
    Stmt *s = named(k, "s");
    Stmt *after = named(k, "after");
    EXPECT_NE(g.findNode(s), g.findNode(after)) << text;
    auto region = g.nodesInRange(g.preorder(s), g.scopeEnd(s));
    EXPECT_EQ(std::count(region.begin(), region.end(), g.findNode(after)), 0) << text;
  }
}

//===----------------------------------------------------------------------===//
// Graphviz
//===----------------------------------------------------------------------===//

TEST(CFGTest, DotListsEveryNodeAndEdge) {
  Parsed p = parse(R"(
field @f : i32[4]
kernel @k(%n: i32) {
  serial {
    %z = const 0 : i32
    %p = cmp gt %n, %z : i32
    if %p {
      %v = load @f[%z] : i32
    }
  }
}
)");
  ASSERT_NE(p.kernel, nullptr);
  ControlFlowGraph g = ControlFlowGraph::build(*p.kernel);
  g.simplify();
  std::string dot = g.toDot();
  EXPECT_EQ(dot.rfind("digraph \"@k\" {\n", 0), 0u) << dot;
  EXPECT_EQ(dot.substr(dot.size() - 2), "}\n");
  for (unsigned u = 0; u < g.numNodes(); ++u)
    EXPECT_NE(dot.find("  n" + std::to_string(u) + " [label=\"{n" + std::to_string(u) + ": " +
                       g.node(u).label),
              std::string::npos)
        << u << "\n"
        << dot;
  size_t arrows = 0;
  for (size_t at = dot.find("->"); at != std::string::npos; at = dot.find("->", at + 1))
    ++arrows;
  EXPECT_EQ(arrows, g.numEdges());
  for (auto [u, v] : edges(g))
    EXPECT_NE(dot.find("  n" + std::to_string(u) + " -> n" + std::to_string(v) + ";\n"),
              std::string::npos)
        << u << " -> " << v;
  // Statements, one per line; an if shows only its condition.
  EXPECT_NE(dot.find("%z = const 0 : i32\\l%p = cmp gt %n, %z : i32\\lif %p\\l"), std::string::npos)
      << dot;
  EXPECT_NE(dot.find("%v = load @f[%z] : i32\\l"), std::string::npos) << dot;
  // Container nodes carry their location.
  EXPECT_NE(dot.find("if.then (cfg.qd:7:5)"), std::string::npos) << dot;
  // Braces and quotes appear only as record syntax.
  size_t open = std::count(dot.begin(), dot.end(), '{');
  EXPECT_EQ(open, g.numNodes() + 1);
  EXPECT_EQ(std::count(dot.begin(), dot.end(), '}'), static_cast<ptrdiff_t>(open));
  EXPECT_EQ(std::count(dot.begin(), dot.end(), '"'), static_cast<ptrdiff_t>(2 * g.numNodes() + 2));
}

TEST(CFGTest, DotEscapesSpecialCharacters) {
  // A file name with quotes, braces, a bar and angle brackets ends up in the
  // labels of container nodes.
  Parsed p = parse(R"(
kernel @k(%n: i32) {
  serial {
    %a = const 1 : i32
  }
}
)",
                   "dir/my \"kernel\" {v2}|<x>.qd");
  ASSERT_NE(p.kernel, nullptr);
  ControlFlowGraph g = ControlFlowGraph::build(*p.kernel);
  std::string dot = g.toDot();
  EXPECT_NE(dot.find("dir/my \\\"kernel\\\" \\{v2\\}\\|\\<x\\>.qd:3:3"), std::string::npos) << dot;
  // Every quote, brace, bar and angle bracket inside a label is escaped.
  size_t labelStart = dot.find("[label=\"");
  ASSERT_NE(labelStart, std::string::npos);
  for (size_t line = 0; line < dot.size();) {
    size_t end = dot.find('\n', line);
    std::string text = dot.substr(line, end - line);
    line = end + 1;
    size_t l = text.find("[label=\"{");
    if (l == std::string::npos)
      continue;
    ASSERT_EQ(text.substr(text.size() - 4), "}\"];") << text;
    std::string inner = text.substr(l + 9, text.size() - 4 - (l + 9));
    for (size_t i = 0; i < inner.size(); ++i) {
      char c = inner[i];
      if (c == '\\') {
        ++i; // an escape pair
        continue;
      }
      EXPECT_TRUE(c != '"' && c != '{' && c != '}' && c != '|' && c != '<' && c != '>')
          << "unescaped " << c << " in " << text;
    }
  }
}

} // namespace
} // namespace qd
