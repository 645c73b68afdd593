//===- PromoteLocals.cpp - Locals to SSA values in time linear in the IR -===//
//
// The emitter keeps every qd local in an entry-block alloca. LLVM's
// mem2reg (inside SROA) promotes them, but it costs more than the function
// in two shapes qd makes: it rescans a block from its start for every local
// the block both reads and writes (quadratic in a loop body carrying N
// locals: 0.8 s of the 8 s compile at N = 500), and it computes each
// local's phis by walking the dominator subtree of every block that stores
// it (quadratic in a deep loop nest, where a frame's locals are stored above
// every loop nested in the frame: 0.24 s at depth 254, 5x per doubling).
//
// This promotion is the classic construction (Cytron et al.) with three
// choices that keep every step linear in the function and the phis it
// places:
//  - dominance frontiers are computed once for all blocks, walking up the
//    dominator tree from each predecessor of a join and stopping where the
//    join is already in the frontier, so each (block, join) pair costs once;
//  - phis are pruned by scope rather than liveness: a local's value before
//    the deepest store that dominates all its loads is dead (the emitter
//    initialises a qd local where it is declared, so that store starts the
//    local's block), so phis go only to joins that store strictly
//    dominates, and the placement never goes past a join it rejects: a
//    local of a loop body never looks at the loops around it. A local
//    without such a store gets the unpruned (minimal) placement;
//  - one walk of the dominator tree renames every local at once, keeping
//    each local's current value with an undo log.
// Phis no load needs and phis of one value are removed at the end. A load
// that no store reaches reads undef, as with mem2reg; code that the entry
// does not reach loses its accesses (loads read undef).
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/Optimize.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/DenseSet.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>

#include <algorithm>
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
  /// The value on the renaming walk's current path (null: none stored).
  llvm::Value *current = nullptr;
  /// The blocks that store it (each once).
  std::vector<unsigned> defBlocks;
  /// scopeOf: phis go only to joins this block strictly dominates (-1:
  /// anywhere, -2: nowhere).
  int scope = -1;
};

/// The function's blocks that the entry reaches, numbered in a preorder of
/// the dominator tree, with their dominance frontiers.
struct BlockGraph {
  llvm::DominatorTree dt;
  std::vector<llvm::BasicBlock *> blocks; // by number
  llvm::DenseMap<const llvm::BasicBlock *, unsigned> number;
  std::vector<unsigned> idom;          // by number; the entry's is itself
  std::vector<unsigned> dfsIn, dfsOut; // dominance in O(1)
  std::vector<llvm::SmallVector<unsigned, 2>> frontier;

  explicit BlockGraph(llvm::Function &f) : dt(f) {
    // Preorder of the dominator tree, without recursion (loop nests make
    // it as deep as the function is long).
    dfsIn.resize(f.size());
    dfsOut.resize(f.size());
    unsigned clock = 0;
    auto visit = [&](llvm::DomTreeNode *node) {
      unsigned n = static_cast<unsigned>(blocks.size());
      number[node->getBlock()] = n;
      blocks.push_back(node->getBlock());
      dfsIn[n] = clock++;
      return n;
    };
    struct Visit {
      llvm::DomTreeNode *node;
      unsigned n;
      unsigned nextChild = 0;
    };
    std::vector<Visit> stack{{dt.getRootNode(), visit(dt.getRootNode())}};
    while (!stack.empty()) {
      Visit &top = stack.back();
      if (top.nextChild < top.node->getNumChildren()) {
        llvm::DomTreeNode *child = top.node->begin()[top.nextChild++];
        stack.push_back({child, visit(child)});
        continue;
      }
      dfsOut[top.n] = clock++;
      stack.pop_back();
    }
    dfsIn.resize(blocks.size());
    dfsOut.resize(blocks.size());
    idom.resize(blocks.size());
    for (unsigned n = 0; n < blocks.size(); ++n) {
      llvm::DomTreeNode *up = dt.getNode(blocks[n])->getIDom();
      idom[n] = up ? number.lookup(up->getBlock()) : n;
    }
    // Frontiers: from each predecessor of a join up to the join's idom. A
    // block that already has the join got it from a walk that went on to
    // the idom, so the walk stops there.
    frontier.resize(blocks.size());
    for (unsigned j = 0; j < blocks.size(); ++j) {
      if (!blocks[j]->hasNPredecessorsOrMore(2))
        continue;
      for (llvm::BasicBlock *pred : llvm::predecessors(blocks[j])) {
        auto it = number.find(pred);
        if (it == number.end())
          continue; // the entry does not reach it
        for (unsigned runner = it->second; runner != idom[j]; runner = idom[runner]) {
          auto &df = frontier[runner];
          if (!df.empty() && df.back() == j)
            break;
          df.push_back(j);
          if (runner == idom[runner])
            break; // the entry (not reached: idom[j] is above every pred)
        }
      }
    }
  }

  bool reached(const llvm::BasicBlock *bb) const { return number.count(bb) != 0; }
  /// Whether block a strictly dominates block b.
  bool strictlyDominates(unsigned a, unsigned b) const {
    return a != b && dfsIn[a] < dfsIn[b] && dfsOut[b] < dfsOut[a];
  }
};

/// The block of the deepest store of `l` that dominates every load of it
/// (a load in its block comes after a store there), -1 where there is none,
/// and -2 where nothing reached loads it. Before that store, `l`'s value is
/// dead.
int scopeOf(const Local &l, const BlockGraph &g) {
  struct Firsts {
    llvm::Instruction *load = nullptr, *store = nullptr;
  };
  llvm::SmallDenseMap<unsigned, Firsts, 8> firsts;
  unsigned minIn = ~0u, maxOut = 0;
  bool anyLoad = false;
  for (llvm::User *u : l.slot->users()) {
    auto *i = llvm::cast<llvm::Instruction>(u);
    auto it = g.number.find(i->getParent());
    if (it == g.number.end())
      continue;
    Firsts &f = firsts[it->second];
    llvm::Instruction *&first = llvm::isa<llvm::LoadInst>(i) ? f.load : f.store;
    if (!first || i->comesBefore(first))
      first = i;
    if (llvm::isa<llvm::LoadInst>(i)) {
      anyLoad = true;
      minIn = std::min(minIn, g.dfsIn[it->second]);
      maxOut = std::max(maxOut, g.dfsOut[it->second]);
    }
  }
  if (!anyLoad)
    return -2;
  int best = -1;
  for (auto &[b, f] : firsts) {
    if (!f.store || (f.load && f.load->comesBefore(f.store)))
      continue;
    // Dominator-tree intervals nest, so containing the loads' extremes
    // is containing them all.
    if (g.dfsIn[b] <= minIn && maxOut <= g.dfsOut[b] &&
        (best < 0 || g.dfsIn[b] > g.dfsIn[static_cast<unsigned>(best)]))
      best = static_cast<int>(b);
  }
  return best;
}

/// Removes the phis of one value (besides themselves), which become that
/// value, and the phis that only dead phis use. Returns how many stay.
size_t removeUselessPhis(const std::vector<llvm::PHINode *> &phis) {
  llvm::DenseSet<llvm::PHINode *> alive(phis.begin(), phis.end());
  std::vector<llvm::PHINode *> work(phis.begin(), phis.end());
  while (!work.empty()) {
    llvm::PHINode *phi = work.back();
    work.pop_back();
    if (!alive.count(phi))
      continue;
    llvm::Value *same = nullptr;
    bool trivial = true;
    for (llvm::Value *in : phi->incoming_values()) {
      if (in == phi || in == same)
        continue;
      if (same) {
        trivial = false;
        break;
      }
      same = in;
    }
    if (!trivial)
      continue;
    for (llvm::User *u : phi->users())
      if (auto *user = llvm::dyn_cast<llvm::PHINode>(u); user && user != phi && alive.count(user))
        work.push_back(user);
    phi->replaceAllUsesWith(same ? same : llvm::UndefValue::get(phi->getType()));
    alive.erase(phi);
    phi->eraseFromParent();
  }
  // Live: used by something other than these phis, or by a live one.
  llvm::DenseSet<llvm::PHINode *> live;
  for (llvm::PHINode *phi : phis)
    if (alive.count(phi))
      for (llvm::User *u : phi->users())
        if (auto *user = llvm::dyn_cast<llvm::PHINode>(u); !user || !alive.count(user)) {
          if (live.insert(phi).second)
            work.push_back(phi);
          break;
        }
  while (!work.empty()) {
    llvm::PHINode *phi = work.back();
    work.pop_back();
    for (llvm::Value *in : phi->incoming_values())
      if (auto *from = llvm::dyn_cast<llvm::PHINode>(in);
          from && alive.count(from) && live.insert(from).second)
        work.push_back(from);
  }
  std::vector<llvm::PHINode *> dead;
  for (llvm::PHINode *phi : phis)
    if (alive.count(phi) && !live.count(phi))
      dead.push_back(phi);
  for (llvm::PHINode *phi : dead)
    phi->dropAllReferences();
  for (llvm::PHINode *phi : dead)
    phi->eraseFromParent();
  return live.size();
}

// Records each local's def blocks, once each, and its scope (stamp: the
// last local that listed the block).
void findDefBlocks(BlockGraph &g, std::vector<Local> &locals) {
  std::vector<unsigned> stamp(g.blocks.size(), ~0u);
  for (unsigned k = 0; k < locals.size(); ++k) {
    Local &l = locals[k];
    for (llvm::User *u : l.slot->users())
      if (auto *st = llvm::dyn_cast<llvm::StoreInst>(u))
        if (auto it = g.number.find(st->getParent());
            it != g.number.end() && stamp[it->second] != k) {
          stamp[it->second] = k;
          l.defBlocks.push_back(it->second);
        }
    l.scope = scopeOf(l, g);
  }
}

// A phi placed for a local.
struct Phi {
  llvm::PHINode *node;
  unsigned local;
};

// Phi placement, per local: the iterated frontier of its stores, within its
// scope. Returns the phis of each block; `allPhis` gets every one.
std::vector<std::vector<Phi>> placePhis(BlockGraph &g, std::vector<Local> &locals,
                                        std::vector<llvm::PHINode *> &allPhis) {
  size_t numBlocks = g.blocks.size();
  std::vector<std::vector<Phi>> phisAt(numBlocks);
  std::vector<unsigned> stamp(numBlocks, ~0u);
  std::vector<unsigned> work;
  for (unsigned k = 0; k < locals.size(); ++k) {
    Local &l = locals[k];
    int scopeBlock = l.scope;
    if (scopeBlock == -2)
      continue; // never read
    work = l.defBlocks;
    while (!work.empty()) {
      unsigned b = work.back();
      work.pop_back();
      for (unsigned j : g.frontier[b]) {
        if (stamp[j] == k)
          continue;
        if (scopeBlock >= 0 && !g.strictlyDominates(static_cast<unsigned>(scopeBlock), j))
          continue;
        stamp[j] = k;
        llvm::BasicBlock *bb = g.blocks[j];
        auto *phi = llvm::PHINode::Create(l.slot->getAllocatedType(),
                                          static_cast<unsigned>(llvm::pred_size(bb)),
                                          l.slot->getName(), bb->begin());
        phisAt[j].push_back({phi, k});
        allPhis.push_back(phi);
        work.push_back(j);
      }
    }
  }
  return phisAt;
}

void promoteAll(llvm::Function &f, std::vector<Local> &locals,
                const llvm::DenseMap<llvm::AllocaInst *, unsigned> &index, PromoteStats &stats) {
  BlockGraph g(f);
  size_t numBlocks = g.blocks.size();
  auto localOf = [&](llvm::Value *ptr) -> int {
    auto *a = llvm::dyn_cast<llvm::AllocaInst>(ptr);
    auto it = a ? index.find(a) : index.end();
    return it == index.end() ? -1 : static_cast<int>(it->second);
  };

  findDefBlocks(g, locals);
  std::vector<llvm::PHINode *> allPhis;
  std::vector<std::vector<Phi>> phisAt = placePhis(g, locals, allPhis);

  // Renaming: one walk of the dominator tree for every local.
  llvm::DenseMap<llvm::LoadInst *, llvm::Value *> value; // a load's replacement
  std::vector<llvm::Instruction *> accesses;
  std::vector<std::pair<unsigned, llvm::Value *>> undo; // (local, value before)
  auto valueOf = [&](unsigned k) -> llvm::Value * {
    return locals[k].current ? locals[k].current : locals[k].undef;
  };
  struct Visit {
    llvm::DomTreeNode *node;
    size_t undoMark;
    size_t nextChild = 0;
  };
  std::vector<Visit> stack;
  auto enter = [&](llvm::DomTreeNode *node) {
    stack.push_back({node, undo.size()});
    llvm::BasicBlock *bb = node->getBlock();
    unsigned n = g.number.lookup(bb);
    for (const Phi &p : phisAt[n]) {
      undo.push_back({p.local, locals[p.local].current});
      locals[p.local].current = p.node;
    }
    for (llvm::Instruction &i : *bb) {
      if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(&i)) {
        int k = localOf(ld->getPointerOperand());
        if (k < 0)
          continue;
        accesses.push_back(ld);
        value[ld] = valueOf(k);
      } else if (auto *st = llvm::dyn_cast<llvm::StoreInst>(&i)) {
        int k = localOf(st->getPointerOperand());
        if (k < 0)
          continue;
        accesses.push_back(st);
        llvm::Value *v = st->getValueOperand();
        // A stored load of a local was renamed already: its block
        // dominates this one.
        if (auto *from = llvm::dyn_cast<llvm::LoadInst>(v))
          if (auto it = value.find(from); it != value.end())
            v = it->second;
        undo.push_back({static_cast<unsigned>(k), locals[k].current});
        locals[k].current = v;
      }
    }
    for (llvm::BasicBlock *succ : llvm::successors(bb)) // an edge each
      for (const Phi &p : phisAt[g.number.lookup(succ)])
        p.node->addIncoming(valueOf(p.local), bb);
  };
  enter(g.dt.getRootNode());
  while (!stack.empty()) {
    Visit &top = stack.back();
    if (top.nextChild < top.node->getNumChildren()) {
      enter(top.node->begin()[top.nextChild++]);
      continue;
    }
    for (size_t k = undo.size(); k-- > top.undoMark;)
      locals[undo[k].first].current = undo[k].second;
    undo.resize(top.undoMark);
    stack.pop_back();
  }
  // Edges from blocks the entry does not reach bring undef.
  for (unsigned j = 0; j < numBlocks; ++j)
    for (const Phi &p : phisAt[j])
      for (llvm::BasicBlock *pred : llvm::predecessors(g.blocks[j]))
        if (!g.reached(pred))
          p.node->addIncoming(locals[p.local].undef, pred);

  for (llvm::Instruction *i : accesses)
    if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(i))
      ld->replaceAllUsesWith(value.lookup(ld));
  // Accesses in unreachable code: loads read undef, stores go.
  for (Local &l : locals) {
    while (!l.slot->use_empty()) {
      auto *i = llvm::cast<llvm::Instruction>(l.slot->user_back());
      if (auto *ld = llvm::dyn_cast<llvm::LoadInst>(i))
        ld->replaceAllUsesWith(l.undef);
      i->eraseFromParent();
    }
    l.slot->eraseFromParent();
  }
  stats.phisPlaced += allPhis.size();
  stats.phisKept += removeUselessPhis(allPhis);
}

} // namespace

size_t promoteLocals(llvm::Function &f, PromoteStats *stats) {
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
  PromoteStats ignored;
  if (!locals.empty())
    promoteAll(f, locals, index, stats ? *stats : ignored);
  return locals.size();
}

} // namespace qd
