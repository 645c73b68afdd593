//===- Buffer.cpp - Dense typed storage -----------------------------------===//
#include "qd/runtime/Buffer.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace qd {

namespace {
absl::StatusOr<int64_t> countElements(ScalarType elem, const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(fmt::format("buffer extent {} is negative", d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d / storageBytes(elem))
      return absl::InvalidArgumentError("buffer size overflows 64 bits");
    n *= d;
  }
  return n;
}
} // namespace

absl::StatusOr<Buffer> Buffer::create(ScalarType elem, std::vector<int64_t> shape) {
  absl::StatusOr<int64_t> n = countElements(elem, shape);
  if (!n.ok())
    return n.status();
  Buffer b;
  b.elem_ = elem;
  b.shape_ = std::move(shape);
  b.numElements_ = *n;
  b.owned_.assign(static_cast<size_t>(*n) * storageBytes(elem), std::byte{0});
  b.data_ = b.owned_.data();
  return b;
}

absl::StatusOr<Buffer> Buffer::borrow(ScalarType elem, std::vector<int64_t> shape, void *data) {
  absl::StatusOr<int64_t> n = countElements(elem, shape);
  if (!n.ok())
    return n.status();
  if (!data && *n != 0)
    return absl::InvalidArgumentError("borrowed buffer has a null data pointer");
  Buffer b;
  b.elem_ = elem;
  b.shape_ = std::move(shape);
  b.numElements_ = *n;
  b.data_ = static_cast<std::byte *>(data);
  return b;
}

std::optional<int64_t> Buffer::flatIndex(std::span<const int64_t> indices) const {
  if (indices.size() != shape_.size())
    return std::nullopt;
  int64_t flat = 0;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (indices[d] < 0 || indices[d] >= shape_[d])
      return std::nullopt;
    flat = flat * shape_[d] + indices[d];
  }
  return flat;
}

Scalar Buffer::get(int64_t flat) const {
  const std::byte *p = data_ + flat * storageBytes(elem_);
  switch (elem_) {
  case ScalarType::I1:
    return Scalar::ofInt(elem_, static_cast<uint8_t>(*p) ? 1 : 0);
  case ScalarType::I32: {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return Scalar::ofInt(elem_, v);
  }
  case ScalarType::I64: {
    int64_t v;
    std::memcpy(&v, p, sizeof v);
    return Scalar::ofInt(elem_, v);
  }
  case ScalarType::F32: {
    float v;
    std::memcpy(&v, p, sizeof v);
    return Scalar::ofFloat(elem_, v);
  }
  case ScalarType::F64: {
    double v;
    std::memcpy(&v, p, sizeof v);
    return Scalar::ofFloat(elem_, v);
  }
  }
  return Scalar();
}

void Buffer::set(int64_t flat, const Scalar &value) {
  std::byte *p = data_ + flat * storageBytes(elem_);
  switch (elem_) {
  case ScalarType::I1: {
    uint8_t v = value.i ? 1 : 0;
    std::memcpy(p, &v, 1);
    break;
  }
  case ScalarType::I32: {
    int32_t v = static_cast<int32_t>(value.i);
    std::memcpy(p, &v, sizeof v);
    break;
  }
  case ScalarType::I64:
    std::memcpy(p, &value.i, sizeof value.i);
    break;
  case ScalarType::F32: {
    float v = static_cast<float>(value.f);
    std::memcpy(p, &v, sizeof v);
    break;
  }
  case ScalarType::F64:
    std::memcpy(p, &value.f, sizeof value.f);
    break;
  }
}

void Buffer::fill(const Scalar &value) {
  for (int64_t i = 0; i < numElements_; ++i)
    set(i, value);
}

} // namespace qd
