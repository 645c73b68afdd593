//===- qd/analysis/Activity.h - Which values carry derivatives --*- C++ -*-===//
//
// Activity analysis, shared by reverse mode (reverse-ad) and forward mode
// (forward-ad). A float value is
//  - *varied* if it depends on a differentiable input: a float load of a
//    global that has the mode's companion (grad for reverse mode, dual for
//    forward mode), through locals and differentiable arithmetic;
//  - *useful* if it influences a differentiable output: a float value
//    stored or atomically added to a global with the companion, backwards
//    through the same statements;
//  - *active* if both: only active values get adjoints or tangents that
//    reach memory.
// Derivatives flow through loads and stores of locals, through the float
// operands of unary, binary and select statements (not a select's
// condition) and through float-to-float casts; an integer-to-float cast, a
// comparison or an integer value stops them. The analysis is flow-
// insensitive (a local is varied if any store to it is) and iterates to a
// fixed point.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <ostream>

namespace qd {

enum class ActivityMode : uint8_t {
  /// Inputs and outputs are globals with a grad companion. Every write to
  /// such a global is an output, whichever component it writes.
  Reverse,
  /// Inputs and outputs are globals with a dual companion; only writes to
  /// the primal component are outputs (the dual kernel writes tangents to
  /// the dual component itself).
  Forward,
};

/// Whether the global that `access` reads or writes has the companion the
/// mode differentiates with (grad for Reverse, dual for Forward).
bool hasDerivativeCompanion(const GlobalAccessStmt &access, ActivityMode mode);

class Activity {
public:
  Activity(const Kernel &kernel, ActivityMode mode);

  bool isVaried(const Value *v) const { return v && varied_.count(v); }
  bool isUseful(const Value *v) const { return v && useful_.count(v); }
  bool isActive(const Value *v) const { return isVaried(v) && isUseful(v); }
  ActivityMode mode() const { return mode_; }

  /// One line per varied or useful value, in program order:
  /// `%name: active` (or `varied`, `useful`), for lit tests.
  void print(const Kernel &kernel, std::ostream &os) const;

private:
  ActivityMode mode_;
  absl::flat_hash_set<const Value *> varied_, useful_;
};

} // namespace qd
