//===- SizingBellmanFord.cpp - Tier 1b: longest paths on the CFG ----------===//
#include "SizingStructural.h"
#include "qd/analysis/NetPushPaths.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/bellman_ford_shortest_paths.hpp>

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace qd {
namespace {

constexpr unsigned kUnreached = ~0u;
constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();

/// The nodes the source reaches, in reverse post-order of a depth-first
/// search; `position[u]` is u's index in it (kUnreached for the others).
std::vector<unsigned> reversePostOrder(const NetPushGraph &g, std::vector<unsigned> &position) {
  const unsigned n = g.numNodes();
  std::vector<unsigned> rpo;
  rpo.reserve(n);
  std::vector<bool> reached(n, false);
  std::vector<std::pair<unsigned, unsigned>> stack{{g.source, 0}};
  reached[g.source] = true;
  while (!stack.empty()) {
    unsigned u = stack.back().first;
    unsigned k = stack.back().second++;
    if (k < g.succs(u).size()) {
      unsigned v = g.succs(u)[k];
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
  position.assign(n, kUnreached);
  for (unsigned i = 0; i < rpo.size(); ++i)
    position[rpo[i]] = i;
  return rpo;
}

/// True if every path from the source to `p` goes through `h`.
bool dominates(const NetPushGraph &g, unsigned h, unsigned p) {
  if (h == g.source || h == p)
    return true;
  std::vector<bool> seen(g.numNodes(), false);
  std::vector<unsigned> work{g.source};
  seen[g.source] = seen[h] = true;
  while (!work.empty()) {
    unsigned u = work.back();
    work.pop_back();
    if (u == p)
      return false;
    for (unsigned v : g.succs(u))
      if (!seen[v]) {
        seen[v] = true;
        work.push_back(v);
      }
  }
  return true;
}

/// True if the subgraph of the nodes in component `c` has a cycle whose
/// net number of pushes is positive.
bool hasPositiveCycle(const NetPushGraph &g, const std::vector<unsigned> &members,
                      const std::vector<unsigned> &comp, unsigned c) {
  using Graph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                            boost::property<boost::edge_weight_t, int64_t>>;
  std::unordered_map<unsigned, unsigned> index;
  for (unsigned i = 0; i < members.size(); ++i)
    index[members[i]] = i;
  Graph bg(members.size());
  for (unsigned i = 0; i < members.size(); ++i)
    for (unsigned v : g.succs(members[i]))
      if (comp[v] == c)
        boost::add_edge(i, index.at(v), -g.net[members[i]], bg);
  // Every node starts at distance 0 (a virtual source reaching all).
  std::vector<int64_t> dist(members.size(), 0);
  return !boost::bellman_ford_shortest_paths(
      bg, static_cast<int>(members.size()),
      boost::weight_map(boost::get(boost::edge_weight, bg)).distance_map(dist.data()));
}

/// Any graph: a positive cycle lies inside one strongly connected component,
/// and a component whose nodes neither push nor pop has only zero-weight
/// cycles, so only components holding a push or pop are searched for one
/// (Bellman-Ford over the component alone, from a virtual source); with no
/// positive cycle, the distances are relaxed in reverse post-order until
/// nothing changes.
std::optional<int64_t> bellmanFordPath(const NetPushGraph &g) {
  const unsigned n = g.numNodes();
  std::vector<unsigned> position;
  std::vector<unsigned> rpo = reversePostOrder(g, position);
  auto reached = [&](unsigned u) { return position[u] != kUnreached; };
  std::vector<std::vector<unsigned>> preds(n);
  for (unsigned u = 0; u < n; ++u)
    for (unsigned v : g.succs(u))
      preds[v].push_back(u);

  // Strongly connected components of the reachable part (Kosaraju: reverse
  // DFS in reverse post-order); search the ones that push or pop.
  std::vector<unsigned> comp(n, kUnreached);
  std::vector<unsigned> members, work;
  unsigned numComps = 0;
  for (unsigned root : rpo) {
    if (comp[root] != kUnreached)
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
      touches |= g.net[u] != 0;
      for (unsigned p : preds[u]) {
        if (p == u)
          cyclic = true;
        if (reached(p) && comp[p] == kUnreached) {
          comp[p] = c;
          work.push_back(p);
        }
      }
    }
    if (!touches || (members.size() == 1 && !cyclic))
      continue;
    // Bellman-Ford (Boost.Graph) on the component alone, with weights
    // -net: a negative cycle is a cycle that pushes more than it pops.
    if (hasPositiveCycle(g, members, comp, c))
      return std::nullopt;
  }

  // No positive cycle: relax in reverse post-order until a fixpoint.
  std::vector<int64_t> d(n, kUnset);
  d[g.source] = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (unsigned u : rpo)
      if (d[u] != kUnset)
        for (unsigned v : g.succs(u))
          if (d[u] + g.net[u] > d[v]) {
            d[v] = d[u] + g.net[u];
            changed = true;
          }
  }
  int64_t best = 0;
  for (unsigned u : rpo)
    best = std::max(best, d[u] + g.peak[u]);
  return best;
}

/// Linear on reducible graphs (docs/sizing.md has the proof). Edges that go
/// forward in the reverse post-order form a DAG; D(u), the longest path
/// over them, is found in one pass. Then:
///  - if no back edge p -> h relaxes (D(p) + net(p) <= D(h)), D satisfies
///    every edge, so no cycle is positive (its nets sum to at most 0) and D
///    is the longest path over all edges (it is the length of a real path,
///    and no path is longer);
///  - if one relaxes and h dominates p, every path to p goes through h, so
///    D(p) = D(h) + (the longest forward path from h to p): that path and
///    the back edge are a cycle of net D(p) + net(p) - D(h) > 0.
/// In a reducible graph every back edge's target dominates its source, so
/// the two cases cover it; anything else runs Bellman-Ford.
std::optional<int64_t> structuredPath(const NetPushGraph &g, bool *fellBack) {
  std::vector<unsigned> position;
  std::vector<unsigned> rpo = reversePostOrder(g, position);
  std::vector<int64_t> d(g.numNodes(), kUnset);
  d[g.source] = 0;
  for (unsigned u : rpo) // the DFS tree edge into u went forward: d[u] is set
    for (unsigned v : g.succs(u))
      if (position[v] > position[u])
        d[v] = std::max(d[v], d[u] + g.net[u]);
  for (unsigned u : rpo)
    for (unsigned h : g.succs(u))
      if (position[h] <= position[u] && d[u] + g.net[u] > d[h]) {
        if (dominates(g, h, u))
          return std::nullopt;
        if (fellBack)
          *fellBack = true;
        return bellmanFordPath(g);
      }
  int64_t best = 0;
  for (unsigned u : rpo)
    best = std::max(best, d[u] + g.peak[u]);
  return best;
}

} // namespace

std::optional<int64_t> longestNetPath(const NetPushGraph &g, NetPathAlgorithm algorithm,
                                      bool *fellBack) {
  if (fellBack)
    *fellBack = false;
  return algorithm == NetPathAlgorithm::BellmanFord ? bellmanFordPath(g)
                                                    : structuredPath(g, fellBack);
}

} // namespace qd

namespace qd::sizing {

bool pushesInLoopWithoutPop(const KernelFacts &facts, const AdStackAllocaStmt &a,
                            const std::vector<AdStackOpStmt *> &ops) {
  // Without break, continue or while, every statement of a loop's body
  // lies on a path from its header back to it, and every statement of the
  // scope after the alloca is reached from it: the CFG has the cycle.
  if (!facts.fallsThrough)
    return false;
  const Block *scope = a.parent();
  auto isLoop = [](const Stmt *s) {
    return s->kind() == StmtKind::For || s->kind() == StmtKind::While;
  };
  // The loops inside the scope around some pop. A walk stops at a loop
  // already marked (the loops around it are too).
  std::unordered_set<const Stmt *> aroundPops;
  for (const AdStackOpStmt *op : ops) {
    if (op->kind() != StmtKind::AdStackPop)
      continue;
    for (const Stmt *s = op; s->parent() != scope; s = s->parentStmt()) {
      const Stmt *up = s->parentStmt();
      if (!up)
        return false; // outside the scope: longestPath decides
      if (isLoop(up) && !aroundPops.insert(up).second)
        break;
    }
  }
  bool found = false;
  for (const AdStackOpStmt *op : ops) {
    if (op->kind() != StmtKind::AdStackPush)
      continue;
    const Stmt *innermost = nullptr;
    for (const Stmt *s = op; s->parent() != scope; s = s->parentStmt()) {
      const Stmt *up = s->parentStmt();
      if (!up)
        return false;
      if (!innermost && isLoop(up))
        innermost = up;
    }
    found |= innermost && !aroundPops.count(innermost);
  }
  return found;
}

/// Longest path of net pushes from the alloca over its scope's CFG nodes, or
/// nullopt when a cycle reachable from the alloca has a positive net.
std::optional<int64_t> longestPath(const ControlFlowGraph &cfg, const AdStackAllocaStmt &a,
                                   const std::vector<AdStackOpStmt *> &ops, PathScratch &scratch,
                                   NetPathAlgorithm algorithm, bool *fellBack) {
  if (fellBack)
    *fellBack = false;
  // An alloca the entry cannot reach never runs, and neither does its scope.
  std::optional<unsigned> allocaNode = cfg.findNode(&a);
  if (!allocaNode)
    return 0;
  std::vector<unsigned> region = cfg.nodesInRange(cfg.preorder(&a), cfg.scopeEnd(&a));
  std::vector<unsigned> &local = scratch.localOf;
  if (local.size() < cfg.numNodes())
    local.assign(cfg.numNodes(), ~0u);
  const unsigned n = static_cast<unsigned>(region.size());
  scratch.nodes += n;
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

  NetPushGraph g;
  g.net.assign(n, 0);
  g.peak.assign(n, 0);
  for (AdStackOpStmt *op : ops) {
    std::optional<unsigned> node = cfg.findNode(op);
    if (!node)
      continue; // unreachable from the entry: it never runs
    unsigned i = local[*node];
    if (i == ~0u)
      return std::nullopt; // not reachable from the alloca: leave to other tiers
    int64_t &d = g.net[i];
    if (op->kind() == StmtKind::AdStackPush)
      g.peak[i] = std::max(g.peak[i], ++d);
    else if (op->kind() == StmtKind::AdStackPop)
      --d;
  }
  g.source = local[*allocaNode];
  // Region edges; entering the alloca's node again starts a fresh stack.
  g.succBegin.assign(n + 1, 0);
  for (unsigned i = 0; i < n; ++i) {
    for (unsigned succ : cfg.node(region[i]).succs)
      if (unsigned j = local[succ]; j != ~0u && j != g.source)
        g.succ.push_back(j);
    g.succBegin[i + 1] = static_cast<unsigned>(g.succ.size());
  }
  return longestNetPath(g, algorithm, fellBack);
}

} // namespace qd::sizing

namespace qd {

using namespace sizing;

std::optional<int64_t> bellmanFordDepth(const Kernel &kernel, const AdStackAllocaStmt &stack,
                                        NetPathAlgorithm algorithm, bool *fellBack) {
  ControlFlowGraph cfg = ControlFlowGraph::build(kernel);
  cfg.simplify();
  KernelFacts facts(kernel);
  static const std::vector<AdStackOpStmt *> none;
  auto it = facts.ops.find(&stack);
  PathScratch scratch;
  return longestPath(cfg, stack, it == facts.ops.end() ? none : it->second, scratch, algorithm,
                     fellBack);
}

bool pushingCycleIsCertain(const Kernel &kernel, const AdStackAllocaStmt &stack) {
  KernelFacts facts(kernel);
  auto it = facts.ops.find(&stack);
  return it != facts.ops.end() && pushesInLoopWithoutPop(facts, stack, it->second);
}

} // namespace qd
