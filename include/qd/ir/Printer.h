//===- qd/ir/Printer.h - Text form of the IR --------------------*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace qd {

/// Unique printed names (`%x`, `%x.1`, `%0`) for every value of a kernel, in
/// definition order, preferring each value's own name. Printing, the
/// verifier's messages and debugging output all name values through it.
class ValueNamer {
public:
  explicit ValueNamer(const Kernel &kernel);
  /// The names of `wanted` (and of every band's dimensions) only, the same
  /// as the whole kernel's namer gives them; other values are `<null>`.
  /// Cheaper where a few values of a large kernel are named.
  ValueNamer(const Kernel &kernel, const std::unordered_set<const Value *> &wanted);
  /// `%name`, or `<null>` for a value outside the kernel.
  const std::string &operator[](const Value *v) const;
  /// `%name` of dimension `dim` (>= 1) of a parallel band in its header:
  /// the first `task_index dim` directly in its body, or a fresh name when
  /// the body has none.
  const std::string &bandIndex(const ForStmt &task, unsigned dim) const;
  /// True for the task_index statements a band's header names (the printer
  /// leaves them out of the body).
  bool namedInBandHeader(const Stmt *s) const { return inHeader_.count(s) > 0; }

private:
  void nameAll(const Kernel &kernel);
  void assign(const Value *v);
  std::string fresh(std::string base);
  /// The first number no value holds, marked as held.
  unsigned nextNumber();
  bool used(const std::string &name) const;
  bool numberUsed(uint32_t n) const { return n < usedNumbers_.size() && usedNumbers_[n]; }
  void markUsed(const std::string &name);
  void markNumber(uint32_t n); // below kNumberedLimit
  std::unordered_map<const ForStmt *, std::vector<std::string>> bandNames_;
  std::unordered_set<const Stmt *> inHeader_;
  std::unordered_map<const Value *, std::string> names_;
  /// Names given: those that are numbers (as std::to_string spells them)
  /// by their number, the others by their text.
  std::vector<bool> usedNumbers_;
  std::unordered_set<std::string> used_;
  /// Per name hint: the suffix its last clash got (the next one starts
  /// above it, so n values with one hint are named in linear time).
  std::unordered_map<std::string, unsigned> lastSuffix_;
  unsigned counter_ = 0;
  const std::unordered_set<const Value *> *wanted_ = nullptr; // null: all
};

/// A ValueNamer of `kernel` built on first use: for messages that name
/// values only on some paths (an error, a refusal, a report), so that the
/// paths that name nothing do not walk the whole kernel. The kernel must
/// not change while it is in use. Threads may share one: the first to ask
/// builds the names, the others wait for them.
class LazyValueNamer {
public:
  explicit LazyValueNamer(const Kernel &kernel) : kernel_(kernel) {}
  /// Names `wanted` only (the ValueNamer constructor of that set).
  LazyValueNamer(const Kernel &kernel, std::unordered_set<const Value *> wanted)
      : kernel_(kernel), wanted_(std::move(wanted)), some_(true) {}
  LazyValueNamer(const LazyValueNamer &) = delete;
  LazyValueNamer &operator=(const LazyValueNamer &) = delete;
  const ValueNamer &get() const;
  const std::string &operator[](const Value *v) const { return get()[v]; }

private:
  const Kernel &kernel_;
  std::unordered_set<const Value *> wanted_;
  bool some_ = false;
  mutable std::once_flag built_;
  mutable std::unique_ptr<ValueNamer> names_;
};

/// Prints a module in the text format of docs/ir.md. The output parses back
/// to an equivalent module and prints identically. Value names come from
/// `Value::name()`; unnamed or clashing values get unique names.
std::string printModule(const Module &module);
void printModule(const Module &module, std::ostream &os);
std::string printKernel(const Kernel &kernel);

/// One statement with its nested blocks, names resolved within its kernel.
/// Meant for diagnostics and debugging; O(kernel size).
std::string printStmt(const Stmt &stmt);
/// Same, with names from a namer built once for the statement's kernel
/// (O(statement size)).
std::string printStmt(const Stmt &stmt, const ValueNamer &names);
/// One line for a diagnostic: the statement with each of its blocks
/// printed as `{ ... }` (a task's header, not its body).
std::string printStmtHeader(const Stmt &stmt);

/// Shortest decimal text that reads back to exactly `value` as `type`
/// (`1.0`, `0.1`, `1e+30`, `inf`, `-inf`, `nan`).
std::string formatFloat(double value, ScalarType type);

} // namespace qd
