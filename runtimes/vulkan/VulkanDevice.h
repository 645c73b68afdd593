//===- VulkanDevice.h - The Vulkan loader, a device, its buffers -*- C++ -*-===//
//
// Private to qd::runtime_vulkan. The loader is opened with dlopen and every
// entry point comes through vkGetInstanceProcAddr / vkGetDeviceProcAddr
// (the headers' prototypes are not used: VK_NO_PROTOTYPES), so nothing
// links libvulkan. A Device is an instance, one physical device with the
// features qd's SPIR-V may use enabled, a compute queue and a command pool;
// buffers and mirrors hold it through a shared pointer, so a program may
// outlive the backend that mirrored its buffers.
//
//===----------------------------------------------------------------------===//
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "qd/runtime/VulkanBackend.h"

#include <absl/status/statusor.h>

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace qd::vk {

// Entry points resolved with vkGetInstanceProcAddr(instance, ...).
#define QD_VK_INSTANCE_FUNCTIONS(X)                                                                \
  X(DestroyInstance)                                                                               \
  X(EnumeratePhysicalDevices)                                                                      \
  X(GetPhysicalDeviceProperties)                                                                   \
  X(GetPhysicalDeviceProperties2)                                                                  \
  X(GetPhysicalDeviceFeatures2)                                                                    \
  X(GetPhysicalDeviceQueueFamilyProperties)                                                        \
  X(GetPhysicalDeviceMemoryProperties)                                                             \
  X(GetPhysicalDeviceMemoryProperties2)                                                            \
  X(EnumerateDeviceExtensionProperties)                                                            \
  X(CreateDevice)                                                                                  \
  X(GetDeviceProcAddr)
// VK_EXT_debug_utils's, resolved like those when validation is on.
#define QD_VK_DEBUG_FUNCTIONS(X)                                                                   \
  X(CreateDebugUtilsMessengerEXT)                                                                  \
  X(DestroyDebugUtilsMessengerEXT)
// Entry points resolved with vkGetDeviceProcAddr(device, ...).
#define QD_VK_DEVICE_FUNCTIONS(X)                                                                  \
  X(DestroyDevice)                                                                                 \
  X(GetDeviceQueue)                                                                                \
  X(CreateBuffer)                                                                                  \
  X(DestroyBuffer)                                                                                 \
  X(GetBufferMemoryRequirements)                                                                   \
  X(AllocateMemory)                                                                                \
  X(FreeMemory)                                                                                    \
  X(BindBufferMemory)                                                                              \
  X(MapMemory)                                                                                     \
  X(UnmapMemory)                                                                                   \
  X(CreateCommandPool)                                                                             \
  X(DestroyCommandPool)                                                                            \
  X(AllocateCommandBuffers)                                                                        \
  X(BeginCommandBuffer)                                                                            \
  X(EndCommandBuffer)                                                                              \
  X(ResetCommandBuffer)                                                                            \
  X(CmdCopyBuffer)                                                                                 \
  X(CmdPipelineBarrier)                                                                            \
  X(CmdBindPipeline)                                                                               \
  X(CmdBindDescriptorSets)                                                                         \
  X(CmdPushConstants)                                                                              \
  X(CmdDispatch)                                                                                   \
  X(CmdFillBuffer)                                                                                 \
  X(QueueSubmit)                                                                                   \
  X(CreateFence)                                                                                   \
  X(DestroyFence)                                                                                  \
  X(WaitForFences)                                                                                 \
  X(GetFenceStatus)                                                                                \
  X(ResetFences)                                                                                   \
  X(CreateShaderModule)                                                                            \
  X(DestroyShaderModule)                                                                           \
  X(CreateDescriptorSetLayout)                                                                     \
  X(DestroyDescriptorSetLayout)                                                                    \
  X(CreatePipelineLayout)                                                                          \
  X(DestroyPipelineLayout)                                                                         \
  X(CreateComputePipelines)                                                                        \
  X(DestroyPipeline)                                                                               \
  X(CreateDescriptorPool)                                                                          \
  X(DestroyDescriptorPool)                                                                         \
  X(ResetDescriptorPool)                                                                           \
  X(AllocateDescriptorSets)                                                                        \
  X(UpdateDescriptorSets)                                                                          \
  X(CreateQueryPool)                                                                               \
  X(DestroyQueryPool)                                                                              \
  X(CmdResetQueryPool)                                                                             \
  X(CmdWriteTimestamp)                                                                             \
  X(GetQueryPoolResults)

struct Api {
  PFN_vkGetInstanceProcAddr GetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance CreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion EnumerateInstanceVersion = nullptr;
  PFN_vkEnumerateInstanceLayerProperties EnumerateInstanceLayerProperties = nullptr;
  PFN_vkEnumerateInstanceExtensionProperties EnumerateInstanceExtensionProperties = nullptr;
#define QD_VK_DECLARE(name) PFN_vk##name name = nullptr;
  QD_VK_INSTANCE_FUNCTIONS(QD_VK_DECLARE)
  QD_VK_DEBUG_FUNCTIONS(QD_VK_DECLARE)
  QD_VK_DEVICE_FUNCTIONS(QD_VK_DECLARE)
#undef QD_VK_DECLARE
};

/// A zeroed Vulkan structure of type `type`.
template <typename T> T make(VkStructureType type) {
  T v{};
  v.sType = type;
  return v;
}

/// "VK_ERROR_OUT_OF_DEVICE_MEMORY", ...
const char *resultName(VkResult r);

class Device;

/// The warnings and errors of the validation layer (thread-safe: the layer
/// reports on whichever thread made the call).
class ValidationLog {
public:
  explicit ValidationLog(std::function<void(const std::string &)> sink) : sink_(std::move(sink)) {}
  void record(std::string message);
  std::vector<std::string> messages() const;
  size_t count() const;
  void clear();
  /// Messages kept (count() goes on counting past them).
  static constexpr size_t kKept = 1000;

private:
  const std::function<void(const std::string &)> sink_;
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
  size_t count_ = 0;
};

/// A VkBuffer with its own memory: device-local, or host-visible and
/// coherent (then mapped for its lifetime).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  ~DeviceBuffer() { reset(); }
  /// `prefer`: more property flags a host-visible buffer's memory should
  /// have if some memory type has them (DEVICE_LOCAL: the BAR).
  static absl::StatusOr<DeviceBuffer> allocate(std::shared_ptr<const Device> device, size_t bytes,
                                               bool hostVisible, VkMemoryPropertyFlags prefer = 0);
  void reset();
  VkBuffer get() const { return buffer_; }
  size_t size() const { return size_; }
  /// Host-visible buffers: their mapped memory.
  void *mapped() const { return mapped_; }
  /// The property flags of the memory type it was allocated from.
  VkMemoryPropertyFlags memoryFlags() const { return flags_; }

private:
  std::shared_ptr<const Device> device_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  size_t size_ = 0;
  void *mapped_ = nullptr;
  VkMemoryPropertyFlags flags_ = 0;
};

class Reducer;

class Device : public std::enable_shared_from_this<Device> {
public:
  /// The loader, an instance and the device `options` selects.
  static absl::StatusOr<std::shared_ptr<Device>> open(const VulkanBackendOptions &options);
  ~Device();
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;

  const Api &api() const { return api_; }
  VkDevice handle() const { return device_; }
  const VulkanDeviceInfo &info() const { return info_; }
  VkInstance instance() const { return instance_; }
  VkPhysicalDevice physical() const { return physical_; }
  /// The validation layer's messages; null when the layer is off.
  ValidationLog *validation() const { return validation_.get(); }
  /// OK, or an Internal error "vulkan: <what> failed: VK_ERROR_...".
  absl::Status check(VkResult r, const std::string &what) const;
  /// A memory type for `bits` with `flags` (and `preferred` if possible).
  absl::StatusOr<uint32_t> memoryType(uint32_t bits, VkMemoryPropertyFlags flags,
                                      VkMemoryPropertyFlags preferred) const;
  /// The bytes the largest device-local heap can still give: its budget
  /// less its usage with VK_EXT_memory_budget, else its size.
  uint64_t freeMemoryBytes() const;
  VkMemoryPropertyFlags memoryTypeFlags(uint32_t type) const {
    return type < memory_.memoryTypeCount ? memory_.memoryTypes[type].propertyFlags : 0;
  }

  /// Records commands with `record` into a command buffer, submits it to
  /// the compute queue and waits for it (serialised per device).
  absl::Status run(const std::function<void(VkCommandBuffer)> &record) const;
  /// Copies between host memory and a device buffer through a staging
  /// buffer the device keeps (one per direction, grown to the largest
  /// transfer up to kStagingChunkBytes; larger ones go in chunks). The
  /// download staging prefers host-cached memory, which the host reads
  /// at memory speed (uncached memory reads are many times slower).
  absl::Status upload(const DeviceBuffer &dst, size_t offset, const void *src, size_t bytes) const;
  absl::Status download(const DeviceBuffer &src, size_t offset, void *dst, size_t bytes) const;
  /// Downloads [offset, offset + bytes) of `src` and hands it to `consume`
  /// piece by piece in the staging memory (each piece a whole number of
  /// `unit`s, which divides kStagingChunkBytes): a reduction of device
  /// data needs no host copy of it.
  absl::Status read(const DeviceBuffer &src, size_t offset, size_t bytes, size_t unit,
                    const std::function<void(const std::byte *, size_t)> &consume) const;
  /// Copies `unit` bytes at each of `offsets` of `src` to `dst`, one after
  /// another, in one submission (at most kStagingChunkBytes in all).
  absl::Status gather(const DeviceBuffer &src, std::span<const size_t> offsets, size_t unit,
                      void *dst) const;
  static constexpr size_t kStagingChunkBytes = size_t(64) << 20;
  /// The device's reductions (VulkanReduction.h).
  Reducer &reducer() const { return *reducer_; }

private:
  Device() = default;
  /// The instance, with the validation layer and a messenger when asked.
  absl::Status createInstance(const VulkanBackendOptions &options, uint32_t version);
  /// Fills the driver fields of info_ (driverId, driverName, endsLongLoops,
  /// checkLoopExits); `hasDriverProperties`: the device reports
  /// VkPhysicalDeviceDriverProperties (Vulkan 1.2 or VK_KHR_driver_properties).
  void identifyDriver(const VulkanBackendOptions &options, bool hasDriverProperties);
  /// The loader's global entry points through `get`.
  absl::Status loadGlobals(PFN_vkGetInstanceProcAddr get);
  /// Picks the physical device (VulkanBackendOptions::device,
  /// QD_VULKAN_DEVICE, else the first discrete GPU) and fills info_ from
  /// its properties, which it returns.
  absl::StatusOr<VkPhysicalDeviceProperties> choosePhysical(const VulkanBackendOptions &options);
  /// info_.features: what qd's SPIR-V may use of what the device has.
  void queryFeatures(const std::vector<VkExtensionProperties> &exts);
  /// The logical device with exactly those features, and its entry points.
  absl::Status createLogicalDevice(uint32_t family);
  /// The compute queue of `family`, the command pool, buffer and fence.
  absl::Status createCommandObjects(uint32_t family);
  /// Runs `piece(staging, done, n)` for the pieces [done, done + n) of a
  /// transfer of `bytes` (each a whole number of `unit`s) in `kept`, grown
  /// to hold a piece (at most kStagingChunkBytes) of host-visible memory
  /// preferring `prefer`, under stagingMutex_.
  absl::Status
  inPieces(DeviceBuffer &kept, VkMemoryPropertyFlags prefer, size_t bytes, size_t unit,
           const std::function<absl::Status(const DeviceBuffer &, size_t, size_t)> &piece) const;
  Api api_;
  // Declared before the handles: outlives the messenger and the instance.
  std::unique_ptr<ValidationLog> validation_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  /// The physical device has VK_EXT_memory_budget.
  bool memoryBudget_ = false;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer commands_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  VulkanDeviceInfo info_;
  /// VulkanBackendOptions::pollMicroseconds (0 on a CPU device).
  int64_t pollMicroseconds_ = 0;
  mutable std::mutex mutex_;
  /// The staging buffers of upload and download (they refer to this
  /// device without owning it) and the lock of a transfer's use of them.
  mutable DeviceBuffer uploadStaging_, downloadStaging_;
  mutable std::mutex stagingMutex_;
  /// Refers to this device; destroyed first.
  std::unique_ptr<Reducer> reducer_;
};

/// Compute shaders of one SPIR-V module over storage buffers 0..n-1 of
/// descriptor set 0: the shader module, the set (with its layout and
/// pool), the pipeline layout (with push constants if asked) and a
/// pipeline per entry point. `device` must outlive it.
class ComputeProgram {
public:
  ComputeProgram() = default;
  ~ComputeProgram();
  ComputeProgram(const ComputeProgram &) = delete;
  ComputeProgram &operator=(const ComputeProgram &) = delete;

  /// `what` names the module in errors ("kernel @k").
  absl::Status create(const Device &device, const std::vector<uint32_t> &words, uint32_t buffers,
                      uint32_t pushBytes, const std::string &what);
  /// A pipeline for entry point `entry` (destroyed with the program).
  absl::StatusOr<VkPipeline> pipeline(const std::string &entry);
  /// Points binding i of the set at buffers[i] (whole buffers).
  void bind(const std::vector<VkBuffer> &buffers) const;
  /// Binds `p` and the set, for a dispatch.
  void use(VkCommandBuffer cb, VkPipeline p) const;
  VkPipelineLayout layout() const { return pipelineLayout_; }

private:
  const Device *device_ = nullptr;
  std::string what_;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout setLayout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipelineLayout_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkDescriptorSet set_ = VK_NULL_HANDLE;
  std::vector<VkPipeline> pipelines_;
};

/// A barrier making every earlier shader and transfer write visible to
/// the later `dstAccess` accesses of `dstStages`.
void barrierAfterWrites(const Api &api, VkCommandBuffer cb, VkAccessFlags dstAccess,
                        VkPipelineStageFlags dstStages);
/// ... to every later shader and transfer access.
void fullBarrier(const Api &api, VkCommandBuffer cb);

} // namespace qd::vk
