//===- MergeTasks.cpp - One function per class of equivalent tasks --------===//
//
// Two task functions are equivalent when a lock-step walk pairs their
// blocks and instructions one to one, each pair the same operation
// (Instruction::isSameOperationAs, and the same flags) whose operands are
// paired values of the two functions, the same constant or global, or two
// integer constants of one type where a run-time value may stand. Classes
// are found by a structural hash first (integer constants hashed by type
// only), then by the walk against each class's first function.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/MergeTasks.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/Hashing.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GetElementPtrTypeIterator.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qd {

/// A task's call of qd_rt_parallel_for and what it passes.
struct TaskMerger::Call {
  llvm::CallInst *call;
  llvm::Function *fn;
  llvm::AllocaInst *captures;
  uint64_t slots; // of the capture buffer
};

namespace {

using llvm::Instruction;
using llvm::Value;

/// The scalar of an integer constant of at most 64 bits, or of a splat of
/// one; null for anything else.
const llvm::ConstantInt *integerOf(const Value *v) {
  if (const auto *c = llvm::dyn_cast<llvm::ConstantInt>(v))
    return c->getBitWidth() <= 64 ? c : nullptr;
  if (!v->getType()->isVectorTy())
    return nullptr;
  const auto *c = llvm::dyn_cast<llvm::Constant>(v);
  const auto *s = c ? llvm::dyn_cast_or_null<llvm::ConstantInt>(c->getSplatValue()) : nullptr;
  return s && s->getBitWidth() <= 64 ? s : nullptr;
}

/// Whether operand `k` of `i` may be a value computed at run time.
bool runtimeOperand(const Instruction &i, unsigned k) {
  if (llvm::isa<llvm::BinaryOperator, llvm::ICmpInst, llvm::SelectInst, llvm::CastInst,
                llvm::PHINode, llvm::FreezeInst>(i))
    return true;
  if (llvm::isa<llvm::StoreInst>(i) || llvm::isa<llvm::InsertElementInst>(i))
    return k == (llvm::isa<llvm::StoreInst>(i) ? 0u : 1u);
  if (llvm::isa<llvm::AtomicRMWInst>(i))
    return k == 1;
  if (llvm::isa<llvm::AtomicCmpXchgInst>(i))
    return k == 1 || k == 2;
  if (const auto *gep = llvm::dyn_cast<llvm::GetElementPtrInst>(&i)) {
    if (k == 0)
      return false;
    auto it = llvm::gep_type_begin(gep);
    for (unsigned n = 1; n < k; ++n)
      ++it;
    return !it.isStruct();
  }
  if (const auto *call = llvm::dyn_cast<llvm::CallInst>(&i))
    return k < call->arg_size() && !call->paramHasAttr(k, llvm::Attribute::ImmArg);
  return false;
}

bool isLocal(const Value *v) {
  return llvm::isa<llvm::Argument, Instruction, llvm::BasicBlock>(v);
}

/// A hash equal for equivalent functions.
size_t shapeHash(const llvm::Function &f) {
  llvm::hash_code h = llvm::hash_value(f.size());
  for (const llvm::BasicBlock &bb : f)
    for (const Instruction &i : bb) {
      h = llvm::hash_combine(h, i.getOpcode(), i.getType(), i.getNumOperands());
      for (unsigned k = 0; k < i.getNumOperands(); ++k) {
        const Value *v = i.getOperand(k);
        const void *key = isLocal(v) ? nullptr
                          : integerOf(v) && runtimeOperand(i, k)
                              ? static_cast<const void *>(v->getType())
                              : v;
        h = llvm::hash_combine(h, key);
      }
    }
  return h;
}

/// The integer constants of `f` where a run-time value may stand, in the
/// order of a walk (equivalent functions list them at the same places).
std::vector<std::pair<Instruction *, unsigned>> integerSlots(llvm::Function &f) {
  std::vector<std::pair<Instruction *, unsigned>> slots;
  for (llvm::BasicBlock &bb : f)
    for (Instruction &i : bb)
      for (unsigned k = 0; k < i.getNumOperands(); ++k)
        if (integerOf(i.getOperand(k)) && runtimeOperand(i, k))
          slots.emplace_back(&i, k);
  return slots;
}

/// Whether `g` is equivalent to `f` (the file's comment).
bool equivalent(const llvm::Function &f, const llvm::Function &g) {
  if (f.getFunctionType() != g.getFunctionType() || f.size() != g.size())
    return false;
  llvm::DenseMap<const Value *, const Value *> pair;
  for (unsigned a = 0; a < f.arg_size(); ++a)
    pair[f.getArg(a)] = g.getArg(a);
  std::vector<std::pair<const Instruction *, const Instruction *>> insts;
  for (auto fb = f.begin(), gb = g.begin(); fb != f.end(); ++fb, ++gb) {
    if (fb->size() != gb->size())
      return false;
    pair[&*fb] = &*gb;
    for (auto fi = fb->begin(), gi = gb->begin(); fi != fb->end(); ++fi, ++gi) {
      pair[&*fi] = &*gi;
      insts.emplace_back(&*fi, &*gi);
    }
  }
  auto same = [&](const Value *a, const Value *b) {
    if (isLocal(a)) {
      auto it = pair.find(a);
      return it != pair.end() && it->second == b;
    }
    return a == b;
  };
  for (auto [fi, gi] : insts) {
    if (!fi->isSameOperationAs(gi) ||
        fi->getRawSubclassOptionalData() != gi->getRawSubclassOptionalData())
      return false;
    for (unsigned k = 0; k < fi->getNumOperands(); ++k) {
      const Value *a = fi->getOperand(k), *b = gi->getOperand(k);
      if (same(a, b))
        continue;
      if (!runtimeOperand(*fi, k) || !integerOf(a) || !integerOf(b) || a->getType() != b->getType())
        return false;
    }
    if (const auto *phi = llvm::dyn_cast<llvm::PHINode>(fi))
      for (unsigned k = 0; k < phi->getNumIncomingValues(); ++k)
        if (!same(phi->getIncomingBlock(k), llvm::cast<llvm::PHINode>(gi)->getIncomingBlock(k)))
          return false;
  }
  return true;
}

/// `call`'s task, if `call` is a call of qd_rt_parallel_for whose function
/// and capture buffer (an `alloca [n x i64]` of the caller's entry block)
/// are its own.
std::optional<TaskMerger::Call> taskCall(llvm::CallInst *call) {
  llvm::Function *callee = call ? call->getCalledFunction() : nullptr;
  if (!callee || callee->getName() != "qd_rt_parallel_for" || call->arg_size() < 3)
    return std::nullopt;
  auto *fn = llvm::dyn_cast<llvm::Function>(call->getArgOperand(1));
  auto *buf = llvm::dyn_cast<llvm::AllocaInst>(call->getArgOperand(2));
  auto *array = buf ? llvm::dyn_cast<llvm::ArrayType>(buf->getAllocatedType()) : nullptr;
  if (!fn || fn->isDeclaration() || !fn->hasOneUse() || fn->arg_size() < 2 || !array ||
      !array->getElementType()->isIntegerTy(64) ||
      buf->getParent() != &call->getFunction()->getEntryBlock())
    return std::nullopt;
  return TaskMerger::Call{call, fn, buf, array->getNumElements()};
}

/// The value at each of `f`'s integer slots (integerSlots).
std::vector<int64_t> slotValues(llvm::Function &f) {
  std::vector<int64_t> values;
  for (auto [inst, k] : integerSlots(f))
    values.push_back(integerOf(inst->getOperand(k))->getSExtValue());
  return values;
}

} // namespace

/// A class of equivalent tasks: its first, whose function is kept, then the
/// others, each with the values at its function's integer slots (`values[t
/// - 1]` for `calls[t]`, taken before its body was deleted).
struct TaskMerger::Class {
  std::vector<Call> calls;
  std::vector<std::vector<int64_t>> values;
};

TaskMerger::TaskMerger() = default;
TaskMerger::~TaskMerger() = default;

void TaskMerger::add(llvm::CallInst *call) {
  std::optional<TaskMerger::Call> t = taskCall(call);
  if (!t)
    return;
  ++tasks_;
  // Candidates by (hash, capture slots); within a bucket, classes by the
  // walk. Classes in the order of their first task.
  std::vector<size_t> &bucket = buckets_[llvm::hash_combine(shapeHash(*t->fn), t->slots)];
  auto it = std::find_if(bucket.begin(), bucket.end(), [&](size_t c) {
    return classes_[c].calls[0].slots == t->slots && equivalent(*classes_[c].calls[0].fn, *t->fn);
  });
  if (it == bucket.end()) {
    bucket.push_back(classes_.size());
    classes_.push_back({{*t}, {}});
    return;
  }
  // The function goes; only its constants are needed, and its body is
  // freed now, while it is in cache.
  Class &c = classes_[*it];
  c.calls.push_back(*t);
  c.values.push_back(slotValues(*t->fn));
  t->fn->deleteBody();
}

/// Keeps the first task of class `c` for all of them; returns the
/// parameters it added.
static size_t mergeClass(const TaskMerger::Class &c) {
  llvm::Function *kept = c.calls[0].fn;
  uint64_t first = c.calls[0].slots;
  std::vector<std::pair<Instruction *, unsigned>> slots = integerSlots(*kept);
  // A parameter per distinct column of values (width, value in each task).
  std::map<std::pair<unsigned, std::vector<int64_t>>, size_t> params;
  std::vector<std::vector<int64_t>> columns;    // by parameter
  std::vector<std::pair<size_t, size_t>> holes; // (slot, parameter)
  for (size_t s = 0; s < slots.size(); ++s) {
    const llvm::ConstantInt *own = integerOf(slots[s].first->getOperand(slots[s].second));
    std::vector<int64_t> values{own->getSExtValue()};
    bool differ = false;
    for (const std::vector<int64_t> &v : c.values) {
      values.push_back(v[s]);
      differ = differ || values.back() != values.front();
    }
    if (!differ)
      continue;
    auto [it, added] = params.try_emplace({own->getBitWidth(), values}, columns.size());
    if (added)
      columns.push_back(values);
    holes.emplace_back(s, it->second);
  }
  // The kept function loads each parameter once, in its entry block.
  llvm::BasicBlock &entry = kept->getEntryBlock();
  llvm::IRBuilder<> b(&entry, entry.getFirstNonPHIOrDbgOrAlloca());
  llvm::Type *i64 = b.getInt64Ty();
  std::vector<Value *> raw;
  for (size_t p = 0; p < columns.size(); ++p)
    raw.push_back(
        b.CreateLoad(i64, b.CreateConstGEP1_64(i64, kept->getArg(1), first + p), "task.param"));
  std::map<std::pair<size_t, llvm::Type *>, Value *> typed;
  for (auto [s, p] : holes) {
    auto [inst, k] = slots[s];
    llvm::Type *ty = inst->getOperand(k)->getType();
    Value *&v = typed[{p, ty}];
    if (!v) {
      Value *scalar = b.CreateTrunc(raw[p], ty->getScalarType());
      v = ty->isVectorTy()
              ? b.CreateVectorSplat(llvm::cast<llvm::VectorType>(ty)->getElementCount(), scalar)
              : scalar;
    }
    inst->setOperand(k, v);
  }
  // Each caller passes its values after its captures.
  for (size_t t = 0; t < c.calls.size(); ++t) {
    const TaskMerger::Call &call = c.calls[t];
    auto *type = llvm::ArrayType::get(i64, first + columns.size());
    auto *buf = new llvm::AllocaInst(type, call.captures->getAddressSpace(), nullptr,
                                     call.captures->getAlign(), "captures", call.captures);
    call.captures->replaceAllUsesWith(buf);
    call.captures->eraseFromParent();
    llvm::IRBuilder<> cb(call.call);
    for (size_t p = 0; p < columns.size(); ++p)
      cb.CreateStore(llvm::ConstantInt::get(i64, columns[p][t], /*isSigned=*/true),
                     cb.CreateConstGEP1_64(i64, buf, first + p));
    if (t > 0) {
      call.call->setArgOperand(1, kept);
      call.fn->eraseFromParent();
    }
  }
  return columns.size();
}

TaskMergeStats TaskMerger::finish() {
  TaskMergeStats stats;
  stats.tasks = tasks_;
  stats.functions = classes_.size();
  for (const Class &c : classes_)
    if (c.calls.size() > 1)
      stats.parameters += mergeClass(c);
  classes_.clear();
  buckets_.clear();
  tasks_ = 0;
  return stats;
}

TaskMergeStats mergeEquivalentTasks(llvm::Module &module) {
  TaskMerger merger;
  if (llvm::Function *kernel = module.getFunction("qd_kernel");
      kernel && !kernel->isDeclaration()) {
    std::vector<llvm::CallInst *> calls;
    for (llvm::BasicBlock &bb : *kernel)
      for (Instruction &i : bb)
        if (auto *call = llvm::dyn_cast<llvm::CallInst>(&i))
          calls.push_back(call);
    for (llvm::CallInst *call : calls)
      merger.add(call);
  }
  return merger.finish();
}

} // namespace qd
