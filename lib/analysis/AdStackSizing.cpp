//===- AdStackSizing.cpp - Adstack capacities -----------------------------===//
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
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"

#include "qd/analysis/CFG.h"
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Stmt.h"
#include "qd/ir/Visitor.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/bellman_ford_shortest_paths.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>

namespace qd {

std::string_view toString(SizingTier tier) {
  switch (tier) {
  case SizingTier::Declared:
    return "declared";
  case SizingTier::Constant:
    return "tier 1 constant";
  case SizingTier::LaunchTime:
    return "tier 2 launch-time";
  case SizingTier::Default:
    return "tier 3 default";
  }
  return "?";
}

std::string_view toString(SizingMethod method) {
  switch (method) {
  case SizingMethod::Declared:
    return "declared";
  case SizingMethod::Unused:
    return "unused";
  case SizingMethod::Structural:
    return "structural";
  case SizingMethod::BellmanFord:
    return "bellman-ford";
  case SizingMethod::Evaluated:
    return "evaluated";
  case SizingMethod::SizeExpr:
    return "size-expr";
  case SizingMethod::Default:
    return "default";
  }
  return "?";
}

const AdStackSize *KernelSizing::find(const AdStackAllocaStmt *stack) const {
  for (const AdStackSize &s : stacks_)
    if (s.stack == stack)
      return &s;
  return nullptr;
}

std::string KernelSizing::describe(const AdStackSize &s) const {
  std::string bound = s.expr ? printSizeExpr(*s.expr, names_) : std::to_string(s.capacity);
  std::string out =
      fmt::format("adstack {} ({}) at {}: {} [{}] = {}", s.name, toString(s.stack->elementType()),
                  s.stack->loc().str(), toString(s.tier), toString(s.method), bound);
  if (s.tier == SizingTier::Constant || s.tier == SizingTier::LaunchTime)
    out += s.exact ? " (exact)" : " (upper bound)";
  if (!s.reason.empty())
    out += ": " + s.reason;
  return out;
}

namespace {

using E = SizeExprRef;

E cst(int64_t v) {
  return SizeExpr::constant(v);
}
E maxOpt(const E &a, const E &b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return SizeExpr::max(a, b);
}
bool sameOpt(const E &a, const E &b) {
  return (!a && !b) || (a && b && a->equals(*b));
}

bool isClosed(const SizeExpr &e) {
  switch (e.kind()) {
  case SizeExprKind::ScalarArg:
  case SizeExprKind::FieldLoad:
  case SizeExprKind::NdarrayShape:
  case SizeExprKind::NdarrayRead:
    return false;
  default:
    for (const auto &op : e.operands())
      if (!isClosed(*op))
        return false;
    return true;
  }
}

class NoInputs : public SizeExprInputs {
public:
  std::optional<int64_t> scalarArg(unsigned) const override { return std::nullopt; }
  std::optional<int64_t> fieldElement(const std::string &,
                                      std::span<const int64_t>) const override {
    return std::nullopt;
  }
  std::optional<int64_t> ndarrayShape(unsigned, unsigned) const override { return std::nullopt; }
  std::optional<int64_t> ndarrayElement(unsigned, std::span<const int64_t>) const override {
    return std::nullopt;
  }
};

struct Summary {
  E fall, brk, cont, peak;
  bool exact = true;
  static Summary identity() { return {cst(0), nullptr, nullptr, cst(0), true}; }
};

Summary seq(const Summary &a, const Summary &b) {
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
  std::unordered_map<const Stmt *, uint32_t> preorder;
  std::unordered_map<const Block *, std::vector<Stmt *>> jumpChildren;
  std::unordered_map<const ForStmt *, unsigned> varOf;
  std::vector<const ForStmt *> loops;
  std::unordered_set<const Field *> writtenFields;
  std::unordered_set<const Value *> writtenNdarrays;

  explicit KernelFacts(const Kernel &kernel) {
    uint32_t n = 0;
    Block &body = const_cast<Kernel &>(kernel).body();
    walk(body, [&](Stmt &s) {
      preorder[&s] = n++;
      if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
        allocas.push_back(a);
      else if (auto *op = dyn_cast<AdStackOpStmt>(&s))
        ops[op->stack()].push_back(op);
      else if (auto *f = dyn_cast<ForStmt>(&s)) {
        varOf[f] = static_cast<unsigned>(loops.size());
        loops.push_back(f);
      } else if (s.kind() == StmtKind::GlobalStore || s.kind() == StmtKind::AtomicAdd) {
        auto &g = cast<GlobalAccessStmt>(s);
        if (g.component() == Component::Primal) {
          if (g.isField())
            writtenFields.insert(g.field());
          else
            writtenNdarrays.insert(g.ndarray());
        }
      }
    });
    markJumps(body);
  }

  // Returns whether `b` contains a break/continue that leaves the innermost
  // statement around it; records such statements per block.
  bool markJumps(Block &b) {
    bool any = false;
    for (Stmt &s : b) {
      bool escapes = false;
      if (s.kind() == StmtKind::Break || s.kind() == StmtKind::Continue)
        escapes = true;
      else if (s.kind() == StmtKind::If || s.kind() == StmtKind::Serial) {
        for (unsigned i = 0; i < s.numBlocks(); ++i)
          escapes |= markJumps(s.block(i));
      } else {
        for (unsigned i = 0; i < s.numBlocks(); ++i)
          markJumps(s.block(i)); // loops capture their own jumps
      }
      if (escapes) {
        jumpChildren[&b].push_back(&s);
        any = true;
      }
    }
    return any;
  }
};

/// Sizes one stack: the structural algebra in constant or symbolic mode.
class StructuralSizer {
public:
  StructuralSizer(const KernelFacts &facts, bool symbolic,
                  std::unordered_map<const Value *, E> &captureCache,
                  std::unordered_map<const Value *, std::string> &captureErrors)
      : facts_(facts), symbolic_(symbolic), cache_(captureCache), captureErrors_(captureErrors) {}

  /// The depth bound, or null with `reason()` set.
  E size(const AdStackAllocaStmt &a) {
    scope_ = a.parent();
    relevant_.clear();
    seen_.clear();
    auto it = facts_.ops.find(&a);
    if (it != facts_.ops.end())
      for (AdStackOpStmt *op : it->second) {
        Stmt *child = op;
        while (child->parent() != scope_) {
          Stmt *up = child->parentStmt();
          if (!up)
            return fail(fmt::format("the adstack operation at {} is outside the adstack's block",
                                    op->loc().str()));
          if (seen_.insert(child).second)
            relevant_[child->parent()].push_back(child);
          child = up;
        }
        if (seen_.insert(child).second)
          relevant_[scope_].push_back(child);
      }
    Summary s = block(*scope_, facts_.preorder.at(&a) + 1);
    if (failed_)
      return nullptr;
    exact_ = s.exact;
    E depth = s.peak;
    // Loops around the alloca: the capacity is the maximum over their
    // iterations (threads included) of the depth reached in one of them.
    // The maximum is only reached when every iteration runs the alloca: an
    // if, a while or a break/continue between the loop and the alloca may
    // skip it in the iteration that gives the maximum.
    bool mayBeSkipped = false;
    for (Stmt *child = const_cast<AdStackAllocaStmt *>(&a), *up = a.parentStmt(); up && !failed_;
         child = up, up = up->parentStmt()) {
      if (auto it = facts_.jumpChildren.find(child->parent()); it != facts_.jumpChildren.end())
        for (Stmt *j : it->second)
          mayBeSkipped |= facts_.preorder.at(j) < facts_.preorder.at(child);
      auto *loop = dyn_cast<ForStmt>(up);
      if (!loop) {
        mayBeSkipped |= up->kind() == StmtKind::If || up->kind() == StmtKind::While;
        continue;
      }
      unsigned v = facts_.varOf.at(loop);
      if (!depth->usesVar(v)) {
        // The depth does not depend on this loop, but the alloca is reached
        // only if it runs: a loop that may run 0 times (for some values of
        // the loops around it) makes the bound an over-estimate there.
        bool runs = loop->begin().isConstant() && loop->end().isConstant() &&
                    loop->begin().constant < loop->end().constant;
        if (!runs) {
          exact_ = false;
          mayBeSkipped = true;
        }
        continue;
      }
      if (mayBeSkipped)
        exact_ = false;
      E begin = bound(loop->begin(), *loop);
      E end = bound(loop->end(), *loop);
      if (failed_)
        return nullptr;
      depth = SizeExpr::maxOverRange(v, begin, end, depth);
    }
    if (failed_)
      return nullptr;
    return depth;
  }

  bool exact() const { return exact_; }
  const std::string &reason() const { return reason_; }

private:
  E fail(std::string why) {
    if (!failed_)
      reason_ = std::move(why);
    failed_ = true;
    return nullptr;
  }

  Summary block(Block &b, uint32_t from) {
    std::vector<Stmt *> children;
    if (auto it = relevant_.find(&b); it != relevant_.end())
      children = it->second;
    if (auto it = facts_.jumpChildren.find(&b); it != facts_.jumpChildren.end())
      for (Stmt *s : it->second)
        if (!seen_.count(s))
          children.push_back(s);
    std::vector<std::pair<uint32_t, Stmt *>> ordered;
    for (Stmt *s : children) {
      uint32_t p = facts_.preorder.at(s);
      if (p >= from)
        ordered.emplace_back(p, s);
    }
    std::sort(ordered.begin(), ordered.end());
    Summary acc = Summary::identity();
    for (auto &[p, s] : ordered) {
      if (failed_ || !acc.fall)
        break;
      acc = seq(acc, stmt(*s));
    }
    return acc;
  }

  Summary stmt(Stmt &s) {
    Summary r = Summary::identity();
    switch (s.kind()) {
    case StmtKind::AdStackPush:
      r.fall = r.peak = cst(1);
      return r;
    case StmtKind::AdStackPop:
      r.fall = cst(-1);
      return r;
    case StmtKind::Break:
      return {nullptr, cst(0), nullptr, cst(0), false};
    case StmtKind::Continue:
      return {nullptr, nullptr, cst(0), cst(0), false};
    case StmtKind::If: {
      auto &i = cast<IfStmt>(s);
      Summary t = block(i.thenBlock(), 0);
      Summary e = block(i.elseBlock(), 0);
      r.fall = maxOpt(t.fall, e.fall);
      r.brk = maxOpt(t.brk, e.brk);
      r.cont = maxOpt(t.cont, e.cont);
      r.peak = SizeExpr::max(t.peak, e.peak);
      r.exact = t.exact && e.exact && sameOpt(t.fall, e.fall) && t.peak->equals(*e.peak);
      return r;
    }
    case StmtKind::Serial:
      return block(s.block(0), 0);
    case StmtKind::For:
      return forLoop(cast<ForStmt>(s));
    case StmtKind::While:
      return whileLoop(cast<WhileStmt>(s));
    default:
      return r; // load_top, load_top_adj, acc_adjoint: depth unchanged
    }
  }

  Summary whileLoop(WhileStmt &w) {
    Summary b = block(w.body(), 0);
    E it = maxOpt(b.fall, b.cont);
    if (it && !(it->isConst() && it->value() <= 0)) {
      fail(fmt::format("the while loop at {} may push more than it pops per iteration, and its "
                       "trip count is not known before it runs",
                       w.loc().str()));
      return Summary::identity();
    }
    // Iteration k starts at k * it <= 0, so the first iteration peaks highest
    // and the exit through a break is at most brk.
    return {b.brk, nullptr, nullptr, b.peak, b.exact && !b.cont};
  }

  Summary forLoop(ForStmt &loop) {
    Summary b = block(loop.body(), 0);
    if (failed_)
      return b;
    E begin, end, trip;
    E it = maxOpt(b.fall, b.cont); // net change of one iteration
    bool nonPositive = !it || (it->isConst() && it->value() <= 0);
    // (Symbolic mode only: with constant trip counts the tier-1 structural
    // pass leaves these shapes to Bellman-Ford, which handles them exactly.)
    auto capturable = [&](Bound bd) { return bd.isConstant() || capture(bd.value) != nullptr; };
    if (symbolic_ && nonPositive && !(capturable(loop.begin()) && capturable(loop.end())) &&
        !b.peak->usesVar(facts_.varOf.at(&loop)) &&
        (!b.brk || !b.brk->usesVar(facts_.varOf.at(&loop)))) {
      // Iterations never raise the depth they start at: the first one peaks
      // highest, whatever the trip count (which may even be data-dependent).
      Summary r;
      r.peak = b.peak;
      r.fall = maxOpt(cst(0), b.brk);
      r.exact = false;
      return r;
    }
    if (symbolic_) {
      begin = bound(loop.begin(), loop);
      end = bound(loop.end(), loop);
      if (failed_)
        return b;
      trip = SizeExpr::tripCount(begin, end);
    } else {
      std::optional<int64_t> t = constantTripCount(loop);
      if (!t) {
        fail(fmt::format("the loop at {} has bounds that are not compile-time constants",
                         loop.loc().str()));
        return b;
      }
      trip = cst(*t);
      begin = cst(0);
      end = trip;
    }
    unsigned v = facts_.varOf.at(&loop);
    if (symbolic_ && it && it->usesVar(v) && !b.brk && !b.cont && it->isNonNegative() &&
        b.peak->equals(*it)) {
      // Every iteration pushes it(v) >= 0 and peaks at its end: the loop
      // peaks after its last iteration, at the sum of all of them (a
      // triangular nest: sum(j in [0, m): j), not m * max(j)).
      Summary r;
      r.fall = r.peak = SizeExpr::sumOverRange(v, begin, end, it);
      r.exact = b.exact;
      return r;
    }
    E br = b.brk, p = b.peak;
    bool exact = b.exact && !b.cont && !b.brk;
    // A body whose depth depends on the loop's own index: bound every
    // iteration by the largest one (sound; exact only for a constant body).
    auto hoist = [&](E &x) {
      if (x && x->usesVar(v)) {
        x = SizeExpr::maxOverRange(v, begin, end, x);
        exact = false;
      }
    };
    E itAt = it; // the net change of the iteration at index v
    bool itUsesVar = it && it->usesVar(v);
    bool othersUseVar = (br && br->usesVar(v)) || p->usesVar(v);
    hoist(it);
    hoist(br);
    hoist(p);
    if (trip->isConst() && trip->value() == 0)
      return Summary::identity();
    // `guard(x)`: x when the loop runs at least once, 0 otherwise.
    auto guard = [&](const E &x) {
      if (trip->isConst())
        return x;
      return SizeExpr::maxOverRange(v, begin, end, x);
    };
    Summary r;
    r.exact = exact;
    if (!it) { // every iteration leaves through a break: at most one runs
      r.peak = guard(p);
      r.fall = br ? guard(br) : cst(0);
      if (!trip->isConst())
        r.fall = SizeExpr::max(r.fall, cst(0));
      return r;
    }
    if (it->isNonPositive()) {
      r.peak = guard(p);
      if (itUsesVar) {
        // The net is the sum of the iterations' nets: exact, where
        // trip * max(net) would over-estimate it.
        r.fall = SizeExpr::sumOverRange(v, begin, end, itAt);
        r.exact = b.exact && !b.cont && !b.brk && !othersUseVar;
      } else {
        r.fall = SizeExpr::mul(trip, it);
      }
    } else {
      E itp = SizeExpr::max(it, cst(0));
      if (!it->isNonNegative())
        r.exact = false;
      E tm1 = SizeExpr::sub(trip, cst(1));
      r.peak = p->equals(*itp) ? SizeExpr::mul(trip, itp)
                               : guard(SizeExpr::add(SizeExpr::mul(tm1, itp), p));
      r.fall = SizeExpr::mul(trip, itp);
      if (br)
        br = SizeExpr::add(SizeExpr::mul(tm1, itp), br);
    }
    if (br)
      r.fall = SizeExpr::max(r.fall, guard(br));
    return r;
  }

  E bound(Bound b, const ForStmt &loop) {
    if (b.isConstant())
      return cst(b.constant);
    E e = capture(b.value);
    if (!e)
      fail(fmt::format("the loop at {} has a bound outside the SizeExpr grammar: {}",
                       loop.loc().str(), captureErrors_[b.value]));
    return e;
  }

  /// The value of an integer SSA value as a SizeExpr, or null (reason in
  /// captureErrors_).
  E capture(const Value *v) {
    if (auto it = cache_.find(v); it != cache_.end())
      return it->second;
    E e = captureUncached(v);
    cache_[v] = e;
    return e;
  }

  E reject(const Value *v, std::string why) {
    captureErrors_[v] = std::move(why);
    return nullptr;
  }

  E captureUncached(const Value *v) {
    if (auto c = evaluateConstantInt(v))
      return cst(*c);
    if (auto *arg = dyn_cast<Argument>(v)) {
      if (arg->isNdarray() || !isInteger(arg->type().element()))
        return reject(v, fmt::format("argument %{} is not an integer scalar", arg->name()));
      return SizeExpr::scalarArg(arg->index());
    }
    const auto *s = dyn_cast<Stmt>(v);
    if (!s)
      return reject(v, "unknown value");
    std::string where = s->loc().str();
    switch (s->kind()) {
    case StmtKind::Shape: {
      auto &sh = cast<ShapeStmt>(*s);
      auto *arg = dyn_cast<Argument>(sh.ndarray());
      if (!arg)
        return reject(v, fmt::format("the shape at {} is not of a kernel argument", where));
      return SizeExpr::ndarrayShape(arg->index(), sh.axis());
    }
    case StmtKind::For: {
      auto &loop = cast<ForStmt>(*s);
      return SizeExpr::boundVar(facts_.varOf.at(&loop));
    }
    case StmtKind::GlobalLoad: {
      auto &g = cast<GlobalLoadStmt>(*s);
      std::string name = g.isField() ? "@" + g.field()->name() : "%" + g.ndarray()->name();
      if (g.component() != Component::Primal || !isInteger(g.elementType()))
        return reject(v, fmt::format("the load at {} does not read integer primal data", where));
      bool written = g.isField() ? facts_.writtenFields.count(g.field()) > 0
                                 : facts_.writtenNdarrays.count(g.ndarray()) > 0;
      if (written)
        return reject(v, fmt::format("the kernel writes {}, so the value the loop at {} reads may "
                                     "differ from its value at launch",
                                     name, where));
      std::vector<E> idx;
      for (unsigned i = 0; i < g.numIndices(); ++i) {
        E e = capture(g.index(i));
        if (!e)
          return reject(v, captureErrors_[g.index(i)]);
        idx.push_back(e);
      }
      if (g.isField())
        return SizeExpr::fieldLoad(g.field()->name(), std::move(idx));
      auto *arg = dyn_cast<Argument>(g.ndarray());
      if (!arg)
        return reject(v, fmt::format("the load at {} is not from a kernel argument", where));
      return SizeExpr::ndarrayRead(arg->index(), std::move(idx));
    }
    case StmtKind::Binary: {
      auto &b = cast<BinaryStmt>(*s);
      if (!isInteger(b.type().element()) || b.type().element() == ScalarType::I1)
        return reject(v, fmt::format("the operation at {} is not on integers", where));
      E l = capture(b.lhs());
      if (!l)
        return reject(v, captureErrors_[b.lhs()]);
      E r = capture(b.rhs());
      if (!r)
        return reject(v, captureErrors_[b.rhs()]);
      switch (b.op()) {
      case BinaryOp::Add:
        return SizeExpr::add(l, r);
      case BinaryOp::Sub:
        return SizeExpr::sub(l, r);
      case BinaryOp::Mul:
        return SizeExpr::mul(l, r);
      case BinaryOp::Max:
        return SizeExpr::max(l, r);
      default:
        return reject(
            v, fmt::format("'{}' at {} is not one of add, sub, mul, max", toString(b.op()), where));
      }
    }
    case StmtKind::Cast: {
      auto &c = cast<CastStmt>(*s);
      if (isInteger(c.from()) && c.from() != ScalarType::I1 && isInteger(c.to()) &&
          bitWidth(c.to()) >= bitWidth(c.from())) {
        E in = capture(c.input());
        return in ? in : reject(v, captureErrors_[c.input()]);
      }
      return reject(v, fmt::format("the cast at {} may change the value", where));
    }
    case StmtKind::LocalLoad:
      return reject(v, fmt::format("the value at {} is loaded from a local variable, so it is only "
                                   "known while the kernel runs",
                                   where));
    default:
      return reject(v, fmt::format("'{}' at {} is not in the grammar", mnemonic(s->kind()), where));
    }
  }

  const KernelFacts &facts_;
  bool symbolic_;
  std::unordered_map<const Value *, E> &cache_;
  std::unordered_map<const Value *, std::string> &captureErrors_;
  Block *scope_ = nullptr;
  std::unordered_map<const Block *, std::vector<Stmt *>> relevant_;
  std::unordered_set<const Stmt *> seen_;
  bool failed_ = false;
  bool exact_ = true;
  std::string reason_;
};

/// Reusable per-kernel scratch for `longestPath`: the region-local index of
/// every CFG node (~0u outside the current region).
struct PathScratch {
  std::vector<unsigned> localOf;
};

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
  for (AdStackOpStmt *op : ops) {
    unsigned i = local[cfg.nodeOf(op)];
    if (i == ~0u)
      return std::nullopt; // not reachable from the alloca: leave to other tiers
    int64_t &d = net[i];
    if (op->kind() == StmtKind::AdStackPush)
      peak[i] = std::max(peak[i], ++d);
    else if (op->kind() == StmtKind::AdStackPop)
      --d;
  }
  const unsigned src = local[cfg.nodeOf(&a)];
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

} // namespace

std::optional<int64_t> bellmanFordDepth(const Kernel &kernel, const AdStackAllocaStmt &stack) {
  ControlFlowGraph cfg = ControlFlowGraph::build(kernel);
  cfg.simplify();
  KernelFacts facts(kernel);
  static const std::vector<AdStackOpStmt *> none;
  auto it = facts.ops.find(&stack);
  PathScratch scratch;
  return longestPath(cfg, stack, it == facts.ops.end() ? none : it->second, scratch);
}

KernelSizing sizeAdStacks(const Kernel &kernel, const SizingOptions &options) {
  KernelSizing out;
  KernelFacts facts(kernel);
  if (facts.allocas.empty())
    return out;
  ValueNamer namer(kernel);
  out.names_ = SizeExprNames::forKernel(kernel);
  for (const ForStmt *loop : facts.loops)
    out.varNames_.push_back(namer[loop]);
  out.names_.varName = [names = out.varNames_](unsigned v) {
    return v < names.size() ? names[v] : fmt::format("%v{}", v);
  };
  std::unordered_map<const Value *, E> constCache, symCache;
  std::unordered_map<const Value *, std::string> constErrors, symErrors;
  std::optional<ControlFlowGraph> cfg;
  PathScratch pathScratch;
  static const std::vector<AdStackOpStmt *> none;

  for (AdStackAllocaStmt *a : facts.allocas) {
    AdStackSize r;
    r.stack = a;
    r.name = namer[a];
    auto opsIt = facts.ops.find(a);
    const auto &ops = opsIt == facts.ops.end() ? none : opsIt->second;
    bool anyPush = std::any_of(ops.begin(), ops.end(),
                               [](const Stmt *s) { return s->kind() == StmtKind::AdStackPush; });
    auto constant = [&](SizingMethod m, int64_t depth, bool exact) {
      r.tier = SizingTier::Constant;
      r.method = m;
      r.capacity = std::max<int64_t>(depth, 1);
      r.exact = exact;
    };
    if (a->capacity() != 0) {
      r.tier = SizingTier::Declared;
      r.method = SizingMethod::Declared;
      r.capacity = a->capacity();
      r.exact = false;
      out.stacks_.push_back(std::move(r));
      continue;
    }
    if (!anyPush) {
      constant(SizingMethod::Unused, 1, true);
      out.stacks_.push_back(std::move(r));
      continue;
    }
    std::string overflow;
    // Tier 1a: structural with constant trip counts.
    if (options.structural) {
      StructuralSizer s(facts, /*symbolic=*/false, constCache, constErrors);
      if (E depth = s.size(*a)) {
        if (depth->isConst()) {
          constant(SizingMethod::Structural, depth->value(), s.exact());
          out.stacks_.push_back(std::move(r));
          continue;
        }
        overflow = "the bound overflows int64";
      }
    }
    // Tier 1b: Bellman-Ford on the CFG.
    if (options.bellmanFord) {
      if (!cfg) {
        cfg = ControlFlowGraph::build(kernel);
        cfg->simplify();
      }
      auto depth = longestPath(*cfg, *a, ops, pathScratch);
      if (depth) {
        constant(SizingMethod::BellmanFord, *depth, false);
        out.stacks_.push_back(std::move(r));
        continue;
      }
    }
    // Tier 2: launch-time expression (or a closed one evaluated now).
    std::string reason;
    if (overflow.empty()) {
      StructuralSizer s(facts, /*symbolic=*/true, symCache, symErrors);
      if (E depth = s.size(*a)) {
        if (!isClosed(*depth)) {
          r.tier = SizingTier::LaunchTime;
          r.method = SizingMethod::SizeExpr;
          r.expr = depth;
          r.exact = s.exact();
          out.stacks_.push_back(std::move(r));
          continue;
        }
        auto v = evaluateSizeExpr(*depth, NoInputs(), options.compileTimeEvalSteps);
        if (v.ok()) {
          constant(SizingMethod::Evaluated, *v, s.exact());
          out.stacks_.push_back(std::move(r));
          continue;
        }
        if (v.status().code() != absl::StatusCode::kOutOfRange) {
          // Too long to evaluate now (a huge range): evaluate at launch.
          r.tier = SizingTier::LaunchTime;
          r.method = SizingMethod::SizeExpr;
          r.expr = depth;
          r.exact = s.exact();
          out.stacks_.push_back(std::move(r));
          continue;
        }
        reason = fmt::format("its bound {} cannot be computed: {}",
                             printSizeExpr(*depth, out.names_), std::string(v.status().message()));
      } else {
        reason = s.reason();
      }
    } else {
      reason = overflow;
    }
    // Tier 3.
    r.tier = SizingTier::Default;
    r.method = SizingMethod::Default;
    r.capacity = options.defaultCapacity;
    r.reason = reason;
    out.warnings_.push_back(
        fmt::format("{}: warning: adstack {} in kernel @{} is outside the sizing grammar ({}); it "
                    "gets the default capacity {}, and a launch that pushes more fails with an "
                    "overflow error. Give it an explicit capacity or bound its loops with "
                    "arguments, fields or ndarray data the kernel does not write",
                    a->loc().str(), r.name, kernel.name(), reason, options.defaultCapacity));
    out.stacks_.push_back(std::move(r));
  }
  return out;
}

} // namespace qd
