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
//
// Ownership. An iteration *owns* the elements of a class when one index
// position holds the task index itself in every access of the class inside
// the task: iteration `i` then only touches elements whose index at that
// position is `i`, which no other iteration touches. Other index positions
// may differ between accesses (`@x[%i, 0]` and `@x[%i, 1]` are both owned).
//
// Private atomics. An atomic add to an owned element cannot race with
// another iteration: a plain read-modify-write does the same.
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

/// Accesses that may touch the same memory (see the file comment).
struct AliasClass {
  const Field *field = nullptr;            // null: ndarrays
  Component component = Component::Primal; // fields only
  ScalarType element = ScalarType::F32;    // ndarrays only
  unsigned rank = 0;                       // ndarrays only
  friend bool operator==(const AliasClass &, const AliasClass &) = default;
};

AliasClass aliasClassOf(const GlobalAccessStmt &access);
/// `@x`, `@x.grad`, or `ndarrays of f32, rank 1`.
std::string describe(const AliasClass &cls);
/// True unless `a` and `b` are proved to touch distinct storage.
inline bool mayAlias(const GlobalAccessStmt &a, const GlobalAccessStmt &b) {
  return aliasClassOf(a) == aliasClassOf(b);
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
    bool owned() const { return ownedPositions != 0; }
    bool written() const { return stored || atomicallyUpdated; }
  };

  ElementOwnership() = default;
  /// Analyses parallel task `task` (a parallel for).
  static ElementOwnership compute(const ForStmt &task);

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
  /// Whether consecutive iterations may run together as lanes.
  bool lanesAllowed() const { return refusedAt_ == nullptr; }
  /// Empty when consecutive iterations may run together as lanes, else why
  /// not, naming the statement and its location. Printing the statement
  /// names the values of its whole kernel: where several tasks of one
  /// kernel are asked, pass one namer of the kernel to the second form.
  std::string lanesRefused() const;
  std::string lanesRefused(const ValueNamer &names) const;

private:
  const ForStmt *task_ = nullptr;
  std::vector<ClassUse> classes_;
  std::unordered_map<const Stmt *, unsigned> classOf_;
  std::unordered_set<const Stmt *> privateAtomics_;
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
