//===- qd/runtime/Buffer.h - Dense typed storage ----------------*- C++ -*-===//
//
// A Buffer holds the contents of a field component or an ndarray. A device
// backend (CUDA) may keep a copy of them in device memory between launches,
// a DeviceMirror: the buffer then tracks which side is current, so data
// moves only when the other side needs it. Host access through `data()`,
// `get`, `set` and `fill` first brings the host side up to date (one copy
// back when a kernel changed the device copy) and, when it may write,
// marks the host side as the newer one (the next device launch copies it
// over). A buffer may also stand for device memory the caller owns (a
// framework's GPU tensor), with host storage only once the host reads it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/LaunchContext.h"
#include "qd/ir/Scalar.h"

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace qd {

/// The host's memory (RAM plus swap) in bytes, or 0 when unknown.
uint64_t hostMemoryBytes();
/// The host's available RAM (MemAvailable of /proc/meminfo, else free
/// RAM; 0 when neither can be read): the CPU backend's default adstack
/// memory budget is a fraction of it.
uint64_t availableHostMemoryBytes();

/// Empty when `bytes` may be allocated on the host, else why not ("more
/// than the host's memory (N bytes of RAM and swap)"). Checked before
/// allocating, so a hopeless size is an error even where the allocator would
/// abort instead of failing (sanitizer runtimes), or overcommit would let
/// the allocation succeed and the process be killed later.
std::string hostAllocationProblem(uint64_t bytes);

/// A copy of a buffer's contents in a device's memory, made and kept by a
/// device backend. Its methods run under the owning buffer's lock.
class DeviceMirror {
public:
  virtual ~DeviceMirror();
  /// Identifies the backend (and device) that made it: a backend uses only
  /// mirrors it owns, and replaces another one's.
  virtual const void *owner() const = 0;
  /// The device address of the contents (for overlap checks).
  virtual uint64_t address() const = 0;
  /// True when the memory belongs to the caller (Buffer::onDevice): it is
  /// never freed or replaced.
  virtual bool borrowed() const = 0;
  /// Copies `bytes` bytes of the device contents to `host`, or from it.
  virtual absl::Status download(std::byte *host, size_t bytes) = 0;
  virtual absl::Status upload(const std::byte *host, size_t bytes) = 0;
  /// Integer element `flat` of the device contents (type `elem`).
  virtual absl::StatusOr<int64_t> readInteger(ScalarType elem, int64_t flat) = 0;
  /// Integer elements `flat` (each as readInteger), in one transfer where
  /// the device can (the default reads them one by one).
  virtual absl::StatusOr<std::vector<int64_t>> readIntegers(ScalarType elem,
                                                            std::span<const int64_t> flat);
  /// The maximum of integer elements [begin, end) (0 <= begin < end <=
  /// elements), computed on the device.
  virtual absl::StatusOr<int64_t> maxInteger(ScalarType elem, int64_t begin, int64_t end) = 0;
  /// Whether maxInteger runs on the device (a reduction kernel) rather than
  /// copying the range back: then a large range is reduced there even when
  /// the host side is current too (Buffer::prefersDeviceMax).
  virtual bool reducesOnDevice() const { return false; }
};

/// A std::allocator aligned to abi::kHostVectorAlignment: Buffer storage,
/// which vector code of the CPU backend loads from.
template <typename T> struct HostVectorAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{abi::kHostVectorAlignment};
  HostVectorAllocator() = default;
  template <typename U> HostVectorAllocator(const HostVectorAllocator<U> &) {}
  T *allocate(size_t n) { return static_cast<T *>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T *p, size_t) { ::operator delete(p, kAlign); }
  template <typename U> bool operator==(const HostVectorAllocator<U> &) const { return true; }
};

/// A dense row-major array of one scalar type: the storage of a field
/// component or an ndarray. Either owns its bytes (zero-initialised),
/// borrows caller memory that must outlive it, or stands for caller device
/// memory. i1 elements are one byte.
///
/// Host accessors may copy device contents back (see the file comment). A
/// copy that fails (a lost GPU context) leaves the host contents as they
/// were and records the error, which `syncToHost` and the next launch that
/// binds the buffer report, once.
class Buffer {
public:
  /// Owned, zero-initialised storage. Fails on negative extents or a size
  /// that overflows.
  static absl::StatusOr<Buffer> create(ScalarType elem, std::vector<int64_t> shape);
  /// Wraps caller memory of `numElements(shape) * storageBytes(elem)` bytes.
  static absl::StatusOr<Buffer> borrow(ScalarType elem, std::vector<int64_t> shape, void *data);
  /// Stands for device memory `mirror` refers to (made by a device backend,
  /// e.g. CudaBackend::borrowDeviceArray): kernels on that backend use it
  /// in place; host storage is allocated and filled on the first host read.
  static absl::StatusOr<Buffer> onDevice(ScalarType elem, std::vector<int64_t> shape,
                                         std::unique_ptr<DeviceMirror> mirror);

  /// Bytes of a buffer of `shape`; fails like `create` on a bad shape.
  static absl::StatusOr<size_t> byteSize(ScalarType elem, const std::vector<int64_t> &shape);

  Buffer();
  Buffer(Buffer &&) noexcept;
  Buffer &operator=(Buffer &&) noexcept;
  ~Buffer();

  ScalarType elementType() const { return elem_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  unsigned ndim() const { return static_cast<unsigned>(shape_.size()); }
  int64_t numElements() const { return numElements_; }
  size_t sizeInBytes() const { return static_cast<size_t>(numElements_) * storageBytes(elem_); }
  bool isBorrowed() const { return owned_.empty() && data_ != nullptr; }

  /// Host contents, up to date. The mutable form marks the host side as the
  /// newer one.
  std::byte *data();
  const std::byte *data() const;

  /// Row-major flat offset of `indices`, or nullopt when out of range.
  std::optional<int64_t> flatIndex(std::span<const int64_t> indices) const;
  Scalar get(int64_t flat) const;
  void set(int64_t flat, const Scalar &value);
  void fill(const Scalar &value);

  /// Brings the host side up to date now; the error of a failed copy back
  /// (this one or an earlier one's, reported once).
  absl::Status syncToHost() const;

  // --- For device backends -------------------------------------------------

  /// The memory the contents live in, without copying anything: host
  /// memory (`space` null) or a borrowed device allocation (`space` its
  /// mirror's owner). For overlap checks.
  struct StorageRange {
    const void *space = nullptr;
    uint64_t begin = 0, end = 0;
  };
  StorageRange storageRange() const;
  /// True when the host side is current (reading it copies nothing).
  bool hostIsCurrent() const;
  /// Integer element `flat` without copying the whole buffer back: read on
  /// the device when only the device side is current.
  absl::StatusOr<int64_t> readInteger(int64_t flat) const;
  /// The maximum of integer elements [begin, end) (0 <= begin < end <=
  /// numElements()), on the device when only the device side is current,
  /// or when prefersDeviceMax(end - begin).
  absl::StatusOr<int64_t> maxInteger(int64_t begin, int64_t end) const;
  /// Ranges of at least this many elements are reduced on a device that
  /// reduces on the device, when its copy is current, rather than scanned
  /// on the host (on a GPU, 2^22 elements take microseconds there and
  /// milliseconds on one host core).
  static constexpr int64_t kDeviceMaxElements = int64_t(1) << 16;
  /// Whether the maximum of `count` elements is taken on the device although
  /// the host side may be current too: a mirror that reduces on the device
  /// is current and `count` >= kDeviceMaxElements.
  bool prefersDeviceMax(int64_t count) const;
  /// Whether maxInteger remembers its last range until the buffer is
  /// written (host accessors, a launch that writes it): a buffer a device
  /// backend mirrors, unless the caller owns the memory (borrowed host or
  /// device memory, which it may write directly).
  bool remembersMax() const;

  /// Makes the device side of `owner` current and returns its mirror: keeps
  /// the mirror `owner` made, or syncs the host from another backend's and
  /// replaces it with `make()`'s; uploads when the host side is newer, and
  /// always for borrowed host memory (the caller may have written it
  /// directly). Reports a copy back that failed earlier. Called by a
  /// launch.
  absl::StatusOr<DeviceMirror *>
  prepareOnDevice(const void *owner,
                  const std::function<absl::StatusOr<std::unique_ptr<DeviceMirror>>()> &make);
  /// After a device launch: when it may have written the device copy, the
  /// device side is the newer one, except for borrowed host memory, which
  /// the caller may read directly: it is copied back now.
  absl::Status finishOnDevice(bool written);

private:
  struct Residency;
  enum class Side : uint8_t { Host, Both, Device };
  void syncLocked() const;
  bool deviceMaxLocked(int64_t count) const;
  int64_t hostMaxLocked(int64_t begin, int64_t end) const;
  void ensureHostStorage() const;
  void hostAccess(bool write) const;
  void setRaw(int64_t flat, const Scalar &value);

  ScalarType elem_ = ScalarType::F32;
  std::vector<int64_t> shape_;
  int64_t numElements_ = 0;
  mutable std::vector<std::byte, HostVectorAllocator<std::byte>> owned_;
  mutable std::byte *data_ = nullptr;
  /// Null until a device backend mirrors the buffer.
  std::unique_ptr<Residency> residency_;
};

} // namespace qd
