//===- qd/analysis/ElementOwnership.h - Elements an iteration owns -*- C++ -*-===//
//
// The iterations of a parallel task run in any order: on several threads, and
// on the CPU several at a time as SIMD lanes (on a GPU, the threads of a
// warp). Which global elements may another iteration touch? This analysis is
// the one answer, used by the static write-after-read checker
// (GlobalAccess.h) and by every mapping of iterations onto lanes or threads
// (TaskVectorPlan.h).
//
// Alias classes. Accesses that may touch the same memory are one class:
//  - one component of one field (`@x`, `@x.grad` and `@x.dual` are separate
//    buffers, and fields never share storage with ndarrays);
//  - every ndarray argument of one element type and rank, any component:
//    the caller may pass one buffer for several arguments (or as another
//    argument's grad/dual companion). A launch only accepts a buffer for an
//    argument of its own element type and rank, so arguments that differ in
//    either are distinct storage. (This assumes distinct Buffer objects do
//    not overlap; two borrowed buffers over overlapping caller memory are
//    outside the contract.)
//  With NdarrayAliasing::Distinct, each component of each ndarray argument
//  is a class of its own: code compiled so may run only when the launch's
//  buffers do not overlap (the CPU, CUDA and HIP backends check, and compile the
//  conservative code for a launch whose buffers do).
//
// Ownership. An iteration *owns* the elements of a class when one index
// position holds the task index itself in every access of the class inside
// the task: iteration `i` then only touches elements whose index at that
// position is `i`, which no other iteration touches. Other index positions
// may differ between accesses (`@x[%i, 0]` and `@x[%i, 1]` are both owned).
//
// Slices. Accesses of one class that can never touch the same element
// (one index position holds `t` in some and `t + 1` in the others, or two
// constants) are analysed apart: each group is a class use of its own.
//
// Private atomics. An atomic add to an owned element cannot race with
// another iteration: a plain read-modify-write does the same.
//
// Near atomics. A class use the task only atomically updates, at elements
// that only iterations close to each other touch: for every task dimension
// d some index position holds `i_d + o` with o in a constant interval
// (neighbours, clamped neighbours; periodic ones modulo the extent), so two
// iterations that update one element differ by at most nearReach()[d] in
// dimension d. A backend that never runs such iterations at the same time
// (the CPU runs the task's chunks in two phases, even and odd, each at
// least that far apart) may update them with a plain read-modify-write.
// Only such a backend asks for them (TaskAssumptions::nearIterationsApart):
// on a GPU every iteration of a launch may run at once, so that near
// atomics made plain there would race; without the assumption the
// analysis finds none.
//
// Lanes. Consecutive iterations may run together as lanes only if they
// cannot observe each other's memory effects in another order than one after
// the other would: a class written by a plain store must be owned, and a
// class that is atomically added to must be owned or never loaded.
// `lanesRefused()` says which access breaks that.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Stmt.h"

#include <algorithm>
#include <compare>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace qd {

class ValueNamer;

/// What the analyses may assume about the buffers of ndarray arguments.
enum class NdarrayAliasing : uint8_t {
  /// Arguments of one element type and rank may share storage, in any
  /// component (the default: what every launch accepts).
  MayAlias,
  /// Every component of every ndarray argument is storage of its own: true
  /// of a launch whose buffers do not overlap (ndarrayBuffersOverlap in
  /// qd/runtime/Program.h).
  Distinct,
};

/// Distinct for code compiled for launches whose buffers do not overlap
/// (the code generators' distinctNdarrays option), else MayAlias.
inline NdarrayAliasing ndarrayAliasing(bool distinctNdarrays) {
  return distinctNdarrays ? NdarrayAliasing::Distinct : NdarrayAliasing::MayAlias;
}

/// What the backend that runs a task guarantees, for the analysis to use.
struct TaskAssumptions {
  /// How far the ndarray arguments' buffers may share storage.
  NdarrayAliasing aliasing = NdarrayAliasing::MayAlias;
  /// The backend never runs two iterations that update one element of a
  /// near class use at the same time, once the task tells it their reach
  /// (ElementOwnership::nearReach(); the CPU's two-phase chunks): the
  /// analysis finds near atomics. False (GPUs, whose threads all run at
  /// once): it finds none, and every such update stays atomic.
  bool nearIterationsApart = false;
};

/// Accesses that may touch the same memory (see the file comment).
struct AliasClass {
  const Field *field = nullptr;            // null: ndarrays
  Component component = Component::Primal; // fields; ndarrays when Distinct
  ScalarType element = ScalarType::F32;    // ndarrays only
  unsigned rank = 0;                       // ndarrays only
  const Value *ndarray = nullptr;          // the argument, when Distinct
  friend bool operator==(const AliasClass &, const AliasClass &) = default;
};

AliasClass aliasClassOf(const GlobalAccessStmt &access,
                        NdarrayAliasing aliasing = NdarrayAliasing::MayAlias);
/// `@x`, `@x.grad`, `%a.grad` (Distinct) or `ndarrays of f32, rank 1`.
std::string describe(const AliasClass &cls);

/// The alias classes that some store or atomic of `kernel` writes, under
/// `aliasing`. A global that no class of it names is read-only for the
/// whole launch: the LLVM GPU targets let the device read such fields
/// through its read-only caches (!invariant.load).
class WrittenAliasClasses {
public:
  WrittenAliasClasses(const Kernel &kernel, NdarrayAliasing aliasing);
  /// Whether some access of `access`'s class writes.
  bool written(const GlobalAccessStmt &access) const;
  bool written(const AliasClass &cls) const;

private:
  NdarrayAliasing aliasing_;
  std::vector<AliasClass> classes_;
};
/// True unless `a` and `b` are proved to touch distinct storage.
inline bool mayAlias(const GlobalAccessStmt &a, const GlobalAccessStmt &b,
                     NdarrayAliasing aliasing = NdarrayAliasing::MayAlias) {
  return aliasClassOf(a, aliasing) == aliasClassOf(b, aliasing);
}

/// Where a code generator emits a top-level store of a constant of a
/// parallel task's body: right before `before`, a later top-level
/// statement of the body, or at the end of the iteration (`before` null).
struct SunkStore {
  GlobalStoreStmt *store = nullptr;
  Stmt *before = nullptr;
};

/// The top-level stores of a constant in `task`'s body that may be emitted
/// later than where they stand, each as late as the first later top-level
/// statement that may touch its memory (an access of an alias class it may
/// share under `aliasing`, unless an index position proves them apart:
/// slices `t + 1` and `t` of one array) or leave the iteration early (a
/// `break` or `continue` of the task itself), else at the end of the
/// iteration; program order. Emitting them so changes no result. A
/// gradient's zeroing of an output's adjoint is one: on a GPU, a store
/// issued while the load of the same element is in flight waits for it,
/// and so do the iteration's memory accesses behind the store (a tape
/// loop's loads; the next slice's adjoint updates) (docs/runtime.md,
/// "Deferred stores").
std::vector<SunkStore> sunkStores(ForStmt &task, NdarrayAliasing aliasing);

/// Calls `emit(s)` for the statements of `task`'s body in the order a code
/// generator emits one iteration: each of sunkStores right before the
/// statement it sinks to, or program order without `defer`
/// (bounds-checked code, whose first bad index must be the one the
/// interpreter reports). Stops where `emit` returns false (a break or
/// continue ended the block).
template <typename Emit>
void forEachInEmissionOrder(ForStmt &task, NdarrayAliasing aliasing, bool defer, Emit &&emit) {
  std::unordered_set<const Stmt *> moved;
  std::unordered_map<const Stmt *, std::vector<GlobalStoreStmt *>> at; // null: the end
  if (defer)
    for (const SunkStore &k : sunkStores(task, aliasing)) {
      moved.insert(k.store);
      at[k.before].push_back(k.store);
    }
  auto emitBefore = [&](const Stmt *s) {
    auto it = at.find(s);
    if (it != at.end())
      for (GlobalStoreStmt *k : it->second)
        if (!emit(*k))
          return false;
    return true;
  };
  for (Stmt &s : task.body())
    if (!moved.count(&s) && (!emitBefore(&s) || !emit(s)))
      return;
  emitBefore(nullptr);
}

/// The index positions (bit d: index d) at which every access in `accesses`
/// indexes by `task` itself; 0 when there is none (or `accesses` is empty).
/// Non-zero means each iteration of `task` owns the elements they touch.
uint64_t ownedIndexPositions(const ForStmt &task,
                             std::span<const GlobalAccessStmt *const> accesses);

class ElementOwnership {
public:
  /// What a parallel task does with one alias class.
  struct ClassUse {
    AliasClass cls;
    std::vector<const GlobalAccessStmt *> accesses; // program order
    uint64_t ownedPositions = 0;
    bool stored = false, atomicallyUpdated = false, loaded = false;
    /// A near class: per task dimension, how far apart two iterations that
    /// update one element may be (empty: not near); bit d of nearCyclic:
    /// dimension d's distance is taken modulo its extent.
    std::vector<int64_t> nearReach;
    uint64_t nearCyclic = 0;
    bool owned() const { return ownedPositions != 0; }
    bool near() const { return !nearReach.empty(); }
    bool written() const { return stored || atomicallyUpdated; }
  };

  ElementOwnership() = default;
  /// Analyses parallel task `task` (a parallel for) under `assume`.
  static ElementOwnership compute(const ForStmt &task, TaskAssumptions assume = {});

  const ForStmt *task() const { return task_; }
  /// One entry per alias class the task accesses, in order of first access.
  const std::vector<ClassUse> &classes() const { return classes_; }
  /// The use of `access`'s class; null for an access outside the task.
  const ClassUse *useOf(const GlobalAccessStmt &access) const;
  /// The element `access` touches is its iteration's own.
  bool owns(const GlobalAccessStmt &access) const;
  /// Some statement of the task stores or atomically adds to memory that
  /// `access` may touch.
  bool mayBeWritten(const GlobalAccessStmt &access) const;
  /// An atomic add to an owned element.
  bool isPrivateAtomic(const Stmt *s) const { return privateAtomics_.count(s) != 0; }
  const std::unordered_set<const Stmt *> &privateAtomics() const { return privateAtomics_; }
  /// An atomic update of a near class use (never without
  /// TaskAssumptions::nearIterationsApart).
  bool isNearAtomic(const Stmt *s) const { return nearAtomics_.count(s) != 0; }
  /// Per task dimension, the largest reach of the task's near class uses
  /// (empty when it has none): iterations that update one element of one
  /// differ by at most this much in each dimension.
  const std::vector<int64_t> &nearReach() const { return nearReach_; }
  /// Bit d: dimension d's reach is cyclic (modulo the dimension's extent).
  uint64_t nearCyclic() const { return nearCyclic_; }
  /// Whether consecutive iterations may run together as lanes.
  bool lanesAllowed() const { return refusedAt_ == nullptr; }
  /// Empty when consecutive iterations may run together as lanes, else why
  /// not: the first form names the access by the field or ndarray it
  /// touches and its location (no walk of the kernel); the second prints
  /// the statement with `names`, a namer of its whole kernel.
  std::string lanesRefused() const;
  std::string lanesRefused(const ValueNamer &names) const;

private:
  const ForStmt *task_ = nullptr;
  NdarrayAliasing aliasing_ = NdarrayAliasing::MayAlias;
  std::vector<ClassUse> classes_;
  std::unordered_map<const Stmt *, unsigned> classOf_;
  std::unordered_map<const Stmt *, size_t> order_; // program order of the accesses
  std::unordered_set<const Stmt *> privateAtomics_;
  std::unordered_set<const Stmt *> nearAtomics_;
  std::vector<int64_t> nearReach_;
  uint64_t nearCyclic_ = 0;
  /// Splits each class use into groups of accesses that may touch the
  /// same element (see "Slices").
  void splitSlices();
  /// Makes class use `u` near when it is (see "Near atomics").
  void findNearReach(ClassUse &u) const;
  /// The access that refuses lanes (null: lanes allowed), and whether the
  /// rule it breaks is a plain store's (else a loaded atomic's).
  const GlobalAccessStmt *refusedAt_ = nullptr;
  bool refusedStore_ = false;
  std::string lanesRefused(const std::string &culprit) const;
};

/// Prints, for every parallel task of `kernel`, each global access with
/// whether its element is owned (and private atomics), each alias class, and
/// whether lanes are refused (the `print-element-ownership` pass).
void printElementOwnership(const Kernel &kernel, std::ostream &os);

} // namespace qd
