//===- AdStackSizing.cpp - Adstack capacities -----------------------------===//
//
// Runs the tiers of qd/analysis/AdStackSizing.h in order for every stack and
// fills the KernelSizing. The tiers live by concern: the structural depth
// algebra (constant and symbolic) in SizingStructural.cpp, the SizeExprs of
// loop bounds in SizingCapture.cpp, the longest path on the CFG in
// SizingBellmanFord.cpp (SizingStructural.h is their interface).
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"

#include "KernelVariants.h"
#include "SizingStructural.h"
#include "qd/analysis/AdStackCounting.h"
#include "qd/analysis/AdStackOptimistic.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <span>

namespace qd {

using namespace sizing;

namespace {

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

// Gives r a capacity known at compile time.
void setConstant(AdStackSize &r, SizingMethod m, int64_t depth, bool exact) {
  r.tier = SizingTier::Constant;
  r.method = m;
  r.capacity = std::max<int64_t>(depth, 1);
  r.exact = exact;
}

// Gives r the SizeExpr `depth`, evaluated at each launch.
void setLaunchTime(AdStackSize &r, E depth, bool exact) {
  r.tier = SizingTier::LaunchTime;
  r.method = SizingMethod::SizeExpr;
  r.expr = std::move(depth);
  r.exact = exact;
}

// The tiers that size a stack without running anything (declared, 1a, 1b
// and 2), in order, with the caches they share across a kernel's stacks.
class StaticTiers {
public:
  using Ops = std::vector<AdStackOpStmt *>;
  StaticTiers(const Kernel &kernel, const KernelFacts &facts, const SizingOptions &options,
              const SizeExprNames &names)
      : kernel_(kernel), facts_(facts), options_(options), names_(names) {}
  // Sizes r (whose stack is `a`) by the first tier that can; false, with
  // r.reason, where none can.
  bool size(AdStackAllocaStmt &a, const Ops &ops, AdStackSize &r);
  int64_t pathNodes() const { return pathScratch_.nodes; }

private:
  bool structuralConstant(AdStackAllocaStmt &a, AdStackSize &r, std::string &overflow);
  bool bellmanFord(AdStackAllocaStmt &a, const Ops &ops, AdStackSize &r);
  bool symbolic(AdStackAllocaStmt &a, AdStackSize &r);

  const Kernel &kernel_;
  const KernelFacts &facts_;
  const SizingOptions &options_;
  const SizeExprNames &names_;
  std::unordered_map<const Value *, E> constCache_, symCache_;
  std::unordered_map<const Value *, std::string> constErrors_, symErrors_;
  StructuralSizer::TripCache trips_;
  std::optional<ControlFlowGraph> cfg_;
  PathScratch pathScratch_;
};

bool StaticTiers::size(AdStackAllocaStmt &a, const Ops &ops, AdStackSize &r) {
  if (Value *arg = a.capacityArgument()) {
    r.tier = SizingTier::LaunchTime;
    r.method = SizingMethod::Declared;
    r.expr = SizeExpr::scalarArg(cast<Argument>(arg)->index());
    r.exact = false;
    return true;
  }
  if (a.capacity() != 0) {
    r.tier = SizingTier::Declared;
    r.method = SizingMethod::Declared;
    r.capacity = a.capacity();
    r.exact = false;
    return true;
  }
  bool anyPush = std::any_of(ops.begin(), ops.end(),
                             [](const Stmt *s) { return s->kind() == StmtKind::AdStackPush; });
  if (!anyPush) {
    setConstant(r, SizingMethod::Unused, 1, true);
    return true;
  }
  std::string overflow;
  if (options_.structural && structuralConstant(a, r, overflow))
    return true;
  if (options_.bellmanFord && bellmanFord(a, ops, r))
    return true;
  if (!overflow.empty()) {
    r.reason = overflow;
    return false;
  }
  return symbolic(a, r);
}

// Tier 1a: structural with constant trip counts. A bound that overflows
// says so in `overflow` (tier 2 would overflow as well).
bool StaticTiers::structuralConstant(AdStackAllocaStmt &a, AdStackSize &r, std::string &overflow) {
  StructuralSizer s(facts_, /*symbolic=*/false, constCache_, constErrors_);
  E depth = s.size(a);
  if (!depth)
    return false;
  if (depth->isConst()) {
    setConstant(r, SizingMethod::Structural, depth->value(), s.exact());
    return true;
  }
  overflow = "the bound overflows int64";
  return false;
}

// Tier 1b: Bellman-Ford on the CFG, unless a loop's cycle is sure to push
// more than it pops (a taped loop of a gradient).
bool StaticTiers::bellmanFord(AdStackAllocaStmt &a, const Ops &ops, AdStackSize &r) {
  if (pushesInLoopWithoutPop(facts_, a, ops)) {
    if (options_.work)
      ++options_.work->pathSkips;
    return false;
  }
  if (!cfg_) {
    cfg_ = ControlFlowGraph::build(kernel_);
    cfg_->simplify();
  }
  auto depth = longestPath(*cfg_, a, ops, pathScratch_);
  if (!depth)
    return false;
  setConstant(r, SizingMethod::BellmanFord, *depth, false);
  return true;
}

// Tier 2: a launch-time expression (or a closed one evaluated now).
bool StaticTiers::symbolic(AdStackAllocaStmt &a, AdStackSize &r) {
  StructuralSizer s(facts_, /*symbolic=*/true, symCache_, symErrors_, &trips_);
  E depth = s.size(a);
  if (!depth) {
    r.reason = s.reason();
    return false;
  }
  if (!isClosed(*depth)) {
    setLaunchTime(r, depth, s.exact());
    return true;
  }
  auto v = evaluateSizeExpr(*depth, NoInputs(), options_.compileTimeEvalSteps);
  if (v.ok()) {
    setConstant(r, SizingMethod::Evaluated, *v, s.exact());
    return true;
  }
  if (v.status().code() != absl::StatusCode::kOutOfRange) {
    // Too long to evaluate now (a huge range): evaluate at launch.
    setLaunchTime(r, depth, s.exact());
    return true;
  }
  r.reason = fmt::format("its bound {} cannot be computed: {}", printSizeExpr(*depth, names_),
                         std::string(v.status().message()));
  return false;
}

// The depth every execution of `a` reaches: its pushes and pops in the
// alloca's own block, up to the first statement that may leave the block
// (a break or continue, or an if around one) or that holds an operation on
// the stack in a nested block (whose effect depends on the path taken).
int64_t guaranteedDepth(const KernelFacts &facts, const AdStackAllocaStmt &a,
                        const std::vector<AdStackOpStmt *> &ops) {
  Block *scope = a.parent();
  // Per statement of the scope: whether it is an operation on the stack
  // (true) or holds one nested (false).
  std::unordered_map<const Stmt *, bool> holders;
  for (AdStackOpStmt *op : ops) {
    Stmt *s = op;
    while (s->parent() != scope)
      s = s->parentStmt();
    holders.emplace(s, s == op);
  }
  auto jumps = facts.jumpChildren.find(scope);
  int64_t depth = 0, deepest = 0;
  for (auto it = std::next(Block::iteratorTo(const_cast<AdStackAllocaStmt *>(&a)));
       it != scope->end(); ++it) {
    Stmt *s = &*it;
    if (jumps != facts.jumpChildren.end() &&
        std::find(jumps->second.begin(), jumps->second.end(), s) != jumps->second.end())
      break;
    auto held = holders.find(s);
    if (held == holders.end())
      continue;
    if (!held->second)
      break;
    depth += s->kind() == StmtKind::AdStackPush ? 1 : s->kind() == StmtKind::AdStackPop ? -1 : 0;
    deepest = std::max(deepest, depth);
  }
  return deepest;
}

// A compile-time bound is exact where no execution of the alloca can need
// less: a capacity of 1 (every stack gets at least that), or a bound that
// the straight-line code after the alloca reaches on every path (the CFG
// tier is path-insensitive, and the structural one gives up exactness at
// an if or a break even where the peak comes before it).
bool provablyTight(const KernelFacts &facts, const AdStackSize &r,
                   const std::vector<AdStackOpStmt *> &ops) {
  return r.tier == SizingTier::Constant &&
         (r.capacity <= 1 || guaranteedDepth(facts, *r.stack, ops) == r.capacity);
}

// Most kernels (every forward kernel) have no stacks: one walk that
// allocates nothing says so, before the facts map every statement; a
// gradient's first task usually has one, which ends the walk there.
bool hasAdStack(const Kernel &kernel) {
  return anyStmt(const_cast<Kernel &>(kernel).body(),
                 [](const Stmt &s) { return s.kind() == StmtKind::AdStackAlloca; });
}

// The indices of the upper bounds worth refining by measuring: loose ones
// above 1.
std::vector<size_t> looseBounds(const std::vector<AdStackSize> &stacks,
                                const SizingOptions &options) {
  std::vector<size_t> loose;
  if (options.refineUpperBounds && options.countKernels)
    for (size_t i = 0; i < stacks.size(); ++i) {
      const AdStackSize &r = stacks[i];
      if (!r.exact && r.method != SizingMethod::Declared &&
          ((r.tier == SizingTier::Constant && r.capacity > 1) || r.tier == SizingTier::LaunchTime))
        loose.push_back(i);
    }
  return loose;
}

// What measuring at launch decided: the counting kernel and the optimistic
// launch (or why there is none).
struct Measurement {
  AdStackCounting counting;
  absl::StatusOr<OptimisticLaunch> optimistic = absl::FailedPreconditionError("");
};

// Builds the counting kernel and optimistic launch of the stacks outside
// the grammar, with the loose ones where the kernel then has an optimistic
// launch: its steady state measures them at the price of the try kernel's
// counters, where counting them would run their loops once more at every
// launch. Otherwise the loose ones keep their bounds. Marks the measured
// stacks in `stacks`.
Measurement measure(const Kernel &kernel, const SizingOptions &options, const LazyValueNamer &namer,
                    const std::vector<size_t> &outside, const std::vector<size_t> &loose,
                    std::vector<AdStackSize> &stacks) {
  auto stacksOf = [&](const std::vector<size_t> &indices) {
    std::vector<const AdStackAllocaStmt *> v;
    for (size_t i : indices)
      v.push_back(stacks[i].stack);
    return v;
  };
  auto optimisticOf = [&](const AdStackCounting &c) -> absl::StatusOr<OptimisticLaunch> {
    if (!c.kernel)
      return absl::FailedPreconditionError("");
    if (!options.optimisticLaunch)
      return absl::FailedPreconditionError(""); // (off: no reason to report)
    return buildAdStackOptimistic(kernel, c.counted);
  };
  Measurement m;
  std::vector<size_t> measured = outside;
  std::vector<size_t> all = outside;
  all.insert(all.end(), loose.begin(), loose.end());
  std::sort(all.begin(), all.end());
  // (The counting kernel of all of them serves only their optimistic
  // launch: where there can be none, it is not built.)
  if (options.countKernels && !loose.empty() && options.optimisticLaunch &&
      variants::mayLaunchOptimistically(kernel, stacksOf(all), namer)) {
    m.counting = buildAdStackCounting(kernel, stacksOf(all));
    m.optimistic = optimisticOf(m.counting);
    if (m.optimistic.ok())
      measured = std::move(all);
    else
      m.counting = AdStackCounting();
  }
  if (options.countKernels && !m.counting.kernel && !outside.empty()) {
    m.counting = buildAdStackCounting(kernel, stacksOf(outside));
    m.optimistic = optimisticOf(m.counting);
  }
  std::unordered_map<const AdStackAllocaStmt *, int> slotOf;
  for (size_t slot = 0; slot < m.counting.counted.size(); ++slot)
    slotOf[m.counting.counted[slot]] = static_cast<int>(slot);
  for (size_t i : measured)
    if (AdStackSize &r = stacks[i]; slotOf.count(r.stack)) {
      if (r.tier != SizingTier::Default) {
        r.refined = true;
        r.countSlot = slotOf[r.stack];
        continue;
      }
      r.tier = SizingTier::Measured;
      r.method = SizingMethod::Counted;
      r.countSlot = slotOf[r.stack];
      r.exact = true;
    }
  return m;
}

// The note of each measured stack outside the grammar, the warning of each
// one left with the default capacity.
std::vector<std::string> outsideWarnings(const Kernel &kernel, const SizingOptions &options,
                                         const AdStackCounting &counting,
                                         const std::vector<size_t> &outside,
                                         std::vector<AdStackSize> &stacks) {
  std::vector<std::string> warnings;
  for (size_t i : outside) {
    AdStackSize &r = stacks[i];
    if (r.tier == SizingTier::Measured) {
      if (counting.boundArgs[r.countSlot] >= 0)
        r.reason += "; its pushes depend on its own values, so the counting kernel keeps it "
                    "with a bound, and runs again with a larger one where the need exceeds it";
      warnings.push_back(fmt::format(
          "{}: note: adstack {} in kernel @{} is outside the sizing grammar ({}); its need is "
          "measured before each launch by the counting kernel @{}, which runs the loops that "
          "decide its depth once more",
          r.stack->loc().str(), r.name(), kernel.name(), r.reason, counting.kernel->name()));
      continue;
    }
    warnings.push_back(fmt::format(
        "{}: warning: adstack {} in kernel @{} is outside the sizing grammar ({}); it "
        "gets the default capacity {}, and a launch that pushes more fails with an "
        "overflow error. Give it an explicit capacity or bound its loops with "
        "arguments, fields or ndarray data the kernel does not write",
        r.stack->loc().str(), r.name(), kernel.name(), r.reason, options.defaultCapacity));
  }
  return warnings;
}

} // namespace

KernelSizing sizeAdStacks(const Kernel &kernel, const SizingOptions &options) {
  KernelSizing out;
  if (!hasAdStack(kernel))
    return out;
  KernelFacts facts(kernel);
  // Names of the stacks and loops only (the reports' and messages').
  std::unordered_set<const Value *> named(facts.allocas.begin(), facts.allocas.end());
  for (const sizing::KernelFacts::LoopVar &var : facts.loops)
    named.insert(var.loop);
  auto namer = std::make_shared<const LazyValueNamer>(kernel, std::move(named));
  out.names_ = SizeExprNames::forKernel(kernel);
  out.names_.varName = [namer, vars = facts.loops](unsigned v) -> std::string {
    if (v >= vars.size())
      return fmt::format("%v{}", v);
    return vars[v].dim == 0 ? (*namer)[vars[v].loop]
                            : namer->get().bandIndex(*vars[v].loop, vars[v].dim);
  };
  static const StaticTiers::Ops none;
  StaticTiers tiers(kernel, facts, options, out.names_);
  std::vector<size_t> outside; // indices in out.stacks_ of the stacks tiers 1-2 cannot size
  for (AdStackAllocaStmt *a : facts.allocas) {
    AdStackSize r;
    r.stack = a;
    r.namer = namer;
    auto opsIt = facts.ops.find(a);
    const StaticTiers::Ops &ops = opsIt == facts.ops.end() ? none : opsIt->second;
    if (tiers.size(*a, ops, r)) {
      r.exact = r.exact || provablyTight(facts, r, ops);
    } else {
      // Measured at launch, or tier 3: decided below for all of them at once.
      r.tier = SizingTier::Default;
      r.method = SizingMethod::Default;
      r.capacity = options.defaultCapacity;
      outside.push_back(out.stacks_.size());
    }
    out.stacks_.push_back(std::move(r));
  }
  if (options.work)
    options.work->pathNodes += tiers.pathNodes();
  std::vector<size_t> loose = looseBounds(out.stacks_, options);
  if (outside.empty() && loose.empty())
    return out;
  Measurement m = measure(kernel, options, *namer, outside, loose, out.stacks_);
  AdStackCounting &counting = m.counting;
  out.countKernel_ = counting.kernel;
  out.numCounted_ = static_cast<int>(counting.counted.size());
  out.countShadowFields_ = counting.shadowFields;
  out.countShadowArgs_ = counting.shadowArgs;
  out.countBoundArgs_ = counting.boundArgs;
  if (m.optimistic.ok())
    out.optimistic_ = std::make_shared<const OptimisticLaunch>(*std::move(m.optimistic));
  else if (counting.kernel)
    out.optimisticRefusal_ = std::string(m.optimistic.status().message());
  out.warnings_ = outsideWarnings(kernel, options, counting, outside, out.stacks_);
  return out;
}

} // namespace qd
