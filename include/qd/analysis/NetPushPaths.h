//===- qd/analysis/NetPushPaths.h - Longest paths of net pushes -*- C++ -*-===//
//
// The graph problem behind the CFG tier of adstack sizing
// (docs/sizing.md, "Tier 1, longest paths on the CFG"): nodes carry a net
// number of pushes (pushes minus pops) and an internal peak; the depth of a
// stack is the longest path of nets from a source plus the peak of the node
// it ends in, and it is unbounded (nullopt) when a cycle reachable from the
// source has a positive net.
//
// Two algorithms give the same answer on every graph:
//  - `Structured` (the one sizing uses): longest paths over the forward
//    edges of a depth-first search in one pass, then one check per back
//    edge. Linear on reducible graphs, which is what qd builds from
//    structured code; a graph where that check cannot decide falls back to
//    `BellmanFord`.
//  - `BellmanFord`: Boost.Graph's Bellman-Ford on every strongly connected
//    component that pushes or pops, then relaxation to a fixpoint. Any
//    graph, O(nodes * edges) per component; kept as the reference.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace qd {

/// A directed graph in compressed rows: the successors of `u` are
/// `succ[succBegin[u] .. succBegin[u + 1])`.
struct NetPushGraph {
  std::vector<unsigned> succBegin{0}; // numNodes() + 1 entries
  std::vector<unsigned> succ;
  std::vector<int64_t> net;  // pushes minus pops of the node
  std::vector<int64_t> peak; // the largest depth inside the node (>= 0), relative to its entry
  unsigned source = 0;       // no edge may enter it (it starts a fresh stack)

  unsigned numNodes() const { return static_cast<unsigned>(net.size()); }
  std::span<const unsigned> succs(unsigned u) const {
    return {succ.data() + succBegin[u], succBegin[u + 1] - succBegin[u]};
  }
};

enum class NetPathAlgorithm { Structured, BellmanFord };

/// The largest depth reached from `g.source`: the maximum, over the nodes it
/// reaches, of the longest path of nets into the node (the node's own net
/// excluded) plus the node's peak, and at least 0; nullopt when a cycle the
/// source reaches has a positive net. `fellBack`, when given, is set when
/// `Structured` had to run `BellmanFord` (a graph that is not reducible).
std::optional<int64_t> longestNetPath(const NetPushGraph &g,
                                      NetPathAlgorithm algorithm = NetPathAlgorithm::Structured,
                                      bool *fellBack = nullptr);

} // namespace qd
