//===- AdStackOptimistic.cpp - Optimistic launches ------------------------===//
//
// The try kernel turns, for each measured stack %s with capacity %cap,
//   adstack.push %s, %v
// into
//   %c = add (min (load %count), 2^31 - 2), 1 ; store %count, %c
//   if (cmp le %c, %cap) { adstack.push %s, %v }
// (an i32 count that saturates: i64 counters cost the CPU's 32 lanes a
// fifth of the gradient's time)
// and inserts at the split (after the last top-level statement of the task
// body that pushes a measured stack):
//   atomic_max %need[slot * spread + (%i & (spread - 1))], (load %count)
//   if (%mode & store needs) { store %rows[slot, %i - begin], (load %count) }
//   if (any count > its capacity) {
//     store %failed[%i - begin], 1 ; atomic_add %need[slots * spread], 1
//     continue
//   }
// Before the split the stacks are only pushed, so a skipped push changes
// nothing the iteration decides, the count is its exact need, and the
// statements after the split (the reverse sweep of a taped gradient, with
// every visible write) run only in iterations whose stacks fit.
//
// Where the launch lays out a compacted heap, each iteration's capacity is
// its group's: with `%mode & read capacities`, the body starts by reading
// %cap from %rows[slots + slot, %i - begin], which the backend fills for
// this launch's layout, and the rows of the measured needs feed the next
// launch's layout (docs/sizing.md, "Optimistic launches and the compacted
// heap").
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackOptimistic.h"

#include "KernelVariants.h"
#include "qd/analysis/ConstantFolding.h"
#include "qd/ir/Clone.h"
#include "qd/ir/IRBuilder.h"
#include "qd/ir/Printer.h"

#include <absl/status/status.h>
#include <fmt/format.h>

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace qd {
namespace {

using variants::freshArgumentName;
using variants::taskOf;

/// Where the measured task of a kernel splits into the part that only
/// pushes and the rest.
struct Split {
  ForStmt *task = nullptr;
  /// The number of statements of the task body before the split.
  size_t position = 0;
  SizeExprRef iterations;
};

/// The task-body statement that contains `s` (`s` itself for one).
const Stmt *bodyStmtOf(const Stmt *s, const Stmt *task) {
  while (s->parentStmt() != task)
    s = s->parentStmt();
  return s;
}

/// A task bound as a SizeExpr, when it is known before the launch: a
/// constant, an integer scalar argument or an ndarray argument's extent.
SizeExprRef boundExpr(const Bound &b) {
  if (b.isConstant())
    return SizeExpr::constant(b.constant);
  if (std::optional<int64_t> c = evaluateConstantInt(b.value))
    return SizeExpr::constant(*c);
  if (auto *arg = dyn_cast<Argument>(b.value);
      arg && !arg->isNdarray() && isInteger(arg->type().element()))
    return SizeExpr::scalarArg(arg->index());
  if (auto *shape = dyn_cast<ShapeStmt>(b.value))
    if (auto *arg = dyn_cast<Argument>(shape->ndarray()))
      return SizeExpr::ndarrayShape(arg->index(), shape->axis());
  return nullptr;
}

/// The memory a global access touches, as the kernel's analyses see it: a
/// field component, or every ndarray of one element type and component
/// (two ndarray arguments may be one buffer).
std::pair<const void *, int> memoryClass(const GlobalAccessStmt &g) {
  int component = static_cast<int>(g.component());
  if (g.isField())
    return {g.field(), component};
  return {nullptr, static_cast<int>(g.elementType()) * 8 + component};
}

absl::Status refuse(const Kernel &kernel, const std::string &why) {
  return absl::FailedPreconditionError(
      fmt::format("kernel @{} has no optimistic launch (its measured adstacks are counted "
                  "before each launch instead): {}",
                  kernel.name(), why));
}

/// `names`: of `kernel`, for the refusals that name a stack.
absl::StatusOr<Split> findSplit(const Kernel &kernel,
                                std::span<const AdStackAllocaStmt *const> stacks,
                                const LazyValueNamer &names) {
  Split split;
  for (const AdStackAllocaStmt *s : stacks) {
    auto *task = dyn_cast<ForStmt>(taskOf(const_cast<AdStackAllocaStmt *>(s)));
    if (!task)
      return refuse(kernel,
                    fmt::format("adstack {} at {} is in a serial task", names[s], s->loc().str()));
    if (split.task && split.task != task)
      return refuse(kernel, fmt::format("its measured adstacks are in more than one task "
                                        "(adstack {} at {} is in the task at {})",
                                        names[s], s->loc().str(), task->loc().str()));
    split.task = task;
    if (s->parentStmt() != task)
      return refuse(kernel, fmt::format("adstack {} at {} is not allocated in the body of its "
                                        "task itself, so it may restart within an iteration",
                                        names[s], s->loc().str()));
  }
  ForStmt *task = split.task;
  std::string where = fmt::format("the task at {}", task->loc().str());
  if (task->numDims() != 1)
    return refuse(kernel, where + " is a parallel band (only 1-D tasks are rerun by index)");
  if (&const_cast<Kernel &>(kernel).body().back() != task)
    return refuse(kernel, where + " is not the kernel's last task, and its reruns would come "
                                  "after the tasks that follow it");
  if (!task->begin().isConstant())
    return refuse(kernel, where + " has a begin that is not a constant");
  SizeExprRef begin = boundExpr(task->begin()), end = boundExpr(task->end());
  if (!end)
    return refuse(kernel, where + " has an end that is not known before the launch (a constant, "
                                  "an integer argument or an ndarray extent)");
  split.iterations = SizeExpr::tripCount(begin, end);

  std::unordered_map<const Stmt *, size_t> position;
  size_t n = 0;
  for (Stmt &s : task->body())
    position[&s] = n++;
  std::unordered_set<const Value *> measured(stacks.begin(), stacks.end());
  std::vector<const Stmt *> others;
  for (const AdStackAllocaStmt *s : stacks)
    for (const Use &u : s->uses()) {
      const Stmt *op = u.user();
      if (op->kind() == StmtKind::AdStackPush)
        split.position = std::max(split.position, position.at(bodyStmtOf(op, task)) + 1);
      else
        others.push_back(op);
    }
  if (split.position == 0)
    return refuse(kernel, "its measured adstacks are never pushed");
  for (const Stmt *op : others)
    if (position.at(bodyStmtOf(op, task)) < split.position)
      return refuse(kernel, fmt::format("'{}' at {} reads or pops a measured adstack before "
                                        "its last push",
                                        printStmt(*op), op->loc().str()));
  std::set<std::pair<const void *, int>> written;
  walk(task->body(), [&](Stmt &s) {
    if (isa<GlobalStoreStmt>(s) || isa<AtomicRmwStmt>(s))
      written.insert(memoryClass(cast<GlobalAccessStmt>(s)));
  });
  // Statements outside the tasks run again in the rerun kernel, after the
  // tasks of the try kernel wrote: they must not read what a task writes.
  std::set<std::pair<const void *, int>> writtenByTasks;
  walk(const_cast<Kernel &>(kernel).body(), [&](Stmt &s) {
    if (isa<GlobalStoreStmt>(s) || isa<AtomicRmwStmt>(s))
      writtenByTasks.insert(memoryClass(cast<GlobalAccessStmt>(s)));
  });
  for (Stmt &top : const_cast<Kernel &>(kernel).body())
    if (auto *g = dyn_cast<GlobalLoadStmt>(&top); g && writtenByTasks.count(memoryClass(*g)))
      return refuse(kernel, fmt::format("the load '{}' at {}, outside the tasks, reads memory "
                                        "the kernel writes; the rerun kernel would read it again",
                                        printStmt(top), top.loc().str()));
  std::string why;
  walk(task->body(), [&](Stmt &s) {
    if (!why.empty() || position.at(bodyStmtOf(&s, task)) >= split.position)
      return;
    if (isa<GlobalStoreStmt>(s) || isa<AtomicRmwStmt>(s))
      why = fmt::format("the write '{}' at {} comes before the last push of a measured adstack",
                        printStmt(s), s.loc().str());
    else if ((isa<BreakStmt>(s) || isa<ContinueStmt>(s)) && jumpTarget(s) == task)
      why = fmt::format("the '{}' at {} leaves the task's iteration before the last push of a "
                        "measured adstack",
                        printStmt(s), s.loc().str());
    else if (auto *g = dyn_cast<GlobalLoadStmt>(&s); g && written.count(memoryClass(*g)))
      why = fmt::format("the load '{}' at {}, before the last push of a measured adstack, reads "
                        "memory the task writes, which a rerun may find changed",
                        printStmt(s), s.loc().str());
  });
  if (!why.empty())
    return refuse(kernel, why);
  return split;
}

/// The statement of `body` at `position` (counted from 0).
Stmt &bodyStmtAt(Block &body, size_t position) {
  auto it = body.begin();
  std::advance(it, static_cast<std::ptrdiff_t>(position));
  return *it;
}

/// The iteration's element of `failed`: `%i - begin`.
Value *failedIndex(IRBuilder &b, ForStmt &task) {
  int64_t begin = task.begin().constant;
  return begin == 0 ? static_cast<Value *>(&task)
                    : b.sub(&task, b.i32(static_cast<int32_t>(begin)));
}

/// The try kernel's per-iteration rows (AdStackOptimistic.h): `rows`
/// (`ndarray<i64, 2>`) and `mode` (i32: kStoreNeeds | kReadCapacities).
struct IterationRows {
  Argument *rows = nullptr, *mode = nullptr;
};

/// At the start of the body, each slot's capacity for this iteration: the
/// argument, or with kReadCapacities, row `slots + slot` of `rows`.
std::vector<AllocaStmt *> iterationCapacities(ForStmt &task, std::span<Argument *const> capacity,
                                              const IterationRows &r) {
  IRBuilder b(task.body());
  b.setInsertionPoint(task.body(), task.body().begin());
  b.setLocation(task.loc());
  std::vector<AllocaStmt *> cap;
  for (Argument *c : capacity) {
    cap.push_back(b.alloca(ScalarType::I32));
    b.store(cap.back(), c);
  }
  Value *bit = b.binary(BinaryOp::And, r.mode, b.i32(kIterationRowsReadCapacities));
  IRBuilder::IfScope read = b.ifThen(b.cmp(CmpPredicate::Ne, bit, b.i32(0)));
  Value *at = failedIndex(b, task);
  for (size_t slot = 0; slot < cap.size(); ++slot) {
    Value *row = b.i32(static_cast<int32_t>(cap.size() + slot));
    b.store(cap[slot], b.cast(b.load(GlobalRef::ofNdarray(r.rows), {row, at}), ScalarType::I32));
  }
  return cap;
}

void makeTryKernel(Kernel &k, ForStmt &task, size_t splitPosition,
                   std::span<AdStackAllocaStmt *const> stacks) {
  Stmt &lastPushing = bodyStmtAt(task.body(), splitPosition - 1);
  Argument *need = k.addArgument(std::make_unique<Argument>(freshArgumentName(k, "adstack_need"),
                                                            Type::ndarray(ScalarType::I64, 1)));
  Argument *failed = k.addArgument(std::make_unique<Argument>(
      freshArgumentName(k, "adstack_failed"), Type::ndarray(ScalarType::I32, 1)));
  std::vector<Argument *> capacity;
  std::vector<AllocaStmt *> count;
  for (size_t slot = 0; slot < stacks.size(); ++slot) {
    capacity.push_back(k.addArgument(std::make_unique<Argument>(
        freshArgumentName(k, fmt::format("adstack_capacity{}", slot)), Type::i32())));
    IRBuilder at = IRBuilder::before(*stacks[slot]);
    at.setLocation(stacks[slot]->loc());
    count.push_back(at.alloca(ScalarType::I32));
  }
  IterationRows rows;
  rows.rows = k.addArgument(std::make_unique<Argument>(freshArgumentName(k, "adstack_rows"),
                                                       Type::ndarray(ScalarType::I64, 2)));
  rows.mode = k.addArgument(
      std::make_unique<Argument>(freshArgumentName(k, "adstack_rows_mode"), Type::i32()));
  // The split first, while `lastPushing` is still where it was (it may be
  // a push, which moves into an `if` below).
  IRBuilder b = IRBuilder::after(lastPushing);
  b.setLocation(task.loc());
  std::vector<AllocaStmt *> cap = iterationCapacities(task, capacity, rows);
  constexpr int64_t spread = KernelSizing::kCountSpread;
  Value *lane = b.binary(BinaryOp::And, &task, b.i32(spread - 1));
  Value *overflowed = nullptr;
  std::vector<Value *> counts;
  for (size_t slot = 0; slot < stacks.size(); ++slot) {
    Value *c = b.load(count[slot]);
    counts.push_back(b.cast(c, ScalarType::I64));
    Value *idx[] = {b.add(b.i32(static_cast<int32_t>(slot * spread)), lane)};
    b.atomicMax(GlobalRef::ofNdarray(need), idx, counts.back());
    Value *over = b.cmp(CmpPredicate::Gt, c, b.load(cap[slot]));
    overflowed = overflowed ? b.binary(BinaryOp::Or, overflowed, over) : over;
  }
  {
    Value *bit = b.binary(BinaryOp::And, rows.mode, b.i32(kIterationRowsStoreNeeds));
    IRBuilder::IfScope store = b.ifThen(b.cmp(CmpPredicate::Ne, bit, b.i32(0)));
    Value *at = failedIndex(b, task);
    for (size_t slot = 0; slot < stacks.size(); ++slot)
      b.store(GlobalRef::ofNdarray(rows.rows), {b.i32(static_cast<int32_t>(slot)), at},
              counts[slot]);
  }
  {
    IRBuilder::IfScope stop = b.ifThen(overflowed);
    Value *idx[] = {failedIndex(b, task)};
    b.store(GlobalRef::ofNdarray(failed), idx, b.i32(1));
    Value *countIdx[] = {b.i32(static_cast<int32_t>(stacks.size() * spread))};
    b.atomicAdd(GlobalRef::ofNdarray(need), countIdx, b.i64(1));
    b.cont();
  }
  for (size_t slot = 0; slot < stacks.size(); ++slot) {
    std::vector<Stmt *> pushes;
    for (const Use &u : stacks[slot]->uses())
      if (u.user()->kind() == StmtKind::AdStackPush)
        pushes.push_back(u.user());
    for (Stmt *push : pushes) {
      IRBuilder at = IRBuilder::before(*push);
      at.setLocation(push->loc());
      // (One statement at a time: the order of function arguments is not.)
      Value *old = at.load(count[slot]);
      Value *low = at.min(old, at.i32(kAdStackCountSaturated - 1));
      Value *c = at.add(low, at.i32(1));
      at.store(count[slot], c);
      Value *limit = at.load(cap[slot]);
      IRBuilder::IfScope fits = at.ifThen(at.cmp(CmpPredicate::Le, c, limit));
      fits.stmt()->thenBlock().push_back(push->remove());
    }
  }
}

void makeRerunKernel(Kernel &k, ForStmt &task) {
  std::vector<Stmt *> otherTasks;
  for (Stmt &s : k.body())
    if (s.isTask() && &s != &task)
      otherTasks.push_back(&s);
  for (Stmt *s : otherTasks)
    s->dropAllReferences();
  for (Stmt *s : otherTasks)
    s->erase();
  Argument *failed = k.addArgument(std::make_unique<Argument>(
      freshArgumentName(k, "adstack_failed"), Type::ndarray(ScalarType::I32, 1)));
  IRBuilder b(task.body());
  b.setInsertionPoint(task.body(), task.body().begin());
  b.setLocation(task.loc());
  Value *idx[] = {failedIndex(b, task)};
  Value *flag = b.load(GlobalRef::ofNdarray(failed), idx);
  {
    IRBuilder::IfScope skip = b.ifThen(b.cmp(CmpPredicate::Eq, flag, b.i32(0)));
    b.cont();
  }
  b.store(GlobalRef::ofNdarray(failed), idx, b.i32(0));
}

} // namespace

bool variants::mayLaunchOptimistically(const Kernel &kernel,
                                       std::span<const AdStackAllocaStmt *const> stacks,
                                       const LazyValueNamer &names) {
  return !stacks.empty() && findSplit(kernel, stacks, names).ok();
}

absl::StatusOr<OptimisticLaunch>
buildAdStackOptimistic(const Kernel &kernel, std::span<const AdStackAllocaStmt *const> stacks) {
  if (stacks.empty())
    return refuse(kernel, "it has no measured adstack");
  LazyValueNamer names(kernel);
  absl::StatusOr<Split> split = findSplit(kernel, stacks, names);
  if (!split.ok())
    return split.status();
  OptimisticLaunch out;
  out.iterations = split->iterations;
  std::shared_ptr<Kernel> tryK = cloneKernel(kernel, kernel.name() + "__adstack_try");
  std::shared_ptr<Kernel> rerunK = cloneKernel(kernel, kernel.name() + "__adstack_rerun");
  std::unordered_map<const Stmt *, Stmt *> inTry = variants::cloneMap(kernel, *tryK);
  std::unordered_map<const Stmt *, Stmt *> inRerun = variants::cloneMap(kernel, *rerunK);
  for (Stmt *s : variants::preorder(kernel))
    if (auto *a = dyn_cast<AdStackAllocaStmt>(s))
      out.stacks.push_back(
          {a, cast<AdStackAllocaStmt>(inTry.at(a)),
           taskOf(s) == split->task ? cast<AdStackAllocaStmt>(inRerun.at(a)) : nullptr});
  std::vector<AdStackAllocaStmt *> tryStacks;
  for (const AdStackAllocaStmt *s : stacks)
    tryStacks.push_back(cast<AdStackAllocaStmt>(inTry.at(s)));
  makeTryKernel(*tryK, *cast<ForStmt>(inTry.at(split->task)), split->position, tryStacks);
  makeRerunKernel(*rerunK, *cast<ForStmt>(inRerun.at(split->task)));
  out.tryKernel = std::move(tryK);
  out.rerunKernel = std::move(rerunK);
  return out;
}

} // namespace qd
