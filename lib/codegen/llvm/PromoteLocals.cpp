//===- PromoteLocals.cpp - Locals to SSA values without rescanning -------===//
//
// The emitter keeps every qd local in an entry-block alloca. LLVM's
// mem2reg (inside SROA) promotes them, but to learn whether a block that
// both loads and stores a local reads it before writing it, it scans the
// block from its first instruction for every such local: a loop body that
// carries N locals costs O(N^2) (0.8 s of the 8 s compile of the loop
// carrying 500 values, 4.5 s at 1000; docs/performance.md, "Compile
// time").
//
// This promotion visits every instruction once, for all locals together
// (promoteAll says how), and leaves only the values that cross into blocks
// with several predecessors to llvm::SSAUpdater, which places the phis. A
// load that no store reaches reads undef, as with mem2reg. What still grows
// faster than the function: SSAUpdater walks up a loop nest once per local
// read deep inside and stored outside (0.36 s for the gradient of a
// 254-deep nest, the IR's limit is 256).
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/Optimize.h"

#include <llvm/ADT/BitVector.h>
#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/DenseSet.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/Transforms/Utils/SSAUpdater.h>

#include <memory>
#include <optional>
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
  llvm::AllocaInst *slot = nullptr;
  llvm::Value *undef = nullptr;
  /// Built when a value of the local first crosses into a root.
  std::unique_ptr<llvm::SSAUpdater> ssa;
  /// The value on the walk's current path (null: none stored yet).
  llvm::Value *current = nullptr;
  /// Loads no store on their path reaches, with the root of their tree.
  std::vector<std::pair<llvm::LoadInst *, llvm::BasicBlock *>> liveIn;
  std::vector<llvm::Instruction *> accesses;

  llvm::SSAUpdater &updater() {
    if (!ssa) {
      ssa = std::make_unique<llvm::SSAUpdater>();
      ssa->Initialize(slot->getAllocatedType(), slot->getName());
    }
    return *ssa;
  }
};

/// Promotes every local of `locals` in `f` at once.
///
/// Blocks with one predecessor hang off it, so the function is a forest of
/// trees of blocks (extended basic blocks) whose roots are the blocks with
/// several predecessors or none: along a tree's paths a value flows as
/// within one block. One walk over every tree, with each local's current
/// value on the path, forwards stored values to loads; only the values at
/// the ends of trees (blocks that branch to a root) reach SSAUpdater, which
/// places the phis at the roots. Asking SSAUpdater block by block instead
/// walked back along every chain of blocks (the emitter makes one block per
/// adstack check): quadratic in a loop body that pops many stacks.
void promoteAll(llvm::Function &f, std::vector<Local> &locals,
                const llvm::DenseMap<llvm::AllocaInst *, unsigned> &index) {
  llvm::DenseMap<llvm::BasicBlock *, std::vector<llvm::BasicBlock *>> children;
  std::vector<llvm::BasicBlock *> roots;
  llvm::DenseSet<llvm::BasicBlock *> rootSet;
  for (llvm::BasicBlock &bb : f) {
    llvm::BasicBlock *pred = bb.getSinglePredecessor();
    if (!pred || pred == &bb)
      roots.push_back(&bb);
    else
      children[pred].push_back(&bb);
  }
  // Blocks a root does not reach (a cycle of single-predecessor blocks
  // nothing enters) become roots of their own after the others.
  for (llvm::BasicBlock &bb : f)
    roots.push_back(&bb);
  std::vector<llvm::BasicBlock *> trees; // their roots
  llvm::DenseMap<llvm::BasicBlock *, unsigned> treeOf;
  for (llvm::BasicBlock *root : roots) {
    if (!treeOf.try_emplace(root, static_cast<unsigned>(trees.size())).second)
      continue;
    rootSet.insert(root);
    std::vector<llvm::BasicBlock *> work{root};
    while (!work.empty()) {
      llvm::BasicBlock *bb = work.back();
      work.pop_back();
      if (auto kids = children.find(bb); kids != children.end())
        for (llvm::BasicBlock *child : kids->second)
          if (treeOf.try_emplace(child, static_cast<unsigned>(trees.size())).second)
            work.push_back(child);
    }
    trees.push_back(root);
  }
  // needed[t]: the locals whose value entering tree t may be read, in it
  // or in a tree after it. The end of a tree hands on only those: every
  // error site of a chain of adstack checks ends a tree, and handing on
  // every value stored since the chain's root made the walk quadratic.
  size_t n = locals.size();
  std::vector<llvm::BitVector> needed(trees.size(), llvm::BitVector(n));
  std::vector<std::vector<unsigned>> next(trees.size());
  for (llvm::BasicBlock &bb : f) {
    unsigned t = treeOf.lookup(&bb);
    for (llvm::Instruction &i : bb)
      if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(&i))
        if (auto it = index.find(llvm::dyn_cast<llvm::AllocaInst>(ld->getPointerOperand()));
            it != index.end())
          needed[t].set(it->second);
    for (llvm::BasicBlock *succ : llvm::successors(&bb))
      if (rootSet.count(succ))
        next[t].push_back(treeOf.lookup(succ));
  }
  // A worklist: a tree is revisited only when a tree it branches to grew
  // (sweeping every tree until nothing changed took a sweep per loop level
  // of a nest: cubic in a deep one).
  std::vector<std::vector<unsigned>> prev(trees.size());
  for (unsigned t = 0; t < trees.size(); ++t)
    for (unsigned s : next[t])
      prev[s].push_back(t);
  std::vector<unsigned> work(trees.size());
  std::vector<char> queued(trees.size(), 1);
  for (unsigned t = 0; t < trees.size(); ++t)
    work[t] = t;
  while (!work.empty()) {
    unsigned s = work.back();
    work.pop_back();
    queued[s] = 0;
    for (unsigned t : prev[s]) {
      size_t before = needed[t].count();
      needed[t] |= needed[s];
      if (needed[t].count() != before && !queued[t]) {
        queued[t] = 1;
        work.push_back(t);
      }
    }
  }

  llvm::DenseMap<llvm::LoadInst *, llvm::Value *> value; // a load's replacement
  auto resolve = [&](llvm::Value *v) {
    // A stored value may be a load already forwarded.
    for (auto *ld = llvm::dyn_cast<llvm::LoadInst>(v); ld; ld = llvm::dyn_cast<llvm::LoadInst>(v)) {
      auto it = value.find(ld);
      if (it == value.end())
        break;
      v = it->second;
    }
    return v;
  };
  auto localOf = [&](llvm::Value *ptr) -> Local * {
    auto *a = llvm::dyn_cast<llvm::AllocaInst>(ptr);
    auto it = a ? index.find(a) : index.end();
    return it == index.end() ? nullptr : &locals[it->second];
  };

  llvm::SmallPtrSet<llvm::BasicBlock *, 32> visited;
  llvm::BasicBlock *entry = &f.getEntryBlock();
  struct Frame {
    llvm::BasicBlock *bb;
    size_t undoMark;
    size_t nextChild = 0;
  };
  std::vector<std::pair<Local *, llvm::Value *>> undo; // (local, value before)
  for (llvm::BasicBlock *root : trees) {
    if (!visited.insert(root).second)
      continue;
    std::vector<Frame> stack;
    auto enter = [&](llvm::BasicBlock *bb) {
      stack.push_back({bb, undo.size()});
      for (llvm::Instruction &i : *bb) {
        if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(&i)) {
          Local *l = localOf(ld->getPointerOperand());
          if (!l)
            continue;
          l->accesses.push_back(ld);
          if (l->current)
            value[ld] = l->current;
          else if (root == entry)
            value[ld] = l->undef;
          else
            l->liveIn.push_back({ld, root});
        } else if (auto *st = llvm::dyn_cast<llvm::StoreInst>(&i)) {
          Local *l = localOf(st->getPointerOperand());
          if (!l)
            continue;
          l->accesses.push_back(st);
          undo.push_back({l, l->current});
          l->current = resolve(st->getValueOperand());
        }
      }
      // The end of a tree: what the path stored reaches the roots it
      // branches to, for the locals read there or later.
      std::optional<llvm::BitVector> handed;
      for (llvm::BasicBlock *succ : llvm::successors(bb))
        if (rootSet.count(succ)) {
          if (!handed)
            handed.emplace(n);
          *handed |= needed[treeOf.lookup(succ)];
        }
      if (!handed)
        return;
      for (unsigned k : handed->set_bits())
        if (locals[k].current)
          locals[k].updater().AddAvailableValue(bb, locals[k].current);
    };
    enter(root);
    while (!stack.empty()) {
      Frame &top = stack.back();
      auto kids = children.find(top.bb);
      if (kids != children.end() && top.nextChild < kids->second.size()) {
        llvm::BasicBlock *child = kids->second[top.nextChild++];
        if (visited.insert(child).second)
          enter(child);
        continue;
      }
      for (size_t k = undo.size(); k-- > top.undoMark;)
        undo[k].first->current = undo[k].second;
      undo.resize(top.undoMark);
      stack.pop_back();
    }
  }

  // Values live into roots, every answer first: an answer may name a load
  // (a stored value that was itself live in), which stays in place until
  // every answer is known.
  for (Local &l : locals) {
    if (l.liveIn.empty())
      continue;
    llvm::SSAUpdater &ssa = l.updater();
    if (!ssa.HasValueForBlock(entry))
      ssa.AddAvailableValue(entry, l.undef);
    std::vector<llvm::Value *> incoming;
    incoming.reserve(l.liveIn.size());
    for (auto [ld, root] : l.liveIn)
      incoming.push_back(ssa.GetValueInMiddleOfBlock(root));
    for (size_t k = 0; k < l.liveIn.size(); ++k)
      value[l.liveIn[k].first] = incoming[k];
  }
  // Final values: never a load of a local. A cycle of loads only reading
  // each other is code no store reaches: undef.
  for (Local &l : locals) {
    for (llvm::Instruction *i : l.accesses) {
      auto *ld = llvm::dyn_cast<llvm::LoadInst>(i);
      if (!ld)
        continue;
      llvm::Value *v = ld;
      for (size_t steps = 0;; ++steps) {
        auto *from = llvm::dyn_cast<llvm::LoadInst>(v);
        auto it = from ? value.find(from) : value.end();
        if (it == value.end())
          break;
        v = steps > value.size() ? l.undef : it->second;
      }
      value[ld] = v;
    }
  }
  for (Local &l : locals)
    for (llvm::Instruction *i : l.accesses)
      if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(i))
        ld->replaceAllUsesWith(value[ld]);
  for (Local &l : locals) {
    for (llvm::Instruction *i : l.accesses)
      i->eraseFromParent();
    l.slot->eraseFromParent();
  }
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
      Local &l = locals.emplace_back();
      l.slot = a;
      l.undef = llvm::UndefValue::get(a->getAllocatedType());
    }
  if (!locals.empty())
    promoteAll(f, locals, index);
  return locals.size();
}

} // namespace qd
