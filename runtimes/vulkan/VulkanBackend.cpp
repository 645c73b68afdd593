//===- VulkanBackend.cpp - Kernels on Vulkan compute ----------------------===//
#include "qd/runtime/VulkanBackend.h"

#include "VulkanDevice.h"
#include "VulkanReduction.h"

#include "qd/abi/LaunchErrors.h"
#include "qd/runtime/LaunchPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>

namespace qd {

using vk::DeviceBuffer;

namespace {

/// Bytes of one element on the device (i1 is a 32-bit word there).
size_t deviceElementBytes(ScalarType t) {
  return t == ScalarType::I1 ? 4 : storageBytes(t);
}

/// The integer of type `elem` at `p` in a device's layout (`eb` bytes:
/// 8, or a 32-bit word; i1 is a word that is 0 or not).
int64_t integerAt(const std::byte *p, size_t eb, ScalarType elem) {
  if (eb == 8) {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  int32_t w;
  std::memcpy(&w, p, 4);
  return elem == ScalarType::I1 ? int64_t(w != 0) : int64_t(w);
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
    return maxInteger(elem, flat, flat + 1);
  }
  absl::StatusOr<std::vector<int64_t>> readIntegers(ScalarType elem,
                                                    std::span<const int64_t> flat) override {
    const size_t eb = deviceElementBytes(elem);
    std::vector<size_t> offsets;
    for (int64_t at : flat)
      offsets.push_back(size_t(at) * eb);
    std::vector<std::byte> raw(offsets.size() * eb);
    if (absl::Status s = device_->gather(buffer_, offsets, eb, raw.data()); !s.ok())
      return s;
    std::vector<int64_t> out;
    for (size_t at = 0; at < raw.size(); at += eb)
      out.push_back(integerAt(raw.data() + at, eb, elem));
    return out;
  }
  /// A range of more than vk::Reducer::kLanes elements is reduced on the
  /// device (one dispatch, a 128 KiB read); a shorter one on the host, over
  /// the staging memory it is copied back to.
  absl::StatusOr<int64_t> maxInteger(ScalarType elem, int64_t begin, int64_t end) override {
    const size_t eb = deviceElementBytes(elem);
    if (end - begin > int64_t(vk::Reducer::kLanes))
      return device_->reducer().max(buffer_, uint64_t(begin), uint64_t(end), eb == 8);
    int64_t most = INT64_MIN;
    absl::Status s = device_->read(buffer_, size_t(begin) * eb, size_t(end - begin) * eb, eb,
                                   [&](const std::byte *piece, size_t bytes) {
                                     for (size_t at = 0; at < bytes; at += eb)
                                       most = std::max(most, integerAt(piece + at, eb, elem));
                                   });
    if (!s.ok())
      return s;
    return most;
  }
  bool reducesOnDevice() const override { return true; }

private:
  VulkanMirror(const void *owner, std::shared_ptr<const vk::Device> device, ScalarType elem)
      : owner_(owner), device_(std::move(device)), elem_(elem) {}

  const void *owner_;
  std::shared_ptr<const vk::Device> device_; // declared first: outlives buffer_
  ScalarType elem_;
  DeviceBuffer buffer_;
};

/// A kernel's SPIR-V and the Vulkan objects that run it.
struct VulkanKernel final : accel::DeviceKernel {
  const KernelLayout &layout() const override { return spirv.layout; }
  int64_t gridThreads() const override { return threads; }
  bool readsStopWord() const override { return spirv.stopBinding != 0; }

  std::shared_ptr<const vk::Device> device; // declared first: outlives program
  SpirvKernel spirv;
  int64_t threads = 0;
  /// Bindings: launch data, heap, the slots, and the stop word after them
  /// if any.
  vk::ComputeProgram program;
  std::vector<VkPipeline> pipelines; // per layout.launches entry
  /// Per layout.launches entry: its cooperative function's pipeline
  /// (KernelLayout::Launch::cooperativeFunction), or null.
  std::vector<VkPipeline> cooperativePipelines;
};

/// The Vulkan objects of `c` (its SPIR-V emitted): shader module,
/// descriptor set of launch data, heap, slots and stop word, one pipeline
/// per entry.
absl::Status createPipelines(const vk::Device &device, const Kernel &kernel, VulkanKernel &c) {
  uint32_t bindings =
      c.spirv.stopBinding ? c.spirv.stopBinding + 1 : uint32_t(2 + c.spirv.layout.slots.size());
  if (absl::Status s =
          c.program.create(device, c.spirv.words, bindings, 0, "kernel @" + kernel.name());
      !s.ok())
    return s;
  for (const KernelLayout::Launch &l : c.spirv.layout.launches) {
    absl::StatusOr<VkPipeline> p = c.program.pipeline(l.function);
    if (!p.ok())
      return p.status();
    c.pipelines.push_back(*p);
    VkPipeline coop = VK_NULL_HANDLE;
    if (!l.cooperativeFunction.empty()) {
      absl::StatusOr<VkPipeline> q = c.program.pipeline(l.cooperativeFunction);
      if (!q.ok())
        return q.status();
      coop = *q;
    }
    c.cooperativePipelines.push_back(coop);
  }
  return absl::OkStatus();
}

} // namespace

/// The Vulkan device of the accelerator launch.
struct VulkanBackend::Impl final : accel::AcceleratorDevice {
  ~Impl() override { dropTimestamps(); }

  const char *backendName() const override { return "vulkan"; }
  const char *optionsName() const override { return "VulkanBackendOptions"; }
  std::string deviceName() const override { return fmt::format("'{}'", device->info().name); }
  accel::DeviceLimits limits() const override;
  uint64_t freeMemoryBytes() const override { return device->freeMemoryBytes(); }
  /// The code addresses the heap in 4-byte words; the table kernel needs
  /// 64-bit integers.
  unsigned groupTableUnit() const override { return device->info().features.int64 ? 4 : 0; }
  bool groupTableInHeap() const override { return true; }
  bool executesWindows() const override { return true; }
  bool compilesDistinctNdarrays() const override { return options.distinctNdarrays; }
  absl::StatusOr<std::unique_ptr<accel::DeviceKernel>>
  compile(const Kernel &kernel, const accel::CompileRequest &request) override;
  absl::Status allocateHeap(size_t bytes) override;
  absl::Status checkBindable(const Buffer &buffer) const override;
  absl::Status checkFrame(const accel::DeviceKernel &kernel,
                          const accel::LaunchFrame &frame) const override;
  absl::StatusOr<std::unique_ptr<DeviceMirror>> mirror(const Buffer &buffer) override;
  absl::StatusOr<int32_t *> stopWord() override;
  absl::Status timeKernels(bool on) override;
  absl::Status execute(accel::DeviceKernel &kernel, const accel::LaunchFrame &frame,
                       accel::LaunchReport &report) override;

  void dropTimestamps() {
    if (timestamps)
      device->api().DestroyQueryPool(device->handle(), timestamps, nullptr);
    timestamps = VK_NULL_HANDLE;
  }
  /// The launch data of `frame` (qd/codegen/spirv/SpirvCodegen.h), in the
  /// staging buffer; its size in bytes.
  absl::StatusOr<size_t> stageLaunchData(const VulkanKernel &c, const accel::LaunchFrame &frame);
  /// Points `c`'s descriptor set at this frame's buffers.
  void bindBuffers(const VulkanKernel &c, const accel::LaunchFrame &frame);

  VulkanBackendOptions options;
  std::shared_ptr<vk::Device> device;
  int64_t threads = 0;
  /// stopWord: host-visible, the word stop checks read (created at the
  /// first launch that may be stopped).
  DeviceBuffer heap, launchData, launchStaging, stopWordBuffer;
  /// Two timestamp queries while timing is on.
  VkQueryPool timestamps = VK_NULL_HANDLE;
};

accel::DeviceLimits VulkanBackend::Impl::limits() const {
  const VulkanDeviceInfo &info = device->info();
  accel::DeviceLimits l;
  l.groupSize = options.workgroupSize;
  int64_t wg = options.workgroupSize;
  if (options.invocationPerIteration)
    l.perIterationThreads =
        std::min<int64_t>(int64_t(info.maxWorkgroupsX) * wg, INT32_MAX / wg * wg);
  l.maxHeapBytes = options.maxHeapBytes ? std::min(options.maxHeapBytes, info.maxStorageBufferRange)
                                        : info.maxStorageBufferRange;
  l.maxHeapSource = fmt::format("maxStorageBufferRange {}, VulkanBackendOptions::maxHeapBytes {}",
                                info.maxStorageBufferRange, options.maxHeapBytes);
  l.gridWaves = options.gridWaves;
  l.localTapeBytes = options.localTapeBytes;
  return l;
}

absl::StatusOr<std::unique_ptr<accel::DeviceKernel>>
VulkanBackend::Impl::compile(const Kernel &kernel, const accel::CompileRequest &request) {
  SpirvOptions so;
  so.boundsChecked = request.boundsChecked;
  so.workgroupSize = options.workgroupSize;
  so.features = device->info().features;
  so.features.atomicFloat32Add &= options.floatAtomics;
  so.features.atomicFloat64Add &= options.floatAtomics;
  so.features.subgroupArithmetic &= options.subgroupSums;
  so.checkLoopExits = device->info().checkLoopExits;
  so.stopChecks = request.stopChecks;
  // A device on the host's processor reads the word as cheaply as the CPU
  // backend does (and lavapipe ends loops after 65535 iterations: a check
  // every 65536th would never run there).
  const bool onHost = device->info().cpu || device->info().endsLongLoops;
  so.stopCheckInterval = onHost ? abi::kStopCheckInterval : abi::kDeviceStopCheckInterval;
  so.stopCheckSpread = onHost ? 64 : abi::kDeviceStopCheckSpread;
  so.localAdStackEntries = request.localAdStackEntries;
  so.distinctNdarrays = request.distinctNdarrays;
  so.readOnlyBuffers = options.readOnlyBuffers;
  // A workgroup per iteration: no more than one dispatch may have.
  so.cooperativeTaskIterations =
      std::min<int64_t>(options.cooperativeTaskIterations, device->info().maxWorkgroupsX);
  so.cooperativeScatteringIterations = options.cooperativeScatteringIterations;
  so.cooperativeGroupSize =
      std::min(options.cooperativeGroupSize, device->info().maxWorkgroupInvocations);
  auto spirv = emitSpirv(kernel, so);
  if (!spirv.ok())
    return spirv.status();
  auto c = std::make_unique<VulkanKernel>();
  c->device = device;
  c->spirv = *std::move(spirv);
  c->threads = threads;
  if (!c->spirv.words.empty())
    if (absl::Status s = createPipelines(*device, kernel, *c); !s.ok())
      return s;
  return std::unique_ptr<accel::DeviceKernel>(std::move(c));
}

absl::Status VulkanBackend::Impl::allocateHeap(size_t bytes) {
  // (A kernel without adstacks binds a 4-byte heap: a descriptor never
  // names VK_NULL_HANDLE.)
  heap.reset();
  auto h = DeviceBuffer::allocate(device, std::max<size_t>(bytes, 4), false);
  if (!h.ok())
    return h.status();
  heap = *std::move(h);
  return absl::OkStatus();
}

absl::Status VulkanBackend::Impl::checkBindable(const Buffer &b) const {
  const VulkanDeviceInfo &info = device->info();
  size_t bytes = size_t(b.numElements()) * deviceElementBytes(b.elementType());
  if (b.numElements() > std::numeric_limits<int32_t>::max() || bytes > info.maxStorageBufferRange)
    return absl::ResourceExhaustedError(
        fmt::format("has {} elements ({} bytes on the device), more than SPIR-V code indexes "
                    "(2^31 - 1 elements) or one storage buffer of '{}' holds ({} bytes)",
                    b.numElements(), bytes, info.name, info.maxStorageBufferRange));
  return absl::OkStatus();
}

absl::Status VulkanBackend::Impl::checkFrame(const accel::DeviceKernel &kernel,
                                             const accel::LaunchFrame &frame) const {
  const KernelLayout &layout = kernel.layout();
  for (size_t s = 0; s < layout.stacks.size(); ++s)
    if (int64_t cap = frame.plan->heap().capacities[s];
        cap > int64_t(std::numeric_limits<uint32_t>::max()))
      return absl::ResourceExhaustedError(fmt::format(
          "{}: error: the adstack's capacity {} is above the 2^32 - 1 entries SPIR-V code "
          "indexes ({}); give it a smaller capacity",
          layout.stacks[s].stmt->loc().str(), cap,
          launchWhere(frame.plan->kernel(), layout.stacks[s].task)));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceMirror>> VulkanBackend::Impl::mirror(const Buffer &b) {
  auto made = VulkanMirror::allocate(static_cast<const accel::AcceleratorDevice *>(this), device,
                                     b.elementType(), b.numElements());
  if (!made.ok())
    return made.status();
  return std::unique_ptr<DeviceMirror>(*std::move(made));
}

absl::StatusOr<int32_t *> VulkanBackend::Impl::stopWord() {
  if (!stopWordBuffer.get()) {
    // In device-local memory the host maps (the BAR): NVIDIA's GPUs cache
    // host memory in their L2, and a running shader never saw the host's
    // write to a word there (H200, driver 580); through the BAR it did.
    auto made = DeviceBuffer::allocate(device, 4, true, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (!made.ok())
      return absl::Status(made.status().code(),
                          fmt::format("cannot allocate the launch's stop word: {}",
                                      std::string(made.status().message())));
    if (!(made->memoryFlags() & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !device->info().cpu)
      return absl::FailedPreconditionError(fmt::format(
          "'{}' has no device-local memory the host can map, where a running launch would see "
          "its stop word (LaunchOptions::timeout and ::cancel); launch without them, or on the "
          "cpu or cuda backend",
          device->info().name));
    stopWordBuffer = *std::move(made);
  }
  return static_cast<int32_t *>(stopWordBuffer.mapped());
}

absl::Status VulkanBackend::Impl::timeKernels(bool on) {
  if (!on) {
    dropTimestamps();
    return absl::OkStatus();
  }
  if (timestamps)
    return absl::OkStatus();
  const VulkanDeviceInfo &info = device->info();
  if (info.timestampValidBits == 0)
    return absl::FailedPreconditionError(
        fmt::format("vulkan: device '{}' has no timestamps on its compute queue "
                    "(timestampValidBits 0): its kernels cannot be timed",
                    info.name));
  auto ci = vk::make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
  ci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  ci.queryCount = 2;
  return device->check(device->api().CreateQueryPool(device->handle(), &ci, nullptr, &timestamps),
                       "vkCreateQueryPool");
}

absl::StatusOr<size_t> VulkanBackend::Impl::stageLaunchData(const VulkanKernel &c,
                                                            const accel::LaunchFrame &frame) {
  const KernelLayout &layout = c.spirv.layout;
  const SpirvLaunchData &data = c.spirv.data;
  const LaunchPlan &plan = *frame.plan;
  std::vector<uint32_t> words(data.words, 0);
  words[SpirvLaunchData::kThreads] = uint32_t(frame.threads);
  words[SpirvLaunchData::kGroupTable] = frame.groupTable ? uint32_t(1 + frame.groupShift) : 0;
  words[SpirvLaunchData::kThreadOffset] = uint32_t(frame.threadOffset);
  words[SpirvLaunchData::kHeapShift] = uint32_t(frame.heapShift / 4);
  for (size_t s = 0; s < layout.stacks.size(); ++s) {
    words[data.capacities + s] = uint32_t(plan.heap().capacities[s]);
    words[data.offsets + s] = uint32_t(plan.heap().offsets[s] / 4);
  }
  auto put64 = [&](uint32_t at, int64_t v) {
    words[at] = uint32_t(uint64_t(v));
    words[at + 1] = uint32_t(uint64_t(v) >> 32);
  };
  for (unsigned a = 0; a < plan.kernel().numArguments(); ++a)
    put64(data.scalars + 2 * a, plan.scalars()[a]);
  for (unsigned s = 0; s < layout.numShapes; ++s)
    put64(data.shapes + 2 * s, plan.shapes()[s]);
  size_t bytes = words.size() * 4;
  // After the words, each later window's first invocation and heap shift
  // (kThreadOffset, kHeapShift), copied over the launch data's before its
  // dispatch.
  std::vector<uint32_t> windows;
  for (const accel::LaunchFrame::Window &w : frame.moreWindows)
    windows.insert(windows.end(), {uint32_t(w.threadOffset), uint32_t(w.heapShift / 4)});
  const size_t staged = bytes + windows.size() * 4;
  for (DeviceBuffer *buf : {&launchData, &launchStaging}) {
    size_t need = buf == &launchStaging ? staged : bytes;
    if (buf->size() < need) {
      auto made = DeviceBuffer::allocate(device, std::max<size_t>(need, 2 * buf->size()),
                                         buf == &launchStaging);
      if (!made.ok())
        return made.status();
      *buf = *std::move(made);
    }
  }
  std::memcpy(launchStaging.mapped(), words.data(), bytes);
  if (!windows.empty())
    std::memcpy(static_cast<std::byte *>(launchStaging.mapped()) + bytes, windows.data(),
                windows.size() * 4);
  return bytes;
}

void VulkanBackend::Impl::bindBuffers(const VulkanKernel &c, const accel::LaunchFrame &frame) {
  std::vector<VkBuffer> buffers = {launchData.get(), heap.get()};
  for (DeviceMirror *m : frame.slots)
    buffers.push_back(static_cast<VulkanMirror *>(m)->buffer().get());
  if (c.spirv.stopBinding) {
    assert(c.spirv.stopBinding == buffers.size());
    // (A launch that may not be stopped binds the heap there: the code
    // reads the binding only when asked to stop.)
    buffers.push_back(frame.stopWord ? stopWordBuffer.get() : heap.get());
  }
  c.program.bind(buffers);
}

absl::Status VulkanBackend::Impl::execute(accel::DeviceKernel &kernel,
                                          const accel::LaunchFrame &frame,
                                          accel::LaunchReport &report) {
  const VulkanKernel &c = static_cast<const VulkanKernel &>(kernel);
  const KernelLayout &layout = c.spirv.layout;
  const vk::Api &api = device->api();
  absl::StatusOr<size_t> dataBytes = stageLaunchData(c, frame);
  if (!dataBytes.ok())
    return dataBytes.status();
  bindBuffers(c, frame);
  VkQueryPool timer = frame.timed ? timestamps : VK_NULL_HANDLE;
  absl::Status ran = device->run([&](VkCommandBuffer cb) {
    VkBufferCopy up{0, 0, *dataBytes};
    if (timer)
      api.CmdResetQueryPool(cb, timer, 0, 2);
    api.CmdCopyBuffer(cb, launchStaging.get(), launchData.get(), 1, &up);
    if (frame.groupTable) {
      // A compacted heap's table goes to the heap's first bytes, where the
      // code reads it.
      VkBufferCopy table{0, 0, VkDeviceSize(frame.groupTableBytes)};
      api.CmdCopyBuffer(cb, static_cast<VulkanMirror *>(frame.groupTable)->buffer().get(),
                        heap.get(), 1, &table);
    }
    vk::fullBarrier(api, cb);
    // The barriers order the timestamps after the copy and after the last
    // dispatch.
    if (timer)
      api.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, timer, 0);
    for (size_t i = 0; i < layout.launches.size(); ++i) {
      if (frame.groups[i] == 0)
        continue;
      bool coop = i < frame.cooperative.size() && frame.cooperative[i];
      c.program.use(cb, coop ? c.cooperativePipelines[i] : c.pipelines[i]);
      api.CmdDispatch(cb, frame.groups[i], 1, 1);
      vk::fullBarrier(api, cb);
    }
    // Later windows of a compacted heap (one parallel entry): their first
    // invocation and heap shift, then the same pipeline again (the error
    // record and the counters stay in the launch data between them).
    static_assert(SpirvLaunchData::kHeapShift == SpirvLaunchData::kThreadOffset + 1);
    for (size_t w = 0; w < frame.moreWindows.size(); ++w) {
      if (frame.moreWindows[w].groups == 0)
        continue;
      VkBufferCopy words{*dataBytes + 8 * w, SpirvLaunchData::kThreadOffset * 4, 8};
      api.CmdCopyBuffer(cb, launchStaging.get(), launchData.get(), 1, &words);
      vk::fullBarrier(api, cb);
      c.program.use(cb, c.pipelines[0]);
      api.CmdDispatch(cb, frame.moreWindows[w].groups, 1, 1);
      vk::fullBarrier(api, cb);
    }
    if (timer)
      api.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timer, 1);
    api.CmdCopyBuffer(cb, launchData.get(), launchStaging.get(), 1, &up);
  });
  if (!ran.ok())
    return ran;
  if (timer) {
    const VulkanDeviceInfo &info = device->info();
    uint64_t ticks[2] = {0, 0};
    if (absl::Status s =
            device->check(api.GetQueryPoolResults(
                              device->handle(), timer, 0, 2, sizeof(ticks), ticks, sizeof(uint64_t),
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                          "vkGetQueryPoolResults");
        !s.ok())
      return s;
    uint64_t mask =
        info.timestampValidBits >= 64 ? ~uint64_t(0) : (uint64_t(1) << info.timestampValidBits) - 1;
    report.kernelMs = double((ticks[1] - ticks[0]) & mask) * info.timestampPeriodNs * 1e-6;
  }
  std::vector<uint32_t> words(*dataBytes / 4);
  std::memcpy(words.data(), launchStaging.mapped(), *dataBytes);
  static_assert(sizeof(QdErrorRecord) == SpirvLaunchData::kThreads * 4);
  std::memcpy(&report.record, words.data(), sizeof(report.record));
  for (size_t s = 0; s < layout.stacks.size(); ++s)
    report.needed[s] = words[c.spirv.data.needed + s];
  return absl::OkStatus();
}

VulkanBackend::VulkanBackend(std::unique_ptr<Impl> impl)
    : AcceleratorBackend(std::move(impl)), impl_(static_cast<Impl &>(device())) {}
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
  return impl_.device->info();
}

int64_t VulkanBackend::gridThreads() const {
  return impl_.threads;
}

bool VulkanBackend::validationActive() const {
  return impl_.device->validation() != nullptr;
}

std::vector<std::string> VulkanBackend::validationMessages() const {
  const vk::ValidationLog *log = impl_.device->validation();
  return log ? log->messages() : std::vector<std::string>{};
}

size_t VulkanBackend::validationMessageCount() const {
  const vk::ValidationLog *log = impl_.device->validation();
  return log ? log->count() : 0;
}

void VulkanBackend::clearValidationMessages() {
  if (vk::ValidationLog *log = impl_.device->validation())
    log->clear();
}

VulkanBackend::NativeHandles VulkanBackend::nativeHandles() const {
  const vk::Device &d = *impl_.device;
  NativeHandles h;
  h.instance = d.instance();
  h.physicalDevice = d.physical();
  h.device = d.handle();
  h.getInstanceProcAddr = reinterpret_cast<void (*)()>(d.api().GetInstanceProcAddr);
  return h;
}

absl::StatusOr<const SpirvKernel *> VulkanBackend::spirv(const Kernel &kernel, bool boundsChecked) {
  auto c = heapCode(kernel, boundsChecked);
  if (!c.ok())
    return c.status();
  return &static_cast<const VulkanKernel *>(*c)->spirv;
}

} // namespace qd
