//===- SpirvCooperative.cpp - A workgroup per task iteration --------------===//
//
// SPIR-V's cooperative tasks (qd/analysis/CooperativeTask.h; the LLVM GPU
// targets do the same with blocks in GpuCooperative.cpp). An entry of
// LocalSize G (SpirvOptions::cooperativeGroupSize) runs
//
//   for (i = begin + WorkgroupId; i < end; i += NumWorkgroups) {
//     <the task's statements; global stores and atomics on the workgroup's
//      first invocation, fenced ones between two barriers>
//     barrier
//     s0 = sum; sum = 0                       (each local the loop adds into)
//     for (j = lo + LocalInvocationId; j < hi; j += G)  <the loop's body>
//     sum = s0 + groupSum(sum)                (the same on every invocation)
//     barrier
//     <the rest>
//   }
//
// groupSum stores each invocation's partial sum into a Workgroup array of
// G elements and adds them in rounds of halving strides, a barrier after
// each (G is known here, so the rounds are straight-line code).
//
//===----------------------------------------------------------------------===//
#include "SpirvEmitter.h"
#include "qd/codegen/CooperativeLayout.h"

#include <fmt/format.h>

namespace qd::spirv {
namespace {

/// OpControlBarrier's semantics: acquire and release of the storage
/// buffers' and the Workgroup memory's writes.
constexpr uint32_t kBarrierSemantics = uint32_t(spv::MemorySemanticsMask::AcquireRelease) |
                                       uint32_t(spv::MemorySemanticsMask::UniformMemory) |
                                       uint32_t(spv::MemorySemanticsMask::WorkgroupMemory);

} // namespace

CooperativeTaskPlan SpirvEmitter::planCooperative(const ForStmt &task) const {
  // An invocation that leaves early (an error site) would leave its
  // workgroup waiting at the next barrier.
  if (opts_.boundsChecked || opts_.stopChecks || opts_.checkLoopExits ||
      opts_.cooperativeTaskIterations <= 0 || opts_.cooperativeGroupSize < 2 || task.numDims() != 1)
    return {};
  CooperativeTaskOptions o;
  o.mostTaskIterations = opts_.cooperativeTaskIterations;
  o.runTimeTrips = true;
  o.mostScatteringIterations = opts_.cooperativeScatteringIterations;
  o.aliasing = aliasing();
  return planCooperativeTask(task, o);
}

Id SpirvEmitter::builtIn(spv::BuiltIn which) {
  Id uvec3 = m_.typeVector(b_.tU32(), 3);
  Id &var = builtIns_[which];
  if (!var) {
    var = m_.globalVariable(m_.typePointer(spv::StorageClass::Input, uvec3),
                            spv::StorageClass::Input);
    m_.decorate(var, spv::Decoration::BuiltIn, {uint32_t(which)});
  }
  return inPrologue([&] {
    Id v = b_.load(uvec3, var);
    return b_.op(spv::Op::OpCompositeExtract, b_.tU32(), {v, 0});
  });
}

void SpirvEmitter::groupBarrier() {
  Id workgroup = b_.u32(uint32_t(spv::Scope::Workgroup));
  b_.inst(spv::Op::OpControlBarrier, {workgroup, workgroup, b_.u32(kBarrierSemantics)});
}

void SpirvEmitter::guarded(const Stmt &s, const std::function<void()> &emit) {
  if (!fn_ || !fn_->cooperative || !fn_->cooperative->guarded.count(&s))
    return emit();
  b_.ifThen(fn_->leader, emit);
}

void SpirvEmitter::emitCooperativeTask(ForStmt &task, const CooperativeTaskPlan &plan,
                                       bool alternative) {
  int index = int(layout_.tasks.size());
  std::string name = fmt::format("qd_task_{}", index);
  if (alternative) { // the task's second form: its launch exists already
    KernelLayout::Launch &l = layout_.launches.back();
    index = l.task;
    addCooperativeForm(l, plan);
    name = l.cooperativeFunction;
  } else {
    layout_.launches.push_back({KernelLayout::Launch::Parallel, name, index, "", 0});
    KernelLayout::Task t{&task, 1, "", taskBoundOf(task.begin()), taskBoundOf(task.end())};
    t.cooperative = true;
    layout_.tasks.push_back(t);
  }
  Function fn;
  beginTask(fn, name, task, index);
  fn.groupSize = opts_.cooperativeGroupSize;
  fn.cooperative = &plan;
  fn.lane = builtIn(spv::BuiltIn::LocalInvocationId);
  fn.leader = inPrologue([&] { return b_.cmp(spv::Op::OpIEqual, fn.lane, b_.u32(0)); });
  Id group = builtIn(spv::BuiltIn::WorkgroupId);
  Id groups = builtIn(spv::BuiltIn::NumWorkgroups);
  Id i32 = b_.tI32();
  Id first = b_.iadd(i32, boundValue(task.begin()), b_.bitcast(i32, group));
  countedLoop(&task, first, boundValue(task.end()), b_.bitcast(i32, groups), [&](Id i) {
    set(&task, i);
    for (Stmt &s : task.body()) {
      if (!b_.open)
        break; // after a continue
      if (const CooperativeTaskPlan::SharedLoop *shared = plan.shared(&s)) {
        emitSharedLoop(*shared);
      } else if (plan.fenced.count(&s)) {
        groupBarrier(); // every invocation has read what it overwrites
        visit(s);
        groupBarrier(); // every invocation sees what it wrote
      } else {
        visit(s);
      }
    }
  });
  endFunction(fn, name);
}

void SpirvEmitter::emitSharedLoop(const CooperativeTaskPlan::SharedLoop &shared) {
  auto &loopStmt = const_cast<ForStmt &>(*shared.loop);
  // What the first invocation stored before is visible to all.
  groupBarrier();
  std::vector<std::pair<Id, Id>> before; // a sum's variable, its value before
  for (const AllocaStmt *sum : shared.sums) {
    ScalarType t = sum->elementType();
    Id var = fn_->locals.at(sum);
    before.push_back({var, b_.load(b_.typeOf(t), var)});
    b_.store(var, isFloat(t) ? m_.constFloat(t == ScalarType::F32 ? 32 : 64, -0.0) : zeroOf(t));
  }
  Id i32 = b_.tI32();
  Id first = b_.iadd(i32, boundValue(loopStmt.begin()), b_.bitcast(i32, fn_->lane));
  countedLoop(&loopStmt, first, boundValue(loopStmt.end()), m_.constI32(int32_t(fn_->groupSize)),
              [&](Id j) {
                set(&loopStmt, j);
                emitBlock(loopStmt.body());
              });
  for (size_t k = 0; k < shared.sums.size(); ++k) {
    ScalarType t = shared.sums[k]->elementType();
    auto [var, start] = before[k];
    Id type = b_.typeOf(t);
    Id total = groupSum(b_.load(type, var), t);
    b_.store(var, isFloat(t) ? b_.fadd(type, start, total) : b_.iadd(type, start, total));
  }
  // The loop's atomic updates are visible to every invocation after it.
  groupBarrier();
}

Id SpirvEmitter::groupSum(Id partial, ScalarType t) {
  Id type = b_.typeOf(t), u32 = b_.tU32();
  const unsigned size = fn_->groupSize;
  Id &scratch = groupScratch_[t];
  if (!scratch) {
    Id array = m_.typeArray(type, b_.u32(opts_.cooperativeGroupSize));
    scratch = m_.globalVariable(m_.typePointer(spv::StorageClass::Workgroup, array),
                                spv::StorageClass::Workgroup);
    m_.name(scratch, fmt::format("cooperative_sums_{}", toString(t)));
  }
  Id pointer = m_.typePointer(spv::StorageClass::Workgroup, type);
  auto slot = [&](Id index) { return b_.op(spv::Op::OpAccessChain, pointer, {scratch, index}); };
  b_.store(slot(fn_->lane), partial);
  groupBarrier();
  unsigned rounded = 1;
  while (rounded < size)
    rounded *= 2;
  for (unsigned stride = rounded / 2; stride > 0; stride /= 2) {
    Id other = b_.iadd(u32, fn_->lane, b_.u32(stride));
    Id adds = b_.land(b_.cmp(spv::Op::OpULessThan, fn_->lane, b_.u32(stride)),
                      b_.cmp(spv::Op::OpULessThan, other, b_.u32(size)));
    b_.ifThen(adds, [&] {
      Id mine = b_.load(type, slot(fn_->lane)), theirs = b_.load(type, slot(other));
      b_.store(slot(fn_->lane),
               isFloat(t) ? b_.fadd(type, mine, theirs) : b_.iadd(type, mine, theirs));
    });
    groupBarrier();
  }
  Id total = b_.load(type, slot(b_.u32(0)));
  groupBarrier(); // before the slots are used again
  return total;
}

} // namespace qd::spirv
