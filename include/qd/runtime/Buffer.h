//===- qd/runtime/Buffer.h - Dense typed storage ----------------*- C++ -*-===//
#pragma once

#include "qd/ir/Scalar.h"

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace qd {

/// A dense row-major array of one scalar type: the storage of a field
/// component or an ndarray. Either owns its bytes (zero-initialised) or
/// borrows caller memory that must outlive it. i1 elements are one byte.
class Buffer {
public:
  /// Owned, zero-initialised storage. Fails on negative extents or a size
  /// that overflows.
  static absl::StatusOr<Buffer> create(ScalarType elem, std::vector<int64_t> shape);
  /// Wraps caller memory of `numElements(shape) * storageBytes(elem)` bytes.
  static absl::StatusOr<Buffer> borrow(ScalarType elem, std::vector<int64_t> shape, void *data);

  Buffer() = default;
  Buffer(Buffer &&) = default;
  Buffer &operator=(Buffer &&) = default;

  ScalarType elementType() const { return elem_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  unsigned ndim() const { return static_cast<unsigned>(shape_.size()); }
  int64_t numElements() const { return numElements_; }
  size_t sizeInBytes() const { return static_cast<size_t>(numElements_) * storageBytes(elem_); }
  bool isBorrowed() const { return owned_.empty() && data_ != nullptr; }
  std::byte *data() { return data_; }
  const std::byte *data() const { return data_; }

  /// Row-major flat offset of `indices`, or nullopt when out of range.
  std::optional<int64_t> flatIndex(std::span<const int64_t> indices) const;
  Scalar get(int64_t flat) const;
  void set(int64_t flat, const Scalar &value);
  void fill(const Scalar &value);

private:
  ScalarType elem_ = ScalarType::F32;
  std::vector<int64_t> shape_;
  int64_t numElements_ = 0;
  std::vector<std::byte> owned_;
  std::byte *data_ = nullptr;
};

} // namespace qd
