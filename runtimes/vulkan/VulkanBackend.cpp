//===- VulkanBackend.cpp - Kernels on Vulkan compute ----------------------===//
#include "qd/runtime/VulkanBackend.h"

#include "VulkanDevice.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/runtime/LaunchPlan.h"
#include "qd/runtime/LaunchWatchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace qd {

using vk::DeviceBuffer;

namespace {

/// Bytes of one element on the device (i1 is a 32-bit word there).
size_t deviceElementBytes(ScalarType t) {
  return t == ScalarType::I1 ? 4 : storageBytes(t);
}

/// The device copy of a Buffer (always owned: Vulkan memory the caller owns
/// is not borrowed yet).
class VulkanMirror : public DeviceMirror {
public:
  static absl::StatusOr<std::unique_ptr<VulkanMirror>>
  allocate(const void *owner, std::shared_ptr<const vk::Device> device, ScalarType elem,
           int64_t elements) {
    auto buf = DeviceBuffer::allocate(device, size_t(elements) * deviceElementBytes(elem), false);
    if (!buf.ok())
      return buf.status();
    auto m = std::unique_ptr<VulkanMirror>(new VulkanMirror(owner, std::move(device), elem));
    m->buffer_ = *std::move(buf);
    return m;
  }

  const void *owner() const override { return owner_; }
  uint64_t address() const override { return uint64_t(reinterpret_cast<uintptr_t>(buffer_.get())); }
  bool borrowed() const override { return false; }
  const DeviceBuffer &buffer() const { return buffer_; }

  absl::Status upload(const std::byte *host, size_t bytes) override {
    if (elem_ != ScalarType::I1)
      return device_->upload(buffer_, 0, host, bytes);
    std::vector<uint32_t> words(bytes);
    for (size_t i = 0; i < bytes; ++i)
      words[i] = host[i] != std::byte{0};
    return device_->upload(buffer_, 0, words.data(), bytes * 4);
  }
  absl::Status download(std::byte *host, size_t bytes) override {
    if (elem_ != ScalarType::I1)
      return device_->download(buffer_, 0, host, bytes);
    std::vector<uint32_t> words(bytes);
    if (absl::Status s = device_->download(buffer_, 0, words.data(), bytes * 4); !s.ok())
      return s;
    for (size_t i = 0; i < bytes; ++i)
      host[i] = std::byte(words[i] != 0);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> readInteger(ScalarType elem, int64_t flat) override {
    auto v = readRange(elem, flat, flat + 1);
    if (!v.ok())
      return v.status();
    return (*v)[0];
  }
  /// On the host, after copying the range back (a reduction shader would
  /// save the copy; ranges read for sizing are small).
  absl::StatusOr<int64_t> maxInteger(ScalarType elem, int64_t begin, int64_t end) override {
    auto v = readRange(elem, begin, end);
    if (!v.ok())
      return v.status();
    return *std::max_element(v->begin(), v->end());
  }

private:
  VulkanMirror(const void *owner, std::shared_ptr<const vk::Device> device, ScalarType elem)
      : owner_(owner), device_(std::move(device)), elem_(elem) {}

  absl::StatusOr<std::vector<int64_t>> readRange(ScalarType elem, int64_t begin, int64_t end) {
    size_t eb = deviceElementBytes(elem);
    std::vector<std::byte> raw(size_t(end - begin) * eb);
    if (absl::Status s = device_->download(buffer_, size_t(begin) * eb, raw.data(), raw.size());
        !s.ok())
      return s;
    std::vector<int64_t> out(size_t(end - begin));
    for (size_t i = 0; i < out.size(); ++i) {
      if (eb == 8) {
        std::memcpy(&out[i], raw.data() + 8 * i, 8);
      } else {
        int32_t v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        out[i] = elem == ScalarType::I1 ? int64_t(v != 0) : int64_t(v);
      }
    }
    return out;
  }

  const void *owner_;
  std::shared_ptr<const vk::Device> device_; // declared first: outlives buffer_
  ScalarType elem_;
  DeviceBuffer buffer_;
};

} // namespace

struct VulkanBackend::Impl {
  /// A kernel's module and the Vulkan objects that run it.
  struct Compiled {
    std::shared_ptr<const vk::Device> device;
    SpirvKernel spirv;
    VkShaderModule module = VK_NULL_HANDLE;
    VkDescriptorSetLayout setLayout = VK_NULL_HANDLE;
    VkPipelineLayout pipelineLayout = VK_NULL_HANDLE;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    VkDescriptorSet set = VK_NULL_HANDLE;
    std::vector<VkPipeline> pipelines; // per layout.launches entry
    /// Heap code: the local array sizes its local-tape variants were
    /// compiled for (at most kMaxLocalVariants; guarded by launchMutex).
    std::vector<std::vector<int64_t>> localVariants;

    ~Compiled() {
      if (!device)
        return;
      const vk::Api &api = device->api();
      VkDevice d = device->handle();
      for (VkPipeline p : pipelines)
        api.DestroyPipeline(d, p, nullptr);
      if (pool)
        api.DestroyDescriptorPool(d, pool, nullptr);
      if (pipelineLayout)
        api.DestroyPipelineLayout(d, pipelineLayout, nullptr);
      if (setLayout)
        api.DestroyDescriptorSetLayout(d, setLayout, nullptr);
      if (module)
        api.DestroyShaderModule(d, module, nullptr);
    }
  };

  VulkanBackendOptions options;
  std::shared_ptr<vk::Device> device;
  int64_t threads = 0;
  mutable std::mutex compileMutex, launchMutex;
  /// Keyed by (kernel, bounds checks, stop checks, local array entries per
  /// stack id: empty for the code that keeps every stack in the heap).
  std::map<std::tuple<uint64_t, bool, bool, std::vector<int64_t>>, std::unique_ptr<Compiled>> cache;
  static constexpr size_t kMaxLocalVariants = 4;
  std::map<uint64_t, std::unique_ptr<KernelSizing>> sizings;
  /// stopWord: host-visible, the word stop checks read (created at the
  /// first launch that may be stopped).
  DeviceBuffer heap, launchData, launchStaging, stopWord;
  int64_t lastHeapBytes = 0, lastThreads = 0;
  /// Two timestamp queries while timing is on (VulkanBackend::timeKernels);
  /// lastKernelMs < 0: no launch timed since.
  VkQueryPool timestamps = VK_NULL_HANDLE;
  double lastKernelMs = -1;

  ~Impl() { dropTimestamps(); }
  void dropTimestamps() {
    if (timestamps)
      device->api().DestroyQueryPool(device->handle(), timestamps, nullptr);
    timestamps = VK_NULL_HANDLE;
  }

  const KernelSizing &sizingOfLocked(const Kernel &kernel) {
    std::unique_ptr<KernelSizing> &slot = sizings[kernel.uniqueId()];
    if (!slot)
      slot = std::make_unique<KernelSizing>(sizeAdStacks(kernel));
    return *slot;
  }

  /// The code of `kernel` (with stop checks for launches that may be
  /// stopped); with `local` (entries per stack id, of the heap code's
  /// layout `heapLayout`), the variant with those local tapes.
  absl::StatusOr<Compiled *> compile(const Kernel &kernel, bool boundsChecked, bool stopChecks,
                                     const std::vector<int64_t> &local = {},
                                     const KernelLayout *heapLayout = nullptr);
  absl::Status launch(Program &program, const Kernel &kernel, std::span<const LaunchArg> args,
                      const LaunchOptions &options);
};

absl::StatusOr<VulkanBackend::Impl::Compiled *>
VulkanBackend::Impl::compile(const Kernel &kernel, bool boundsChecked, bool stopChecks,
                             const std::vector<int64_t> &local, const KernelLayout *heapLayout) {
  std::lock_guard<std::mutex> lock(compileMutex);
  auto key = std::tuple(kernel.uniqueId(), boundsChecked, stopChecks, local);
  if (auto it = cache.find(key); it != cache.end())
    return it->second.get();
  sizingOfLocked(kernel);
  SpirvOptions so;
  so.boundsChecked = boundsChecked;
  so.workgroupSize = options.workgroupSize;
  so.features = device->info().features;
  so.features.atomicFloat32Add &= options.floatAtomics;
  so.features.atomicFloat64Add &= options.floatAtomics;
  so.checkLoopExits = device->info().checkLoopExits;
  so.stopChecks = stopChecks;
  // A device on the host's processor reads the word as cheaply as the CPU
  // backend does (and lavapipe ends loops after 65535 iterations: a check
  // every 65536th would never run there).
  const bool onHost = device->info().cpu || device->info().endsLongLoops;
  so.stopCheckInterval = onHost ? abi::kStopCheckInterval : abi::kDeviceStopCheckInterval;
  so.stopCheckSpread = onHost ? 64 : abi::kDeviceStopCheckSpread;
  for (size_t i = 0; i < local.size() && heapLayout; ++i)
    so.localAdStackEntries[heapLayout->stacks.at(i).stmt] = local[i];
  auto spirv = emitSpirv(kernel, so);
  if (!spirv.ok())
    return spirv.status();
  auto c = std::make_unique<Compiled>();
  c->device = device;
  c->spirv = *std::move(spirv);
  const vk::Api &api = device->api();
  VkDevice d = device->handle();
  if (!c->spirv.words.empty()) {
    auto smi = vk::make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    smi.codeSize = c->spirv.words.size() * 4;
    smi.pCode = c->spirv.words.data();
    if (absl::Status s = device->check(api.CreateShaderModule(d, &smi, nullptr, &c->module),
                                       "vkCreateShaderModule (kernel @" + kernel.name() + ")");
        !s.ok())
      return s;
    // Launch data, heap, the slots, and the stop word after them if any.
    uint32_t bindings = c->spirv.stopBinding ? c->spirv.stopBinding + 1
                                             : uint32_t(2 + c->spirv.layout.slots.size());
    std::vector<VkDescriptorSetLayoutBinding> b(bindings);
    for (uint32_t i = 0; i < bindings; ++i)
      b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    auto dsl = vk::make<VkDescriptorSetLayoutCreateInfo>(
        VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
    dsl.bindingCount = bindings;
    dsl.pBindings = b.data();
    if (absl::Status s =
            device->check(api.CreateDescriptorSetLayout(d, &dsl, nullptr, &c->setLayout),
                          "vkCreateDescriptorSetLayout");
        !s.ok())
      return s;
    auto pl = vk::make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &c->setLayout;
    if (absl::Status s =
            device->check(api.CreatePipelineLayout(d, &pl, nullptr, &c->pipelineLayout),
                          "vkCreatePipelineLayout");
        !s.ok())
      return s;
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, bindings};
    auto dp = vk::make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    dp.maxSets = 1;
    dp.poolSizeCount = 1;
    dp.pPoolSizes = &size;
    if (absl::Status s = device->check(api.CreateDescriptorPool(d, &dp, nullptr, &c->pool),
                                       "vkCreateDescriptorPool");
        !s.ok())
      return s;
    auto dsa =
        vk::make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
    dsa.descriptorPool = c->pool;
    dsa.descriptorSetCount = 1;
    dsa.pSetLayouts = &c->setLayout;
    if (absl::Status s =
            device->check(api.AllocateDescriptorSets(d, &dsa, &c->set), "vkAllocateDescriptorSets");
        !s.ok())
      return s;
    for (const KernelLayout::Launch &l : c->spirv.layout.launches) {
      auto cp =
          vk::make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
      cp.stage = vk::make<VkPipelineShaderStageCreateInfo>(
          VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
      cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
      cp.stage.module = c->module;
      cp.stage.pName = l.function.c_str();
      cp.layout = c->pipelineLayout;
      VkPipeline p = VK_NULL_HANDLE;
      if (absl::Status s = device->check(
              api.CreateComputePipelines(d, VK_NULL_HANDLE, 1, &cp, nullptr, &p),
              fmt::format("vkCreateComputePipelines (kernel @{}, {})", kernel.name(), l.function));
          !s.ok())
        return s;
      c->pipelines.push_back(p);
    }
  }
  return (cache[key] = std::move(c)).get();
}

VulkanBackend::VulkanBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VulkanBackend::~VulkanBackend() = default;

absl::StatusOr<std::unique_ptr<VulkanBackend>>
VulkanBackend::create(const VulkanBackendOptions &options) {
  if (options.workgroupSize == 0 || options.workgroupSize > 1024)
    return absl::InvalidArgumentError(fmt::format(
        "vulkan backend: workgroup size {} is outside [1, 1024]", options.workgroupSize));
  auto device = vk::Device::open(options);
  if (!device.ok())
    return device.status();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->device = *std::move(device);
  int64_t wg = options.workgroupSize;
  // Vulkan guarantees 65535 workgroups in a dispatch.
  impl->threads = std::clamp<int64_t>(options.maxThreads / wg * wg, wg, 65535 * wg);
  return std::unique_ptr<VulkanBackend>(new VulkanBackend(std::move(impl)));
}

const VulkanDeviceInfo &VulkanBackend::deviceInfo() const {
  return impl_->device->info();
}

int64_t VulkanBackend::gridThreads() const {
  return impl_->threads;
}

int64_t VulkanBackend::lastLaunchThreads() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->lastThreads;
}

absl::Status VulkanBackend::timeKernels(bool on) {
  Impl &m = *impl_;
  std::lock_guard<std::mutex> lock(m.launchMutex);
  m.lastKernelMs = -1;
  if (!on) {
    m.dropTimestamps();
    return absl::OkStatus();
  }
  if (m.timestamps)
    return absl::OkStatus();
  const VulkanDeviceInfo &info = m.device->info();
  if (info.timestampValidBits == 0)
    return absl::FailedPreconditionError(
        fmt::format("vulkan: device '{}' has no timestamps on its compute queue "
                    "(timestampValidBits 0): its kernels cannot be timed",
                    info.name));
  auto ci = vk::make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
  ci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  ci.queryCount = 2;
  return m.device->check(
      m.device->api().CreateQueryPool(m.device->handle(), &ci, nullptr, &m.timestamps),
      "vkCreateQueryPool");
}

absl::StatusOr<double> VulkanBackend::lastKernelMs() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  if (!impl_->timestamps)
    return absl::FailedPreconditionError(
        "vulkan backend: kernel timing is off; call timeKernels(true) before the launches");
  if (impl_->lastKernelMs < 0)
    return absl::FailedPreconditionError(
        "vulkan backend: no launch has run its kernels since timing was turned on");
  return impl_->lastKernelMs;
}

int64_t VulkanBackend::lastAdStackHeapBytes() const {
  std::lock_guard<std::mutex> lock(impl_->launchMutex);
  return impl_->lastHeapBytes;
}

bool VulkanBackend::validationActive() const {
  return impl_->device->validation() != nullptr;
}

std::vector<std::string> VulkanBackend::validationMessages() const {
  const vk::ValidationLog *log = impl_->device->validation();
  return log ? log->messages() : std::vector<std::string>{};
}

size_t VulkanBackend::validationMessageCount() const {
  const vk::ValidationLog *log = impl_->device->validation();
  return log ? log->count() : 0;
}

void VulkanBackend::clearValidationMessages() {
  if (vk::ValidationLog *log = impl_->device->validation())
    log->clear();
}

VulkanBackend::NativeHandles VulkanBackend::nativeHandles() const {
  const vk::Device &d = *impl_->device;
  NativeHandles h;
  h.instance = d.instance();
  h.physicalDevice = d.physical();
  h.device = d.handle();
  h.getInstanceProcAddr = reinterpret_cast<void (*)()>(d.api().GetInstanceProcAddr);
  return h;
}

absl::StatusOr<const KernelSizing *> VulkanBackend::adStackSizing(const Kernel &kernel) {
  std::lock_guard<std::mutex> lock(impl_->compileMutex);
  return &impl_->sizingOfLocked(kernel);
}

absl::StatusOr<const SpirvKernel *> VulkanBackend::spirv(const Kernel &kernel, bool boundsChecked) {
  auto c = impl_->compile(kernel, boundsChecked, /*stopChecks=*/false);
  if (!c.ok())
    return c.status();
  return &(*c)->spirv;
}

absl::Status VulkanBackend::launch(Program &program, const Kernel &kernel,
                                   std::span<const LaunchArg> args, const LaunchOptions &options) {
  if (absl::Status s = validateLaunchArgs(kernel, args); !s.ok())
    return s;
  if (absl::Status s = refuseGlobalAccessChecks(kernel, options, "vulkan"); !s.ok())
    return s;
  return impl_->launch(program, kernel, args, options);
}

absl::Status VulkanBackend::Impl::launch(Program &program, const Kernel &kernel,
                                         std::span<const LaunchArg> args,
                                         const LaunchOptions &options) {
  // A launch that may be stopped runs code that checks (SpirvOptions::stopChecks).
  const bool stoppable = options.stoppable();
  auto compiled = compile(kernel, options.boundsChecked, stoppable);
  if (!compiled.ok())
    return compiled.status();
  std::lock_guard<std::mutex> lock(launchMutex);
  const vk::Api &api = device->api();
  const VulkanDeviceInfo &info = device->info();

  absl::StatusOr<LaunchPlan> plan =
      LaunchPlan::bind(program, kernel, (*compiled)->spirv.layout, args, options);
  if (!plan.ok())
    return plan.status();
  if ((*compiled)->spirv.layout.launches.empty())
    return absl::OkStatus();
  if (absl::Status s = plan->layoutAdStacks(); !s.ok())
    return s;
  // Stacks whose capacities fit this->options.localTapeBytes run from
  // local arrays (code compiled for those sizes), the rest of the kernel
  // unchanged.
  if (std::vector<int64_t> local = localTapeEntries(
          (*compiled)->spirv.layout, plan->heap().capacities, this->options.localTapeBytes,
          (*compiled)->localVariants, kMaxLocalVariants);
      !local.empty()) {
    Compiled &heapCode = **compiled;
    compiled = compile(kernel, options.boundsChecked, stoppable, local, &heapCode.spirv.layout);
    if (!compiled.ok())
      return compiled.status();
    auto &known = heapCode.localVariants;
    if (std::find(known.begin(), known.end(), local) == known.end())
      known.push_back(local);
    plan = LaunchPlan::bind(program, kernel, (*compiled)->spirv.layout, args, options);
    if (!plan.ok())
      return plan.status();
    if (absl::Status s = plan->layoutAdStacks(); !s.ok())
      return s;
  }
  const Compiled &c = **compiled;
  const KernelLayout &layout = c.spirv.layout;
  const SpirvLaunchData &data = c.spirv.data;
  // The heap is one storage buffer: where the adstacks of every invocation
  // of the grid do not fit in one, fewer invocations run the launch (each
  // parallel task is a grid-stride loop over the T of the launch data, so
  // any T gives the same result). Tasks with fewer iterations than the
  // grid has invocations run on as many as they have (whole workgroups).
  // A launch without heap may run one invocation per iteration
  // (VulkanBackendOptions::invocationPerIteration).
  int64_t grid = threads;
  if (std::optional<int64_t> most = plan->fixedParallelIterations()) {
    int64_t wg = c.spirv.workgroupSize, cap = grid;
    if (this->options.invocationPerIteration && plan->heap().stride == 0)
      cap =
          std::max(grid, std::min<int64_t>(int64_t(info.maxWorkgroupsX) * wg, INT32_MAX / wg * wg));
    grid = std::clamp<int64_t>((*most + wg - 1) / wg * wg, std::min<int64_t>(wg, grid), cap);
  }
  absl::StatusOr<int64_t> heapBytes = plan->heapBytes(grid);
  if (!heapBytes.ok())
    return heapBytes.status();
  const uint64_t range = this->options.maxHeapBytes
                             ? std::min(this->options.maxHeapBytes, info.maxStorageBufferRange)
                             : info.maxStorageBufferRange;
  while (uint64_t(*heapBytes) > range && grid > 1) {
    int64_t fit = int64_t(double(range) / double(*heapBytes) * double(grid));
    grid = std::clamp<int64_t>(fit, 1, grid - 1);
    heapBytes = plan->heapBytes(grid);
    if (!heapBytes.ok())
      return heapBytes.status();
  }
  if (uint64_t(*heapBytes) > range)
    return absl::ResourceExhaustedError(fmt::format(
        "kernel @{}: the adstacks of one invocation need {} bytes of heap, more than the {} "
        "bytes one heap may hold on '{}' (maxStorageBufferRange {}, "
        "VulkanBackendOptions::maxHeapBytes {}); lower the capacities",
        kernel.name(), *heapBytes, range, info.name, info.maxStorageBufferRange,
        this->options.maxHeapBytes));
  for (size_t s = 0; s < layout.stacks.size(); ++s)
    if (plan->heap().capacities[s] > int64_t(std::numeric_limits<uint32_t>::max()))
      return absl::ResourceExhaustedError(fmt::format(
          "kernel @{}: adstack capacity {} is above the 2^32 - 1 entries SPIR-V code indexes",
          kernel.name(), plan->heap().capacities[s]));
  // (A kernel without adstacks binds a 4-byte heap: a descriptor never
  // names VK_NULL_HANDLE.)
  if (!heap.get() || size_t(*heapBytes) > heap.size()) {
    size_t grown = std::max<size_t>(size_t(*heapBytes), 2 * heap.size());
    grown =
        std::min<size_t>(grown, std::max<size_t>(size_t(*heapBytes), info.maxStorageBufferRange));
    heap.reset();
    auto h = DeviceBuffer::allocate(device, grown, false);
    if (!h.ok())
      return absl::ResourceExhaustedError(
          fmt::format("kernel @{}: cannot allocate {} bytes of adstack heap on '{}': {}",
                      kernel.name(), grown, info.name, std::string(h.status().message())));
    heap = *std::move(h);
  }
  lastHeapBytes = *heapBytes;
  lastThreads = grid;

  // The bound buffers on the device: resident copies, uploaded only when
  // the host side changed since the last launch.
  const std::vector<Buffer *> &buffers = plan->slotBuffers();
  std::vector<const DeviceBuffer *> slots;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer *b = buffers[i];
    const KernelLayout::GlobalSlot &slot = layout.slots[i];
    auto name = [&] {
      std::string what = slot.field ? "field @" + std::string(slot.field->name())
                                    : "argument %" + std::string(slot.ndarray->name());
      if (slot.component != Component::Primal)
        what += "." + std::string(toString(slot.component));
      return what;
    };
    size_t bytes = size_t(b->numElements()) * deviceElementBytes(b->elementType());
    if (b->numElements() > std::numeric_limits<int32_t>::max() ||
        bytes > info.maxStorageBufferRange)
      return absl::ResourceExhaustedError(fmt::format(
          "kernel @{}: {} has {} elements ({} bytes on the device), more than SPIR-V code "
          "indexes (2^31 - 1 elements) or one storage buffer of '{}' holds ({} bytes)",
          kernel.name(), name(), b->numElements(), bytes, info.name, info.maxStorageBufferRange));
    absl::StatusOr<DeviceMirror *> m = b->prepareOnDevice(this, [&] {
      auto made = VulkanMirror::allocate(this, device, b->elementType(), b->numElements());
      if (!made.ok())
        return absl::StatusOr<std::unique_ptr<DeviceMirror>>(made.status());
      return absl::StatusOr<std::unique_ptr<DeviceMirror>>(*std::move(made));
    });
    if (!m.ok())
      return absl::Status(m.status().code(),
                          fmt::format("kernel @{}: cannot put {} on '{}': {}", kernel.name(),
                                      name(), info.name, std::string(m.status().message())));
    slots.push_back(&static_cast<VulkanMirror *>(*m)->buffer());
  }

  // The launch data (qd/codegen/spirv/SpirvCodegen.h).
  std::vector<uint32_t> words(data.words, 0);
  words[SpirvLaunchData::kThreads] = uint32_t(grid);
  for (size_t s = 0; s < layout.stacks.size(); ++s) {
    words[data.capacities + s] = uint32_t(plan->heap().capacities[s]);
    words[data.offsets + s] = uint32_t(plan->heap().offsets[s] / 4);
  }
  auto put64 = [&](uint32_t at, int64_t v) {
    words[at] = uint32_t(uint64_t(v));
    words[at + 1] = uint32_t(uint64_t(v) >> 32);
  };
  for (unsigned a = 0; a < kernel.numArguments(); ++a)
    put64(data.scalars + 2 * a, plan->scalars()[a]);
  for (unsigned s = 0; s < layout.numShapes; ++s)
    put64(data.shapes + 2 * s, plan->shapes()[s]);
  size_t dataBytes = words.size() * 4;
  for (DeviceBuffer *buf : {&launchData, &launchStaging})
    if (buf->size() < dataBytes) {
      auto made = DeviceBuffer::allocate(device, std::max<size_t>(dataBytes, 2 * buf->size()),
                                         buf == &launchStaging);
      if (!made.ok())
        return made.status();
      *buf = *std::move(made);
    }
  std::memcpy(launchStaging.mapped(), words.data(), dataBytes);

  std::vector<VkDescriptorBufferInfo> infos;
  infos.push_back({launchData.get(), 0, VK_WHOLE_SIZE});
  infos.push_back({heap.get(), 0, VK_WHOLE_SIZE});
  for (const DeviceBuffer *b : slots)
    infos.push_back({b->get(), 0, VK_WHOLE_SIZE});
  std::optional<std::atomic_ref<uint32_t>> stop;
  if (c.spirv.stopBinding) {
    if (!stopWord.get()) {
      // In device-local memory the host maps (the BAR): NVIDIA's GPUs cache
      // host memory in their L2, and a running shader never saw the host's
      // write to a word there (H200, driver 580); through the BAR it did.
      auto made = DeviceBuffer::allocate(device, 4, true, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
      if (!made.ok())
        return absl::Status(made.status().code(),
                            fmt::format("kernel @{}: cannot allocate the launch's stop word: {}",
                                        kernel.name(), std::string(made.status().message())));
      if (!(made->memoryFlags() & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !info.cpu)
        return absl::FailedPreconditionError(fmt::format(
            "kernel @{}: '{}' has no device-local memory the host can map, where a running "
            "launch would see its stop word (LaunchOptions::timeout and ::cancel); launch "
            "without them, or on the cpu or cuda backend",
            kernel.name(), info.name));
      stopWord = *std::move(made);
    }
    stop.emplace(*static_cast<uint32_t *>(stopWord.mapped()));
    // A cancel flag already set stops the launch at its first check (on a
    // device that ends long loops, before the watchdog's first poll).
    bool cancelled = options.cancel && options.cancel->load(std::memory_order_acquire);
    stop->store(cancelled ? uint32_t(StopReason::Cancelled) : 0, std::memory_order_release);
    assert(c.spirv.stopBinding == infos.size());
    infos.push_back({stopWord.get(), 0, VK_WHOLE_SIZE});
  }
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    writes[i] = vk::make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstSet = c.set;
    writes[i].dstBinding = uint32_t(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  api.UpdateDescriptorSets(device->handle(), uint32_t(writes.size()), writes.data(), 0, nullptr);

  // A parallel task whose extent is known now and fits the grid needs only
  // the workgroups that have an iteration.
  std::vector<uint32_t> groups;
  int64_t fullGroups = (grid + c.spirv.workgroupSize - 1) / int64_t(c.spirv.workgroupSize);
  for (const KernelLayout::Launch &l : layout.launches) {
    if (l.kind != KernelLayout::Launch::Parallel) {
      groups.push_back(1);
      continue;
    }
    int64_t n = fullGroups;
    if (std::optional<int64_t> count = plan->fixedIterations(layout.tasks[l.task]))
      n = std::min(n, (*count + c.spirv.workgroupSize - 1) / c.spirv.workgroupSize);
    groups.push_back(uint32_t(n));
  }
  lastKernelMs = -1;
  // Watches the submission, whose end device->run waits for.
  LaunchWatchdog watchdog(options, [&](StopReason why) {
    if (stop)
      stop->store(uint32_t(why), std::memory_order_release);
  });
  absl::Status ran = device->run([&](VkCommandBuffer cb) {
    VkBufferCopy up{0, 0, dataBytes};
    if (timestamps)
      api.CmdResetQueryPool(cb, timestamps, 0, 2);
    api.CmdCopyBuffer(cb, launchStaging.get(), launchData.get(), 1, &up);
    vk::fullBarrier(api, cb);
    // The barriers order the timestamps after the copy and after the last
    // dispatch.
    if (timestamps)
      api.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, timestamps, 0);
    for (size_t i = 0; i < layout.launches.size(); ++i) {
      if (groups[i] == 0)
        continue;
      api.CmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipelines[i]);
      api.CmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipelineLayout, 0, 1, &c.set,
                                0, nullptr);
      api.CmdDispatch(cb, groups[i], 1, 1);
      vk::fullBarrier(api, cb);
    }
    if (timestamps)
      api.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, 1);
    api.CmdCopyBuffer(cb, launchData.get(), launchStaging.get(), 1, &up);
  });
  if (ran.ok() && timestamps) {
    uint64_t ticks[2] = {0, 0};
    ran = device->check(api.GetQueryPoolResults(device->handle(), timestamps, 0, 2, sizeof(ticks),
                                                ticks, sizeof(uint64_t),
                                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                        "vkGetQueryPoolResults");
    uint64_t mask =
        info.timestampValidBits >= 64 ? ~uint64_t(0) : (uint64_t(1) << info.timestampValidBits) - 1;
    if (ran.ok())
      lastKernelMs = double((ticks[1] - ticks[0]) & mask) * info.timestampPeriodNs * 1e-6;
  }
  // What the code stores to is newer on the device now.
  for (size_t i = 0; i < buffers.size(); ++i)
    if (absl::Status s = buffers[i]->finishOnDevice(layout.slots[i].written); !s.ok() && ran.ok())
      ran = s;
  if (!ran.ok())
    return absl::Status(ran.code(),
                        fmt::format("kernel @{}: the launch failed on '{}': {}", kernel.name(),
                                    info.name, std::string(ran.message())));
  std::memcpy(words.data(), launchStaging.mapped(), dataBytes);
  QdErrorRecord record;
  static_assert(sizeof(QdErrorRecord) == SpirvLaunchData::kThreads * 4);
  std::memcpy(&record, words.data(), sizeof(record));
  std::vector<int64_t> needed = plan->zeroNeeded();
  for (size_t s = 0; s < layout.stacks.size(); ++s)
    needed[s] = words[data.needed + s];
  return plan->finish(record, needed);
}

} // namespace qd
