//===- qd/analysis/SizeExpr.h - Launch-time adstack bounds ------*- C++ -*-===//
//
// A SizeExpr is a symbolic upper bound on an adstack's depth whose value is
// known only at launch: it reads kernel scalar arguments, field elements,
// ndarray shapes and elements, and takes maxima over the ranges of loop
// variables. Expressions are immutable trees shared by pointer; the
// constructors fold constants, so an expression with no launch-time leaf is
// a single Const node.
//
// Evaluation (`evaluateSizeExpr`) uses saturating int64 arithmetic (a
// saturated result is an error, never a wrong number) and never reads
// outside a buffer: an out-of-range element evaluates to 0. No valid
// execution performs that read, so any fixed value keeps the bound sound.
//
// Serialisation is a flat post-order list of nodes behind a format version
// (see docs/sizing.md), so a compiled kernel cached on disk sizes its stacks
// exactly as a fresh compile does.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Type.h"

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace qd {

class Kernel;

enum class SizeExprKind : uint8_t {
  Const,        // value()
  ScalarArg,    // argIndex(): an integer scalar kernel argument
  FieldLoad,    // fieldName(), operands() = indices
  NdarrayShape, // argIndex(), axis()
  NdarrayRead,  // argIndex(), operands() = indices
  BoundVar,     // var(): the value of an enclosing range's variable
  Add,
  Sub,
  Mul,
  Max,
  MaxOverRange, // var(), operands() = {begin, end, body}; 0 on an empty range
  SumOverRange, // var(), operands() = {begin, end, body}; 0 on an empty range (format v2)
  // Format v3: the integer operations of the IR, with its semantics.
  Min,
  Div,     // truncating (toward zero), as `div`; x / 0 evaluates to 0
  Rem,     // the sign of the dividend, as `rem`; x rem 0 evaluates to 0
  Trunc32, // the low 32 bits, sign-extended: a `cast ... : i64 to i32`
};
/// MaxOverRange and SumOverRange bind var() in their body (operand 2) to
/// every value of [begin, end).
inline bool isRange(SizeExprKind kind) {
  return kind == SizeExprKind::MaxOverRange || kind == SizeExprKind::SumOverRange;
}
std::string_view toString(SizeExprKind kind);

class SizeExpr;
using SizeExprRef = std::shared_ptr<const SizeExpr>;

class SizeExpr {
public:
  // Leaves.
  static SizeExprRef constant(int64_t value);
  static SizeExprRef scalarArg(unsigned argIndex);
  static SizeExprRef fieldLoad(std::string field, std::vector<SizeExprRef> indices);
  static SizeExprRef ndarrayShape(unsigned argIndex, unsigned axis);
  static SizeExprRef ndarrayRead(unsigned argIndex, std::vector<SizeExprRef> indices);
  static SizeExprRef boundVar(unsigned var);

  // Operators. These simplify: constants fold (saturating), x+0, x*1, x*0,
  // max(x, x) and max(x, 0) for x >= 0 disappear, and a MaxOverRange whose
  // range is a non-empty constant and whose body does not use the variable
  // is its body.
  static SizeExprRef add(SizeExprRef a, SizeExprRef b);
  static SizeExprRef sub(SizeExprRef a, SizeExprRef b);
  static SizeExprRef mul(SizeExprRef a, SizeExprRef b);
  static SizeExprRef max(SizeExprRef a, SizeExprRef b);
  static SizeExprRef maxOverRange(unsigned var, SizeExprRef begin, SizeExprRef end,
                                  SizeExprRef body);
  /// The sum of `body` over var in [begin, end): a stack pushed in a loop
  /// nest whose inner trip count depends on the outer index (a triangular
  /// nest pushes sum(j in [0, m): j), half of m * max(j)). Folds to 0 on an
  /// empty constant range or a zero body, and to trip * body when the body
  /// does not use the variable and the range is constant.
  static SizeExprRef sumOverRange(unsigned var, SizeExprRef begin, SizeExprRef end,
                                  SizeExprRef body);
  /// The IR's `min`, `div`, `rem` and i64-to-i32 `cast`. A division or
  /// remainder by 0 evaluates to 0: the kernel fails at that statement, so
  /// no valid execution uses its value (as for reads outside a buffer).
  static SizeExprRef min(SizeExprRef a, SizeExprRef b);
  static SizeExprRef div(SizeExprRef a, SizeExprRef b);
  static SizeExprRef rem(SizeExprRef a, SizeExprRef b);
  static SizeExprRef trunc32(SizeExprRef a);
  /// The number of iterations of `range(begin, end)`: max(end - begin, 0).
  static SizeExprRef tripCount(SizeExprRef begin, SizeExprRef end);

  /// Builds a node without simplifying (deserialisation and tests).
  static SizeExprRef make(SizeExprKind kind, std::vector<SizeExprRef> operands, int64_t value = 0,
                          unsigned index = 0, unsigned axis = 0, std::string field = {});

  SizeExprKind kind() const { return kind_; }
  bool isConst() const { return kind_ == SizeExprKind::Const; }
  int64_t value() const { return value_; }
  unsigned argIndex() const { return index_; }
  unsigned var() const { return index_; }
  unsigned axis() const { return axis_; }
  const std::string &fieldName() const { return field_; }
  const std::vector<SizeExprRef> &operands() const { return operands_; }
  /// Number of nodes in the tree (shared subtrees counted once per use).
  size_t size() const { return size_; }

  /// True if the expression reads `var` outside a range binding it.
  bool usesVar(unsigned var) const;
  /// True if the value is provably >= 0 for every launch.
  bool isNonNegative() const;
  /// True if the value is provably <= 0 for every launch.
  bool isNonPositive() const { return nonPositive_; }
  /// Structural equality.
  bool equals(const SizeExpr &other) const;

private:
  SizeExpr() = default;
  SizeExprKind kind_ = SizeExprKind::Const;
  int64_t value_ = 0;
  unsigned index_ = 0;
  unsigned axis_ = 0;
  std::string field_;
  std::vector<SizeExprRef> operands_;
  std::vector<unsigned> freeVars_; // sorted
  size_t size_ = 1;
  bool nonNegative_ = false;
  bool nonPositive_ = false;
};

/// How `printSizeExpr` names arguments and variables. Unset names print as
/// `%arg<i>` and `%v<i>`.
struct SizeExprNames {
  std::function<std::string(unsigned)> argName;
  std::function<std::string(unsigned)> varName;
  /// Argument and variable names of a kernel's parameters (`%n`).
  static SizeExprNames forKernel(const Kernel &kernel);
};

/// Readable form: `max(@n[] - 1, 0) * 2`, `max(%i in [0, shape(%a, 0)): %a[%i])`.
std::string printSizeExpr(const SizeExpr &e, const SizeExprNames &names = {});

/// A read-only view of an integer buffer: row-major elements of
/// `storageBytes(type)` bytes each (i1 as one byte), `shape` extents.
struct SizeExprBufferView {
  const std::byte *data = nullptr;
  ScalarType type = ScalarType::I32;
  std::span<const int64_t> shape;
  /// The maximum of a range of a 1-D view is asked of fieldRangeMax /
  /// ndarrayRangeMax instead of scanning `data` (the elements also live on
  /// a device that reduces them faster than one host core scans them).
  bool rangeMaxElsewhere = false;
};

/// The data an evaluation reads. Each accessor returns nullopt when the
/// element does not exist (bad argument, out-of-range index, non-integer).
class SizeExprInputs {
public:
  virtual ~SizeExprInputs();
  virtual std::optional<int64_t> scalarArg(unsigned argIndex) const = 0;
  virtual std::optional<int64_t> fieldElement(const std::string &field,
                                              std::span<const int64_t> indices) const = 0;
  virtual std::optional<int64_t> ndarrayShape(unsigned argIndex, unsigned axis) const = 0;
  virtual std::optional<int64_t> ndarrayElement(unsigned argIndex,
                                                std::span<const int64_t> indices) const = 0;
  /// Optional fast paths: direct views of integer fields and ndarrays, valid
  /// for the duration of one evaluation. The evaluator resolves each read
  /// once and scans whole ranges without a call per element; nullopt (the
  /// default) means "use the element accessors".
  virtual std::optional<SizeExprBufferView> fieldView(const std::string &field) const;
  virtual std::optional<SizeExprBufferView> ndarrayView(unsigned argIndex) const;
  /// Optional, for buffers without a view (e.g. resident on a GPU): the
  /// maximum of elements [begin, end) of a 1-D integer field or ndarray,
  /// with 0 <= begin < end <= its extent, computed where the data lives;
  /// nullopt (the default) means "read the elements one by one".
  virtual std::optional<int64_t> fieldRangeMax(const std::string &field, int64_t begin,
                                               int64_t end) const;
  virtual std::optional<int64_t> ndarrayRangeMax(unsigned argIndex, int64_t begin,
                                                 int64_t end) const;
  /// Optional: the extent of a 1-D field (nullopt: unknown), so that a range
  /// max can be clipped to it before `fieldRangeMax`.
  virtual std::optional<int64_t> fieldExtent(const std::string &field) const;
};

/// Evaluates `e` with saturating int64 arithmetic. `stepLimit` bounds the
/// number of nodes evaluated (range bodies count once per iteration
/// evaluated), a guard against a corrupt or huge range; exceeding it is an
/// InvalidArgument error. Saturation is an OutOfRange error.
///
/// A MaxOverRange is not always iterated: a body constant in its variable is
/// evaluated once, a body monotone in it at one end of the range, and a body
/// that reads its variable only as the index of one 1-D buffer and is
/// non-decreasing in that element's value at the range maximum of the
/// buffer (one scan of the elements). A SumOverRange is iterated, unless its
/// body does not use its variable (trip * body) or the range has more than
/// `kSumIterationLimit` values: then the result is the sound upper bound
/// trip * max(body), the maximum found as for a MaxOverRange. See
/// docs/sizing.md.
absl::StatusOr<int64_t> evaluateSizeExpr(const SizeExpr &e, const SizeExprInputs &inputs,
                                         int64_t stepLimit = int64_t(1) << 32);

/// Ranges longer than this are not summed term by term (see above).
inline constexpr int64_t kSumIterationLimit = int64_t(1) << 16;

/// The serialisation format version written in the header. Version 2 added
/// SumOverRange, version 3 Min, Div, Rem and Trunc32; data of versions 1
/// and 2 (without them) is still read.
inline constexpr uint32_t kSizeExprFormatVersion = 3;

/// Flat post-order bytes: magic "QDSX", version, node count, then each node
/// (kind, payload, operand indices that refer to earlier nodes); the last
/// node is the root.
std::vector<uint8_t> serializeSizeExpr(const SizeExpr &e);
/// Reads what `serializeSizeExpr` wrote. Every malformed input (truncated,
/// wrong magic or version, forward or missing operand references, operand
/// counts that do not match the kind, unbound variables) is an error.
absl::StatusOr<SizeExprRef> deserializeSizeExpr(std::span<const uint8_t> bytes);

} // namespace qd
