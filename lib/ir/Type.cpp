//===- Type.cpp - IR types and locations ----------------------------------===//
#include "qd/ir/Type.h"
#include "qd/ir/Location.h"

#include <fmt/format.h>

namespace qd {

std::string_view toString(ScalarType type) {
  switch (type) {
  case ScalarType::I1:
    return "i1";
  case ScalarType::I32:
    return "i32";
  case ScalarType::I64:
    return "i64";
  case ScalarType::F32:
    return "f32";
  case ScalarType::F64:
    return "f64";
  }
  return "?";
}

std::optional<ScalarType> parseScalarType(std::string_view text) {
  for (ScalarType t :
       {ScalarType::I1, ScalarType::I32, ScalarType::I64, ScalarType::F32, ScalarType::F64})
    if (toString(t) == text)
      return t;
  return std::nullopt;
}

unsigned bitWidth(ScalarType t) {
  switch (t) {
  case ScalarType::I1:
    return 1;
  case ScalarType::I32:
  case ScalarType::F32:
    return 32;
  case ScalarType::I64:
  case ScalarType::F64:
    return 64;
  }
  return 0;
}

unsigned storageBytes(ScalarType t) {
  return t == ScalarType::I1 ? 1 : bitWidth(t) / 8;
}

std::string Type::str() const {
  switch (kind_) {
  case Kind::Void:
    return "void";
  case Kind::Scalar:
    return std::string(toString(elem_));
  case Kind::Local:
    return fmt::format("local<{}>", toString(elem_));
  case Kind::AdStack:
    return fmt::format("adstack<{}>", toString(elem_));
  case Kind::Ndarray:
    return fmt::format("ndarray<{}, {}>", toString(elem_), ndim_);
  }
  return "?";
}

const std::string &Location::file() const {
  static const std::string empty;
  return file_ ? *file_ : empty;
}

std::string Location::str() const {
  if (!isKnown())
    return "<unknown>";
  return fmt::format("{}:{}:{}", file(), line_, col_);
}

} // namespace qd
