//===- MergeTasks.cpp - One function per class of equivalent tasks --------===//
//
// Two task functions are equivalent when a lock-step walk pairs their
// blocks and instructions one to one, each pair the same operation
// (Instruction::isSameOperationAs, and the same flags) whose operands are
// paired values of the two functions, the same constant or global, or two
// integer constants of one type where a run-time value may stand. Each
// task's function is flattened into words as it is added (Shape); classes
// are found by the words' hash, then by comparing the words with those of
// each class's first function, which is long out of cache by then.
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

uint64_t pointer(const void *p) {
  return reinterpret_cast<uint64_t>(p);
}

} // namespace

/// What add() reuses from one task to the next: a large task's words
/// would otherwise be reallocated (and, past malloc's mmap threshold,
/// faulted in afresh) at every doubling, and its map of locals rehashed.
struct TaskMerger::Scratch {
  llvm::DenseMap<const Value *, uint64_t> ids;
  std::vector<uint64_t> words;
};

namespace {

/// A task function flattened into words, taken in one walk while the
/// function is in cache: two functions are equivalent (the file's comment)
/// exactly when their words are equal and their `unencoded` instructions
/// pair up under isSameOperationAs. Locals (arguments, blocks,
/// instructions) are numbered in the order the walk meets them, so equal
/// words pair them one to one; an integer constant where a run-time value
/// may stand is a word for its type, and its value goes to `values`. The
/// words are built in the scratch's buffer; a class's first function keeps
/// a copy (`words`).
struct Shape {
  std::vector<uint64_t> words;
  std::vector<int64_t> values;
  std::vector<const Instruction *> unencoded;
  size_t hash = 0;

  Shape(const llvm::Function &f, TaskMerger::Scratch &scratch) {
    auto &ids = scratch.ids;
    std::vector<uint64_t> &out = scratch.words;
    ids.clear();
    out.clear();
    for (const llvm::Argument &a : f.args())
      ids[&a] = ids.size();
    auto local = [&](const Value *v) { return ids.try_emplace(v, ids.size()).first->second; };
    enum : uint64_t { kBlock = 1, kLocal, kConstant, kInteger };
    out.push_back(pointer(f.getFunctionType()));
    for (const llvm::BasicBlock &bb : f) {
      out.insert(out.end(), {kBlock, local(&bb)});
      for (const Instruction &i : bb) {
        out.insert(out.end(), {local(&i), i.getOpcode(), pointer(i.getType()), i.getNumOperands(),
                               i.getRawSubclassOptionalData()});
        for (unsigned k = 0; k < i.getNumOperands(); ++k) {
          const Value *v = i.getOperand(k);
          if (isLocal(v)) {
            out.insert(out.end(), {kLocal, local(v)});
          } else if (const llvm::ConstantInt *c = integerOf(v); c && runtimeOperand(i, k)) {
            out.insert(out.end(), {kInteger, pointer(v->getType())});
            values.push_back(c->getSExtValue());
          } else {
            out.insert(out.end(), {kConstant, pointer(v)});
          }
        }
        if (!encodeSpecial(i, local, out))
          unencoded.push_back(&i);
      }
    }
    hash = llvm::hash_combine_range(out.begin(), out.end());
  }

  /// Whether the function of `other`, whose words are `otherWords`, is
  /// equivalent to this one's.
  bool matches(const Shape &other, const std::vector<uint64_t> &otherWords) const {
    if (hash != other.hash || words != otherWords || unencoded.size() != other.unencoded.size())
      return false;
    for (size_t k = 0; k < unencoded.size(); ++k)
      if (!unencoded[k]->isSameOperationAs(other.unencoded[k]))
        return false;
    return true;
  }

private:
  /// Adds what LLVM's hasSameSpecialState compares for `i` (and a PHI's
  /// incoming blocks) to `words`; false where that is not all of it (the
  /// instruction is then compared with isSameOperationAs).
  template <typename Local>
  static bool encodeSpecial(const Instruction &i, Local &local, std::vector<uint64_t> &words) {
    auto add = [&](std::initializer_list<uint64_t> w) { words.insert(words.end(), w); };
    if (const auto *phi = llvm::dyn_cast<llvm::PHINode>(&i)) {
      for (const llvm::BasicBlock *bb : phi->blocks())
        words.push_back(local(bb));
    } else if (const auto *cmp = llvm::dyn_cast<llvm::CmpInst>(&i)) {
      add({cmp->getPredicate()});
    } else if (const auto *gep = llvm::dyn_cast<llvm::GetElementPtrInst>(&i)) {
      add({pointer(gep->getSourceElementType())});
    } else if (const auto *a = llvm::dyn_cast<llvm::AllocaInst>(&i)) {
      add({pointer(a->getAllocatedType()), a->getAlign().value()});
    } else if (const auto *l = llvm::dyn_cast<llvm::LoadInst>(&i)) {
      add({l->isVolatile(), l->getAlign().value(), static_cast<uint64_t>(l->getOrdering()),
           l->getSyncScopeID()});
    } else if (const auto *st = llvm::dyn_cast<llvm::StoreInst>(&i)) {
      add({st->isVolatile(), st->getAlign().value(), static_cast<uint64_t>(st->getOrdering()),
           st->getSyncScopeID()});
    } else if (const auto *rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&i)) {
      add({static_cast<uint64_t>(rmw->getOperation()), rmw->isVolatile(), rmw->getAlign().value(),
           static_cast<uint64_t>(rmw->getOrdering()), rmw->getSyncScopeID()});
    } else if (const auto *sv = llvm::dyn_cast<llvm::ShuffleVectorInst>(&i)) {
      words.push_back(sv->getShuffleMask().size());
      for (int m : sv->getShuffleMask())
        words.push_back(static_cast<uint64_t>(static_cast<int64_t>(m)));
    } else if (const auto *ev = llvm::dyn_cast<llvm::ExtractValueInst>(&i)) {
      words.push_back(ev->getNumIndices());
      words.insert(words.end(), ev->idx_begin(), ev->idx_end());
    } else if (const auto *iv = llvm::dyn_cast<llvm::InsertValueInst>(&i)) {
      words.push_back(iv->getNumIndices());
      words.insert(words.end(), iv->idx_begin(), iv->idx_end());
    } else if (const auto *call = llvm::dyn_cast<llvm::CallInst>(&i)) {
      if (call->hasOperandBundles())
        return false;
      add({static_cast<uint64_t>(call->getTailCallKind()), call->getCallingConv(),
           pointer(call->getAttributes().getRawPointer()), pointer(call->getFunctionType())});
    } else {
      // The kinds without special state; any other is compared in full.
      return llvm::isa<llvm::BinaryOperator, llvm::UnaryOperator, llvm::CastInst, llvm::SelectInst,
                       llvm::BranchInst, llvm::ReturnInst, llvm::SwitchInst, llvm::UnreachableInst,
                       llvm::FreezeInst, llvm::ExtractElementInst, llvm::InsertElementInst>(i);
    }
    return true;
  }
};

/// The integer constants of `f` where a run-time value may stand, in the
/// order of a walk (Shape::values lists their values in the same order).
std::vector<std::pair<Instruction *, unsigned>> integerSlots(llvm::Function &f) {
  std::vector<std::pair<Instruction *, unsigned>> slots;
  for (llvm::BasicBlock &bb : f)
    for (Instruction &i : bb)
      for (unsigned k = 0; k < i.getNumOperands(); ++k)
        if (integerOf(i.getOperand(k)) && runtimeOperand(i, k))
          slots.emplace_back(&i, k);
  return slots;
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

} // namespace

/// A class of equivalent tasks: its first, whose function is kept, then the
/// others, each with the values at its function's integer slots (`values[t
/// - 1]` for `calls[t]`, taken before its body was deleted).
struct TaskMerger::Class {
  std::vector<Call> calls;
  std::vector<std::vector<int64_t>> values;
  Shape shape; // of calls[0]'s function
};

TaskMerger::TaskMerger() : scratch_(std::make_unique<Scratch>()) {}
TaskMerger::~TaskMerger() = default;

bool TaskMerger::add(llvm::CallInst *call) {
  std::optional<TaskMerger::Call> t = taskCall(call);
  if (!t)
    return true;
  ++tasks_;
  // Candidates by (shape hash, capture slots); within a bucket, classes by
  // their shapes. Classes in the order of their first task.
  Shape shape(*t->fn, *scratch_);
  std::vector<size_t> &bucket = buckets_[llvm::hash_combine(shape.hash, t->slots)];
  auto it = std::find_if(bucket.begin(), bucket.end(), [&](size_t c) {
    return classes_[c].calls[0].slots == t->slots &&
           classes_[c].shape.matches(shape, scratch_->words);
  });
  if (it == bucket.end()) {
    bucket.push_back(classes_.size());
    shape.words = scratch_->words;
    classes_.push_back({{*t}, {}, std::move(shape)});
    return true;
  }
  // The function goes; only its constants are needed, and its body is
  // freed now, while it is in cache.
  Class &c = classes_[*it];
  c.calls.push_back(*t);
  c.values.push_back(std::move(shape.values));
  t->fn->deleteBody();
  return false;
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
