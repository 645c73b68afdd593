//===- qd/ir/Type.h - IR types ----------------------------------*- C++ -*-===//
//
// Scalar element types and the handful of derived value types the IR needs:
// locals, adstacks and ndarray arguments.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qd {

enum class ScalarType : uint8_t { I1, I32, I64, F32, F64 };

std::string_view toString(ScalarType type);
std::optional<ScalarType> parseScalarType(std::string_view text);
inline bool isFloat(ScalarType t) {
  return t == ScalarType::F32 || t == ScalarType::F64;
}
inline bool isInteger(ScalarType t) {
  return !isFloat(t);
}
/// Width in bits (i1 counts as 1).
unsigned bitWidth(ScalarType t);
/// Bytes one element occupies in memory (i1 is stored as one byte).
unsigned storageBytes(ScalarType t);

/// The type of an SSA value. Scalars are plain values; `Local` is the handle
/// produced by `alloca`, `AdStack` by `adstack.alloca`, and `Ndarray` is the
/// type of an ndarray kernel argument. `Void` marks statements without result.
class Type {
public:
  enum class Kind : uint8_t { Void, Scalar, Local, AdStack, Ndarray };

  constexpr Type() = default;
  static constexpr Type getVoid() { return Type(); }
  static constexpr Type scalar(ScalarType e) { return Type(Kind::Scalar, e, 0); }
  static constexpr Type local(ScalarType e) { return Type(Kind::Local, e, 0); }
  static constexpr Type adstack(ScalarType e) { return Type(Kind::AdStack, e, 0); }
  static constexpr Type ndarray(ScalarType e, unsigned ndim) {
    return Type(Kind::Ndarray, e, ndim);
  }

  static constexpr Type i1() { return scalar(ScalarType::I1); }
  static constexpr Type i32() { return scalar(ScalarType::I32); }
  static constexpr Type i64() { return scalar(ScalarType::I64); }
  static constexpr Type f32() { return scalar(ScalarType::F32); }
  static constexpr Type f64() { return scalar(ScalarType::F64); }

  Kind kind() const { return kind_; }
  ScalarType element() const { return elem_; }
  unsigned ndim() const { return ndim_; }

  bool isVoid() const { return kind_ == Kind::Void; }
  bool isScalar() const { return kind_ == Kind::Scalar; }
  bool isScalar(ScalarType e) const { return isScalar() && elem_ == e; }
  bool isFloatScalar() const { return isScalar() && isFloat(elem_); }
  bool isIntegerScalar() const { return isScalar() && isInteger(elem_); }
  bool isLocal() const { return kind_ == Kind::Local; }
  bool isAdStack() const { return kind_ == Kind::AdStack; }
  bool isNdarray() const { return kind_ == Kind::Ndarray; }

  friend bool operator==(const Type &a, const Type &b) {
    return a.kind_ == b.kind_ && (a.kind_ == Kind::Void || a.elem_ == b.elem_) &&
           a.ndim_ == b.ndim_;
  }

  /// Text form as it appears in the IR: `f32`, `local<f32>`, `adstack<f32>`,
  /// `ndarray<f32, 2>`, `void`.
  std::string str() const;

private:
  constexpr Type(Kind k, ScalarType e, unsigned ndim) : kind_(k), elem_(e), ndim_(ndim) {}
  Kind kind_ = Kind::Void;
  ScalarType elem_ = ScalarType::I32;
  unsigned ndim_ = 0;
};

} // namespace qd
