//===- lib/capi/Dlpack.cpp - Buffers from and to DLPack tensors -----------===//
//
// A DLPack tensor (dlpack/dlpack.h) becomes a buffer over its memory: host
// memory is borrowed, device memory is borrowed through the backend of its
// device. The buffer owns the managed tensor and calls its deleter when the
// last reference goes. The other way, a buffer's host memory is exported
// with the buffer kept alive by the tensor.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>

using namespace qd::capi;

namespace qd::capi {
absl::StatusOr<Buffer> borrowDevice(const char *call, qd_backend backend, ScalarType elem,
                                    std::vector<int64_t> shape, uint64_t pointer);
}

namespace {

// DLPack 0.8's kDLBool, which the 0.6 headers some systems have lack.
constexpr uint8_t kBoolCode = 6;

absl::StatusOr<qd::ScalarType> elementType(const char *call, DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32)
      return qd::ScalarType::F32;
    if (t.code == kDLFloat && t.bits == 64)
      return qd::ScalarType::F64;
    if (t.code == kDLInt && t.bits == 32)
      return qd::ScalarType::I32;
    if (t.code == kDLInt && t.bits == 64)
      return qd::ScalarType::I64;
    if (t.code == kBoolCode && t.bits == 8)
      return qd::ScalarType::I1;
  }
  return absl::InvalidArgumentError(fmt::format(
      "{}: the tensor's element type (DLPack code {}, {} bits, {} lanes) is none of qd's: "
      "float32, float64, int32, int64 or bool; convert the tensor first",
      call, int(t.code), int(t.bits), int(t.lanes)));
}

DLDataType dlType(qd::ScalarType t) {
  switch (t) {
  case qd::ScalarType::I1:
    return {kBoolCode, 8, 1};
  case qd::ScalarType::I32:
    return {kDLInt, 32, 1};
  case qd::ScalarType::I64:
    return {kDLInt, 64, 1};
  case qd::ScalarType::F32:
    return {kDLFloat, 32, 1};
  case qd::ScalarType::F64:
    return {kDLFloat, 64, 1};
  }
  return {kDLFloat, 64, 1};
}

/// OK when `t` is dense and row-major: no strides, or the compact ones
/// (extents of 1 may have any stride).
absl::Status checkContiguous(const char *call, const DLTensor &t) {
  if (!t.strides)
    return absl::OkStatus();
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected)
      return absl::InvalidArgumentError(fmt::format(
          "{}: the tensor is not contiguous (dimension {} has stride {}, a dense row-major "
          "array has {}); pass a contiguous copy (torch: .contiguous(), numpy: "
          "np.ascontiguousarray)",
          call, d, t.strides[d], expected));
    expected *= t.shape[d];
  }
  return absl::OkStatus();
}

absl::StatusOr<qd::Buffer> bufferOver(const char *call, const DLTensor &t, qd_backend backend) {
  auto elem = elementType(call, t.dtype);
  if (!elem.ok())
    return elem.status();
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape))
    return absl::InvalidArgumentError(fmt::format("{}: the tensor has no shape", call));
  if (absl::Status s = checkContiguous(call, t); !s.ok())
    return s;
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  auto *data = static_cast<char *>(t.data) + t.byte_offset;
  switch (t.device.device_type) {
  case kDLCPU:
  case kDLCUDAHost:
    return qd::Buffer::borrow(*elem, std::move(shape), data);
  case kDLCUDA:
  case kDLROCM:
    return borrowDevice(call, backend, *elem, std::move(shape), reinterpret_cast<uint64_t>(data));
  default:
    return absl::InvalidArgumentError(fmt::format(
        "{}: the tensor lives on DLPack device type {}; qd takes host (kDLCPU), CUDA or ROCm "
        "memory",
        call, int(t.device.device_type)));
  }
}

/// What an exported tensor keeps: the buffer and the shape it points to.
struct Export {
  DLManagedTensor managed{};
  std::shared_ptr<qd::Buffer> buffer;
  std::vector<int64_t> shape;
};

} // namespace

extern "C" {

qd_status qd_buffer_from_dlpack(DLManagedTensor *tensor, qd_backend backend, qd_buffer *out) {
  constexpr const char *call = "qd_buffer_from_dlpack";
  return guard(call, [&]() -> qd_status {
    if (!tensor || !out)
      return nullArgument(call, !tensor ? "tensor" : "out");
    auto buffer = bufferOver(call, tensor->dl_tensor, backend);
    if (!buffer.ok())
      return toStatus(buffer.status());
    auto owner = std::make_unique<qd::Buffer>(std::move(*buffer));
    *out = registerBuffer(std::shared_ptr<qd::Buffer>(owner.release(), [tensor](qd::Buffer *b) {
      delete b;
      if (tensor->deleter)
        tensor->deleter(tensor);
    }));
    return nullptr;
  });
}

qd_status qd_buffer_to_dlpack(qd_buffer buffer, DLManagedTensor **out) {
  constexpr const char *call = "qd_buffer_to_dlpack";
  return guard(call, [&]() -> qd_status {
    auto b = lookupBuffer(call, buffer);
    if (!b.ok())
      return toStatus(b.status());
    if (!out)
      return nullArgument(call, "out");
    if (absl::Status s = (*b)->syncToHost(); !s.ok())
      return toStatus(s);
    auto e = std::make_unique<Export>();
    e->buffer = *b;
    e->shape = (*b)->shape();
    DLTensor &t = e->managed.dl_tensor;
    t.data = (*b)->data();
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int>(e->shape.size());
    t.dtype = dlType((*b)->elementType());
    t.shape = e->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    e->managed.manager_ctx = e.get();
    e->managed.deleter = [](DLManagedTensor *self) {
      delete static_cast<Export *>(self->manager_ctx);
    };
    *out = &e.release()->managed;
    return nullptr;
  });
}

} // extern "C"
