//===- CudaDriver.cpp - The CUDA driver API, loaded at run time -----------===//
#include "qd/runtime/CudaDriver.h"

#include "../gpu/DriverLibrary.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

namespace qd::cuda {
namespace {

// Device attributes and JIT options (values from the driver API, stable).
constexpr int kAttrMultiprocessors = 16;
constexpr int kAttrMaxThreadsPerMultiprocessor = 39;
constexpr int kAttrComputeMajor = 75;
constexpr int kAttrComputeMinor = 76;
constexpr int kJitMaxRegisters = 0;
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSize = 6;
constexpr CUresult kErrorNoDevice = 100;

using Loaded = gpu::LoadedDriver<DriverApi>;

/// Opens the driver library `library` and initialises it.
Loaded openDriver(const std::string &library) {
  Loaded l;
  void *handle = gpu::openLibrary(library, l.status, [&](const std::string &why) {
    return fmt::format("cuda: cannot load the NVIDIA driver library '{}' ({}): this machine has "
                       "no CUDA driver; use the cpu backend, or set QD_LIBCUDA to the driver's "
                       "path",
                       library, why);
  });
  if (!handle)
    return l;
  gpu::SymbolResolver resolve(handle, "cuda: the driver library", library,
                              "update the NVIDIA driver");
  DriverApi &a = l.api;
  resolve(a.cuInit, "cuInit");
  resolve(a.cuDriverGetVersion, "cuDriverGetVersion");
  resolve(a.cuDeviceGetCount, "cuDeviceGetCount");
  resolve(a.cuDeviceGet, "cuDeviceGet");
  resolve(a.cuDeviceGetName, "cuDeviceGetName");
  resolve(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  resolve(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve(a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  resolve(a.cuCtxSetCurrent, "cuCtxSetCurrent");
  resolve(a.cuMemAlloc, "cuMemAlloc_v2");
  resolve(a.cuMemFree, "cuMemFree_v2");
  resolve(a.cuMemGetInfo, "cuMemGetInfo_v2");
  resolve(a.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  resolve(a.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  resolve(a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  resolve(a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  resolve(a.cuMemsetD8, "cuMemsetD8_v2");
  resolve(a.cuMemGetAddressRange, "cuMemGetAddressRange_v2");
  resolve(a.cuMemHostAlloc, "cuMemHostAlloc");
  resolve(a.cuMemFreeHost, "cuMemFreeHost");
  resolve(a.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
  resolve(a.cuModuleLoadDataEx, "cuModuleLoadDataEx");
  resolve(a.cuModuleUnload, "cuModuleUnload");
  resolve(a.cuModuleGetFunction, "cuModuleGetFunction");
  resolve(a.cuModuleGetGlobal, "cuModuleGetGlobal_v2");
  resolve(a.cuLaunchKernel, "cuLaunchKernel");
  resolve(a.cuOccupancyMaxActiveBlocksPerMultiprocessor,
          "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  resolve(a.cuStreamCreate, "cuStreamCreate");
  resolve(a.cuStreamDestroy, "cuStreamDestroy_v2");
  resolve(a.cuStreamSynchronize, "cuStreamSynchronize");
  resolve(a.cuStreamQuery, "cuStreamQuery");
  resolve(a.cuStreamWaitEvent, "cuStreamWaitEvent");
  resolve(a.cuEventCreate, "cuEventCreate");
  resolve(a.cuEventDestroy, "cuEventDestroy_v2");
  resolve(a.cuEventRecord, "cuEventRecord");
  resolve(a.cuEventElapsedTime, "cuEventElapsedTime");
  resolve(a.cuEventSynchronize, "cuEventSynchronize");
  resolve(a.cuGetErrorName, "cuGetErrorName");
  resolve(a.cuGetErrorString, "cuGetErrorString");
  l.status = resolve.status();
  if (!l.status.ok())
    return l;
  // Graphs, where the driver has them all (Device::hasGraphs).
  bool graphs = resolve.optional(a.cuStreamBeginCapture, "cuStreamBeginCapture_v2") &&
                resolve.optional(a.cuStreamEndCapture, "cuStreamEndCapture") &&
                resolve.optional(a.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") &&
                resolve.optional(a.cuGraphExecDestroy, "cuGraphExecDestroy") &&
                resolve.optional(a.cuGraphDestroy, "cuGraphDestroy") &&
                resolve.optional(a.cuGraphLaunch, "cuGraphLaunch");
  if (!graphs)
    a.cuGraphLaunch = nullptr;
  if (CUresult r = a.cuInit(0); r != 0) {
    const char *n = nullptr;
    a.cuGetErrorName(r, &n);
    l.status = absl::FailedPreconditionError(fmt::format(
        "cuda: cuInit failed with {}: the NVIDIA driver is installed but unusable here{}",
        n ? n : std::to_string(r), r == kErrorNoDevice ? " (no CUDA device)" : ""));
  }
  return l;
}

std::string errorText(const DriverApi &api, CUresult r) {
  const char *name = nullptr, *text = nullptr;
  api.cuGetErrorName(r, &name);
  api.cuGetErrorString(r, &text);
  return fmt::format("{} ({})", name ? name : std::to_string(r), text ? text : "unknown error");
}

} // namespace

absl::StatusOr<std::unique_ptr<Device>> Device::open(int ordinal, std::string library) {
  if (library.empty()) {
    const char *env = std::getenv("QD_LIBCUDA");
    library = env && *env ? env : "libcuda.so.1";
  }
  const Loaded &l = gpu::loadOnce(library, openDriver);
  if (!l.status.ok())
    return l.status;
  std::unique_ptr<Device> d(new Device());
  d->api_ = &l.api;
  const DriverApi &a = l.api;
  int count = 0;
  if (absl::Status s = d->check(a.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok())
    return s;
  if (ordinal < 0 || ordinal >= count)
    return absl::FailedPreconditionError(
        fmt::format("cuda: there is no CUDA device {} (this machine has {}{})", ordinal, count,
                    count ? fmt::format(": ordinals 0 to {}", count - 1) : std::string()));
  if (absl::Status s = d->check(a.cuDeviceGet(&d->device_, ordinal), "cuDeviceGet"); !s.ok())
    return s;
  if (absl::Status s = d->check(a.cuDevicePrimaryCtxRetain(&d->context_, d->device_),
                                "cuDevicePrimaryCtxRetain");
      !s.ok())
    return s;
  DeviceInfo &info = d->info_;
  info.ordinal = ordinal;
  char name[256] = {};
  a.cuDeviceGetName(name, sizeof(name) - 1, d->device_);
  info.name = name;
  a.cuDeviceGetAttribute(&info.computeMajor, kAttrComputeMajor, d->device_);
  a.cuDeviceGetAttribute(&info.computeMinor, kAttrComputeMinor, d->device_);
  a.cuDeviceGetAttribute(&info.multiprocessors, kAttrMultiprocessors, d->device_);
  a.cuDeviceGetAttribute(&info.maxThreadsPerMultiprocessor, kAttrMaxThreadsPerMultiprocessor,
                         d->device_);
  return d;
}

Device::~Device() {
  if (captureStream_ && makeCurrent().ok())
    api_->cuStreamDestroy(captureStream_);
  if (context_)
    api_->cuDevicePrimaryCtxRelease(device_);
}

std::string Device::smArch() const {
  return fmt::format("sm_{}{}", info_.computeMajor, info_.computeMinor);
}

absl::Status Device::check(CUresult r, std::string_view what) const {
  if (r == 0)
    return absl::OkStatus();
  return absl::InternalError(fmt::format("cuda: {}: {}", what, errorText(*api_, r)));
}

absl::Status Device::makeCurrent() const {
  return check(api_->cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

absl::StatusOr<CUdeviceptr> Device::alloc(size_t bytes) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  CUdeviceptr p = 0;
  if (CUresult r = api_->cuMemAlloc(&p, bytes ? bytes : 1); r != 0)
    return absl::ResourceExhaustedError(
        fmt::format("cuda: cannot allocate {} bytes on device {} ({}): {}", bytes, info_.ordinal,
                    info_.name, errorText(*api_, r)));
  return p;
}

uint64_t Device::freeMemory() const {
  size_t avail = 0, total = 0;
  if (!makeCurrent().ok() || api_->cuMemGetInfo(&avail, &total) != 0)
    return 0;
  return avail;
}

void Device::free(CUdeviceptr p) const {
  if (p && makeCurrent().ok())
    api_->cuMemFree(p);
}

absl::Status Device::copyToDevice(CUdeviceptr dst, const void *src, size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  noteDefaultStreamWork();
  return check(api_->cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

absl::Status Device::copyToDeviceAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                       gpu::Stream stream) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->cuMemcpyHtoDAsync(dst, src, bytes, static_cast<CUstream>(stream)),
               "cuMemcpyHtoDAsync");
}

absl::Status Device::copyToHostAsync(void *dst, CUdeviceptr src, size_t bytes,
                                     gpu::Stream stream) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->cuMemcpyDtoHAsync(dst, src, bytes, static_cast<CUstream>(stream)),
               "cuMemcpyDtoHAsync");
}

absl::StatusOr<gpu::Event> Device::createEvent() const {
  constexpr unsigned kDisableTiming = 0x2; // CU_EVENT_DISABLE_TIMING
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  CUevent e = nullptr;
  if (absl::Status s = check(api_->cuEventCreate(&e, kDisableTiming), "cuEventCreate"); !s.ok())
    return s;
  return static_cast<gpu::Event>(e);
}

void Device::destroyEvent(gpu::Event event) const {
  if (event && makeCurrent().ok())
    api_->cuEventDestroy(static_cast<CUevent>(event));
}

absl::Status Device::recordEvent(gpu::Event event, gpu::Stream stream) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->cuEventRecord(static_cast<CUevent>(event), static_cast<CUstream>(stream)),
               "cuEventRecord");
}

absl::Status Device::streamWaitEvent(gpu::Stream stream, gpu::Event event) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(
      api_->cuStreamWaitEvent(static_cast<CUstream>(stream), static_cast<CUevent>(event), 0),
      "cuStreamWaitEvent");
}

absl::Status Device::waitEvent(gpu::Event event) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->cuEventSynchronize(static_cast<CUevent>(event)), "cuEventSynchronize");
}

absl::StatusOr<std::pair<void *, CUdeviceptr>> Device::allocMapped(size_t bytes) const {
  constexpr unsigned kPortable = 0x1, kDeviceMap = 0x2; // CU_MEMHOSTALLOC_*
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  void *host = nullptr;
  if (absl::Status s = check(api_->cuMemHostAlloc(&host, bytes ? bytes : 1, kPortable | kDeviceMap),
                             "cuMemHostAlloc");
      !s.ok())
    return s;
  CUdeviceptr mapped = 0;
  if (absl::Status s =
          check(api_->cuMemHostGetDevicePointer(&mapped, host, 0), "cuMemHostGetDevicePointer");
      !s.ok()) {
    api_->cuMemFreeHost(host);
    return s;
  }
  std::memset(host, 0, bytes);
  return std::pair(host, mapped);
}

void Device::freeMapped(void *host) const {
  if (makeCurrent().ok())
    api_->cuMemFreeHost(host);
}

absl::Status Device::launch(gpu::Function f, unsigned grid, unsigned block,
                            std::span<const uint64_t> args, std::string_view what,
                            gpu::Stream stream) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  if (!stream)
    noteDefaultStreamWork();
  std::vector<void *> params;
  for (const uint64_t &a : args)
    params.push_back(const_cast<uint64_t *>(&a));
  return check(api_->cuLaunchKernel(static_cast<CUfunction>(f), grid, 1, 1, block, 1, 1, 0,
                                    static_cast<CUstream>(stream), params.data(), nullptr),
               fmt::format("cuLaunchKernel({})", what));
}

absl::StatusOr<int> Device::residentBlocks(gpu::Function f, unsigned block) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  int perSm = 0;
  if (absl::Status s = check(api_->cuOccupancyMaxActiveBlocksPerMultiprocessor(
                                 &perSm, static_cast<CUfunction>(f), int(block), 0),
                             "cuOccupancyMaxActiveBlocksPerMultiprocessor");
      !s.ok())
    return s;
  return perSm;
}

namespace {

/// Two events: CU_EVENT_DEFAULT records timing.
class EventTimer final : public gpu::StreamTimer {
public:
  explicit EventTimer(const Device &d) : device_(d) {}
  ~EventTimer() override {
    if (device_.makeCurrent().ok())
      for (CUevent e : events_)
        if (e)
          device_.api().cuEventDestroy(e);
  }
  absl::Status create() {
    if (absl::Status s = device_.makeCurrent(); !s.ok())
      return s;
    for (CUevent &e : events_)
      if (absl::Status s = device_.check(device_.api().cuEventCreate(&e, 0), "cuEventCreate");
          !s.ok())
        return s;
    return absl::OkStatus();
  }
  absl::Status start(gpu::Stream stream) override { return record(0, stream); }
  absl::Status stop(gpu::Stream stream) override { return record(1, stream); }
  absl::StatusOr<double> elapsedMs() override {
    if (absl::Status s = device_.makeCurrent(); !s.ok())
      return s;
    float ms = 0;
    if (absl::Status s = device_.check(
            device_.api().cuEventElapsedTime(&ms, events_[0], events_[1]), "cuEventElapsedTime");
        !s.ok())
      return s;
    return double(ms);
  }

private:
  absl::Status record(int which, gpu::Stream stream) {
    if (absl::Status s = device_.makeCurrent(); !s.ok())
      return s;
    return device_.check(device_.api().cuEventRecord(events_[which], static_cast<CUstream>(stream)),
                         "cuEventRecord");
  }
  const Device &device_;
  CUevent events_[2] = {nullptr, nullptr};
};

} // namespace

absl::StatusOr<std::unique_ptr<gpu::StreamTimer>> Device::createTimer() const {
  auto timer = std::make_unique<EventTimer>(*this);
  if (absl::Status s = timer->create(); !s.ok())
    return s;
  return std::unique_ptr<gpu::StreamTimer>(std::move(timer));
}

absl::StatusOr<std::pair<CUdeviceptr, size_t>> Device::addressRange(CUdeviceptr p) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (absl::Status s = check(api_->cuMemGetAddressRange(&base, &size, p), "cuMemGetAddressRange");
      !s.ok())
    return s;
  return std::pair(base, size);
}

absl::Status Device::copyToHost(void *dst, CUdeviceptr src, size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

absl::Status Device::zero(CUdeviceptr dst, size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  noteDefaultStreamWork();
  return check(api_->cuMemsetD8(dst, 0, bytes), "cuMemsetD8");
}

absl::StatusOr<std::unique_ptr<Module>> Module::load(const Device &device, std::string_view ptx,
                                                     unsigned maxRegisters) {
  if (absl::Status s = device.makeCurrent(); !s.ok())
    return s;
  std::string text(ptx); // the driver wants a NUL-terminated image
  std::string log(8192, '\0');
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSize, kJitMaxRegisters};
  void *values[] = {log.data(), reinterpret_cast<void *>(log.size()),
                    reinterpret_cast<void *>(uintptr_t(maxRegisters))};
  CUmodule m = nullptr;
  CUresult r =
      device.api().cuModuleLoadDataEx(&m, text.c_str(), maxRegisters > 0 ? 3 : 2, options, values);
  if (r != 0) {
    log.resize(log.find('\0'));
    absl::Status s = device.check(r, "cuModuleLoadDataEx");
    return absl::InvalidArgumentError(
        fmt::format("{}{}{}", std::string(s.message()), log.empty() ? "" : ": ", log));
  }
  return std::unique_ptr<Module>(new Module(device, m));
}

Module::~Module() {
  if (module_ && device_.makeCurrent().ok())
    device_.api().cuModuleUnload(module_);
}

absl::StatusOr<std::pair<CUdeviceptr, size_t>> Module::global(const std::string &name) const {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  if (absl::Status s =
          device_.check(device_.api().cuModuleGetGlobal(&p, &bytes, module_, name.c_str()),
                        "cuModuleGetGlobal(" + name + ")");
      !s.ok())
    return s;
  return std::pair(p, bytes);
}

absl::StatusOr<gpu::Function> Module::entry(const std::string &name) const {
  absl::StatusOr<CUfunction> f = function(name);
  if (!f.ok())
    return f.status();
  return static_cast<gpu::Function>(*f);
}

absl::StatusOr<CUfunction> Module::function(const std::string &name) const {
  CUfunction f = nullptr;
  if (absl::Status s = device_.check(device_.api().cuModuleGetFunction(&f, module_, name.c_str()),
                                     "cuModuleGetFunction(" + name + ")");
      !s.ok())
    return s;
  return f;
}

//===--- Graphs -----------------------------------------------------------===//

namespace {
constexpr unsigned kStreamNonBlocking = 1; // CU_STREAM_NON_BLOCKING
constexpr int kCaptureModeRelaxed = 2;     // CU_STREAM_CAPTURE_MODE_RELAXED
} // namespace

absl::StatusOr<gpu::Stream> Device::beginCapture() const {
  if (!hasGraphs())
    return noGraphs("beginCapture");
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  std::lock_guard<std::mutex> lock(captureMutex_);
  if (!captureStream_)
    if (absl::Status s = check(api_->cuStreamCreate(&captureStream_, kStreamNonBlocking),
                               "cuStreamCreate (the capture stream)");
        !s.ok())
      return s;
  if (absl::Status s = check(api_->cuStreamBeginCapture(captureStream_, kCaptureModeRelaxed),
                             "cuStreamBeginCapture");
      !s.ok())
    return s;
  return static_cast<gpu::Stream>(captureStream_);
}

absl::StatusOr<gpu::Graph> Device::endCapture(gpu::Stream stream) const {
  if (!hasGraphs())
    return noGraphs("endCapture");
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  CUgraph graph = nullptr;
  if (absl::Status s = check(api_->cuStreamEndCapture(static_cast<CUstream>(stream), &graph),
                             "cuStreamEndCapture");
      !s.ok()) {
    if (graph)
      api_->cuGraphDestroy(graph);
    return s;
  }
  CUgraphExec exec = nullptr;
  absl::Status made =
      check(api_->cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  api_->cuGraphDestroy(graph);
  if (!made.ok())
    return made;
  return static_cast<gpu::Graph>(exec);
}

absl::Status Device::launchGraph(gpu::Graph graph, gpu::Stream stream) const {
  if (!hasGraphs())
    return noGraphs("launchGraph");
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  if (!stream)
    noteDefaultStreamWork();
  return check(api_->cuGraphLaunch(static_cast<CUgraphExec>(graph), static_cast<CUstream>(stream)),
               "cuGraphLaunch");
}

void Device::destroyGraph(gpu::Graph graph) const {
  if (graph && hasGraphs() && makeCurrent().ok())
    api_->cuGraphExecDestroy(static_cast<CUgraphExec>(graph));
}

} // namespace qd::cuda
