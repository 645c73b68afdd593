//===- SpirvEmitMemory.cpp - Memory and adstacks of the SPIR-V emitter ---===//
//
// Locals, field and ndarray accesses and atomics, and the adstacks: in
// the interleaved heap or, with SpirvOptions::localAdStackEntries, in a
// local array per invocation (SpirvEmitter.h).
//
//===----------------------------------------------------------------------===//
#include "SpirvEmitter.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/analysis/TaskVarying.h"

namespace qd::spirv {

//===--- Memory -----------------------------------------------------------===//

void SpirvEmitter::visitAllocaStmt(AllocaStmt &s) {
  ScalarType t = s.elementType();
  Id var = 0;
  if (auto it = fn_->locals.find(&s); it != fn_->locals.end())
    var = it->second;
  else
    var = fn_->locals[&s] = localVariable(b_.typeOf(t));
  b_.store(var, zeroOf(t));
}

void SpirvEmitter::visitLocalLoadStmt(LocalLoadStmt &s) {
  set(&s, b_.load(b_.typeOf(s.type().element()), fn_->locals.at(s.local())));
}

void SpirvEmitter::visitLocalStoreStmt(LocalStoreStmt &s) {
  b_.store(fn_->locals.at(s.local()), get(s.value()));
}

void SpirvEmitter::visitShapeStmt(ShapeStmt &s) {
  unsigned off = layout_.shapeOffset[cast<Argument>(s.ndarray())->index()] + s.axis();
  uint32_t at = out_.data.shapes + 2 * off;
  set(&s, fromWords(controlWord(at), controlWord(at + 1), s.type().element()));
}

void SpirvEmitter::globalAccess(GlobalAccessStmt &g) {
  using spv::Op;
  const SlotInfo &slot = slots_[slotOfStmt_.at(&g)];
  ScalarType elem = g.elementType();
  Id u32 = b_.tU32();
  Id flat = b_.u32(0);
  Id bad = m_.constBool(false);
  std::vector<std::pair<Id, Id>> data;
  for (unsigned d = 0; d < g.numIndices(); ++d) {
    Id extLo, extHi;
    if (g.isField()) {
      int64_t e = g.field()->shape()[d];
      extLo = b_.u32(uint32_t(e));
      extHi = b_.u32(0);
    } else {
      unsigned off = layout_.shapeOffset[cast<Argument>(g.ndarray())->index()] + d;
      extLo = controlWord(out_.data.shapes + 2 * off);
      extHi = controlWord(out_.data.shapes + 2 * off + 1);
    }
    Value *index = g.index(d);
    ScalarType it = index->type().element();
    Id idx = get(index);
    Id u = 0;
    if (it == ScalarType::I64) {
      Id ext64 = fromWords(extLo, extHi, ScalarType::I64);
      if (opts_.boundsChecked)
        bad = b_.lor(bad, b_.cmp(Op::OpUGreaterThanEqual, idx, ext64));
      u = b_.bitcast(u32, b_.op(Op::OpSConvert, b_.tI32(), {idx}));
    } else {
      u = b_.bitcast(u32, idx);
      if (opts_.boundsChecked) // a negative index is huge unsigned
        bad = b_.lor(bad, b_.cmp(Op::OpUGreaterThanEqual, u, extLo));
    }
    if (opts_.boundsChecked)
      data.push_back(toWords(idx, it));
    flat = b_.iadd(u32, b_.imul(u32, flat, extLo), u);
  }
  if (opts_.boundsChecked && g.numIndices() > 0) {
    unsigned id = site(g, "index out of range");
    layout_.sites.back().indexCheck = true;
    raiseIf(bad, id, data);
  }
  Id ptr = b_.op(Op::OpAccessChain, slot.pointer, {slot.var, b_.u32(0), flat});
  auto toStorage = [&](Id v) {
    if (elem == ScalarType::I1)
      return b_.select(u32, v, b_.u32(1), b_.u32(0));
    return slot.floatAsBits ? b_.bitcast(slot.storage, v) : v;
  };
  if (g.kind() == StmtKind::GlobalLoad) {
    Id raw = b_.load(slot.storage, ptr);
    Id v = elem == ScalarType::I1 ? b_.cmp(Op::OpINotEqual, raw, b_.u32(0))
           : slot.floatAsBits     ? b_.bitcast(b_.typeOf(elem), raw)
                                  : raw;
    set(&g, v);
  } else if (auto *st = dyn_cast<GlobalStoreStmt>(&g)) {
    b_.store(ptr, toStorage(get(st->value())));
  } else {
    auto &rmw = cast<AtomicRmwStmt>(g);
    switch (rmw.op()) {
    case AtomicOp::Add: {
      if (elem != ScalarType::I1 && fn_->ownership && fn_->ownership->isPrivateAtomic(&g) &&
          !(nativeAdd(slot) && inLoopOfTask(g, *fn_->ownership->task())) &&
          !(fn_->cooperative && fn_->cooperative->inSharedLoop(g))) {
        // No other iteration touches the element: a plain update. Not in
        // a loop where the device adds atomically by itself: there each
        // update's load waits for the store before it (the driver cannot
        // tell their addresses apart), while an atomic add waits for
        // nothing (mass_spring's nn1 gradient on NVIDIA, H200: a task of 32
        // iterations each looping over 4096 masses, 5.1 against 6.4 ms).
        Id raw = b_.load(slot.storage, ptr);
        Id t = b_.typeOf(elem);
        Id old = slot.floatAsBits ? b_.bitcast(t, raw) : raw;
        Id v = get(rmw.value());
        b_.store(ptr, toStorage(isFloat(elem) ? b_.fadd(t, old, v) : b_.iadd(t, old, v)));
        break;
      }
      bool uniform = !fn_->varying.empty() && !hasVaryingIndex(g, fn_->varying);
      if (uniform)
        subgroupAtomicAdd(cast<AtomicAddStmt>(g), slot, ptr, flat, get(rmw.value()));
      else
        atomicAdd(cast<AtomicAddStmt>(g), slot, ptr, get(rmw.value()));
      break;
    }
    case AtomicOp::Max:
      b_.op(Op::OpAtomicSMax, slot.storage,
            {ptr, b_.u32(kScopeDevice), b_.u32(0), get(rmw.value())});
      break;
    }
  }
}

bool SpirvEmitter::nativeAdd(const SlotInfo &slot) {
  return !isFloat(slot.elem) || !slot.floatAsBits;
}

bool SpirvEmitter::inLoopOfTask(const Stmt &s, const ForStmt &task) {
  for (const Stmt *p = s.parentStmt(); p && p != &task; p = p->parentStmt())
    if (p->kind() == StmtKind::For || p->kind() == StmtKind::While)
      return true;
  return false;
}

void SpirvEmitter::atomicAdd(const AtomicAddStmt &add, const SlotInfo &slot, Id ptr, Id value) {
  using spv::Op;
  Id scope = b_.u32(kScopeDevice), none = b_.u32(0);
  switch (slot.elem) {
  case ScalarType::I1: // wrapping 1-bit add
    b_.op(Op::OpAtomicXor, slot.storage,
          {ptr, scope, none, b_.select(b_.tU32(), value, b_.u32(1), b_.u32(0))});
    return;
  case ScalarType::I32:
  case ScalarType::I64:
    b_.op(Op::OpAtomicIAdd, slot.storage, {ptr, scope, none, value});
    return;
  case ScalarType::F32:
  case ScalarType::F64:
    break;
  }
  if (!slot.floatAsBits) {
    m_.extension("SPV_EXT_shader_atomic_float_add");
    m_.capability(slot.elem == ScalarType::F32 ? spv::Capability::AtomicFloat32AddEXT
                                               : spv::Capability::AtomicFloat64AddEXT);
    b_.op(Op::OpAtomicFAddEXT, slot.storage, {ptr, scope, none, value});
    nativeFloatAdds_ = true;
    return;
  }
  // A compare-exchange loop on the bits.
  Id ft = b_.typeOf(slot.elem);
  Id header = m_.newId(), body = m_.newId(), cont = m_.newId(), merge = m_.newId();
  ExitFlag exited = beginExitCheck();
  b_.branch(header);
  b_.label(header);
  b_.loopMerge(merge, cont);
  b_.branch(body);
  b_.label(body);
  Id old = b_.load(slot.storage, ptr);
  Id sum = b_.bitcast(slot.storage, b_.fadd(ft, b_.bitcast(ft, old), value));
  Id got = b_.op(Op::OpAtomicCompareExchange, slot.storage, {ptr, scope, none, none, sum, old});
  Id done = b_.cmp(Op::OpIEqual, got, old);
  setExit(exited, done);
  b_.branch(cont);
  b_.label(cont);
  b_.condBranch(done, merge, header);
  b_.label(merge);
  checkExit(exited, add);
}

void SpirvEmitter::subgroupAtomicAdd(const AtomicAddStmt &add, const SlotInfo &slot, Id ptr,
                                     Id flat, Id value) {
  using spv::Op;
  ScalarType t = slot.elem;
  // 64-bit group operations need shaderSubgroupExtendedTypes.
  if (t != ScalarType::F32 && t != ScalarType::I32)
    return atomicAdd(add, slot, ptr, value);
  m_.capability(spv::Capability::GroupNonUniform);
  m_.capability(spv::Capability::GroupNonUniformVote);
  m_.capability(spv::Capability::GroupNonUniformArithmetic);
  Id scope = b_.u32(uint32_t(spv::Scope::Subgroup)), boolTy = b_.tBool();
  // The active invocations all update one element: one adds their sum
  // (a reduction over the active invocations, whatever the control flow).
  Id same = b_.op(Op::OpGroupNonUniformAllEqual, boolTy, {scope, flat});
  Id sum = b_.op(isFloat(t) ? Op::OpGroupNonUniformFAdd : Op::OpGroupNonUniformIAdd, b_.typeOf(t),
                 {scope, uint32_t(spv::GroupOperation::Reduce), value});
  Id elected = b_.op(Op::OpGroupNonUniformElect, boolTy, {scope});
  Id v = b_.select(b_.typeOf(t), same, sum, value);
  b_.ifThen(b_.lor(b_.lnot(same), elected), [&] { atomicAdd(add, slot, ptr, v); });
}

//===--- Adstacks ---------------------------------------------------------===//

const StackState &SpirvEmitter::stack(unsigned id) {
  StackState &st = fn_->stacks[id];
  if (!st.base) {
    Id u32 = b_.tU32();
    Id threads = controlWord(SpirvLaunchData::kThreads);
    Id offset = controlWord(out_.data.offsets + id);
    st.capacity = controlWord(out_.data.capacities + id);
    Id words = b_.u32(out_.entryWords[id]);
    KernelLayout::Stack &layout = layout_.stacks[id];
    auto local = opts_.localAdStackEntries.find(layout.stmt);
    if (local != opts_.localAdStackEntries.end() && local->second > 0) {
      layout.localEntries = local->second;
      st.local =
          localVariable(m_.typeArray(u32, b_.u32(uint32_t(local->second) * out_.entryWords[id])));
      st.base = b_.u32(0);
      st.row = words;
    } else {
      Id compacted = controlWord(SpirvLaunchData::kGroupTable);
      Id heapShift = controlWord(SpirvLaunchData::kHeapShift);
      Id capacity = st.capacity;
      inPrologue([&] {
        Id base = b_.iadd(u32, b_.imul(u32, offset, threads), b_.imul(u32, fn_->thread, words));
        Id row = b_.imul(u32, threads, words);
        // A compacted heap (docs/runtime.md, "Compacted heap"): the table
        // at its start (u32 words) gives each group of G = 1 << (word - 1)
        // invocations (1-32, per launch), per column of stacks, a region
        // (its word offset; its capacity is the distance to the next offset
        // over G x the column's entry words); the header gives the stack's
        // column, its prefix and its column's entry bytes. The group's
        // invocations interleave there. (Word 0 where there is no table:
        // every heap with stacks has it.)
        Id on = b_.cmp(spv::Op::OpINotEqual, compacted, b_.u32(0));
        Id shift =
            b_.select(u32, on, b_.op(spv::Op::OpISub, u32, {compacted, b_.u32(1)}), b_.u32(0));
        Id group = b_.op(spv::Op::OpShiftLeftLogical, u32, {b_.u32(1), shift});
        Id g = b_.op(spv::Op::OpShiftRightLogical, u32, {fn_->thread, shift});
        Id lane = b_.op(spv::Op::OpBitwiseAnd, u32,
                        {fn_->thread, b_.op(spv::Op::OpISub, u32, {group, b_.u32(1)})});
        auto word = [&](Id at) { return b_.load(u32, heapPtr(b_.select(u32, on, at, b_.u32(0)))); };
        auto words4 = [&](Id bytes) {
          return b_.op(spv::Op::OpShiftRightLogical, u32, {bytes, b_.u32(2)});
        };
        uint32_t header = 1 + 3 * uint32_t(layout_.stacks.size());
        Id column = word(b_.u32(1 + 3 * id));
        Id prefix = words4(word(b_.u32(2 + 3 * id)));
        Id perLevel = b_.imul(u32, group, words4(word(b_.u32(3 + 3 * id))));
        Id entry =
            b_.iadd(u32, b_.iadd(u32, b_.imul(u32, g, word(b_.u32(0))), b_.u32(header)), column);
        Id region = word(entry);
        Id next = word(b_.iadd(u32, entry, b_.u32(1)));
        // (A window's regions start `heapShift` words before their offset.)
        Id shifted = b_.op(spv::Op::OpISub, u32, {region, heapShift});
        Id start = b_.iadd(u32, shifted, b_.imul(u32, group, prefix));
        st.base = b_.select(u32, on, b_.iadd(u32, start, b_.imul(u32, lane, words)), base);
        st.row = b_.select(u32, on, perLevel, row);
        Id none = b_.cmp(spv::Op::OpIEqual, perLevel, b_.u32(0));
        Id divisor = b_.select(u32, none, b_.u32(1), perLevel);
        Id own =
            b_.op(spv::Op::OpUDiv, u32, {b_.op(spv::Op::OpISub, u32, {next, region}), divisor});
        st.capacity = b_.select(u32, on, own, capacity);
        return 0;
      });
    }
    st.depth = localVariable(u32);
    st.excess = localVariable(u32);
  }
  return st;
}

void SpirvEmitter::visitAdStackAllocaStmt(AdStackAllocaStmt &s) {
  const StackState &st = stack(stackIds_.at(&s));
  b_.store(st.depth, b_.u32(0));
  b_.store(st.excess, b_.u32(0));
}

void SpirvEmitter::adStackOp(AdStackOpStmt &op) {
  using spv::Op;
  auto *alloca = cast<AdStackAllocaStmt>(op.stack());
  unsigned id = stackIds_.at(alloca);
  const StackState &st = stack(id);
  ScalarType elem = alloca->elementType();
  Id u32 = b_.tU32();
  uint32_t pw = wordsOf(elem);
  // Word `index` of the stack's storage: the heap, or its local array.
  auto wordPtr = [&](Id index) {
    if (!st.local)
      return heapPtr(index);
    return b_.op(spv::Op::OpAccessChain, m_.typePointer(spv::StorageClass::Function, u32),
                 {st.local, index});
  };
  auto readAt = [&](Id at) {
    std::vector<Id> w;
    for (uint32_t i = 0; i < pw; ++i)
      w.push_back(b_.load(u32, wordPtr(b_.iadd(u32, at, b_.u32(i)))));
    return wordsValue(w, elem);
  };
  auto writeAt = [&](Id at, Id v) {
    std::vector<Id> w = valueWords(v, elem);
    for (uint32_t i = 0; i < pw; ++i)
      b_.store(wordPtr(b_.iadd(u32, at, b_.u32(i))), w[i]);
  };
  if (auto *push = dyn_cast<AdStackPushStmt>(&op)) {
    Id write = m_.newId(), over = m_.newId(), done = m_.newId();
    Id depth = b_.load(u32, st.depth);
    Id fits = b_.cmp(Op::OpULessThan, depth, st.capacity);
    b_.selectionMerge(done);
    b_.condBranch(fits, write, over);
    b_.label(write);
    Id at = b_.iadd(u32, st.base, b_.imul(u32, depth, st.row));
    writeAt(at, get(push->value()));
    if (out_.entryWords[id] > pw) // the adjoint slot starts at 0
      writeAt(b_.iadd(u32, at, b_.u32(pw)), zeroOf(elem));
    b_.store(st.depth, b_.iadd(u32, depth, b_.u32(1)));
    b_.branch(done);
    // Nothing is written; remember how far past the capacity this push went.
    b_.label(over);
    Id excess = b_.iadd(u32, b_.load(u32, st.excess), b_.u32(1));
    b_.store(st.excess, excess);
    b_.op(Op::OpAtomicUMax, u32,
          {controlPtr(b_.u32(out_.data.needed + id)), b_.u32(kScopeDevice), b_.u32(0), excess});
    b_.branch(done);
    b_.label(done);
    return;
  }
  unsigned underflow = site(op, adStackUnderflowText(alloca));
  if (op.kind() == StmtKind::AdStackPop) {
    // An excess push goes first (nothing was stored for it).
    Id dropExcess = m_.newId(), dropRow = m_.newId(), done = m_.newId();
    Id excess = b_.load(u32, st.excess);
    Id hasExcess = b_.cmp(Op::OpINotEqual, excess, b_.u32(0));
    b_.selectionMerge(done);
    b_.condBranch(hasExcess, dropExcess, dropRow);
    b_.label(dropExcess);
    b_.store(st.excess, b_.isub(u32, excess, b_.u32(1)));
    b_.branch(done);
    b_.label(dropRow);
    Id depth = b_.load(u32, st.depth);
    raiseIf(b_.cmp(Op::OpIEqual, depth, b_.u32(0)), underflow);
    b_.store(st.depth, b_.isub(u32, depth, b_.u32(1)));
    b_.branch(done);
    b_.label(done);
    return;
  }
  // After an overflow the depth stays at the capacity: reads use the last
  // stored entry (the runtime refuses capacity 0, so it exists).
  Id depth = b_.load(u32, st.depth);
  raiseIf(b_.cmp(Op::OpIEqual, depth, b_.u32(0)), underflow);
  Id at = b_.iadd(u32, st.base, b_.imul(u32, b_.isub(u32, depth, b_.u32(1)), st.row));
  Id adj = b_.iadd(u32, at, b_.u32(pw));
  if (op.kind() == StmtKind::AdStackLoadTop) {
    set(&op, readAt(at));
  } else if (op.kind() == StmtKind::AdStackLoadTopAdj) {
    set(&op, readAt(adj));
  } else {
    Id ty = b_.typeOf(elem);
    writeAt(adj, b_.fadd(ty, readAt(adj), get(cast<AdStackAccAdjointStmt>(op).value())));
  }
}

} // namespace qd::spirv
