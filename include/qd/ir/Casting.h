//===- qd/ir/Casting.h - isa/cast/dyn_cast ----------------------*- C++ -*-===//
//
// LLVM-style RTTI helpers driven by a static `classof`. qd::ir does not depend
// on LLVM, so it carries its own minimal versions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cassert>
#include <type_traits>

namespace qd {

template <typename To, typename From> bool isa(const From *v) {
  return v != nullptr && To::classof(v);
}
template <typename To, typename From>
requires(!std::is_pointer_v<From>) bool isa(const From &v) {
  return To::classof(&v);
}

template <typename To, typename From> To *cast(From *v) {
  assert(isa<To>(v) && "cast<> to an incompatible type");
  return static_cast<To *>(v);
}
template <typename To, typename From> const To *cast(const From *v) {
  assert(isa<To>(v) && "cast<> to an incompatible type");
  return static_cast<const To *>(v);
}
template <typename To, typename From>
requires(!std::is_pointer_v<From>) To &cast(From &v) {
  assert(isa<To>(v) && "cast<> to an incompatible type");
  return static_cast<To &>(v);
}
template <typename To, typename From>
requires(!std::is_pointer_v<From>) const To &cast(const From &v) {
  assert(isa<To>(v) && "cast<> to an incompatible type");
  return static_cast<const To &>(v);
}

template <typename To, typename From> To *dyn_cast(From *v) {
  return isa<To>(v) ? static_cast<To *>(v) : nullptr;
}
template <typename To, typename From> const To *dyn_cast(const From *v) {
  return isa<To>(v) ? static_cast<const To *>(v) : nullptr;
}

} // namespace qd
