//===- CudaMemory.cpp - Device copies of buffers, reductions, launch arenas ===//
#include "CudaMemory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace qd::cuda {

namespace {

/// One reduction kernel: `name(data, begin, end, out)` folds elements
/// [begin, end) with a grid-stride loop, reduces each warp with shuffles
/// and lets lane 0 of each warp do one atomic max on *out (an int64 the
/// host initialised to INT64_MIN). Blocks must be whole warps.
std::string reductionKernel(const char *name, const char *load, unsigned shift) {
  return fmt::format(R"(
.visible .entry {0}(.param .u64 p_data, .param .u64 p_begin, .param .u64 p_end,
                    .param .u64 p_out)
{{
  .reg .pred %p<3>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [p_data];
  ld.param.u64 %rd2, [p_begin];
  ld.param.u64 %rd3, [p_end];
  ld.param.u64 %rd4, [p_out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd4, %rd4;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  mul.wide.u32 %rd5, %r1, %r2;
  cvt.u64.u32 %rd6, %r3;
  add.s64 %rd5, %rd5, %rd6;
  add.s64 %rd5, %rd5, %rd2;
  mul.wide.u32 %rd7, %r4, %r2;
  mov.b64 %rd8, 0x8000000000000000;
LOOP:
  setp.ge.s64 %p1, %rd5, %rd3;
  @%p1 bra REDUCE;
  shl.b64 %rd9, %rd5, {2};
  add.s64 %rd9, %rd1, %rd9;
  {1}
  max.s64 %rd8, %rd8, %rd10;
  add.s64 %rd5, %rd5, %rd7;
  bra LOOP;
REDUCE:
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 16, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 16, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 8, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 8, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 4, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 4, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 2, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 2, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 1, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 1, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  and.b32 %r9, %r3, 31;
  setp.ne.u32 %p2, %r9, 0;
  @%p2 bra DONE;
  atom.global.max.s64 %rd12, [%rd4], %rd8;
DONE:
  ret;
}}
)",
                     name, load, shift);
}

constexpr const char *kReductionNames[3] = {"qd_max_u8", "qd_max_i32", "qd_max_i64"};
constexpr unsigned kReductionBlock = 256;

int reductionIndex(ScalarType elem) {
  return elem == ScalarType::I1 ? 0 : elem == ScalarType::I32 ? 1 : 2;
}

} // namespace

std::string Reducer::ptx() {
  std::string out = ".version 7.0\n.target sm_70\n.address_size 64\n";
  out += reductionKernel(kReductionNames[0],
                         "ld.global.u8 %r10, [%rd9];\n  cvt.u64.u32 %rd10, %r10;", 0);
  out += reductionKernel(kReductionNames[1],
                         "ld.global.s32 %r10, [%rd9];\n  cvt.s64.s32 %rd10, %r10;", 2);
  out += reductionKernel(kReductionNames[2], "ld.global.s64 %rd10, [%rd9];", 3);
  return out;
}

absl::StatusOr<int64_t> Reducer::max(CUdeviceptr data, ScalarType elem, int64_t begin,
                                     int64_t end) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!module_) {
    auto m = Module::load(*device_, ptx());
    if (!m.ok())
      return m.status();
    for (int i = 0; i < 3; ++i) {
      auto fn = (*m)->function(kReductionNames[i]);
      if (!fn.ok())
        return fn.status();
      fns_[i] = *fn;
    }
    auto r = DeviceBuffer::allocate(*device_, 8);
    if (!r.ok())
      return r.status();
    module_ = *std::move(m);
    result_ = *std::move(r);
  }
  int64_t init = std::numeric_limits<int64_t>::min();
  if (absl::Status s = device_->copyToDevice(result_.get(), &init, 8); !s.ok())
    return s;
  // Enough blocks to fill the GPU, no more than the range needs.
  int64_t blocksNeeded = (end - begin + kReductionBlock - 1) / kReductionBlock;
  int64_t blocks = std::clamp<int64_t>(blocksNeeded, 1,
                                       int64_t(std::max(device_->info().multiprocessors, 1)) * 8);
  CUdeviceptr out = result_.get();
  auto b = static_cast<unsigned long long>(begin), e = static_cast<unsigned long long>(end);
  void *params[] = {&data, &b, &e, &out};
  if (absl::Status s = device_->check(
          device_->api().cuLaunchKernel(fns_[reductionIndex(elem)], unsigned(blocks), 1, 1,
                                        kReductionBlock, 1, 1, 0, nullptr, params, nullptr),
          "cuLaunchKernel(qd_max)");
      !s.ok())
    return s;
  int64_t best = 0;
  if (absl::Status s = device_->copyToHost(&best, result_.get(), 8); !s.ok())
    return s;
  return elem == ScalarType::I1 ? (best != 0 ? 1 : 0) : best;
}

absl::StatusOr<std::unique_ptr<CudaMirror>>
CudaMirror::allocate(const void *owner, std::shared_ptr<const Device> device,
                     std::shared_ptr<Reducer> reducer, size_t bytes) {
  auto buf = DeviceBuffer::allocate(*device, std::max<size_t>(bytes, 8));
  if (!buf.ok())
    return buf.status();
  std::unique_ptr<CudaMirror> m(new CudaMirror(owner, std::move(device), std::move(reducer)));
  m->owned_ = *std::move(buf);
  m->ptr_ = m->owned_.get();
  return m;
}

absl::StatusOr<std::unique_ptr<CudaMirror>> CudaMirror::borrow(const void *owner,
                                                               std::shared_ptr<const Device> device,
                                                               std::shared_ptr<Reducer> reducer,
                                                               CUdeviceptr ptr, size_t bytes) {
  if (ptr == 0)
    return absl::InvalidArgumentError("device pointer is null");
  auto range = device->addressRange(ptr);
  if (!range.ok())
    return absl::InvalidArgumentError(
        fmt::format("0x{:x} is not device memory of GPU {} ({}); pass a pointer from cuMemAlloc "
                    "or a framework's tensor on that GPU",
                    ptr, device->info().ordinal, std::string(range.status().message())));
  auto [base, size] = *range;
  if (ptr + bytes > base + size)
    return absl::InvalidArgumentError(
        fmt::format("the allocation at 0x{:x} holds {} bytes from 0x{:x}, but the array needs {}",
                    base, base + size - ptr, ptr, bytes));
  std::unique_ptr<CudaMirror> m(new CudaMirror(owner, std::move(device), std::move(reducer)));
  m->ptr_ = ptr;
  return m;
}

absl::Status CudaMirror::download(std::byte *host, size_t bytes) {
  return device_->copyToHost(host, ptr_, bytes);
}

absl::Status CudaMirror::upload(const std::byte *host, size_t bytes) {
  return device_->copyToDevice(ptr_, host, bytes);
}

absl::StatusOr<int64_t> CudaMirror::readInteger(ScalarType elem, int64_t flat) {
  unsigned bytes = storageBytes(elem);
  unsigned char raw[8] = {};
  if (absl::Status s = device_->copyToHost(raw, ptr_ + uint64_t(flat) * bytes, bytes); !s.ok())
    return s;
  switch (elem) {
  case ScalarType::I1:
    return raw[0] ? 1 : 0;
  case ScalarType::I32: {
    int32_t v;
    std::memcpy(&v, raw, 4);
    return v;
  }
  default: {
    int64_t v;
    std::memcpy(&v, raw, 8);
    return v;
  }
  }
}

absl::StatusOr<int64_t> CudaMirror::maxInteger(ScalarType elem, int64_t begin, int64_t end) {
  return reducer_->max(ptr_, elem, begin, end);
}

size_t LaunchArena::place(size_t bytes) {
  size_t off = (host_.size() + 15) & ~size_t(15);
  host_.resize(off + std::max<size_t>(bytes, 8));
  return off;
}

void LaunchArena::write(size_t offset, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(host_.data() + offset, src, bytes);
}

absl::Status LaunchArena::reserve(const Device &device) {
  if (host_.size() <= block_.size())
    return absl::OkStatus();
  size_t grown = std::max(host_.size(), 2 * block_.size());
  block_.reset();
  auto b = DeviceBuffer::allocate(device, grown);
  if (!b.ok())
    return b.status();
  block_ = *std::move(b);
  return absl::OkStatus();
}

absl::Status LaunchArena::upload(const Device &device) const {
  return device.copyToDevice(block_.get(), host_.data(), host_.size());
}

absl::Status LaunchArena::download(const Device &device, size_t offset, void *dst,
                                   size_t bytes) const {
  return device.copyToHost(dst, block_.get() + offset, bytes);
}

} // namespace qd::cuda
