//===- CFG.cpp - Control-flow graph of a kernel ---------------------------===//
#include "qd/analysis/CFG.h"

#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dominator_tree.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace qd {

class CFGBuilder {
public:
  explicit CFGBuilder(ControlFlowGraph &g) : g_(g) {}

  void run(const Kernel &kernel) {
    g_.kernel_ = &kernel;
    number(const_cast<Block &>(kernel.body()));
    unsigned entry = add("entry", nullptr, 0);
    g_.exit_ = add("exit", nullptr, counter_);
    cur_ = add("kernel", nullptr, 0);
    edge(entry, cur_);
    buildBlock(const_cast<Block &>(kernel.body()));
    edge(cur_, g_.exit_);
  }

private:
  struct Loop {
    unsigned header, exit;
  };

  void number(Block &b) {
    for (Stmt &s : b) {
      g_.preorder_[&s] = counter_++;
      for (unsigned i = 0; i < s.numBlocks(); ++i)
        number(s.block(i));
      g_.subtreeEnd_[&s] = counter_;
    }
  }

  unsigned add(std::string label, const Stmt *owner, uint32_t anchor) {
    g_.nodes_.push_back({std::move(label), owner, anchor, {}, {}, {}});
    return static_cast<unsigned>(g_.nodes_.size() - 1);
  }
  void edge(unsigned from, unsigned to) {
    g_.nodes_[from].succs.push_back(to);
    g_.nodes_[to].preds.push_back(from);
  }
  uint32_t pre(const Stmt &s) const { return g_.preorder_.at(&s); }

  void buildBlock(Block &b) {
    for (Stmt &s : b)
      buildStmt(s);
  }

  void buildStmt(Stmt &s) {
    switch (s.kind()) {
    case StmtKind::For:
    case StmtKind::While: {
      bool isFor = s.kind() == StmtKind::For;
      std::string kind = isFor ? (cast<ForStmt>(s).isParallel() ? "parallel_for" : "for") : "while";
      unsigned header = add(kind + ".header", &s, pre(s));
      unsigned exit = add(kind + ".exit", &s, pre(s));
      edge(cur_, header);
      unsigned body = add(kind + ".body", &s, pre(s));
      edge(header, body);
      if (isFor)
        edge(header, exit);
      loops_[&s] = {header, exit};
      cur_ = body;
      buildBlock(s.block(0));
      edge(cur_, header);
      cur_ = exit;
      return;
    }
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      g_.nodes_[cur_].stmts.push_back(&s); // the condition is evaluated here
      g_.nodeOf_[&s] = cur_;
      unsigned from = cur_;
      unsigned join = add("if.join", &s, pre(s));
      for (unsigned arm = 0; arm < 2; ++arm) {
        unsigned start = add(arm == 0 ? "if.then" : "if.else", &s, pre(s));
        edge(from, start);
        cur_ = start;
        buildBlock(arm == 0 ? i.thenBlock() : i.elseBlock());
        edge(cur_, join);
      }
      cur_ = join;
      return;
    }
    case StmtKind::Serial: {
      unsigned body = add("serial", &s, pre(s));
      edge(cur_, body);
      cur_ = body;
      buildBlock(s.block(0));
      unsigned after = add("serial.exit", &s, pre(s));
      edge(cur_, after);
      cur_ = after;
      return;
    }
    case StmtKind::Break:
    case StmtKind::Continue: {
      append(s);
      if (auto it = loops_.find(jumpTarget(s)); it != loops_.end())
        edge(cur_, s.kind() == StmtKind::Break ? it->second.exit : it->second.header);
      cur_ = add("dead", &s, pre(s)); // statements after a jump are unreachable
      return;
    }
    case StmtKind::AdStackAlloca: {
      unsigned n = add("adstack", &s, pre(s));
      edge(cur_, n);
      cur_ = n;
      append(s);
      return;
    }
    default:
      append(s);
    }
  }

  void append(Stmt &s) {
    g_.nodes_[cur_].stmts.push_back(&s);
    g_.nodeOf_[&s] = cur_;
  }

  ControlFlowGraph &g_;
  unsigned cur_ = 0;
  uint32_t counter_ = 1;                         // 0 is the entry's anchor
  std::unordered_map<const Stmt *, Loop> loops_; // header and exit of every loop built so far
};

ControlFlowGraph ControlFlowGraph::build(const Kernel &kernel) {
  ControlFlowGraph g;
  CFGBuilder(g).run(kernel);
  g.reindex();
  return g;
}

size_t ControlFlowGraph::numEdges() const {
  size_t n = 0;
  for (const Node &node : nodes_)
    n += node.succs.size();
  return n;
}

uint32_t ControlFlowGraph::scopeEnd(const Stmt *s) const {
  return subtreeEnd_.at(&s->parent()->back());
}

std::vector<unsigned> ControlFlowGraph::nodesInRange(uint32_t lo, uint32_t hi) const {
  auto first = std::lower_bound(byAnchor_.begin(), byAnchor_.end(), std::pair(lo, 0u));
  auto last = std::lower_bound(byAnchor_.begin(), byAnchor_.end(), std::pair(hi, 0u));
  std::vector<unsigned> out;
  for (auto it = first; it != last; ++it)
    out.push_back(it->second);
  std::sort(out.begin(), out.end());
  return out;
}

void ControlFlowGraph::reindex() {
  nodeOf_.clear();
  byAnchor_.clear();
  for (unsigned i = 0; i < nodes_.size(); ++i) {
    for (Stmt *s : nodes_[i].stmts)
      nodeOf_[s] = i;
    byAnchor_.emplace_back(nodes_[i].anchor, i);
  }
  std::sort(byAnchor_.begin(), byAnchor_.end());
}

void ControlFlowGraph::simplify() {
  const unsigned n = numNodes();
  std::vector<bool> dead(n, false);
  auto startsWithAlloca = [&](unsigned v) {
    return !nodes_[v].stmts.empty() && nodes_[v].stmts.front()->kind() == StmtKind::AdStackAlloca;
  };
  // The anchor range of each stack's scope. A merge must keep the anchor
  // ranges exact: it never moves a statement into or out of a scope (the
  // node after a loop left by a break, or after an if whose other arm
  // jumps, can have its only predecessor inside a scope).
  std::vector<std::pair<uint32_t, uint32_t>> scopes;
  for (const Node &node : nodes_)
    for (const Stmt *s : node.stmts)
      if (s->kind() == StmtKind::AdStackAlloca)
        scopes.emplace_back(preorder(s), scopeEnd(s));
  auto sameScopes = [&](unsigned a, unsigned b) {
    uint32_t x = nodes_[a].anchor, y = nodes_[b].anchor;
    for (auto [lo, hi] : scopes)
      if ((lo <= x && x < hi) != (lo <= y && y < hi))
        return false;
    return true;
  };
  auto removeEdge = [&](std::vector<unsigned> &list, unsigned v) {
    auto it = std::find(list.begin(), list.end(), v);
    if (it != list.end())
      list.erase(it);
  };

  // Unreachable nodes (code after break/continue, the exit of an endless
  // while): everything the entry cannot reach, except the exit.
  std::vector<bool> seen(n, false);
  std::vector<unsigned> work{entryNode()};
  seen[entryNode()] = true;
  while (!work.empty()) {
    unsigned u = work.back();
    work.pop_back();
    for (unsigned v : nodes_[u].succs)
      if (!seen[v]) {
        seen[v] = true;
        work.push_back(v);
      }
  }
  for (unsigned u = 0; u < n; ++u)
    if (!seen[u] && u != exit_) {
      for (unsigned v : nodes_[u].succs)
        removeEdge(nodes_[v].preds, u);
      for (unsigned p : nodes_[u].preds)
        removeEdge(nodes_[p].succs, u);
      nodes_[u].succs.clear();
      nodes_[u].preds.clear();
      dead[u] = true;
    }

  // Empty pass-through nodes: redirect predecessors to the single successor.
  for (unsigned u = 0; u < n; ++u) {
    Node &node = nodes_[u];
    if (dead[u] || u == entryNode() || u == exit_ || !node.stmts.empty() ||
        node.succs.size() != 1 || node.succs[0] == u)
      continue;
    unsigned next = node.succs[0];
    removeEdge(nodes_[next].preds, u);
    for (unsigned p : node.preds) {
      for (unsigned &s : nodes_[p].succs)
        if (s == u)
          s = next;
      nodes_[next].preds.push_back(p);
    }
    node.preds.clear();
    node.succs.clear();
    dead[u] = true;
  }

  // Chains: u -> v where u has one successor and v one predecessor.
  for (unsigned u = 0; u < n; ++u) {
    if (dead[u] || u == entryNode())
      continue;
    while (nodes_[u].succs.size() == 1) {
      unsigned v = nodes_[u].succs[0];
      if (v == u || v == exit_ || dead[v] || nodes_[v].preds.size() != 1 || startsWithAlloca(v) ||
          !sameScopes(u, v))
        break;
      Node &a = nodes_[u];
      Node &b = nodes_[v];
      a.stmts.insert(a.stmts.end(), b.stmts.begin(), b.stmts.end());
      a.succs = std::move(b.succs);
      for (unsigned s : a.succs)
        for (unsigned &p : nodes_[s].preds)
          if (p == v)
            p = u;
      b.stmts.clear();
      b.succs.clear();
      b.preds.clear();
      dead[v] = true;
    }
  }

  // Compact.
  std::vector<unsigned> newIndex(n, ~0u);
  std::vector<Node> kept;
  for (unsigned u = 0; u < n; ++u)
    if (!dead[u]) {
      newIndex[u] = static_cast<unsigned>(kept.size());
      kept.push_back(std::move(nodes_[u]));
    }
  for (Node &node : kept) {
    for (unsigned &s : node.succs)
      s = newIndex[s];
    for (unsigned &p : node.preds)
      p = newIndex[p];
  }
  exit_ = newIndex[exit_];
  nodes_ = std::move(kept);
  reindex();
}

std::vector<unsigned> ControlFlowGraph::immediateDominators() const {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;
  using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
  Graph g(nodes_.size());
  for (unsigned u = 0; u < nodes_.size(); ++u)
    for (unsigned v : nodes_[u].succs)
      boost::add_edge(u, v, g);
  std::vector<Vertex> idom(nodes_.size(), boost::graph_traits<Graph>::null_vertex());
  auto index = boost::get(boost::vertex_index, g);
  boost::lengauer_tarjan_dominator_tree(g, boost::vertex(entryNode(), g),
                                        boost::make_iterator_property_map(idom.begin(), index));
  std::vector<unsigned> out(nodes_.size());
  for (unsigned u = 0; u < nodes_.size(); ++u)
    out[u] =
        idom[u] == boost::graph_traits<Graph>::null_vertex() ? u : static_cast<unsigned>(idom[u]);
  return out;
}

namespace {

std::string dotEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '{' || c == '}' || c == '<' || c == '>' || c == '|')
      out += '\\';
    if (c == '\n')
      out += "\\l";
    else
      out += c;
  }
  return out;
}

} // namespace

std::string ControlFlowGraph::toDot() const {
  std::string out = fmt::format("digraph \"@{}\" {{\n  node [shape=record, fontname=monospace];\n",
                                kernel_ ? kernel_->name() : "");
  std::unique_ptr<ValueNamer> names;
  if (kernel_)
    names = std::make_unique<ValueNamer>(*kernel_);
  for (unsigned u = 0; u < nodes_.size(); ++u) {
    const Node &node = nodes_[u];
    std::string label = fmt::format("n{}: {}", u, node.label);
    if (node.owner && node.owner->loc().isKnown())
      label += " (" + dotEscape(node.owner->loc().str()) + ")"; // the file name is arbitrary
    label += "\\l";
    for (const Stmt *s : node.stmts) {
      std::string text;
      if (s->isContainer()) // an if: only its condition belongs here
        text = "if " + (*names)[cast<IfStmt>(*s).cond()];
      else
        text = printStmt(*s, *names);
      label += dotEscape(text) + "\\l";
    }
    out += fmt::format("  n{} [label=\"{{{}}}\"];\n", u, label);
  }
  for (unsigned u = 0; u < nodes_.size(); ++u)
    for (unsigned v : nodes_[u].succs)
      out += fmt::format("  n{} -> n{};\n", u, v);
  out += "}\n";
  return out;
}

} // namespace qd
