//===- GpuCooperative.cpp - A group of threads per task iteration ---------===//
//
// The GPU targets' code for a cooperative task (qd/analysis/CooperativeTask.h):
//
//   for (i = begin + group; i < end; i += groups) {
//     <the task's statements; global stores and atomics on the group's
//      first thread, fenced ones between two group barriers>
//     barrier
//     s0 = sum; sum = 0                       (each local the loop adds into;
//                                              for each shared loop)
//     for (j = lo + lane; j < hi; j += size)  <the loop's body>
//     sum = s0 + groupSum(sum)                (the same on every thread)
//     barrier
//     <the rest of the task's statements>
//   }
//
// groupSum stores each thread's partial sum into group-shared memory
// (kCooperativeScratch, one 8-byte slot per thread) and halves the active
// threads each round, every round a barrier, until slot 0 holds the sum.
//
//===----------------------------------------------------------------------===//
#include "GpuTarget.h"
#include "qd/codegen/CooperativeLayout.h"

#include "qd/ir/Casting.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>

namespace qd::codegen {
namespace {

/// Group-shared memory (address space 3 on both targets).
constexpr unsigned kGroupShared = 3;
/// Most threads a group may have (CUDA's and HIP's block limit).
constexpr uint64_t kMostGroupThreads = 1024;
constexpr const char *kCooperativeScratch = "qd_cooperative_scratch";

llvm::GlobalVariable *scratch(EmitContext &c) {
  if (llvm::GlobalVariable *g = c.module->getNamedGlobal(kCooperativeScratch))
    return g;
  auto *type = llvm::ArrayType::get(c.i64, kMostGroupThreads);
  auto *g = new llvm::GlobalVariable(*c.module, type, false, llvm::GlobalValue::InternalLinkage,
                                     llvm::PoisonValue::get(type), kCooperativeScratch, nullptr,
                                     llvm::GlobalValue::NotThreadLocal, kGroupShared);
  g->setAlignment(llvm::Align(8));
  return g;
}

} // namespace

CooperativeTaskPlan GpuTarget::planCooperative(const EmitContext &c, const ForStmt &task) const {
  // A thread that leaves early (an error check) would leave its group
  // waiting at the next barrier.
  if (c.opts.boundsChecked || c.opts.stopChecks || c.opts.cooperativeTaskIterations <= 0)
    return {};
  CooperativeTaskOptions o;
  o.mostTaskIterations = c.opts.cooperativeTaskIterations;
  o.runTimeTrips = true;
  o.mostScatteringIterations = c.opts.cooperativeScatteringIterations;
  o.aliasing = ndarrayAliasing(c.opts.distinctNdarrays);
  return planCooperativeTask(task, o);
}

void GpuTarget::emitCooperativeTask(KernelEmitter &e, ForStmt &task,
                                    const CooperativeTaskPlan &plan, bool alternative) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  FunctionState state;
  TaskVectorPlan vectorPlan; // its private atomics
  if (alternative) {
    // The task's second form, next to its one-iteration-per-thread entry.
    KernelLayout::Launch &l = c.layout.launches.back();
    addCooperativeForm(l, plan);
    beginTask(e, task, state, vectorPlan, &l.cooperativeFunction);
  } else {
    beginTask(e, task, state, vectorPlan);
    KernelLayout::Task t{&task, 1, "", KernelEmitter::taskBound(task.begin()),
                         KernelEmitter::taskBound(task.end())};
    t.cooperative = true;
    c.layout.tasks.push_back(t);
  }
  state.cooperative = &plan;
  llvm::IRBuilder<> eb = c.entryBuilder();
  GroupIds ids = groupIds(c, eb);
  ids.groups = groupCount(c, eb, ids);
  state.leader = eb.CreateICmpEQ(ids.lane, eb.getInt32(0), "leader");
  LV *begin = b.CreateSExt(c.boundValue(task.begin()), c.i64);
  LV *end = b.CreateSExt(c.boundValue(task.end()), c.i64);
  e.control().countedLoop(
      b.CreateAdd(begin, b.CreateZExt(ids.group, c.i64)), end, c.i64, &task,
      [&](LV *i) {
        c.set(&task, b.CreateTrunc(i, c.i32));
        for (Stmt &s : task.body()) {
          if (const CooperativeTaskPlan::SharedLoop *shared = plan.shared(&s)) {
            emitSharedLoop(e, *shared, ids);
          } else if (plan.fenced.count(&s)) {
            groupBarrier(c); // every thread has read what it overwrites
            e.emitStatement(s);
            groupBarrier(c); // every thread sees what it wrote
          } else {
            e.emitStatement(s);
          }
          if (b.GetInsertBlock()->getTerminator())
            break; // after a continue
        }
      },
      b.CreateZExt(ids.groups, c.i64));
  b.CreateRetVoid();
  e.finishFunction();
  c.fn = nullptr;
}

void GpuTarget::emitSharedLoop(KernelEmitter &e, const CooperativeTaskPlan::SharedLoop &plan,
                               const GroupIds &ids) {
  EmitContext &c = e.context();
  llvm::IRBuilder<> &b = c.b;
  auto &loop = const_cast<ForStmt &>(*plan.loop);
  // What the group's first thread stored before is visible to all.
  groupBarrier(c);
  std::vector<std::pair<llvm::AllocaInst *, LV *>> before;
  for (const AllocaStmt *sum : plan.sums) {
    auto *slot = llvm::cast<llvm::AllocaInst>(c.get(sum));
    llvm::Type *t = slot->getAllocatedType();
    before.push_back({slot, b.CreateLoad(t, slot)});
    b.CreateStore(t->isFloatingPointTy() ? llvm::ConstantFP::getNegativeZero(t)
                                         : llvm::ConstantInt::get(t, 0),
                  slot);
  }
  LV *lo = b.CreateSExt(c.boundValue(loop.begin()), c.i64);
  LV *hi = b.CreateSExt(c.boundValue(loop.end()), c.i64);
  e.control().countedLoop(
      b.CreateAdd(lo, b.CreateZExt(ids.lane, c.i64)), hi, c.i64, &loop,
      [&](LV *j) {
        c.set(&loop, b.CreateTrunc(j, c.i32));
        e.emitBlock(loop.body());
      },
      b.CreateZExt(ids.size, c.i64));
  for (size_t k = 0; k < plan.sums.size(); ++k) {
    auto [slot, start] = before[k];
    LV *partial = b.CreateLoad(slot->getAllocatedType(), slot);
    LV *total = groupSum(c, partial, plan.sums[k]->elementType(), ids);
    b.CreateStore(isFloat(plan.sums[k]->elementType()) ? b.CreateFAdd(start, total)
                                                       : b.CreateAdd(start, total),
                  slot);
  }
  // The loop's atomic updates are visible to every thread after it.
  groupBarrier(c);
}

LV *GpuTarget::groupSum(EmitContext &c, LV *partial, ScalarType type, const GroupIds &ids) {
  llvm::IRBuilder<> &b = c.b;
  llvm::GlobalVariable *buf = scratch(c);
  auto slot = [&](LV *k) {
    return b.CreateInBoundsGEP(buf->getValueType(), buf, {b.getInt32(0), k});
  };
  llvm::Type *t = partial->getType();
  auto add = [&](LV *x, LV *y) { return isFloat(type) ? b.CreateFAdd(x, y) : b.CreateAdd(x, y); };
  b.CreateStore(partial, slot(ids.lane));
  groupBarrier(c);
  // Rounds of half the power of two at or above the group's size, halved.
  LV *ceil = b.CreateShl(
      b.getInt32(1),
      b.CreateSub(b.getInt32(32),
                  b.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz,
                                          b.CreateSub(ids.size, b.getInt32(1)), b.getFalse())));
  llvm::AllocaInst *stride = c.entryAlloca(c.i32, "group.sum.stride");
  b.CreateStore(b.CreateLShr(ceil, b.getInt32(1)), stride);
  BasicBlock *header = c.newBlock("group.sum.header"), *round = c.newBlock("group.sum.round");
  BasicBlock *adds = c.newBlock("group.sum.add"), *next = c.newBlock("group.sum.next");
  BasicBlock *done = c.newBlock("group.sum.done");
  b.CreateBr(header);
  b.SetInsertPoint(header);
  LV *s = b.CreateLoad(c.i32, stride);
  b.CreateCondBr(b.CreateICmpUGT(s, b.getInt32(0)), round, done);
  b.SetInsertPoint(round);
  LV *other = b.CreateAdd(ids.lane, s);
  b.CreateCondBr(b.CreateAnd(b.CreateICmpULT(ids.lane, s), b.CreateICmpULT(other, ids.size)), adds,
                 next);
  b.SetInsertPoint(adds);
  b.CreateStore(add(b.CreateLoad(t, slot(ids.lane)), b.CreateLoad(t, slot(other))), slot(ids.lane));
  b.CreateBr(next);
  b.SetInsertPoint(next);
  groupBarrier(c);
  b.CreateStore(b.CreateLShr(s, b.getInt32(1)), stride);
  b.CreateBr(header);
  b.SetInsertPoint(done);
  LV *total = b.CreateLoad(t, slot(b.getInt32(0)));
  groupBarrier(c); // before the slots are used again
  return total;
}

} // namespace qd::codegen
