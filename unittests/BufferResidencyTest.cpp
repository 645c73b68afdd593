//===- BufferResidencyTest.cpp - Which side of a mirrored buffer is current -===//
//
// The residency rules of qd/runtime/Buffer.h, checked on every machine with
// a device copy kept in host memory (`MemoryMirror`) that counts what moves.
// The CUDA backend's real mirror is tested on the GPU by CudaBackendTest.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/Buffer.h"
#include "qd/runtime/Program.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Parser.h"

#include <gtest/gtest.h>

#include <cstring>

namespace qd {
namespace {

struct Traffic {
  int downloads = 0, uploads = 0, reads = 0, maxes = 0;
  bool failDownloads = false;
};

/// A "device" copy in host memory.
class MemoryMirror : public DeviceMirror {
public:
  MemoryMirror(const void *owner, size_t bytes, Traffic &t, bool borrowed = false)
      : owner_(owner), bytes_(bytes, std::byte{0}), traffic_(t), borrowed_(borrowed) {}
  const void *owner() const override { return owner_; }
  uint64_t address() const override { return reinterpret_cast<uint64_t>(bytes_.data()); }
  bool borrowed() const override { return borrowed_; }
  absl::Status download(std::byte *host, size_t n) override {
    ++traffic_.downloads;
    if (traffic_.failDownloads)
      return absl::InternalError("cuMemcpyDtoH: CUDA_ERROR_ILLEGAL_ADDRESS");
    std::memcpy(host, bytes_.data(), n);
    return absl::OkStatus();
  }
  absl::Status upload(const std::byte *host, size_t n) override {
    ++traffic_.uploads;
    std::memcpy(bytes_.data(), host, n);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> readInteger(ScalarType, int64_t flat) override {
    ++traffic_.reads;
    int32_t v;
    std::memcpy(&v, bytes_.data() + flat * 4, 4);
    return v;
  }
  absl::StatusOr<int64_t> maxInteger(ScalarType, int64_t begin, int64_t end) override {
    ++traffic_.maxes;
    int32_t best = INT32_MIN;
    for (int64_t i = begin; i < end; ++i) {
      int32_t v;
      std::memcpy(&v, bytes_.data() + i * 4, 4);
      best = std::max(best, v);
    }
    return best;
  }
  bool reducesOnDevice() const override { return reduces; }
  /// Whether maxInteger stands for a reduction kernel (a GPU) rather than
  /// a copy back (Vulkan's mirror).
  bool reduces = true;
  /// What a kernel does: writes the device copy.
  void deviceWrite(int64_t flat, int32_t v) { std::memcpy(bytes_.data() + flat * 4, &v, 4); }

private:
  const void *owner_;
  std::vector<std::byte> bytes_;
  Traffic &traffic_;
  bool borrowed_;
};

int ownerA, ownerB; // two "backends"

/// Puts `b` on `owner`'s device, returning the mirror.
MemoryMirror *prepare(Buffer &b, const void *owner, Traffic &t) {
  auto m = b.prepareOnDevice(owner, [&]() -> absl::StatusOr<std::unique_ptr<DeviceMirror>> {
    return std::make_unique<MemoryMirror>(owner, b.sizeInBytes(), t);
  });
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? static_cast<MemoryMirror *>(*m) : nullptr;
}

TEST(BufferResidency, DataMovesOnlyWhenTheOtherSideNeedsIt) {
  Traffic t;
  Buffer b = *Buffer::create(ScalarType::I32, {4});
  b.set(1, Scalar::ofInt(ScalarType::I32, 7));
  MemoryMirror *m = prepare(b, &ownerA, t);
  EXPECT_EQ(t.uploads, 1); // first use: the host side is copied over
  ASSERT_TRUE(b.finishOnDevice(false).ok());
  EXPECT_TRUE(b.hostIsCurrent()); // a launch that only read it
  EXPECT_EQ(prepare(b, &ownerA, t), m);
  EXPECT_EQ(t.uploads, 1); // unchanged: not copied again
  m->deviceWrite(2, 5);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  EXPECT_FALSE(b.hostIsCurrent());
  EXPECT_EQ(t.downloads, 0); // nothing comes back until the host reads
  prepare(b, &ownerA, t);    // a second launch on the device
  EXPECT_EQ(t.uploads + t.downloads, 1);
  EXPECT_EQ(b.get(2).i, 5); // the host reads: one copy back
  EXPECT_EQ(b.get(1).i, 7);
  EXPECT_EQ(t.downloads, 1);
  EXPECT_TRUE(b.hostIsCurrent());
  b.set(0, Scalar::ofInt(ScalarType::I32, 3)); // the host writes
  prepare(b, &ownerA, t);
  EXPECT_EQ(t.uploads, 2); // so the next launch copies it over
  EXPECT_EQ(t.downloads, 1);
}

TEST(BufferResidency, LargeRangesAreReducedOnTheGpuEvenWhenTheHostIsCurrent) {
  // A launch-time max over 2^22 elements takes milliseconds on one host
  // core and microseconds on a GPU: where both copies are current, a large
  // range goes to a mirror that reduces on the device; a small one, or a
  // mirror that would copy the range back, stays on the host.
  Traffic t;
  const int64_t n = Buffer::kDeviceMaxElements;
  Buffer b = *Buffer::create(ScalarType::I32, {n});
  b.set(n - 1, Scalar::ofInt(ScalarType::I32, 9));
  MemoryMirror *m = prepare(b, &ownerA, t);
  ASSERT_TRUE(b.finishOnDevice(false).ok());
  ASSERT_TRUE(b.hostIsCurrent());
  EXPECT_TRUE(b.prefersDeviceMax(n));
  EXPECT_FALSE(b.prefersDeviceMax(n - 1));
  EXPECT_EQ(*b.maxInteger(0, n), 9);
  EXPECT_EQ(t.maxes, 1);
  EXPECT_EQ(*b.maxInteger(1, n), 9); // n - 1 elements: the host
  EXPECT_EQ(t.maxes, 1);
  m->reduces = false;
  EXPECT_FALSE(b.prefersDeviceMax(n));
  EXPECT_EQ(*b.maxInteger(0, n), 9);
  EXPECT_EQ(t.maxes, 1);
  EXPECT_EQ(t.downloads, 0);
  // A host-only buffer never asks.
  Buffer h = *Buffer::create(ScalarType::I32, {n});
  EXPECT_FALSE(h.prefersDeviceMax(n));
}

TEST(BufferResidency, TheLastMaximumIsRememberedUntilTheBufferIsWritten) {
  // Launch-time sizing asks for the same range before every launch: a
  // buffer a device mirrors answers from memory until something writes it.
  Traffic t;
  const int64_t n = Buffer::kDeviceMaxElements;
  Buffer b = *Buffer::create(ScalarType::I32, {n});
  b.set(5, Scalar::ofInt(ScalarType::I32, 4));
  EXPECT_FALSE(b.remembersMax()); // host only: written behind its back
  MemoryMirror *m = prepare(b, &ownerA, t);
  ASSERT_TRUE(b.finishOnDevice(false).ok());
  EXPECT_TRUE(b.remembersMax());
  EXPECT_EQ(*b.maxInteger(0, n), 4);
  EXPECT_EQ(*b.maxInteger(0, n), 4);
  EXPECT_EQ(t.maxes, 1);             // the second answer came from memory
  EXPECT_EQ(*b.maxInteger(0, 6), 4); // another range: asked again (the host)
  // A host write forgets it.
  b.set(7, Scalar::ofInt(ScalarType::I32, 11));
  EXPECT_EQ(*b.maxInteger(0, n), 11);
  // So does a launch that writes the device copy.
  prepare(b, &ownerA, t);
  m->deviceWrite(9, 30);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  int before = t.maxes;
  EXPECT_EQ(*b.maxInteger(0, n), 30);
  EXPECT_EQ(*b.maxInteger(0, n), 30);
  EXPECT_EQ(t.maxes, before + 1);
  // A launch that only read it keeps it.
  prepare(b, &ownerA, t);
  ASSERT_TRUE(b.finishOnDevice(false).ok());
  EXPECT_EQ(*b.maxInteger(0, n), 30);
  EXPECT_EQ(t.maxes, before + 1);
  // Borrowed host memory is never remembered.
  std::vector<int32_t> mine(n, 1);
  Buffer borrowed = *Buffer::borrow(ScalarType::I32, {n}, mine.data());
  prepare(borrowed, &ownerA, t);
  EXPECT_FALSE(borrowed.remembersMax());
}

TEST(BufferResidency, SizingReadsOnTheDeviceWithoutCopyingBack) {
  Traffic t;
  Buffer b = *Buffer::create(ScalarType::I32, {1000});
  MemoryMirror *m = prepare(b, &ownerA, t);
  m->deviceWrite(700, 42);
  m->deviceWrite(3, -9);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  EXPECT_EQ(*b.readInteger(3), -9);
  EXPECT_EQ(*b.maxInteger(0, 1000), 42);
  EXPECT_EQ(*b.maxInteger(0, 700), 0);
  EXPECT_EQ(t.reads, 1);
  EXPECT_EQ(t.maxes, 2);
  EXPECT_EQ(t.downloads, 0);
  EXPECT_FALSE(b.hostIsCurrent());
  EXPECT_FALSE(b.maxInteger(5, 5).ok()); // empty ranges are the caller's to handle
  EXPECT_FALSE(b.maxInteger(0, 1001).ok());
  // Once the host side is current, the host answers.
  (void)b.data();
  EXPECT_EQ(*b.maxInteger(0, 1000), 42);
  EXPECT_EQ(t.maxes, 2); // unchanged
}

TEST(BufferResidency, ALaunchSizesFromDeviceDataWithoutCopyingItBack) {
  // @g's adstack is bounded by max over %i of @m[%i]: sizing reduces @m
  // where it lives.
  auto module = *parseModule(R"(field @m : i32[64]
field @y : f32[64]
kernel @g() {
  parallel for %i = 0 to 64 {
    %s = adstack.alloca f32, capacity 0
    %n = load @m[%i] : i32
    for %j = 0 to %n {
      %z = const 1.0 : f32
      adstack.push %s, %z
    }
  }
}
)",
                             {"g.qd", 1});
  auto program = *Program::create(*module);
  Buffer &m = *program->field("m");
  Traffic t;
  MemoryMirror *mirror = prepare(m, &ownerA, t);
  mirror->deviceWrite(40, 300);
  ASSERT_TRUE(m.finishOnDevice(true).ok());
  KernelSizing sizing = sizeAdStacks(*module->findKernel("g"));
  auto caps = program->adStackCapacities(*module->findKernel("g"), sizing, {});
  ASSERT_TRUE(caps.ok()) << caps.status().message();
  ASSERT_EQ(caps->size(), 1u);
  EXPECT_EQ(caps->begin()->second, 300);
  EXPECT_EQ(t.downloads, 0);
  EXPECT_EQ(t.maxes, 1);
  // A device read that fails makes sizing fail, naming the stack, instead
  // of guessing a capacity.
  class Failing : public MemoryMirror {
  public:
    using MemoryMirror::MemoryMirror;
    absl::StatusOr<int64_t> maxInteger(ScalarType, int64_t, int64_t) override {
      return absl::InternalError("cuLaunchKernel(qd_max): CUDA_ERROR_LAUNCH_FAILED");
    }
  };
  auto broken = *Program::create(*module);
  Buffer &bm = *broken->field("m");
  ASSERT_TRUE(bm.prepareOnDevice(&ownerB, [&]() -> absl::StatusOr<std::unique_ptr<DeviceMirror>> {
                  return std::make_unique<Failing>(&ownerB, bm.sizeInBytes(), t);
                }).ok());
  ASSERT_TRUE(bm.finishOnDevice(true).ok());
  auto failed = broken->adStackCapacities(*module->findKernel("g"), sizing, {});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(std::string(failed.status().message()).find("cannot size adstack"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(std::string(failed.status().message()).find("CUDA_ERROR_LAUNCH_FAILED"),
            std::string::npos);
}

TEST(BufferResidency, AFailedCopyBackIsReportedOnceAndNeverSilently) {
  Traffic t;
  Buffer b = *Buffer::create(ScalarType::I32, {4});
  b.set(0, Scalar::ofInt(ScalarType::I32, 1));
  MemoryMirror *m = prepare(b, &ownerA, t);
  m->deviceWrite(0, 2);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  t.failDownloads = true;
  EXPECT_EQ(b.get(0).i, 1); // the host keeps what it had
  absl::Status s = b.syncToHost();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("could not be read back"), std::string::npos)
      << s.message();
  EXPECT_NE(std::string(s.message()).find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos);
  EXPECT_TRUE(b.syncToHost().ok()); // reported once
  // The next device use re-uploads the host contents.
  t.failDownloads = false;
  int uploads = t.uploads;
  prepare(b, &ownerA, t);
  EXPECT_EQ(t.uploads, uploads + 1);
}

TEST(BufferResidency, ALaunchReportsALostCopy) {
  Traffic t;
  Buffer b = *Buffer::create(ScalarType::I32, {4});
  MemoryMirror *m = prepare(b, &ownerA, t);
  m->deviceWrite(0, 2);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  t.failDownloads = true;
  (void)b.get(0);
  auto again = b.prepareOnDevice(&ownerA, [&]() -> absl::StatusOr<std::unique_ptr<DeviceMirror>> {
    return std::make_unique<MemoryMirror>(&ownerA, 16, t);
  });
  ASSERT_FALSE(again.ok());
  EXPECT_NE(std::string(again.status().message()).find("could not be read back"),
            std::string::npos);
}

TEST(BufferResidency, AnotherBackendTakesOverAfterCopyingBack) {
  Traffic ta, tb;
  Buffer b = *Buffer::create(ScalarType::I32, {4});
  MemoryMirror *ma = prepare(b, &ownerA, ta);
  ma->deviceWrite(3, 11);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  MemoryMirror *mb = prepare(b, &ownerB, tb);
  ASSERT_NE(mb, nullptr);
  EXPECT_EQ(ta.downloads, 1); // A's newer contents came back first
  EXPECT_EQ(tb.uploads, 1);   // and went to B
  EXPECT_EQ(*mb->readInteger(ScalarType::I32, 3), 11);
}

TEST(BufferResidency, BorrowedHostMemoryIsCopiedBothWaysEveryLaunch) {
  // The caller may read or write its memory directly at any time.
  Traffic t;
  std::vector<int32_t> mem{1, 2, 3, 4};
  Buffer b = *Buffer::borrow(ScalarType::I32, {4}, mem.data());
  MemoryMirror *m = prepare(b, &ownerA, t);
  m->deviceWrite(1, 20);
  ASSERT_TRUE(b.finishOnDevice(true).ok());
  EXPECT_EQ(mem[1], 20); // back at once
  mem[2] = 30;           // written behind the buffer's back
  m = prepare(b, &ownerA, t);
  EXPECT_EQ(t.uploads, 2);
  EXPECT_EQ(*m->readInteger(ScalarType::I32, 2), 30);
}

TEST(BufferResidency, BorrowedDeviceMemoryStaysWhereItIs) {
  Traffic t;
  auto mirror = std::make_unique<MemoryMirror>(&ownerA, 16, t, /*borrowed=*/true);
  MemoryMirror *m = mirror.get();
  m->deviceWrite(2, 9);
  Buffer b = *Buffer::onDevice(ScalarType::I32, {4}, std::move(mirror));
  EXPECT_FALSE(b.hostIsCurrent());
  Buffer::StorageRange r = b.storageRange();
  EXPECT_EQ(r.space, &ownerA);
  EXPECT_EQ(r.begin, m->address());
  EXPECT_EQ(r.end, m->address() + 16);
  // Used in place by its backend: nothing is copied.
  EXPECT_EQ(prepare(b, &ownerA, t), m);
  EXPECT_EQ(t.uploads + t.downloads, 0);
  EXPECT_EQ(b.get(2).i, 9); // host storage appears on the first read
  EXPECT_EQ(t.downloads, 1);
  // Another backend cannot take it over.
  auto other = b.prepareOnDevice(&ownerB, [&]() -> absl::StatusOr<std::unique_ptr<DeviceMirror>> {
    return std::make_unique<MemoryMirror>(&ownerB, 16, t);
  });
  ASSERT_FALSE(other.ok());
  EXPECT_NE(std::string(other.status().message()).find("another backend or GPU"),
            std::string::npos);
  EXPECT_FALSE(Buffer::onDevice(ScalarType::I32, {4}, nullptr).ok());
}

TEST(BufferResidency, OverlapChecksCompareDeviceRangesOfOneDevice) {
  // Two ndarrays of different element types over one device allocation.
  auto module = *parseModule(R"(kernel @k(%a: ndarray<f32, 1>, %b: ndarray<i32, 1>) {
}
)",
                             {"k.qd", 1});
  Traffic t;
  auto whole = std::make_unique<MemoryMirror>(&ownerA, 64, t, true);
  uint64_t base = whole->address();
  struct At : MemoryMirror {
    At(uint64_t a, Traffic &t) : MemoryMirror(&ownerA, 0, t, true), a_(a) {}
    uint64_t address() const override { return a_; }
    uint64_t a_;
  };
  Buffer a = *Buffer::onDevice(ScalarType::F32, {8}, std::make_unique<At>(base, t));
  Buffer b = *Buffer::onDevice(ScalarType::I32, {8}, std::make_unique<At>(base + 16, t));
  Buffer c = *Buffer::onDevice(ScalarType::I32, {8}, std::make_unique<At>(base + 32, t));
  NdarrayArg na{&a}, nb{&b}, nc{&c};
  std::vector<LaunchArg> overlapping{LaunchArg::ndarray(&na), LaunchArg::ndarray(&nb)};
  std::vector<LaunchArg> apart{LaunchArg::ndarray(&na), LaunchArg::ndarray(&nc)};
  absl::Status s = validateLaunchArgs(*module->findKernel("k"), overlapping);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("overlap"), std::string::npos);
  EXPECT_TRUE(validateLaunchArgs(*module->findKernel("k"), apart).ok());
  EXPECT_EQ(t.downloads, 0); // checked without copying anything back
}

} // namespace
} // namespace qd
