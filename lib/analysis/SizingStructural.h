//===- SizingStructural.h - Internals of adstack sizing ---------*- C++ -*-===//
//
// Shared by the files of the sizing computation (AdStackSizing.cpp drives
// the tiers): kernel facts, the structural path algebra and the CFG
// longest-path (Bellman-Ford) tier. Not a public header.
//
// The structural tiers evaluate a small path algebra over the structured IR.
// A region (statement or block) is summarised relative to the stack depth at
// its entry by
//   fall  the largest net depth on paths that leave it normally,
//   brk   ... on paths that leave it through a `break`,
//   cont  ... on paths that leave it through a `continue`,
//   peak  the largest depth reached inside it (>= 0),
// where a missing path is "none". Sequencing adds, if arms take the max, and a
// loop with trip count T and per-iteration net `it` peaks at
// (T - 1) * max(it, 0) + peak(body) (just peak(body) when it <= 0), or at
// the sum of `it` over the iterations when every iteration peaks at its
// end and `it` depends on the loop index. Values
// are SizeExprs, so the same code gives constants (tier 1, everything folds)
// and launch-time expressions (tier 2).
//
#pragma once

#include "qd/analysis/AdStackSizing.h"
#include "qd/analysis/CFG.h"
#include "qd/analysis/NetPushPaths.h"
#include "qd/ir/Module.h"
#include "qd/ir/Stmt.h"

#include <absl/container/flat_hash_map.h>

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace qd::sizing {

using E = SizeExprRef;

inline E cst(int64_t v) {
  // Nodes are immutable, so the small constants every summary holds (an
  // empty one has two zeros) are shared instead of allocated each time.
  static const E small[] = {SizeExpr::constant(-1), SizeExpr::constant(0), SizeExpr::constant(1)};
  return v >= -1 && v <= 1 ? small[v + 1] : SizeExpr::constant(v);
}
inline E maxOpt(const E &a, const E &b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return SizeExpr::max(a, b);
}
inline bool sameOpt(const E &a, const E &b) {
  return (!a && !b) || (a && b && a->equals(*b));
}

struct Summary {
  E fall, brk, cont, peak;
  bool exact = true;
  static Summary identity() { return {cst(0), nullptr, nullptr, cst(0), true}; }
};

inline Summary seq(const Summary &a, const Summary &b) {
  Summary r;
  r.fall = a.fall && b.fall ? SizeExpr::add(a.fall, b.fall) : nullptr;
  r.brk = maxOpt(a.brk, a.fall && b.brk ? SizeExpr::add(a.fall, b.brk) : nullptr);
  r.cont = maxOpt(a.cont, a.fall && b.cont ? SizeExpr::add(a.fall, b.cont) : nullptr);
  r.peak = a.fall ? SizeExpr::max(a.peak, SizeExpr::add(a.fall, b.peak)) : a.peak;
  r.exact = a.exact && b.exact;
  return r;
}

/// What is known about a kernel before sizing its stacks.
struct KernelFacts {
  std::vector<AdStackAllocaStmt *> allocas;
  std::unordered_map<const Value *, std::vector<AdStackOpStmt *>> ops; // program order
  /// Open addressing: a gradient of many tasks numbers tens of thousands.
  absl::flat_hash_map<const Stmt *, uint32_t> preorder;
  std::unordered_map<const Block *, std::vector<Stmt *>> jumpChildren;
  /// The SizeExpr variable of each loop index: a for's own value, and a
  /// parallel band's task_index statements (one variable per dimension).
  std::unordered_map<const Value *, unsigned> varOf;
  /// Per variable: its loop and dimension.
  struct LoopVar {
    const ForStmt *loop;
    unsigned dim;
  };
  std::vector<LoopVar> loops;
  /// The variable of dimension `dim` of `loop`.
  unsigned varOfDim(const ForStmt &loop, unsigned dim) const { return varOf.at(&loop) + dim; }
  /// No break, continue or while: every statement of a block runs after the
  /// one before it, so the structural walk reaches every loop around an op.
  bool fallsThrough = true;
  std::unordered_set<const Field *> writtenFields;
  std::unordered_set<const Value *> writtenNdarrays;

  explicit KernelFacts(const Kernel &kernel);
};

/// Sizes one stack: the structural algebra in constant or symbolic mode
/// (SizingStructural.cpp), with loop bounds captured as SizeExprs
/// (SizingCapture.cpp).
class StructuralSizer {
public:
  /// Symbolic mode: a loop's begin, end and trip count, shared by the
  /// stacks of a kernel (a nest's stacks each walk the loops above them).
  using TripCache = std::unordered_map<const ForStmt *, std::array<E, 3>>;

  StructuralSizer(const KernelFacts &facts, bool symbolic,
                  std::unordered_map<const Value *, E> &captureCache,
                  std::unordered_map<const Value *, std::string> &captureErrors,
                  TripCache *trips = nullptr)
      : facts_(facts), symbolic_(symbolic), cache_(captureCache), captureErrors_(captureErrors),
        trips_(trips) {}

  /// The depth bound, or null with `reason()` set.
  E size(const AdStackAllocaStmt &a);
  bool exact() const { return exact_; }
  const std::string &reason() const { return reason_; }

private:
  E fail(std::string why);
  Summary block(Block &b, uint32_t from);
  Summary stmt(Stmt &s);
  Summary whileLoop(WhileStmt &w);
  Summary forLoop(ForStmt &loop);
  std::array<E, 3> tripBounds(ForStmt &loop, std::optional<int64_t> constantTrip);

  // SizingCapture.cpp
  E bound(Bound b, const ForStmt &loop);
  /// The value of an integer SSA value as a SizeExpr, or null (reason in
  /// captureErrors_).
  E capture(const Value *v);
  E reject(const Value *v, std::string why);
  E captureUncached(const Value *v);

  const KernelFacts &facts_;
  bool symbolic_;
  std::unordered_map<const Value *, E> &cache_;
  std::unordered_map<const Value *, std::string> &captureErrors_;
  TripCache *trips_;
  Block *scope_ = nullptr;
  uint32_t lastPushTop_ = 0; // pre-order of the scope's statement with the last push
  std::unordered_map<const Block *, std::vector<Stmt *>> relevant_;
  std::unordered_set<const Stmt *> seen_;
  bool failed_ = false;
  bool exact_ = true;
  std::string reason_;
};

/// True when a push of the stack lies in a loop (inside the stack's scope)
/// that holds no pop of it, in a kernel that falls through everywhere: the
/// loop's cycle through that push is then reachable from the alloca and has
/// a positive net, so `longestPath` would return nullopt. Costs the depth
/// of the stack's operations, where `longestPath` costs its whole scope (in
/// a gradient, the task around a nest of taped loops, for every stack).
bool pushesInLoopWithoutPop(const KernelFacts &facts, const AdStackAllocaStmt &a,
                            const std::vector<AdStackOpStmt *> &ops);

/// Reusable per-kernel scratch for `longestPath`: the region-local index of
/// every CFG node (~0u outside the current region).
struct PathScratch {
  std::vector<unsigned> localOf;
  /// Region nodes of every call so far (SizingWork::pathNodes).
  int64_t nodes = 0;
};

/// Longest path of net pushes from the alloca over its scope's CFG nodes, or
/// nullopt when a cycle reachable from the alloca has a positive net
/// (SizingBellmanFord.cpp; `longestNetPath` on the scope's graph).
std::optional<int64_t> longestPath(const ControlFlowGraph &cfg, const AdStackAllocaStmt &a,
                                   const std::vector<AdStackOpStmt *> &ops, PathScratch &scratch,
                                   NetPathAlgorithm algorithm = NetPathAlgorithm::Structured,
                                   bool *fellBack = nullptr);

} // namespace qd::sizing
