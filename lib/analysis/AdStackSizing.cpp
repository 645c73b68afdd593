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

} // namespace

KernelSizing sizeAdStacks(const Kernel &kernel, const SizingOptions &options) {
  KernelSizing out;
  // Most kernels (every forward kernel) have no stacks: one walk that
  // allocates nothing says so, before the facts map every statement.
  bool anyStack = false;
  walk(const_cast<Kernel &>(kernel).body(),
       [&](Stmt &s) { anyStack |= s.kind() == StmtKind::AdStackAlloca; });
  if (!anyStack)
    return out;
  KernelFacts facts(kernel);
  // Names of the stacks and loops only (the reports' and messages').
  std::unordered_set<const Value *> named(facts.allocas.begin(), facts.allocas.end());
  for (const sizing::KernelFacts::LoopVar &var : facts.loops)
    named.insert(var.loop);
  LazyValueNamer namer(kernel, std::move(named));
  out.names_ = SizeExprNames::forKernel(kernel);
  for (const sizing::KernelFacts::LoopVar &var : facts.loops)
    out.varNames_.push_back(var.dim == 0 ? namer[var.loop]
                                         : namer.get().bandIndex(*var.loop, var.dim));
  out.names_.varName = [names = out.varNames_](unsigned v) {
    return v < names.size() ? names[v] : fmt::format("%v{}", v);
  };
  std::unordered_map<const Value *, E> constCache, symCache;
  std::unordered_map<const Value *, std::string> constErrors, symErrors;
  StructuralSizer::TripCache trips;
  std::optional<ControlFlowGraph> cfg;
  PathScratch pathScratch;
  static const std::vector<AdStackOpStmt *> none;
  std::vector<size_t> outside; // indices in out.stacks_ of the stacks tiers 1-2 cannot size

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
    if (Value *arg = a->capacityArgument()) {
      r.tier = SizingTier::LaunchTime;
      r.method = SizingMethod::Declared;
      r.expr = SizeExpr::scalarArg(cast<Argument>(arg)->index());
      r.exact = false;
      out.stacks_.push_back(std::move(r));
      continue;
    }
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
    // Tier 1b: Bellman-Ford on the CFG, unless a loop's cycle is sure to
    // push more than it pops (a taped loop of a gradient).
    bool cyclePushes = options.bellmanFord && pushesInLoopWithoutPop(facts, *a, ops);
    if (cyclePushes && options.work)
      ++options.work->pathSkips;
    if (options.bellmanFord && !cyclePushes) {
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
      StructuralSizer s(facts, /*symbolic=*/true, symCache, symErrors, &trips);
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
    // Measured at launch, or tier 3: decided below for all of them at once.
    r.tier = SizingTier::Default;
    r.method = SizingMethod::Default;
    r.capacity = options.defaultCapacity;
    r.reason = reason;
    outside.push_back(out.stacks_.size());
    out.stacks_.push_back(std::move(r));
  }
  if (options.work)
    options.work->pathNodes += pathScratch.nodes;
  // Upper bounds worth refining: a loose bound above 1.
  std::vector<size_t> loose;
  if (options.refineUpperBounds && options.countKernels)
    for (size_t i = 0; i < out.stacks_.size(); ++i) {
      const AdStackSize &r = out.stacks_[i];
      if (!r.exact && r.method != SizingMethod::Declared &&
          ((r.tier == SizingTier::Constant && r.capacity > 1) || r.tier == SizingTier::LaunchTime))
        loose.push_back(i);
    }
  if (outside.empty() && loose.empty())
    return out;
  auto stacksOf = [&](const std::vector<size_t> &indices) {
    std::vector<const AdStackAllocaStmt *> v;
    for (size_t i : indices)
      v.push_back(out.stacks_[i].stack);
    return v;
  };
  auto optimisticOf = [&](const AdStackCounting &c) -> absl::StatusOr<OptimisticLaunch> {
    if (!c.kernel)
      return absl::FailedPreconditionError("");
    if (!options.optimisticLaunch)
      return absl::FailedPreconditionError(""); // (off: no reason to report)
    return buildAdStackOptimistic(kernel, c.counted);
  };
  // The stacks outside the grammar, with the loose ones where the kernel
  // then has an optimistic launch: its steady state measures them at the
  // price of the try kernel's counters, where counting them would run their
  // loops once more at every launch. Otherwise the loose ones keep their
  // bounds.
  std::vector<size_t> measured = outside;
  AdStackCounting counting;
  absl::StatusOr<OptimisticLaunch> optimistic = absl::FailedPreconditionError("");
  std::vector<size_t> all = outside;
  all.insert(all.end(), loose.begin(), loose.end());
  std::sort(all.begin(), all.end());
  // (The counting kernel of all of them serves only their optimistic
  // launch: where there can be none, it is not built.)
  if (options.countKernels && !loose.empty() && options.optimisticLaunch &&
      variants::mayLaunchOptimistically(kernel, stacksOf(all), namer)) {
    counting = buildAdStackCounting(kernel, stacksOf(all));
    optimistic = optimisticOf(counting);
    if (optimistic.ok())
      measured = std::move(all);
    else
      counting = AdStackCounting();
  }
  if (options.countKernels && !counting.kernel && !outside.empty()) {
    counting = buildAdStackCounting(kernel, stacksOf(outside));
    optimistic = optimisticOf(counting);
  }
  std::unordered_map<const AdStackAllocaStmt *, int> slotOf;
  for (size_t slot = 0; slot < counting.counted.size(); ++slot)
    slotOf[counting.counted[slot]] = static_cast<int>(slot);
  for (size_t i : measured)
    if (AdStackSize &r = out.stacks_[i]; slotOf.count(r.stack)) {
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
  out.countKernel_ = counting.kernel;
  out.numCounted_ = static_cast<int>(counting.counted.size());
  out.countShadowFields_ = counting.shadowFields;
  out.countShadowArgs_ = counting.shadowArgs;
  out.countBoundArgs_ = counting.boundArgs;
  if (optimistic.ok())
    out.optimistic_ = std::make_shared<const OptimisticLaunch>(*std::move(optimistic));
  else if (counting.kernel)
    out.optimisticRefusal_ = std::string(optimistic.status().message());
  for (size_t i : outside) {
    AdStackSize &r = out.stacks_[i];
    if (r.tier == SizingTier::Measured) {
      if (counting.boundArgs[r.countSlot] >= 0)
        r.reason += "; its pushes depend on its own values, so the counting kernel keeps it "
                    "with a bound, and runs again with a larger one where the need exceeds it";
      out.warnings_.push_back(fmt::format(
          "{}: note: adstack {} in kernel @{} is outside the sizing grammar ({}); its need is "
          "measured before each launch by the counting kernel @{}, which runs the loops that "
          "decide its depth once more",
          r.stack->loc().str(), r.name, kernel.name(), r.reason, counting.kernel->name()));
      continue;
    }
    out.warnings_.push_back(fmt::format(
        "{}: warning: adstack {} in kernel @{} is outside the sizing grammar ({}); it "
        "gets the default capacity {}, and a launch that pushes more fails with an "
        "overflow error. Give it an explicit capacity or bound its loops with "
        "arguments, fields or ndarray data the kernel does not write",
        r.stack->loc().str(), r.name, kernel.name(), r.reason, options.defaultCapacity));
  }
  return out;
}

} // namespace qd
