//===- AdStackCounting.cpp - Counting kernels -----------------------------===//
//
// The slice is a backward closure over three kinds of dependence, starting
// from the pushes and pops of a counted stack (its pushes alone where every
// pop follows every push, as in a gradient's forward and reverse sweeps: the
// peak is then the number of pushes):
//   - data: a kept statement keeps the statements defining its operands (a
//     push of a counted stack keeps its stack, not its value);
//   - control: a kept statement keeps the statements that contain it (an
//     `if` keeps its condition, a `for` its bounds), and a kept loop keeps
//     every `break`/`continue` that leaves or continues it;
//   - memory: a kept load of a local keeps the stores to that local that can
//     reach it; a kept read of a stack keeps that stack's pushes and pops; a
//     kept read of a field or ndarray the kernel writes keeps those writes,
//     which then go to copies the caller passes (program state is never
//     written).
// A slice that reads a stack being counted keeps that stack as a real
// stack as well as counting it (*materialised*: its pushes keep their
// values, its pops and reads stay). Its capacity is the counting kernel's
// own business: launched through Program::launch like any kernel, the
// counting kernel's sizing measures it with a counting kernel of its own,
// which reads fewer stacks. Counting thus runs in stages where a count
// depends on a measured stack's values (taped nested `while` loops: the
// reverse sweep runs inner loops again with trip counts read back from the
// outer loop's tape). A stack whose count depends on its own values is
// *bounded*: its capacity in the counting kernel is an argument, a push
// past it is skipped and stops the thread's loops, and the caller runs the
// counting kernel again with a larger bound until every need fits
// (boundStack; docs/sizing.md, "Bounded stacks").
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackCounting.h"

#include "KernelVariants.h"
#include "qd/analysis/KernelSizing.h"
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Module.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_set>

namespace qd {
namespace {

/// What the closure needs to know about the whole kernel, computed once.
struct KernelIndex {
  std::vector<Stmt *> preorder;
  std::unordered_map<const Value *, std::vector<Stmt *>> localStores;
  std::unordered_map<const Value *, std::vector<Stmt *>> stackOps;
  std::unordered_map<const Stmt *, std::vector<Stmt *>> jumpsTo;
  /// Written globals: fields by component, ndarrays by element type and
  /// component (see isWritten).
  std::map<std::pair<const Field *, Component>, std::vector<Stmt *>> fieldWriters;
  std::map<std::pair<ScalarType, Component>, std::vector<Stmt *>> ndarrayWriters;
  std::unordered_map<const Stmt *, size_t> position;

  explicit KernelIndex(const Kernel &kernel) {
    walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) {
      position[&s] = preorder.size();
      preorder.push_back(&s);
      if (auto *st = dyn_cast<LocalStoreStmt>(&s))
        localStores[st->local()].push_back(&s);
      else if (auto *op = dyn_cast<AdStackOpStmt>(&s))
        stackOps[op->stack()].push_back(&s);
      else if (isa<BreakStmt>(s) || isa<ContinueStmt>(s))
        jumpsTo[jumpTarget(s)].push_back(&s);
      else if (isa<GlobalStoreStmt>(s) || isa<AtomicRmwStmt>(s)) {
        auto &g = cast<GlobalAccessStmt>(s);
        if (g.isField())
          fieldWriters[{g.field(), g.component()}].push_back(&s);
        else
          ndarrayWriters[{g.elementType(), g.component()}].push_back(&s);
      }
    });
  }

  /// The writes of the kernel that may change the element `g` reads: the
  /// writes of the same field component, or of an ndarray component of the
  /// same element type (two ndarray arguments may be one buffer).
  const std::vector<Stmt *> *writersOf(const GlobalAccessStmt &g) const {
    if (g.isField()) {
      auto it = fieldWriters.find({g.field(), g.component()});
      return it == fieldWriters.end() ? nullptr : &it->second;
    }
    auto it = ndarrayWriters.find({g.elementType(), g.component()});
    return it == ndarrayWriters.end() ? nullptr : &it->second;
  }

  /// Whether every pop of `stack` comes after every push in each lifetime
  /// of the stack: the statements of the alloca's block holding a push all
  /// come before those holding a pop. Its peak is then the number of
  /// pushes, and its count needs no pop (nor what decides the pops: the
  /// reverse sweep that reads the stack back).
  bool popsFollowPushes(const AdStackAllocaStmt &stack) const {
    auto it = stackOps.find(&stack);
    if (it == stackOps.end())
      return true;
    const Block *home = stack.parent();
    size_t lastPush = 0, firstPop = SIZE_MAX;
    bool pushes = false;
    for (const Stmt *op : it->second) {
      if (op->kind() != StmtKind::AdStackPush && op->kind() != StmtKind::AdStackPop)
        continue;
      const Stmt *s = op;
      while (s && s->parent() != home)
        s = s->parentStmt();
      if (!s)
        return false; // (not under the alloca's block: the verifier forbids it)
      size_t at = position.at(s);
      if (op->kind() == StmtKind::AdStackPush) {
        pushes = true;
        lastPush = std::max(lastPush, at);
      } else {
        firstPop = std::min(firstPop, at);
      }
    }
    return !pushes || lastPush < firstPop;
  }

  /// Whether the value `store` writes into its local may be what `load`
  /// reads: the store comes first in the text, or a loop inside the local's
  /// scope contains both (a later iteration reads it). A loop that contains
  /// the local's `alloca` starts a fresh local every iteration.
  bool mayReach(const Stmt &store, const Stmt &load, const Stmt &local) const {
    if (position.at(&store) < position.at(&load))
      return true;
    std::unordered_set<const Stmt *> aroundStore, aroundLocal;
    for (const Stmt *p = store.parentStmt(); p; p = p->parentStmt())
      aroundStore.insert(p);
    for (const Stmt *p = local.parentStmt(); p; p = p->parentStmt())
      aroundLocal.insert(p);
    for (const Stmt *p = load.parentStmt(); p && !aroundLocal.count(p); p = p->parentStmt())
      if ((isa<ForStmt>(p) || isa<WhileStmt>(p)) && aroundStore.count(p))
        return !killedInEveryIteration(*p, load, store);
    return false;
  }

  /// Whether `loop`'s body stores to the local `load` reads unconditionally
  /// (a statement of the body itself, not `other`) before the statement
  /// holding `load`: a value stored in an earlier iteration never reaches
  /// it. (A gradient's reverse sweep restores a local from its tape at the
  /// top of each iteration; without this, a count would seem to read the
  /// values the sweep after it stores.)
  bool killedInEveryIteration(const Stmt &loop, const Stmt &load, const Stmt &other) const {
    const Block &body = loop.block(0);
    const Stmt *holder = &load;
    while (holder->parent() != &body)
      holder = holder->parentStmt();
    auto it = localStores.find(cast<LocalLoadStmt>(load).local());
    if (it == localStores.end())
      return false;
    for (const Stmt *st : it->second)
      if (st != &other && st->parent() == &body && position.at(st) < position.at(holder))
        return true;
    return false;
  }
};

/// The slice of one counted stack, or why it cannot be counted.
class Slicer {
public:
  /// `materialisable`: counted stacks the slice may read by keeping them
  /// (null: none).
  Slicer(const KernelIndex &index, const std::unordered_set<const Value *> &counted,
         const LazyValueNamer &names,
         const std::unordered_set<const Value *> *materialisable = nullptr)
      : index_(index), counted_(counted), names_(names), materialisable_(materialisable) {}

  /// Adds the slice of `stack` to `kept` and the counted stacks it keeps to
  /// `materialised`; returns a reason on failure (`kept` and `materialised`
  /// are then unchanged).
  std::string slice(const AdStackAllocaStmt &stack, std::unordered_set<const Stmt *> &kept,
                    std::unordered_set<const Value *> &materialised) {
    std::unordered_set<const Stmt *> mine;
    std::unordered_set<const Value *> myMaterialised;
    std::vector<const Stmt *> work;
    auto keep = [&](const Value *v) {
      auto *s = dyn_cast<Stmt>(v);
      if (s && mine.insert(s).second)
        work.push_back(s);
    };
    keep(&stack);
    bool pops = !index_.popsFollowPushes(stack);
    if (auto it = index_.stackOps.find(&stack); it != index_.stackOps.end())
      for (const Stmt *op : it->second)
        if (op->kind() == StmtKind::AdStackPush || (pops && op->kind() == StmtKind::AdStackPop))
          keep(op);
    while (!work.empty()) {
      const Stmt *s = work.back();
      work.pop_back();
      // Data.
      for (unsigned i = 0; i < s->numOperands(); ++i) {
        const Value *v = s->operand(i);
        const Value *pushed =
            s->kind() == StmtKind::AdStackPush ? cast<AdStackOpStmt>(s)->stack() : nullptr;
        // (A stack another slice keeps has its values kept by that slice.)
        bool countedPush =
            pushed && i == 1 && counted_.count(pushed) && !myMaterialised.count(pushed);
        if (v && !countedPush)
          keep(v);
      }
      // Control.
      if (const Stmt *parent = s->parentStmt())
        keep(parent);
      if (auto it = index_.jumpsTo.find(s); it != index_.jumpsTo.end())
        for (const Stmt *j : it->second)
          keep(j);
      // Memory.
      if (auto *ld = dyn_cast<LocalLoadStmt>(s)) {
        if (auto it = index_.localStores.find(ld->local()); it != index_.localStores.end())
          for (const Stmt *st : it->second)
            if (index_.mayReach(*st, *ld, *cast<Stmt>(ld->local())))
              keep(st);
      } else if (auto *op = dyn_cast<AdStackOpStmt>(s);
                 op && (op->kind() == StmtKind::AdStackLoadTop ||
                        op->kind() == StmtKind::AdStackLoadTopAdj)) {
        bool adjoint = op->kind() == StmtKind::AdStackLoadTopAdj;
        if (counted_.count(op->stack())) {
          if (!materialisable_ || !materialisable_->count(op->stack()))
            return fmt::format("the value '{}' at {} read from adstack {}, which is itself "
                               "measured, decides how often it is pushed",
                               printStmt(*op), op->loc().str(), names_[op->stack()]);
          // Kept as a real stack: its pushes with their values.
          if (myMaterialised.insert(op->stack()).second)
            for (const Stmt *other : index_.stackOps.at(op->stack()))
              if (other->kind() == StmtKind::AdStackPush)
                keep(other->operand(1));
        }
        for (const Stmt *other : index_.stackOps.at(op->stack()))
          if (other->kind() != StmtKind::AdStackAccAdjoint || adjoint)
            keep(other);
      } else if (auto *g = dyn_cast<GlobalLoadStmt>(s)) {
        // Memory the kernel writes: the counting kernel replays the writes
        // on a copy (the caller passes copies; see AdStackCounting).
        if (const std::vector<Stmt *> *writers = index_.writersOf(*g))
          for (const Stmt *w : *writers)
            keep(w);
      }
    }
    kept.insert(mine.begin(), mine.end());
    materialised.insert(myMaterialised.begin(), myMaterialised.end());
    return "";
  }

private:
  const KernelIndex &index_;
  const std::unordered_set<const Value *> &counted_;
  const LazyValueNamer &names_;
  const std::unordered_set<const Value *> *materialisable_;
};

using variants::freshArgumentName;
using variants::taskOf;

/// The memory the slice writes goes to copies: each written field component
/// becomes a new ndarray argument (appended after `need`; a 0-d field a
/// 1-element ndarray), and the ndarray arguments of written element classes
/// are listed for the caller to pass as copies.
void shadowWrittenMemory(Kernel &k, const Argument *need, AdStackCounting &out) {
  std::set<std::pair<const Field *, Component>> fields;
  std::set<std::pair<ScalarType, Component>> ndarrayClasses;
  std::vector<GlobalAccessStmt *> accesses;
  walk(k.body(), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g || g->ndarray() == need)
      return;
    accesses.push_back(g);
    if (isa<GlobalStoreStmt>(g) || isa<AtomicRmwStmt>(g)) {
      if (g->isField())
        fields.insert({g->field(), g->component()});
      else
        ndarrayClasses.insert({g->elementType(), g->component()});
    }
  });
  std::map<std::pair<const Field *, Component>, Argument *> shadowOf;
  for (auto [field, component] : fields) {
    std::string name = field->name() + (component == Component::Primal ? "" : "_") +
                       (component == Component::Primal ? "" : std::string(toString(component)));
    shadowOf[{field, component}] = k.addArgument(std::make_unique<Argument>(
        freshArgumentName(k, "adstack_copy_" + name),
        Type::ndarray(field->elementType(), std::max<unsigned>(field->ndim(), 1))));
    out.shadowFields.push_back({field, component});
  }
  std::set<unsigned> args;
  for (GlobalAccessStmt *g : accesses) {
    if (!g->isField()) {
      if (ndarrayClasses.count({g->elementType(), g->component()}))
        args.insert(cast<Argument>(g->ndarray())->index());
      continue;
    }
    auto it = shadowOf.find({g->field(), g->component()});
    if (it == shadowOf.end())
      continue;
    IRBuilder b = IRBuilder::before(*g);
    b.setLocation(g->loc());
    std::vector<Value *> idx = g->indices();
    if (idx.empty())
      idx.push_back(b.i32(0));
    GlobalRef ref = GlobalRef::ofNdarray(it->second);
    Stmt *copy = nullptr;
    if (isa<GlobalLoadStmt>(g))
      copy = b.load(ref, idx);
    else if (auto *st = dyn_cast<GlobalStoreStmt>(g))
      copy = b.store(ref, idx, st->value());
    else
      copy = b.atomic(cast<AtomicRmwStmt>(g)->op(), ref, idx, cast<AtomicRmwStmt>(g)->value());
    g->replaceAndErase(copy);
  }
  out.shadowArgs.assign(args.begin(), args.end());
}

/// Bounds the materialised stack `stack` of counted slot `slot` in the
/// counting kernel `k`: its capacity becomes a new argument, a push past it
/// is skipped and sets `stopped` (and so does the pop of a skipped push),
/// and its count goes on as before, so `need` reports more than the bound.
void boundStack(Kernel &k, size_t slot, AdStackAllocaStmt &stack, AllocaStmt &count,
                AllocaStmt &stopped, AdStackCounting &out) {
  Argument *bound = k.addArgument(std::make_unique<Argument>(
      freshArgumentName(k, fmt::format("adstack_bound{}", slot)), Type::i32()));
  out.boundArgs[slot] = static_cast<int>(bound->index());
  IRBuilder at = IRBuilder::before(stack);
  at.setLocation(stack.loc());
  auto *sized = at.insert(std::make_unique<AdStackAllocaStmt>(stack.elementType(), bound));
  stack.replaceAndErase(sized);
  std::vector<Stmt *> ops;
  for (const Use &u : sized->uses())
    if (u.user()->kind() == StmtKind::AdStackPush || u.user()->kind() == StmtKind::AdStackPop)
      ops.push_back(u.user());
  for (Stmt *op : ops) {
    IRBuilder b = IRBuilder::before(*op);
    b.setLocation(op->loc());
    // After a push the count is the depth it would reach; after a pop, the
    // depth it left, so its push was made when the count is below the bound.
    Value *c = b.load(&count);
    bool push = op->kind() == StmtKind::AdStackPush;
    Value *fits = b.cmp(push ? CmpPredicate::Le : CmpPredicate::Lt, c, bound);
    if (push) {
      IRBuilder::IfScope over = b.ifThen(b.cmp(CmpPredicate::Gt, c, bound));
      b.store(&stopped, b.i32(1));
    }
    IRBuilder::IfScope made = b.ifThen(fits);
    made.stmt()->thenBlock().push_back(op->remove());
  }
}

/// Ends every loop of `task` at the top of its next iteration once
/// `stopped` is set: a thread that skipped a push of a bounded stack reads
/// values that are not the kernel's, and its loops need not end otherwise.
/// (Its `need` is past the bound already: the launch runs again.)
void stopLoopsWhenStopped(Stmt &task, AllocaStmt &stopped) {
  std::vector<Stmt *> loops;
  walk(task.block(0), [&](Stmt &s) {
    if (isa<ForStmt>(s) || isa<WhileStmt>(s))
      loops.push_back(&s);
  });
  for (Stmt *loop : loops) {
    Block &body = loop->block(0);
    IRBuilder b(body);
    b.setInsertionPoint(body, body.begin());
    b.setLocation(loop->loc());
    IRBuilder::IfScope stop = b.ifThen(b.cmp(CmpPredicate::Ne, b.load(&stopped), b.i32(0)));
    b.brk();
  }
}

/// Which measured stacks' values each count reads (its slice with every
/// stack kept where it is read), and so which stacks the counting kernel
/// keeps as real stacks and which it bounds.
struct CountSlices {
  CountSlices(const Kernel &kernel, std::span<const AdStackAllocaStmt *const> stacks);
  std::unordered_set<const Value *> counted;
  std::unordered_set<const Stmt *> kept;
  std::unordered_set<const Value *> materialised, bounded;
};

CountSlices::CountSlices(const Kernel &kernel, std::span<const AdStackAllocaStmt *const> stacks)
    : counted(stacks.begin(), stacks.end()) {
  KernelIndex index(kernel);
  LazyValueNamer names(kernel); // (only a count that cannot be made names values)
  // Which measured stacks' values each count reads (its slice with every
  // stack kept where it is read). A stack whose count reads its own values
  // (directly or through another stack) is bounded; among the others
  // reading is acyclic (T read by S: S's slice holds T's, so T reads less
  // than S), which is what ends the recursion of counting kernels (a
  // bounded stack is sized by its bound argument there, not counted).
  // Most counts read no measured stack: one slice each, as they are. Only
  // the others are sliced again, with every stack they read kept as a real
  // stack; a stack whose slice then reads itself is *bounded* (below).
  bool reading = false;
  {
    Slicer plain(index, counted, names);
    for (const AdStackAllocaStmt *s : stacks)
      reading |= !plain.slice(*s, kept, materialised).empty();
  }
  if (reading) {
    kept.clear();
    materialised.clear();
    Slicer slicer(index, counted, names, &counted);
    for (const AdStackAllocaStmt *s : stacks) {
      std::unordered_set<const Value *> reads;
      std::string why = slicer.slice(*s, kept, reads);
      assert(why.empty() && "every counted stack may be kept");
      (void)why;
      if (reads.count(s))
        bounded.insert(s);
      materialised.insert(reads.begin(), reads.end());
    }
  }
}

/// Counts the pushes and pops of `stack` in `count`, raising `peak`; a
/// stack the slice does not read (not `real`) goes, with its operations.
void countPushesAndPops(AdStackAllocaStmt &stack, AllocaStmt &count, AllocaStmt &peak, bool real) {
  std::vector<Stmt *> ops;
  for (const Use &u : stack.uses())
    ops.push_back(u.user());
  for (Stmt *op : ops) {
    if (op->kind() != StmtKind::AdStackPush && op->kind() != StmtKind::AdStackPop)
      continue; // a read of a materialised stack
    IRBuilder b = IRBuilder::before(*op);
    b.setLocation(op->loc());
    if (op->kind() == StmtKind::AdStackPush) {
      Value *old = b.load(&count);
      Value *low = b.min(old, b.i32(kAdStackCountSaturated - 1));
      Value *c = b.add(low, b.i32(1));
      b.store(&count, c);
      b.store(&peak, b.max(b.load(&peak), c));
    } else if (op->kind() == StmtKind::AdStackPop) {
      Value *old = b.load(&count);
      b.store(&count, b.sub(old, b.i32(1)));
    }
    if (!real) {
      op->dropAllReferences();
      op->erase();
    }
  }
  if (!real)
    stack.erase();
}

/// Raises `need` to the peaks of `task`'s counted stacks where each of its
/// iterations ends.
void raiseNeedAtExits(Stmt &task, const std::vector<std::pair<AllocaStmt *, int>> &peaks,
                      Argument *need, size_t slots) {
  // (A body that ends in its own `continue` has no other end: the
  // `continue` is its exit.)
  Block &body = task.block(0);
  std::vector<std::pair<Block *, Block::iterator>> exits;
  if (body.empty() || !isa<ContinueStmt>(body.back()))
    exits.push_back({&body, body.end()});
  walk(body, [&](Stmt &s) {
    if (isa<ContinueStmt>(s) && jumpTarget(s) == &task)
      exits.push_back({s.parent(), Block::iteratorTo(&s)});
  });
  for (auto &[block, pos] : exits) {
    IRBuilder b(*block);
    b.setInsertionPoint(*block, pos);
    b.setLocation(task.loc());
    // Each slot has extent(need) / slots elements, a power of two the
    // runtime chooses (KernelSizing::kCountSpread, or at least the task's
    // iterations: one element per iteration, for a compacted heap).
    // Consecutive iterations raise different elements: of a band, those
    // of one row, so its innermost index.
    Value *index = &task;
    if (auto *band = dyn_cast<ForStmt>(&task); band && band->numDims() > 1)
      index = b.insert(std::make_unique<TaskIndexStmt>(band->numDims() - 1));
    // (Statements built one at a time: their order in the text is fixed.)
    Value *extent = b.shape(need, 0);
    Value *numSlots = b.i32(static_cast<int32_t>(std::max<size_t>(slots, 1)));
    Value *spread = b.binary(BinaryOp::Div, extent, numSlots);
    Value *lane = nullptr;
    if (isa<ForStmt>(&task)) {
      Value *one = b.i32(1);
      Value *mask = b.sub(spread, one);
      lane = b.binary(BinaryOp::And, index, mask);
    } else {
      lane = b.i32(0);
    }
    for (auto &[peak, slot] : peaks) {
      Value *first = b.i32(static_cast<int32_t>(slot));
      Value *base = b.mul(first, spread);
      Value *idx[] = {b.add(base, lane)};
      b.atomicMax(GlobalRef::ofNdarray(need), idx, b.cast(b.load(peak), ScalarType::I64));
    }
  }
}

/// A counted stack the counting kernel keeps with a bound.
struct BoundedSlot {
  size_t slot;
  AdStackAllocaStmt *stack;
  AllocaStmt *count;
};

/// Bounds the bounded stacks (boundStack) and stops the loops of their
/// tasks once one of them skipped a push.
void boundStacks(Kernel &k, const std::vector<BoundedSlot> &boundedSlots, AdStackCounting &out) {
  out.boundArgs.assign(out.counted.size(), -1);
  std::unordered_map<Stmt *, AllocaStmt *> stoppedOfTask;
  for (const BoundedSlot &b : boundedSlots) {
    Stmt *task = taskOf(b.stack);
    AllocaStmt *&stopped = stoppedOfTask[task];
    if (!stopped) {
      IRBuilder top(task->block(0));
      top.setInsertionPoint(task->block(0), task->block(0).begin());
      top.setLocation(task->loc());
      stopped = top.alloca(ScalarType::I32);
    }
    boundStack(k, b.slot, *b.stack, *b.count, *stopped, out);
  }
  for (auto &[task, stopped] : stoppedOfTask)
    stopLoopsWhenStopped(*task, *stopped);
}

} // namespace

AdStackCounting buildAdStackCounting(const Kernel &kernel,
                                     std::span<const AdStackAllocaStmt *const> stacks) {
  AdStackCounting out;
  if (stacks.empty())
    return out;
  CountSlices slices(kernel, stacks);
  const std::unordered_set<const Value *> &counted = slices.counted;
  const std::unordered_set<const Stmt *> &kept = slices.kept;
  const std::unordered_set<const Value *> &materialised = slices.materialised;
  const std::unordered_set<const Value *> &bounded = slices.bounded;
  for (const AdStackAllocaStmt *s : stacks)
    if (counted.count(s))
      out.counted.push_back(s);
  if (out.counted.empty())
    return out;

  // Clone what holds the slice: the launch-time statements and the tasks
  // with a kept statement (a task without one would go as a whole below,
  // and no value crosses tasks). `toClone` maps the source onto the clone.
  ValueMap toClone;
  std::shared_ptr<Kernel> k = cloneKernel(
      kernel, kernel.name() + "__adstack_count",
      [&](const Stmt &top) { return top.numBlocks() == 0 || kept.count(&top); }, toClone);
  std::unordered_set<const Stmt *> keptClone;
  for (const Stmt *s : kept)
    keptClone.insert(cast<Stmt>(toClone.at(s)));

  // What the slice does not keep goes (a statement that is not kept
  // contains nothing that is kept): first its references, so that the
  // counted stacks' remaining uses are their pushes and pops.
  std::vector<Stmt *> dropped, droppedRoots;
  for (Stmt *s : variants::preorder(*k))
    if (!keptClone.count(s)) {
      dropped.push_back(s);
      if (!s->parentStmt() || keptClone.count(s->parentStmt()))
        droppedRoots.push_back(s);
    }
  for (Stmt *s : dropped)
    s->dropAllReferences();

  // The output and the counters.
  Argument *need = k->addArgument(std::make_unique<Argument>(freshArgumentName(*k, "adstack_need"),
                                                             Type::ndarray(ScalarType::I64, 1)));
  std::unordered_map<Stmt *, std::vector<std::pair<AllocaStmt *, int>>> peaksOfTask;
  std::vector<BoundedSlot> boundedSlots;
  for (size_t slot = 0; slot < out.counted.size(); ++slot) {
    auto *stack = cast<AdStackAllocaStmt>(toClone.at(out.counted[slot]));
    Stmt *task = taskOf(stack);
    IRBuilder top(task->block(0));
    top.setInsertionPoint(task->block(0), task->block(0).begin());
    top.setLocation(stack->loc());
    AllocaStmt *peak = top.alloca(ScalarType::I32);
    peaksOfTask[task].push_back({peak, static_cast<int>(slot)});
    IRBuilder at = IRBuilder::before(*stack);
    at.setLocation(stack->loc());
    AllocaStmt *count = at.alloca(ScalarType::I32);
    bool real = materialised.count(out.counted[slot]) > 0;
    if (bounded.count(out.counted[slot]))
      boundedSlots.push_back({slot, stack, count});
    countPushesAndPops(*stack, *count, *peak, real);
  }
  for (Stmt *s : droppedRoots)
    s->erase();
  // Each thread raises need[slot * spread + (i & (spread - 1))] to its
  // maximum where its task iteration `i` ends (a serial task is iteration
  // 0): at the end of the body and before a `continue` of the task loop,
  // with spread = extent(need) / slots. Spreading the maximum over
  // `spread` elements keeps a GPU's threads off one address; the runtime
  // takes the maximum of the range (or, with a spread of at least the
  // task's iterations, reads each iteration's own need).
  for (auto &[task, peaks] : peaksOfTask)
    raiseNeedAtExits(*task, peaks, need, out.counted.size());
  shadowWrittenMemory(*k, need, out);
  boundStacks(*k, boundedSlots, out);
  out.kernel = std::move(k);
  return out;
}

} // namespace qd
