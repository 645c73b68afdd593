//===- lib/capi/Core.cpp - Status objects, strings, buffer handles --------===//
#include "Internal.h"

#include "qd/ir/Type.h"

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace qd::capi {

qd_status error(qd_status_code code, std::string message) {
  return new (std::nothrow) qd_status_s{code, std::move(message)};
}

qd_status toStatus(const absl::Status &status) {
  if (status.ok())
    return nullptr;
  return error(static_cast<qd_status_code>(status.code()), std::string(status.message()));
}

qd_status nullArgument(const char *call, const char *what) {
  return error(QD_INVALID_ARGUMENT, fmt::format("{}: {} is NULL", call, what));
}

char *copyString(const std::string &text) {
  char *out = static_cast<char *>(std::malloc(text.size() + 1));
  if (out)
    std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

absl::StatusOr<ScalarType> scalarType(const char *call, qd_dtype dtype) {
  switch (dtype) {
  case QD_I1:
    return ScalarType::I1;
  case QD_I32:
    return ScalarType::I32;
  case QD_I64:
    return ScalarType::I64;
  case QD_F32:
    return ScalarType::F32;
  case QD_F64:
    return ScalarType::F64;
  }
  return absl::InvalidArgumentError(
      fmt::format("{}: {} is not an element type (QD_I1, QD_I32, QD_I64, QD_F32 or QD_F64)", call,
                  static_cast<int>(dtype)));
}

qd_dtype toDtype(ScalarType type) {
  switch (type) {
  case ScalarType::I1:
    return QD_I1;
  case ScalarType::I32:
    return QD_I32;
  case ScalarType::I64:
    return QD_I64;
  case ScalarType::F32:
    return QD_F32;
  case ScalarType::F64:
    return QD_F64;
  }
  return QD_F64;
}

absl::StatusOr<std::vector<int64_t>> shapeOf(const char *call, int ndim, const int64_t *shape) {
  if (ndim < 0)
    return absl::InvalidArgumentError(fmt::format("{}: ndim is {}; it must be >= 0", call, ndim));
  if (ndim > 0 && !shape)
    return absl::InvalidArgumentError(
        fmt::format("{}: shape is NULL but ndim is {}; pass {} extents", call, ndim, ndim));
  return std::vector<int64_t>(shape, shape + ndim);
}

namespace {

/// The live buffer handles. A handle is a number that is never reused, so
/// a freed one stays recognisable.
struct BufferRegistry {
  std::mutex mutex;
  absl::flat_hash_map<uintptr_t, std::shared_ptr<Buffer>> live;
  uintptr_t next = 1;

  static BufferRegistry &get() {
    static BufferRegistry *registry = new BufferRegistry; // never destroyed: used at exit
    return *registry;
  }
};

} // namespace

qd_buffer registerBuffer(std::shared_ptr<Buffer> buffer) {
  BufferRegistry &r = BufferRegistry::get();
  std::lock_guard lock(r.mutex);
  uintptr_t id = r.next++;
  r.live.emplace(id, std::move(buffer));
  return reinterpret_cast<qd_buffer>(id);
}

absl::StatusOr<std::shared_ptr<Buffer>> lookupBuffer(const char *call, qd_buffer handle) {
  if (!handle)
    return absl::InvalidArgumentError(fmt::format("{}: buffer is NULL", call));
  auto id = reinterpret_cast<uintptr_t>(handle);
  BufferRegistry &r = BufferRegistry::get();
  std::lock_guard lock(r.mutex);
  if (auto it = r.live.find(id); it != r.live.end())
    return it->second;
  if (id < r.next)
    return absl::FailedPreconditionError(fmt::format(
        "{}: buffer #{} was freed (qd_buffer_free); create a new buffer instead", call, id));
  return absl::InvalidArgumentError(
      fmt::format("{}: {:#x} is not a buffer handle qd returned", call, id));
}

} // namespace qd::capi

using namespace qd::capi;

extern "C" {

const char *qd_version(void) {
#define QD_C_STR2(x) #x
#define QD_C_STR(x) QD_C_STR2(x)
  return QD_C_STR(QD_C_VERSION_MAJOR) "." QD_C_STR(QD_C_VERSION_MINOR) "." QD_C_STR(
      QD_C_VERSION_PATCH);
}

qd_status_code qd_status_get_code(qd_status status) {
  return status ? status->code : QD_OK;
}

const char *qd_status_message(qd_status status) {
  return status ? status->message.c_str() : "";
}

void qd_status_free(qd_status status) {
  delete status;
}

void qd_string_free(char *text) {
  std::free(text);
}

const char *qd_dtype_name(qd_dtype dtype) {
  auto type = scalarType("qd_dtype_name", dtype);
  return type.ok() ? qd::toString(*type).data() : "?";
}

void qd_buffer_free(qd_buffer buffer) {
  BufferRegistry &r = BufferRegistry::get();
  std::shared_ptr<qd::Buffer> dropped; // released outside the lock
  std::lock_guard lock(r.mutex);
  if (auto it = r.live.find(reinterpret_cast<uintptr_t>(buffer)); it != r.live.end()) {
    dropped = std::move(it->second);
    r.live.erase(it);
  }
}

} // extern "C"
