//===- qd/analysis/CFG.h - Control-flow graph of a kernel -------*- C++ -*-===//
//
// The statement-level control-flow graph of a kernel: nodes are straight-line
// runs of non-container statements; edges follow if/else, range-for and while
// loops, break and continue, and the kernel's tasks in order. Every
// `adstack.alloca` starts a node of its own, so a stack's lifetime begins at
// the start of a node (sizing relies on this).
//
// Each node carries an *anchor*: a pre-order position in the kernel. The
// statements executed after an `adstack.alloca` inside its block (its
// *scope*) are exactly the nodes whose anchor lies in
// [preorder(alloca), scopeEnd(alloca)).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace qd {

class AdStackAllocaStmt;
class Kernel;
class Stmt;

class ControlFlowGraph {
public:
  struct Node {
    std::string label;         // "entry", "for.header", "if.then", ...
    const Stmt *owner;         // the container a header/arm/join node belongs to
    uint32_t anchor;           // pre-order position (see the file comment)
    std::vector<Stmt *> stmts; // non-container statements, in program order
    std::vector<unsigned> succs;
    std::vector<unsigned> preds;
  };

  /// Builds the graph of `kernel` (not simplified).
  static ControlFlowGraph build(const Kernel &kernel);

  /// Removes unreachable nodes and empty pass-through nodes and merges
  /// single-successor/single-predecessor chains (never merging a node that
  /// starts with an `adstack.alloca` into its predecessor). Node indices are
  /// renumbered; entry stays 0.
  void simplify();

  unsigned numNodes() const { return static_cast<unsigned>(nodes_.size()); }
  const Node &node(unsigned i) const { return nodes_[i]; }
  unsigned entryNode() const { return 0; }
  unsigned exitNode() const { return exit_; }
  size_t numEdges() const;

  /// The node holding a non-container statement, or nullopt when it has
  /// none: simplify() removed it as unreachable (it never runs).
  std::optional<unsigned> findNode(const Stmt *s) const {
    auto it = nodeOf_.find(s);
    return it == nodeOf_.end() ? std::nullopt : std::optional<unsigned>(it->second);
  }
  /// Pre-order number of a statement (containers before their contents).
  uint32_t preorder(const Stmt *s) const { return preorder_.at(s); }
  /// One past the pre-order number of the last statement of `s`'s block:
  /// `[preorder(s), scopeEnd(s))` is `s` and everything after it in its block.
  uint32_t scopeEnd(const Stmt *s) const;

  /// Nodes whose anchor lies in [lo, hi), in increasing node order.
  std::vector<unsigned> nodesInRange(uint32_t lo, uint32_t hi) const;

  /// Immediate dominator of each node (Lengauer-Tarjan, Boost.Graph); the
  /// entry and unreachable nodes map to themselves.
  std::vector<unsigned> immediateDominators() const;

  /// Graphviz text: one record per node listing its statements.
  std::string toDot() const;

private:
  friend class CFGBuilder;
  void reindex();
  const Kernel *kernel_ = nullptr;
  std::vector<Node> nodes_;
  unsigned exit_ = 0;
  std::unordered_map<const Stmt *, unsigned> nodeOf_;
  std::unordered_map<const Stmt *, uint32_t> preorder_;
  std::unordered_map<const Stmt *, uint32_t> subtreeEnd_;
  std::vector<std::pair<uint32_t, unsigned>> byAnchor_; // sorted (anchor, node)
};

} // namespace qd
