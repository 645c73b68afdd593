//===- Checkpointing.cpp - Checkpointed loops of the gradient kernel ------===//
//
// A checkpointed range-for L (ReverseADOptions::checkpointLoops) reads the
// interval k from a field the runtime sets before each launch
// (qd/ir/Checkpointing.h). With trip count n:
//
//   forward:  Record(L) over [begin, begin + n * c)     c = 1 if k >= n, else 0
//             for s in [0, S): push the state; run [a_s, e_s) untaped
//   reverse:  Rev(L) over [begin, begin + n * c)
//             for s' in [0, S): s = S - 1 - s'
//               restore the state, pop it; Record(L) and Rev(L) over [a_s, e_s)
//
// with S = (n / k + min(n % k, 1)) * (1 - c) segments, a_s = begin + s * k
// and e_s = a_s + min(k, end - a_s). Exactly one of the two paths runs
// iterations. Both are written with bounds only (no branch), so that the
// sizing sees each stack's exact depth for the launch's k: the full tapes
// n * c, the stored states S, a segment's tapes the largest segment
// (docs/autodiff.md, "Checkpointing long loops").
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include "qd/ir/Checkpointing.h"
#include "qd/ir/Visitor.h"

namespace qd::reverse {

PrimalReplay::Segments PrimalReplay::segments(const ForStmt &loop, Frame &f, IRBuilder &b) {
  auto value = [&](Bound bd) {
    return bd.isConstant() ? b.i32(static_cast<int32_t>(bd.constant)) : bd.value;
  };
  Segments g{};
  g.begin = value(bound(loop.begin(), f, b));
  g.end = value(bound(loop.end(), f, b));
  g.interval = b.max(b.load(GlobalRef::ofField(plan_.checkpointInterval), {}), b.i32(1));
  Value *trip = b.max(b.sub(g.end, g.begin), b.i32(0));
  // c = 1 when k >= n: min(max(k - n, -1), 0) + 1 (k - n cannot overflow).
  Value *full = b.add(b.min(b.max(b.sub(g.interval, trip), b.i32(-1)), b.i32(0)), b.i32(1));
  g.fullEnd = b.add(g.begin, b.mul(trip, full));
  // ceil(n / k) without n + k - 1, which could overflow.
  Value *ceil = b.add(b.div(trip, g.interval), b.min(b.rem(trip, g.interval), b.i32(1)));
  g.count = b.mul(ceil, b.sub(b.i32(1), full));
  return g;
}

std::pair<Bound, Bound> PrimalReplay::segmentRange(const Segments &g, Value *s, IRBuilder &b) {
  Value *a = b.add(g.begin, b.mul(s, g.interval));
  return {Bound(a), Bound(b.add(a, b.min(g.interval, b.sub(g.end, a))))};
}

void PrimalReplay::recordCheckpointed(ForStmt &loop, IRBuilder &b, Frame &f) {
  const LoopPlan &plan = loopPlan(loop);
  Segments g = segments(loop, f, b);
  record(loop, b, f, std::pair<Bound, Bound>(Bound(g.begin), Bound(g.fullEnd)));
  std::vector<AdStackAllocaStmt *> &states = checkpoints_[&loop];
  states.clear();
  for (AllocaStmt *a : plan.checkpointState) {
    AdStackAllocaStmt *stack = atTop(f).adstackAlloca(a->elementType());
    stack->setLoc(loop.loc());
    stack->setName(std::string(kCheckpointStackName));
    states.push_back(stack);
  }
  auto outer = b.forRange(Bound(0), Bound(g.count));
  for (size_t i = 0; i < states.size(); ++i)
    b.adstackPush(states[i], b.load(primal(plan.checkpointState[i], f, b)));
  auto [lo, hi] = segmentRange(g, outer.index(), b);
  auto inner = b.forRange(lo, hi);
  ValueMap map;
  map[&loop] = inner.index();
  plain(loop.body(), b, f, map, /*taping=*/false);
}

void GradientBuilder::reverseCheckpointed(ForStmt &loop, IRBuilder &b, Frame &f) {
  const LoopPlan &plan = loopPlan(loop);
  Segments g = segments(loop, f, b);
  // The fully taped path first: the segments below record the loop again,
  // in frames of their own, and replace its stacks in the maps.
  reverseLoop(loop, b, f, std::pair<Bound, Bound>(Bound(g.begin), Bound(g.fullEnd)));
  std::vector<AdStackAllocaStmt *> states = checkpoints_.at(&loop);
  auto outer = b.forRange(Bound(0), Bound(g.count));
  Frame segment(&f, frames_);
  segment.block = &outer.stmt()->body();
  Value *s = b.sub(b.sub(g.count, b.i32(1)), outer.index());
  for (size_t i = 0; i < states.size(); ++i) {
    b.store(primal(plan.checkpointState[i], f, b), b.adstackLoadTop(states[i]));
    b.adstackPop(states[i]);
  }
  auto range = segmentRange(g, s, b);
  record(loop, b, segment, range);
  reverseLoop(loop, b, segment, range);
  // The tapes of one segment, allocated at the top of its frame.
  for (Stmt &t : *segment.block)
    if (auto *stack = dyn_cast<AdStackAllocaStmt>(&t))
      stack->setName(std::string(kSegmentStackName));
}

} // namespace qd::reverse
