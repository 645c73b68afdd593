//===- qd/ir/Value.h - SSA values and use lists -----------------*- C++ -*-===//
#pragma once

#include "qd/ir/Type.h"

#include <cstddef>
#include <iterator>
#include <string>

namespace qd {

class Stmt;
class Value;

/// One operand slot of a statement. Every non-null slot is threaded on the
/// intrusive use list of the value it refers to, so replace-all-uses and
/// "is this value used?" are cheap.
class Use {
public:
  Use() = default;
  Use(const Use &) = delete;
  Use &operator=(const Use &) = delete;
  ~Use() { set(nullptr); }

  Value *get() const { return value_; }
  Stmt *user() const { return user_; }
  unsigned index() const { return index_; }
  Use *next() const { return next_; }
  void set(Value *v);

private:
  friend class Stmt;
  friend class Value;
  void init(Stmt *user, unsigned index) {
    user_ = user;
    index_ = index;
  }
  void unlink();

  Value *value_ = nullptr;
  Stmt *user_ = nullptr;
  unsigned index_ = 0;
  Use *next_ = nullptr;
  Use **prevNext_ = nullptr;
};

/// Base of everything that can appear as an operand: kernel arguments and
/// statements (a statement *is* its result, as in Halide and Taichi; a
/// range-for's value is its loop index).
class Value {
public:
  enum class ValueKind : uint8_t { Argument, Stmt, Placeholder };

  Value(const Value &) = delete;
  Value &operator=(const Value &) = delete;
  virtual ~Value();

  ValueKind valueKind() const { return valueKind_; }
  Type type() const { return type_; }
  void setType(Type t) { type_ = t; }

  /// Name hint without the leading `%`. Printing makes names unique.
  const std::string &name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }

  class use_iterator {
  public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Use;
    using difference_type = std::ptrdiff_t;
    using pointer = Use *;
    using reference = Use &;
    use_iterator() = default;
    explicit use_iterator(Use *u) : u_(u) {}
    Use &operator*() const { return *u_; }
    Use *operator->() const { return u_; }
    use_iterator &operator++() {
      u_ = u_->next();
      return *this;
    }
    use_iterator operator++(int) {
      auto old = *this;
      ++*this;
      return old;
    }
    friend bool operator==(use_iterator a, use_iterator b) { return a.u_ == b.u_; }

  private:
    Use *u_ = nullptr;
  };
  struct UseRange {
    Use *first;
    use_iterator begin() const { return use_iterator(first); }
    use_iterator end() const { return use_iterator(); }
  };

  UseRange uses() const { return {firstUse_}; }
  bool hasUses() const { return firstUse_ != nullptr; }
  size_t numUses() const;
  /// Points every use of this value at `replacement` instead.
  void replaceAllUsesWith(Value *replacement);

protected:
  Value(ValueKind k, Type t) : valueKind_(k), type_(t) {}

private:
  friend class Use;
  ValueKind valueKind_;
  Type type_;
  std::string name_;
  Use *firstUse_ = nullptr;
};

} // namespace qd
