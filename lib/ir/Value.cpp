//===- Value.cpp - SSA values and use lists -------------------------------===//
#include "qd/ir/Value.h"

#include <cassert>

namespace qd {

void Use::unlink() {
  if (!value_)
    return;
  *prevNext_ = next_;
  if (next_)
    next_->prevNext_ = prevNext_;
  next_ = nullptr;
  prevNext_ = nullptr;
  value_ = nullptr;
}

void Use::set(Value *v) {
  if (v == value_)
    return;
  unlink();
  if (!v)
    return;
  value_ = v;
  next_ = v->firstUse_;
  if (next_)
    next_->prevNext_ = &next_;
  prevNext_ = &v->firstUse_;
  v->firstUse_ = this;
}

Value::~Value() {
  // Any remaining uses would dangle; detach them so destruction order within
  // a subtree does not matter.
  while (firstUse_)
    firstUse_->unlink();
}

size_t Value::numUses() const {
  size_t n = 0;
  for (Use *u = firstUse_; u; u = u->next())
    ++n;
  return n;
}

void Value::replaceAllUsesWith(Value *replacement) {
  assert(replacement != this && "replacing a value with itself");
  while (firstUse_)
    firstUse_->set(replacement);
}

} // namespace qd
