//===- PromoteLocals.cpp - Locals to SSA values in linear time ------------===//
//
// The emitter keeps every qd local in an entry-block alloca. LLVM's
// mem2reg (inside SROA) promotes them, but to learn whether a block that
// both loads and stores a local reads it before writing it, it scans the
// block from its first instruction for every such local: a loop body that
// carries N locals costs O(N^2) (0.8 s of the 8 s compile of the loop
// carrying 500 values, 4.5 s at 1000; docs/performance.md, "Compile
// time").
//
// This promotion visits every instruction once: one walk records each
// local's loads and stores per block in order; then, per local, a load
// after a store in its block takes the stored value and the others take
// the value live into their block from llvm::SSAUpdater, which places the
// phis. A load that no store reaches reads undef, as with mem2reg.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/Optimize.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/Transforms/Utils/SSAUpdater.h>

#include <vector>

namespace qd {
namespace {

/// A local the walk can promote: a fixed-size entry-block alloca used only
/// by simple loads and stores of its own type through its own address.
bool promotable(const llvm::AllocaInst &a) {
  if (!a.isStaticAlloca() || a.isArrayAllocation())
    return false;
  llvm::Type *t = a.getAllocatedType();
  for (const llvm::Use &u : a.uses()) {
    const llvm::User *user = u.getUser();
    if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(user)) {
      if (!ld->isSimple() || ld->getType() != t)
        return false;
    } else if (auto *st = llvm::dyn_cast<llvm::StoreInst>(user)) {
      if (!st->isSimple() || u.getOperandNo() != st->getPointerOperandIndex() ||
          st->getValueOperand()->getType() != t)
        return false;
    } else {
      return false;
    }
  }
  return true;
}

struct Local {
  llvm::AllocaInst *slot;
  /// Loads and stores in walk order: grouped by block, in block order.
  std::vector<llvm::Instruction *> accesses;
};

void promote(Local &local) {
  llvm::AllocaInst *slot = local.slot;
  llvm::Type *t = slot->getAllocatedType();
  llvm::BasicBlock *entry = &slot->getFunction()->getEntryBlock();
  llvm::Value *undef = llvm::UndefValue::get(t);
  llvm::SSAUpdater ssa;
  ssa.Initialize(t, slot->getName());
  // A load after a store in its block reads that store's value; the
  // others read the value live into their block.
  llvm::DenseMap<llvm::LoadInst *, llvm::Value *> value;
  llvm::SmallVector<llvm::LoadInst *, 8> liveIn;
  auto resolve = [&](llvm::Value *v) {
    // A stored value may be a load of this local already forwarded.
    for (auto *ld = llvm::dyn_cast<llvm::LoadInst>(v); ld; ld = llvm::dyn_cast<llvm::LoadInst>(v)) {
      auto it = value.find(ld);
      if (it == value.end())
        break;
      v = it->second;
    }
    return v;
  };
  auto &acc = local.accesses;
  for (size_t i = 0; i < acc.size();) {
    llvm::BasicBlock *bb = acc[i]->getParent();
    llvm::Value *current = nullptr;
    for (; i < acc.size() && acc[i]->getParent() == bb; ++i) {
      if (auto *st = llvm::dyn_cast<llvm::StoreInst>(acc[i]))
        current = resolve(st->getValueOperand());
      else if (current)
        value[llvm::cast<llvm::LoadInst>(acc[i])] = current;
      else if (bb == entry)
        value[llvm::cast<llvm::LoadInst>(acc[i])] = undef;
      else
        liveIn.push_back(llvm::cast<llvm::LoadInst>(acc[i]));
    }
    if (current)
      ssa.AddAvailableValue(bb, current);
  }
  if (!ssa.HasValueForBlock(entry))
    ssa.AddAvailableValue(entry, undef);
  // Every live-in value first: the updater's answers may name loads of
  // this local (a stored value that was itself live in), which stay in
  // place until every answer is known.
  std::vector<llvm::Value *> incoming;
  incoming.reserve(liveIn.size());
  for (llvm::LoadInst *ld : liveIn)
    incoming.push_back(ssa.GetValueInMiddleOfBlock(ld->getParent()));
  for (size_t k = 0; k < liveIn.size(); ++k)
    value[liveIn[k]] = incoming[k];
  // Final values: never a load of this local. A cycle of loads only
  // reading each other is code no store reaches: undef.
  auto final = [&](llvm::LoadInst *ld) {
    llvm::Value *v = ld;
    for (size_t steps = 0; steps <= value.size(); ++steps) {
      auto *l = llvm::dyn_cast<llvm::LoadInst>(v);
      auto it = l ? value.find(l) : value.end();
      if (it == value.end())
        return v;
      v = it->second;
    }
    return undef;
  };
  llvm::SmallVector<std::pair<llvm::LoadInst *, llvm::Value *>, 16> replacements;
  for (llvm::Instruction *i : acc)
    if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(i))
      replacements.push_back({ld, final(ld)});
  for (auto [ld, v] : replacements)
    ld->replaceAllUsesWith(v);
  for (llvm::Instruction *i : acc)
    i->eraseFromParent();
  slot->eraseFromParent();
}

} // namespace

size_t promoteLocals(llvm::Function &f) {
  if (f.isDeclaration())
    return 0;
  llvm::DenseMap<llvm::AllocaInst *, unsigned> index;
  std::vector<Local> locals;
  for (llvm::Instruction &i : f.getEntryBlock())
    if (auto *a = llvm::dyn_cast<llvm::AllocaInst>(&i); a && promotable(*a)) {
      index[a] = static_cast<unsigned>(locals.size());
      locals.push_back({a, {}});
    }
  if (locals.empty())
    return 0;
  for (llvm::BasicBlock &bb : f)
    for (llvm::Instruction &i : bb) {
      llvm::Value *ptr = nullptr;
      if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(&i))
        ptr = ld->getPointerOperand();
      else if (auto *st = llvm::dyn_cast<llvm::StoreInst>(&i))
        ptr = st->getPointerOperand();
      auto *a = llvm::dyn_cast_or_null<llvm::AllocaInst>(ptr);
      if (!a)
        continue;
      if (auto it = index.find(a); it != index.end())
        locals[it->second].accesses.push_back(&i);
    }
  for (Local &local : locals)
    promote(local);
  return locals.size();
}

} // namespace qd
