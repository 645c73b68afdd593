//===- Buffer.cpp - Dense typed storage -----------------------------------===//
#include "qd/runtime/Buffer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <sys/sysinfo.h>
#include <utility>

namespace qd {

uint64_t hostMemoryBytes() {
  struct sysinfo info {};
  if (sysinfo(&info) != 0)
    return 0;
  return (static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit;
}

uint64_t availableHostMemoryBytes() {
  if (std::FILE *f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f))
      found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    std::fclose(f);
    if (found)
      return uint64_t(kb) * 1024;
  }
  struct sysinfo info {};
  if (sysinfo(&info) != 0)
    return 0;
  return static_cast<uint64_t>(info.freeram) * info.mem_unit;
}

std::string hostAllocationProblem(uint64_t bytes) {
  uint64_t host = hostMemoryBytes();
  if (host == 0 || bytes <= host)
    return {};
  return fmt::format("more than the host's memory ({} bytes of RAM and swap)", host);
}

namespace {
absl::StatusOr<int64_t> countElements(ScalarType elem, const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(fmt::format("buffer extent {} is negative", d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d / storageBytes(elem))
      return absl::InvalidArgumentError(
          fmt::format("a buffer of shape [{}] of {} would take more than 2^63-1 bytes, the "
                      "largest size a buffer may have; give it a smaller shape",
                      fmt::join(shape, ", "), toString(elem)));
    n *= d;
  }
  return n;
}
} // namespace

struct Buffer::Residency {
  std::mutex mutex;
  std::unique_ptr<DeviceMirror> mirror;
  Side side = Side::Host;
  /// A copy back that failed, until reported.
  absl::Status lost;
  /// The last maxInteger range and its value, while nothing wrote the
  /// buffer since (begin -1: none). Launch-time sizing asks for the same
  /// range before every launch.
  struct {
    int64_t begin = -1, end = -1, value = 0;
  } max;
};

DeviceMirror::~DeviceMirror() = default;

absl::StatusOr<std::vector<int64_t>> DeviceMirror::readIntegers(ScalarType elem,
                                                                std::span<const int64_t> flat) {
  std::vector<int64_t> out;
  out.reserve(flat.size());
  for (int64_t at : flat) {
    absl::StatusOr<int64_t> v = readInteger(elem, at);
    if (!v.ok())
      return v.status();
    out.push_back(*v);
  }
  return out;
}

Buffer::Buffer() = default;
Buffer::Buffer(Buffer &&) noexcept = default;
Buffer &Buffer::operator=(Buffer &&) noexcept = default;
Buffer::~Buffer() = default;

absl::StatusOr<size_t> Buffer::byteSize(ScalarType elem, const std::vector<int64_t> &shape) {
  absl::StatusOr<int64_t> n = countElements(elem, shape);
  if (!n.ok())
    return n.status();
  return static_cast<size_t>(*n) * storageBytes(elem);
}

absl::StatusOr<Buffer> Buffer::create(ScalarType elem, std::vector<int64_t> shape) {
  absl::StatusOr<int64_t> n = countElements(elem, shape);
  if (!n.ok())
    return n.status();
  Buffer b;
  b.elem_ = elem;
  b.shape_ = std::move(shape);
  b.numElements_ = *n;
  size_t bytes = static_cast<size_t>(*n) * storageBytes(elem);
  if (std::string why = hostAllocationProblem(bytes); !why.empty())
    return absl::ResourceExhaustedError(
        fmt::format("cannot allocate {} bytes ({} elements of {}) on the host: {}; use a smaller "
                    "shape",
                    bytes, *n, toString(elem), why));
  try {
    b.owned_.assign(bytes, std::byte{0});
  } catch (const std::bad_alloc &) {
    return absl::ResourceExhaustedError(
        fmt::format("cannot allocate {} bytes ({} elements of {}) on the host; use a smaller shape",
                    bytes, *n, toString(elem)));
  }
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

absl::StatusOr<Buffer> Buffer::onDevice(ScalarType elem, std::vector<int64_t> shape,
                                        std::unique_ptr<DeviceMirror> mirror) {
  absl::StatusOr<int64_t> n = countElements(elem, shape);
  if (!n.ok())
    return n.status();
  if (!mirror || (mirror->address() == 0 && *n != 0))
    return absl::InvalidArgumentError("device buffer has a null device pointer");
  Buffer b;
  b.elem_ = elem;
  b.shape_ = std::move(shape);
  b.numElements_ = *n;
  b.residency_ = std::make_unique<Residency>();
  b.residency_->mirror = std::move(mirror);
  b.residency_->side = Side::Device;
  return b;
}

void Buffer::ensureHostStorage() const {
  if (data_ || numElements_ == 0)
    return;
  owned_.assign(sizeInBytes(), std::byte{0});
  data_ = owned_.data();
}

void Buffer::syncLocked() const {
  Residency &r = *residency_;
  if (r.side != Side::Device)
    return;
  ensureHostStorage();
  absl::Status s = numElements_ == 0 ? absl::OkStatus() : r.mirror->download(data_, sizeInBytes());
  if (s.ok()) {
    r.side = Side::Both;
    return;
  }
  // The host keeps what it had; the error is reported later, once.
  r.lost = absl::Status(
      s.code(), fmt::format("the device copy of a buffer could not be read back ({}); its host "
                            "contents are older than the device's were",
                            std::string(s.message())));
  r.side = Side::Host;
}

void Buffer::hostAccess(bool write) const {
  if (!residency_) {
    ensureHostStorage();
    return;
  }
  std::lock_guard<std::mutex> lock(residency_->mutex);
  syncLocked();
  ensureHostStorage();
  if (write) {
    residency_->max.begin = -1;
    if (residency_->mirror)
      residency_->side = Side::Host;
  }
}

std::byte *Buffer::data() {
  hostAccess(true);
  return data_;
}

const std::byte *Buffer::data() const {
  hostAccess(false);
  return data_;
}

absl::Status Buffer::syncToHost() const {
  if (!residency_)
    return absl::OkStatus();
  std::lock_guard<std::mutex> lock(residency_->mutex);
  syncLocked();
  return std::exchange(residency_->lost, absl::OkStatus());
}

Buffer::StorageRange Buffer::storageRange() const {
  if (residency_ && residency_->mirror && residency_->mirror->borrowed()) {
    uint64_t a = residency_->mirror->address();
    return {residency_->mirror->owner(), a, a + sizeInBytes()};
  }
  auto a = reinterpret_cast<uint64_t>(data_);
  return {nullptr, a, a + sizeInBytes()};
}

bool Buffer::hostIsCurrent() const {
  if (!residency_)
    return true;
  std::lock_guard<std::mutex> lock(residency_->mutex);
  return residency_->side != Side::Device;
}

absl::StatusOr<int64_t> Buffer::readInteger(int64_t flat) const {
  if (residency_) {
    std::lock_guard<std::mutex> lock(residency_->mutex);
    if (residency_->side == Side::Device)
      return residency_->mirror->readInteger(elem_, flat);
  }
  ensureHostStorage();
  return get(flat).i;
}

namespace {
template <typename T> int64_t hostMax(const std::byte *data, int64_t begin, int64_t end) {
  T best = std::numeric_limits<T>::min();
  for (int64_t i = begin; i < end; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    best = std::max(best, v);
  }
  return int64_t(best);
}
} // namespace

bool Buffer::deviceMaxLocked(int64_t count) const {
  const Residency &r = *residency_;
  return r.side != Side::Host && r.mirror && r.mirror->reducesOnDevice() &&
         count >= kDeviceMaxElements;
}

bool Buffer::prefersDeviceMax(int64_t count) const {
  if (!residency_)
    return false;
  std::lock_guard<std::mutex> lock(residency_->mutex);
  return deviceMaxLocked(count);
}

absl::StatusOr<int64_t> Buffer::maxInteger(int64_t begin, int64_t end) const {
  if (begin < 0 || begin >= end || end > numElements_ || isFloat(elem_))
    return absl::InvalidArgumentError(
        fmt::format("maxInteger: [{}, {}) is not a non-empty range of the {} integer elements",
                    begin, end, numElements_));
  if (!residency_) {
    ensureHostStorage();
    return hostMaxLocked(begin, end);
  }
  std::lock_guard<std::mutex> lock(residency_->mutex);
  Residency &r = *residency_;
  if (r.max.begin == begin && r.max.end == end)
    return r.max.value;
  absl::StatusOr<int64_t> v;
  if (r.side == Side::Device || deviceMaxLocked(end - begin)) {
    v = r.mirror->maxInteger(elem_, begin, end);
  } else {
    ensureHostStorage();
    v = hostMaxLocked(begin, end);
  }
  // Memory the caller may write behind qd's back is never remembered.
  if (v.ok() && !isBorrowed() && r.mirror && !r.mirror->borrowed())
    r.max = {begin, end, *v};
  return v;
}

int64_t Buffer::hostMaxLocked(int64_t begin, int64_t end) const {
  switch (elem_) {
  case ScalarType::I1:
    return hostMax<uint8_t>(data_, begin, end) ? 1 : 0;
  case ScalarType::I32:
    return hostMax<int32_t>(data_, begin, end);
  default:
    return hostMax<int64_t>(data_, begin, end);
  }
}

bool Buffer::remembersMax() const {
  if (!residency_ || isBorrowed())
    return false;
  std::lock_guard<std::mutex> lock(residency_->mutex);
  return residency_->mirror && !residency_->mirror->borrowed();
}

absl::StatusOr<DeviceMirror *> Buffer::prepareOnDevice(
    const void *owner, const std::function<absl::StatusOr<std::unique_ptr<DeviceMirror>>()> &make) {
  if (!residency_)
    residency_ = std::make_unique<Residency>();
  Residency &r = *residency_;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.lost.ok())
    return std::exchange(r.lost, absl::OkStatus());
  if (r.mirror && r.mirror->owner() != owner) {
    if (r.mirror->borrowed())
      return absl::FailedPreconditionError(
          "the buffer stands for device memory of another backend or GPU; copy it to the host "
          "(or borrow it on this backend's GPU) to use it here");
    syncLocked();
    if (!r.lost.ok())
      return std::exchange(r.lost, absl::OkStatus());
    r.mirror.reset();
    r.side = Side::Host;
  }
  if (!r.mirror) {
    absl::StatusOr<std::unique_ptr<DeviceMirror>> m = make();
    if (!m.ok())
      return m.status();
    r.mirror = *std::move(m);
    r.side = Side::Host;
  }
  if (isBorrowed() && r.side == Side::Both)
    r.side = Side::Host; // the caller may have written its memory
  if (r.side == Side::Host) {
    ensureHostStorage();
    if (numElements_ > 0)
      if (absl::Status s = r.mirror->upload(data_, sizeInBytes()); !s.ok())
        return s;
    r.side = Side::Both;
  }
  return r.mirror.get();
}

absl::Status Buffer::finishOnDevice(bool written) {
  if (!residency_ || !written)
    return absl::OkStatus();
  std::lock_guard<std::mutex> lock(residency_->mutex);
  residency_->max.begin = -1;
  if (!residency_->mirror)
    return absl::OkStatus();
  residency_->side = Side::Device;
  if (!isBorrowed())
    return absl::OkStatus();
  syncLocked();
  return std::exchange(residency_->lost, absl::OkStatus());
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
  if (residency_ || !data_)
    hostAccess(false);
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
  if (residency_ || !data_)
    hostAccess(true);
  setRaw(flat, value);
}

void Buffer::setRaw(int64_t flat, const Scalar &value) {
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
  hostAccess(true);
  for (int64_t i = 0; i < numElements_; ++i)
    setRaw(i, value);
}

} // namespace qd
