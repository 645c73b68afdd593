//===- VulkanMemory.cpp - Device buffers and host transfers ---------------===//
#include "VulkanDevice.h"

#include "qd/runtime/LaunchTrace.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

namespace qd::vk {

namespace {

/// A QD_TRACE_LAUNCHES line for one host transfer or allocation, printed
/// when it ends.
class TransferTrace {
public:
  TransferTrace(const char *what, size_t bytes) : what_(what), bytes_(bytes), on_(launchTraceOn()) {
    if (on_)
      start_ = std::chrono::steady_clock::now();
  }
  TransferTrace(const TransferTrace &) = delete;
  TransferTrace &operator=(const TransferTrace &) = delete;
  ~TransferTrace() {
    if (on_)
      launchTrace(fmt::format("vulkan {} of {} bytes: {:.1f} us", what_, bytes_,
                              microsecondsSince(start_)));
  }

private:
  const char *what_;
  size_t bytes_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace

absl::Status Device::inPieces(
    DeviceBuffer &kept, VkMemoryPropertyFlags prefer, size_t bytes, size_t unit,
    const std::function<absl::Status(const DeviceBuffer &, size_t, size_t)> &piece) const {
  std::lock_guard<std::mutex> lock(stagingMutex_);
  const size_t chunk = kStagingChunkBytes / unit * unit;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, chunk);
    if (!kept.get() || kept.size() < n) {
      kept.reset();
      // Not owning: the device outlives its own staging buffers.
      std::shared_ptr<const Device> self(std::shared_ptr<const Device>(), this);
      absl::StatusOr<DeviceBuffer> made = DeviceBuffer::allocate(
          std::move(self), std::min(std::bit_ceil(std::max(n, size_t(1) << 20)), chunk), true,
          prefer);
      if (!made.ok())
        return made.status();
      kept = *std::move(made);
    }
    if (absl::Status s = piece(kept, done, n); !s.ok())
      return s;
    done += n;
  }
  return absl::OkStatus();
}

absl::Status Device::upload(const DeviceBuffer &dst, size_t offset, const void *src,
                            size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  TransferTrace trace("upload", bytes);
  return inPieces(uploadStaging_, 0, bytes, 1,
                  [&](const DeviceBuffer &staged, size_t done, size_t n) {
                    std::memcpy(staged.mapped(), static_cast<const std::byte *>(src) + done, n);
                    return run([&](VkCommandBuffer cb) {
                      VkBufferCopy region{0, offset + done, n};
                      api_.CmdCopyBuffer(cb, staged.get(), dst.get(), 1, &region);
                    });
                  });
}

absl::Status Device::download(const DeviceBuffer &src, size_t offset, void *dst,
                              size_t bytes) const {
  return read(src, offset, bytes, 1, [&](const std::byte *piece, size_t n) {
    std::memcpy(static_cast<std::byte *>(dst), piece, n);
    dst = static_cast<std::byte *>(dst) + n;
  });
}

absl::Status Device::read(const DeviceBuffer &src, size_t offset, size_t bytes, size_t unit,
                          const std::function<void(const std::byte *, size_t)> &consume) const {
  if (bytes == 0)
    return absl::OkStatus();
  TransferTrace trace("download", bytes);
  return inPieces(downloadStaging_, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, bytes, unit,
                  [&](const DeviceBuffer &staged, size_t done, size_t n) {
                    if (absl::Status s = run([&](VkCommandBuffer cb) {
                          VkBufferCopy region{offset + done, 0, n};
                          api_.CmdCopyBuffer(cb, src.get(), staged.get(), 1, &region);
                        });
                        !s.ok())
                      return s;
                    consume(static_cast<const std::byte *>(staged.mapped()), n);
                    return absl::OkStatus();
                  });
}

absl::Status Device::gather(const DeviceBuffer &src, std::span<const size_t> offsets, size_t unit,
                            void *dst) const {
  const size_t bytes = offsets.size() * unit;
  if (bytes == 0)
    return absl::OkStatus();
  if (bytes > kStagingChunkBytes)
    return absl::InvalidArgumentError(fmt::format(
        "vulkan: gathering {} bytes in one copy, more than {}", bytes, kStagingChunkBytes));
  TransferTrace trace("download", bytes);
  return inPieces(downloadStaging_, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, bytes, unit,
                  [&](const DeviceBuffer &staged, size_t, size_t) {
                    std::vector<VkBufferCopy> regions;
                    regions.reserve(offsets.size());
                    for (size_t k = 0; k < offsets.size(); ++k)
                      regions.push_back({offsets[k], k * unit, unit});
                    if (absl::Status s = run([&](VkCommandBuffer cb) {
                          api_.CmdCopyBuffer(cb, src.get(), staged.get(), uint32_t(regions.size()),
                                             regions.data());
                        });
                        !s.ok())
                      return s;
                    std::memcpy(dst, staged.mapped(), bytes);
                    return absl::OkStatus();
                  });
}

//===--- DeviceBuffer -----------------------------------------------------===//

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::move(o.device_);
    buffer_ = std::exchange(o.buffer_, VkBuffer(VK_NULL_HANDLE));
    memory_ = std::exchange(o.memory_, VkDeviceMemory(VK_NULL_HANDLE));
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, nullptr);
    flags_ = std::exchange(o.flags_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (device_) {
    const Api &api = device_->api();
    if (buffer_)
      api.DestroyBuffer(device_->handle(), buffer_, nullptr);
    if (memory_)
      api.FreeMemory(device_->handle(), memory_, nullptr);
  }
  device_.reset();
  buffer_ = VK_NULL_HANDLE;
  memory_ = VK_NULL_HANDLE;
  size_ = 0;
  mapped_ = nullptr;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::allocate(std::shared_ptr<const Device> device,
                                                    size_t bytes, bool hostVisible,
                                                    VkMemoryPropertyFlags prefer) {
  TransferTrace trace(hostVisible ? "allocation (host-visible)" : "allocation", bytes);
  const Api &api = device->api();
  DeviceBuffer b;
  b.device_ = device;
  b.size_ = std::max<size_t>(bytes, 4); // Vulkan buffers are never empty
  auto bci = vk::make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bci.size = b.size_;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (absl::Status s = device->check(api.CreateBuffer(device->handle(), &bci, nullptr, &b.buffer_),
                                     fmt::format("vkCreateBuffer ({} bytes)", b.size_));
      !s.ok())
    return s;
  VkMemoryRequirements req;
  api.GetBufferMemoryRequirements(device->handle(), b.buffer_, &req);
  VkMemoryPropertyFlags flags =
      hostVisible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0;
  VkMemoryPropertyFlags preferred =
      hostVisible ? flags | prefer : VkMemoryPropertyFlags(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  auto type = device->memoryType(req.memoryTypeBits, flags, preferred);
  if (!type.ok())
    return type.status();
  b.flags_ = device->memoryTypeFlags(*type);
  auto mai = vk::make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = *type;
  if (absl::Status s =
          device->check(api.AllocateMemory(device->handle(), &mai, nullptr, &b.memory_),
                        fmt::format("vkAllocateMemory ({} bytes)", req.size));
      !s.ok())
    return s;
  if (absl::Status s = device->check(
          api.BindBufferMemory(device->handle(), b.buffer_, b.memory_, 0), "vkBindBufferMemory");
      !s.ok())
    return s;
  if (hostVisible)
    if (absl::Status s = device->check(
            api.MapMemory(device->handle(), b.memory_, 0, VK_WHOLE_SIZE, 0, &b.mapped_),
            "vkMapMemory");
        !s.ok())
      return s;
  return b;
}

} // namespace qd::vk
