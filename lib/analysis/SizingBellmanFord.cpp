//===- SizingBellmanFord.cpp - Tier 1b: longest paths on the CFG ----------===//
#include "SizingStructural.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/bellman_ford_shortest_paths.hpp>

#include <algorithm>
#include <limits>
#include <span>

namespace qd::sizing {
namespace {

/// True if the subgraph of the nodes in component `c` has a cycle whose
/// net number of pushes is positive.
template <typename Succs>
bool hasPositiveCycle(const std::vector<unsigned> &members, const std::vector<unsigned> &comp,
                      unsigned c, const std::vector<int64_t> &net, Succs &&succs) {
  using Graph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                            boost::property<boost::edge_weight_t, int64_t>>;
  std::unordered_map<unsigned, unsigned> index;
  for (unsigned i = 0; i < members.size(); ++i)
    index[members[i]] = i;
  Graph g(members.size());
  for (unsigned i = 0; i < members.size(); ++i)
    for (unsigned v : succs(members[i]))
      if (comp[v] == c)
        boost::add_edge(i, index.at(v), -net[members[i]], g);
  // Every node starts at distance 0 (a virtual source reaching all).
  std::vector<int64_t> dist(members.size(), 0);
  return !boost::bellman_ford_shortest_paths(
      g, static_cast<int>(members.size()),
      boost::weight_map(boost::get(boost::edge_weight, g)).distance_map(dist.data()));
}

} // namespace

/// Longest path of net pushes from the alloca over its scope's CFG nodes, or
/// nullopt when a cycle reachable from the alloca has a positive net.
///
/// This is Bellman-Ford from the alloca's node (edge u -> v weighted by the
/// net of u, maximised), organised so that it stays linear in the region on
/// the CFGs of structured code instead of O(nodes * edges):
///  - a positive cycle lies inside one strongly connected component, and a
///    component whose nodes neither push nor pop has only zero-weight
///    cycles, so only components holding a push or pop are searched for one
///    (Bellman-Ford over the component alone, from a virtual source);
///  - with no positive cycle, the distances are relaxed in reverse
///    post-order until nothing changes: one pass plus a check pass when
///    every loop is entered through its header (the longest paths then need
///    no back edge), at most one pass per node otherwise.
std::optional<int64_t> longestPath(const ControlFlowGraph &cfg, const AdStackAllocaStmt &a,
                                   const std::vector<AdStackOpStmt *> &ops, PathScratch &scratch) {
  std::vector<unsigned> region = cfg.nodesInRange(cfg.preorder(&a), cfg.scopeEnd(&a));
  std::vector<unsigned> &local = scratch.localOf;
  if (local.size() < cfg.numNodes())
    local.assign(cfg.numNodes(), ~0u);
  const unsigned n = static_cast<unsigned>(region.size());
  for (unsigned i = 0; i < n; ++i)
    local[region[i]] = i;
  struct Reset { // leaves the scratch all ~0u again on every return path
    std::vector<unsigned> &local;
    const std::vector<unsigned> &region;
    ~Reset() {
      for (unsigned u : region)
        local[u] = ~0u;
    }
  } reset{local, region};

  std::vector<int64_t> net(n, 0), peak(n, 0);
  // An alloca the entry cannot reach never runs, and neither does its scope.
  std::optional<unsigned> allocaNode = cfg.findNode(&a);
  if (!allocaNode)
    return 0;
  for (AdStackOpStmt *op : ops) {
    std::optional<unsigned> node = cfg.findNode(op);
    if (!node)
      continue; // unreachable from the entry: it never runs
    unsigned i = local[*node];
    if (i == ~0u)
      return std::nullopt; // not reachable from the alloca: leave to other tiers
    int64_t &d = net[i];
    if (op->kind() == StmtKind::AdStackPush)
      peak[i] = std::max(peak[i], ++d);
    else if (op->kind() == StmtKind::AdStackPop)
      --d;
  }
  const unsigned src = local[*allocaNode];
  // Region edges in compressed rows (succs of u: succ[succBegin[u] ..
  // succBegin[u + 1]), likewise preds); entering the alloca's node again
  // starts a fresh stack.
  std::vector<unsigned> succBegin(n + 1, 0), predBegin(n + 1, 0);
  auto forEachRegionEdge = [&](auto &&fn) {
    for (unsigned i = 0; i < n; ++i)
      for (unsigned succ : cfg.node(region[i]).succs) {
        unsigned j = local[succ];
        if (j != ~0u && j != src)
          fn(i, j);
      }
  };
  forEachRegionEdge([&](unsigned i, unsigned j) {
    ++succBegin[i + 1];
    ++predBegin[j + 1];
  });
  for (unsigned i = 0; i < n; ++i) {
    succBegin[i + 1] += succBegin[i];
    predBegin[i + 1] += predBegin[i];
  }
  std::vector<unsigned> succ(succBegin[n]), pred(predBegin[n]);
  {
    std::vector<unsigned> succFill(succBegin.begin(), succBegin.end() - 1);
    std::vector<unsigned> predFill(predBegin.begin(), predBegin.end() - 1);
    forEachRegionEdge([&](unsigned i, unsigned j) {
      succ[succFill[i]++] = j;
      pred[predFill[j]++] = i;
    });
  }
  auto succs = [&](unsigned u) {
    return std::span<const unsigned>(succ.data() + succBegin[u], succBegin[u + 1] - succBegin[u]);
  };
  auto preds = [&](unsigned u) {
    return std::span<const unsigned>(pred.data() + predBegin[u], predBegin[u + 1] - predBegin[u]);
  };

  // Nodes reachable from the alloca, in reverse post-order.
  std::vector<unsigned> rpo;
  rpo.reserve(n);
  std::vector<bool> reached(n, false);
  {
    std::vector<std::pair<unsigned, unsigned>> stack{{src, 0}};
    reached[src] = true;
    while (!stack.empty()) {
      unsigned u = stack.back().first;
      unsigned k = stack.back().second++;
      if (k < succs(u).size()) {
        unsigned v = succs(u)[k];
        if (!reached[v]) {
          reached[v] = true;
          stack.emplace_back(v, 0);
        }
      } else {
        rpo.push_back(u);
        stack.pop_back();
      }
    }
    std::reverse(rpo.begin(), rpo.end());
  }

  // Strongly connected components of the reachable part (Kosaraju: reverse
  // DFS in reverse post-order); search the ones that push or pop.
  constexpr unsigned kNone = ~0u;
  std::vector<unsigned> comp(n, kNone);
  std::vector<unsigned> members, work;
  std::vector<int64_t> d(n, 0);
  unsigned numComps = 0;
  for (unsigned root : rpo) {
    if (comp[root] != kNone)
      continue;
    unsigned c = numComps++;
    members.clear();
    work.assign(1, root);
    comp[root] = c;
    bool touches = false, cyclic = false;
    while (!work.empty()) {
      unsigned u = work.back();
      work.pop_back();
      members.push_back(u);
      touches |= net[u] != 0;
      for (unsigned p : preds(u)) {
        if (p == u)
          cyclic = true;
        if (reached[p] && comp[p] == kNone) {
          comp[p] = c;
          work.push_back(p);
        }
      }
    }
    if (!touches || (members.size() == 1 && !cyclic))
      continue;
    // Bellman-Ford (Boost.Graph) on the component alone, with weights
    // -net: a negative cycle is a cycle that pushes more than it pops.
    if (hasPositiveCycle(members, comp, c, net, succs))
      return std::nullopt;
  }

  // No positive cycle: relax in reverse post-order until a fixpoint.
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  std::fill(d.begin(), d.end(), kUnset);
  d[src] = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (unsigned u : rpo)
      if (d[u] != kUnset)
        for (unsigned v : succs(u))
          if (d[u] + net[u] > d[v]) {
            d[v] = d[u] + net[u];
            changed = true;
          }
  }
  int64_t best = 0;
  for (unsigned u : rpo)
    best = std::max(best, d[u] + peak[u]);
  return best;
}

} // namespace qd::sizing

namespace qd {

using namespace sizing;

std::optional<int64_t> bellmanFordDepth(const Kernel &kernel, const AdStackAllocaStmt &stack) {
  ControlFlowGraph cfg = ControlFlowGraph::build(kernel);
  cfg.simplify();
  KernelFacts facts(kernel);
  static const std::vector<AdStackOpStmt *> none;
  auto it = facts.ops.find(&stack);
  PathScratch scratch;
  return longestPath(cfg, stack, it == facts.ops.end() ? none : it->second, scratch);
}

} // namespace qd
