//===- HipDriver.cpp - HIP's module API, loaded at run time ---------------===//
#include "qd/runtime/HipDriver.h"

#include "../gpu/DriverLibrary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qd::hip {
namespace {

// hipDeviceAttribute_t values (ABI-stable since ROCm 5.0) and error codes.
constexpr int kAttrMaxThreadsPerMultiprocessor = 57;
constexpr int kAttrMultiprocessors = 63;
constexpr int kAttrWarpSize = 87;
constexpr int kAttrGcnArchName = 10004; // ROCm 5 only; "Unused5" since ROCm 6
constexpr hipError_t kErrorNoDevice = 100, kErrorInvalidDevice = 101;
// hipHostMalloc flags.
constexpr unsigned kHostMallocPortable = 0x1, kHostMallocMapped = 0x2;
// hipModuleLaunchKernel's `extra`: the kernel arguments as one buffer.
void *const kLaunchParamBufferPointer = reinterpret_cast<void *>(0x1);
void *const kLaunchParamBufferSize = reinterpret_cast<void *>(0x2);
void *const kLaunchParamEnd = reinterpret_cast<void *>(0x3);

using Loaded = gpu::LoadedDriver<HipApi>;

/// Opens HIP from `library` and initialises it.
Loaded openHip(const std::string &library) {
  Loaded l;
  void *handle = gpu::openLibrary(library, l.status, [&](const std::string &why) {
    return fmt::format("hip: cannot load HIP's library '{}' ({}): this machine has no ROCm/HIP "
                       "runtime; use the cpu backend, or set QD_LIBAMDHIP64 to the path of "
                       "libamdhip64.so",
                       library, why);
  });
  if (!handle)
    return l;
  gpu::SymbolResolver resolve(handle, "hip: HIP's library", library, "install ROCm 5.0 or later");
  HipApi &a = l.api;
  resolve(a.hipInit, "hipInit");
  resolve(a.hipGetDeviceCount, "hipGetDeviceCount");
  resolve(a.hipSetDevice, "hipSetDevice");
  resolve(a.hipDeviceGetName, "hipDeviceGetName");
  resolve(a.hipDeviceGetAttribute, "hipDeviceGetAttribute");
  resolve(a.hipMalloc, "hipMalloc");
  resolve(a.hipFree, "hipFree");
  resolve(a.hipMemGetInfo, "hipMemGetInfo");
  resolve(a.hipMemcpyHtoD, "hipMemcpyHtoD");
  resolve(a.hipMemcpyDtoH, "hipMemcpyDtoH");
  resolve(a.hipMemcpyHtoDAsync, "hipMemcpyHtoDAsync");
  resolve(a.hipMemcpyDtoHAsync, "hipMemcpyDtoHAsync");
  resolve(a.hipEventCreateWithFlags, "hipEventCreateWithFlags");
  resolve(a.hipEventDestroy, "hipEventDestroy");
  resolve(a.hipEventRecord, "hipEventRecord");
  resolve(a.hipEventSynchronize, "hipEventSynchronize");
  resolve(a.hipStreamWaitEvent, "hipStreamWaitEvent");
  resolve(a.hipMemsetD8, "hipMemsetD8");
  resolve(a.hipMemGetAddressRange, "hipMemGetAddressRange");
  resolve(a.hipHostMalloc, "hipHostMalloc");
  resolve(a.hipHostFree, "hipHostFree");
  resolve(a.hipHostGetDevicePointer, "hipHostGetDevicePointer");
  resolve(a.hipModuleLoadData, "hipModuleLoadData");
  resolve(a.hipModuleUnload, "hipModuleUnload");
  resolve(a.hipModuleGetFunction, "hipModuleGetFunction");
  resolve(a.hipModuleGetGlobal, "hipModuleGetGlobal");
  resolve(a.hipModuleLaunchKernel, "hipModuleLaunchKernel");
  resolve(a.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor,
          "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
  resolve(a.hipGetErrorName, "hipGetErrorName");
  resolve(a.hipGetErrorString, "hipGetErrorString");
  // Where the architecture is found on ROCm 6 (archOf); optional.
  if (!resolve.optional(a.hipGetDeviceProperties, "hipGetDevicePropertiesR0600"))
    resolve.optional(a.hipGetDeviceProperties, "hipGetDeviceProperties");
  l.status = resolve.status();
  if (!l.status.ok())
    return l;
  if (hipError_t r = a.hipInit(0); r != 0) {
    const char *n = a.hipGetErrorName(r);
    bool noGpu = r == kErrorNoDevice || r == kErrorInvalidDevice;
    l.status = absl::FailedPreconditionError(fmt::format(
        "hip: hipInit failed with {}: HIP is installed but unusable here{}", n ? n : "?",
        noGpu ? " (no AMD GPU: the amdgpu backend needs one; use the cpu backend, or "
                "qd-translate --target=amdgpu to compile without running)"
              : ""));
  }
  return l;
}

std::string errorText(const HipApi &api, hipError_t r) {
  const char *name = api.hipGetErrorName(r), *text = api.hipGetErrorString(r);
  return fmt::format("{} ({})", name ? name : std::to_string(r), text ? text : "unknown error");
}

/// The processor name ("gfx90a") at the start of a target id
/// ("gfx90a:sramecc+:xnack-"), or "" when `id` is not one.
std::string processorOf(const char *id, size_t size) {
  std::string text(id, strnlen(id, size));
  if (text.rfind("gfx", 0) != 0)
    return "";
  text = text.substr(0, text.find(':'));
  bool name = text.size() > 3 && std::all_of(text.begin(), text.end(),
                                             [](char c) { return std::isalnum((unsigned char)c); });
  return name ? text : "";
}

} // namespace

std::string findProcessorName(const char *bytes, size_t size) {
  for (size_t i = 0; i + 3 < size; ++i)
    if ((i == 0 || bytes[i - 1] == 0) && bytes[i] == 'g')
      if (std::string arch = processorOf(bytes + i, size - i); !arch.empty())
        return arch;
  return "";
}

namespace {

/// Device `ordinal`'s architecture: ROCm 5 gives the target id as an
/// attribute (256 bytes written through the int pointer); ROCm 6 only in
/// hipDeviceProp_t::gcnArchName, whose offset differs between releases, so
/// the first NUL-terminated target id in the properties is taken (the
/// fields before it are numbers and the marketing name).
std::string archOf(const HipApi &api, int ordinal) {
  int attribute[64] = {};
  if (api.hipDeviceGetAttribute(attribute, kAttrGcnArchName, ordinal) == 0)
    if (std::string arch = findProcessorName(reinterpret_cast<const char *>(attribute), 256);
        !arch.empty())
      return arch;
  if (!api.hipGetDeviceProperties)
    return "";
  std::vector<char> props(64 * 1024, 0); // far larger than any hipDeviceProp_t
  if (api.hipGetDeviceProperties(props.data(), ordinal) != 0)
    return "";
  return findProcessorName(props.data(), props.size());
}

hipDeviceptr_t ptr(gpu::DevicePtr p) {
  return reinterpret_cast<hipDeviceptr_t>(uintptr_t(p));
}

} // namespace

absl::StatusOr<std::unique_ptr<Device>> Device::open(int ordinal, std::string library) {
  if (library.empty()) {
    const char *env = std::getenv("QD_LIBAMDHIP64");
    if (env && *env)
      library = env;
  }
  const Loaded *l = nullptr;
  if (!library.empty()) {
    l = &gpu::loadOnce(library, openHip);
  } else {
    // The unversioned name comes with the development package only.
    for (const char *name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}) {
      l = &gpu::loadOnce(std::string(name), openHip);
      if (l->status.ok() || l->status.message().find("cannot load") == std::string::npos)
        break;
    }
  }
  if (!l->status.ok())
    return l->status;
  std::unique_ptr<Device> d(new Device());
  d->api_ = &l->api;
  const HipApi &a = l->api;
  int count = 0;
  if (hipError_t r = a.hipGetDeviceCount(&count); r != 0 && r != kErrorNoDevice)
    return d->check(r, "hipGetDeviceCount");
  if (ordinal < 0 || ordinal >= count)
    return absl::FailedPreconditionError(fmt::format(
        "hip: there is no AMD GPU {} (this machine has {}{}); the amdgpu backend "
        "needs one: use the cpu backend, or qd-translate --target=amdgpu to compile "
        "without running",
        ordinal, count, count ? fmt::format(": ordinals 0 to {}", count - 1) : std::string()));
  DeviceInfo &info = d->info_;
  info.ordinal = ordinal;
  if (absl::Status s = d->makeCurrent(); !s.ok())
    return s;
  char name[256] = {};
  a.hipDeviceGetName(name, sizeof(name) - 1, ordinal);
  info.name = name;
  a.hipDeviceGetAttribute(&info.multiprocessors, kAttrMultiprocessors, ordinal);
  a.hipDeviceGetAttribute(&info.maxThreadsPerMultiprocessor, kAttrMaxThreadsPerMultiprocessor,
                          ordinal);
  a.hipDeviceGetAttribute(&info.waveSize, kAttrWarpSize, ordinal);
  info.arch = archOf(a, ordinal);
  return d;
}

absl::Status Device::check(hipError_t r, std::string_view what) const {
  if (r == 0)
    return absl::OkStatus();
  return absl::InternalError(fmt::format("hip: {}: {}", what, errorText(*api_, r)));
}

absl::Status Device::makeCurrent() const {
  return check(api_->hipSetDevice(info_.ordinal), "hipSetDevice");
}

uint64_t Device::freeMemory() const {
  size_t avail = 0, total = 0;
  if (!makeCurrent().ok() || api_->hipMemGetInfo(&avail, &total) != 0)
    return 0;
  return avail;
}

absl::StatusOr<gpu::DevicePtr> Device::alloc(size_t bytes) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  void *p = nullptr;
  if (hipError_t r = api_->hipMalloc(&p, bytes ? bytes : 1); r != 0)
    return absl::ResourceExhaustedError(
        fmt::format("hip: cannot allocate {} bytes on device {} ({}): {}", bytes, info_.ordinal,
                    info_.name, errorText(*api_, r)));
  return gpu::DevicePtr(uintptr_t(p));
}

void Device::free(gpu::DevicePtr p) const {
  if (p && makeCurrent().ok())
    api_->hipFree(ptr(p));
}

absl::Status Device::copyToDevice(gpu::DevicePtr dst, const void *src, size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  noteDefaultStreamWork();
  return check(api_->hipMemcpyHtoD(ptr(dst), const_cast<void *>(src), bytes), "hipMemcpyHtoD");
}

absl::Status Device::copyToHost(void *dst, gpu::DevicePtr src, size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->hipMemcpyDtoH(dst, ptr(src), bytes), "hipMemcpyDtoH");
}

absl::Status Device::zero(gpu::DevicePtr dst, size_t bytes) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  noteDefaultStreamWork();
  return check(api_->hipMemsetD8(ptr(dst), 0, bytes), "hipMemsetD8");
}

absl::StatusOr<std::pair<gpu::DevicePtr, size_t>> Device::addressRange(gpu::DevicePtr p) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  hipDeviceptr_t base = nullptr;
  size_t size = 0;
  if (absl::Status s =
          check(api_->hipMemGetAddressRange(&base, &size, ptr(p)), "hipMemGetAddressRange");
      !s.ok())
    return s;
  return std::pair(gpu::DevicePtr(uintptr_t(base)), size);
}

absl::StatusOr<std::pair<void *, gpu::DevicePtr>> Device::allocMapped(size_t bytes) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  void *host = nullptr;
  if (absl::Status s = check(
          api_->hipHostMalloc(&host, bytes ? bytes : 1, kHostMallocPortable | kHostMallocMapped),
          "hipHostMalloc");
      !s.ok())
    return s;
  void *mapped = nullptr;
  if (absl::Status s =
          check(api_->hipHostGetDevicePointer(&mapped, host, 0), "hipHostGetDevicePointer");
      !s.ok()) {
    api_->hipHostFree(host);
    return s;
  }
  std::memset(host, 0, bytes);
  return std::pair(host, gpu::DevicePtr(uintptr_t(mapped)));
}

void Device::freeMapped(void *host) const {
  if (makeCurrent().ok())
    api_->hipHostFree(host);
}

absl::Status Device::launch(gpu::Function f, unsigned grid, unsigned block,
                            std::span<const uint64_t> args, std::string_view what,
                            gpu::Stream stream) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  if (!stream)
    noteDefaultStreamWork();
  // Every argument is 8 bytes and 8-byte aligned in the kernarg segment.
  std::vector<uint64_t> buffer(args.begin(), args.end());
  size_t bytes = buffer.size() * sizeof(uint64_t);
  void *extra[] = {kLaunchParamBufferPointer, buffer.data(), kLaunchParamBufferSize, &bytes,
                   kLaunchParamEnd};
  return check(api_->hipModuleLaunchKernel(static_cast<hipFunction_t>(f), grid, 1, 1, block, 1, 1,
                                           0, static_cast<hipStream_t>(stream), nullptr, extra),
               fmt::format("hipModuleLaunchKernel({})", what));
}

absl::Status Device::copyToDeviceAsync(gpu::DevicePtr dst, const void *src, size_t bytes,
                                       gpu::Stream stream) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->hipMemcpyHtoDAsync(ptr(dst), const_cast<void *>(src), bytes,
                                        static_cast<hipStream_t>(stream)),
               "hipMemcpyHtoDAsync");
}

absl::Status Device::copyToHostAsync(void *dst, gpu::DevicePtr src, size_t bytes,
                                     gpu::Stream stream) const {
  if (bytes == 0)
    return absl::OkStatus();
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->hipMemcpyDtoHAsync(dst, ptr(src), bytes, static_cast<hipStream_t>(stream)),
               "hipMemcpyDtoHAsync");
}

absl::StatusOr<gpu::Event> Device::createEvent() const {
  constexpr unsigned kDisableTiming = 0x2; // hipEventDisableTiming
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  hipEvent_t e = nullptr;
  if (absl::Status s =
          check(api_->hipEventCreateWithFlags(&e, kDisableTiming), "hipEventCreateWithFlags");
      !s.ok())
    return s;
  return static_cast<gpu::Event>(e);
}

void Device::destroyEvent(gpu::Event event) const {
  if (event && makeCurrent().ok())
    api_->hipEventDestroy(static_cast<hipEvent_t>(event));
}

absl::Status Device::recordEvent(gpu::Event event, gpu::Stream stream) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(
      api_->hipEventRecord(static_cast<hipEvent_t>(event), static_cast<hipStream_t>(stream)),
      "hipEventRecord");
}

absl::Status Device::streamWaitEvent(gpu::Stream stream, gpu::Event event) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(
      api_->hipStreamWaitEvent(static_cast<hipStream_t>(stream), static_cast<hipEvent_t>(event), 0),
      "hipStreamWaitEvent");
}

absl::Status Device::waitEvent(gpu::Event event) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  return check(api_->hipEventSynchronize(static_cast<hipEvent_t>(event)), "hipEventSynchronize");
}

absl::StatusOr<int> Device::residentBlocks(gpu::Function f, unsigned block) const {
  if (absl::Status s = makeCurrent(); !s.ok())
    return s;
  int perCu = 0;
  if (absl::Status s = check(api_->hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(
                                 &perCu, static_cast<hipFunction_t>(f), int(block), 0),
                             "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
      !s.ok())
    return s;
  return perCu;
}

absl::StatusOr<std::unique_ptr<Module>> Module::load(const Device &device, std::string_view hsaco) {
  if (absl::Status s = device.makeCurrent(); !s.ok())
    return s;
  std::unique_ptr<Module> m(new Module(device, std::string(hsaco)));
  if (hipError_t r = device.api().hipModuleLoadData(&m->module_, m->image_.data()); r != 0)
    return absl::InvalidArgumentError(std::string(device.check(r, "hipModuleLoadData").message()));
  return m;
}

Module::~Module() {
  if (module_ && device_.makeCurrent().ok())
    device_.api().hipModuleUnload(module_);
}

absl::StatusOr<gpu::Function> Module::entry(const std::string &name) const {
  hipFunction_t f = nullptr;
  if (absl::Status s = device_.check(device_.api().hipModuleGetFunction(&f, module_, name.c_str()),
                                     "hipModuleGetFunction(" + name + ")");
      !s.ok())
    return s;
  return static_cast<gpu::Function>(f);
}

absl::StatusOr<std::pair<gpu::DevicePtr, size_t>> Module::global(const std::string &name) const {
  hipDeviceptr_t p = nullptr;
  size_t bytes = 0;
  if (absl::Status s =
          device_.check(device_.api().hipModuleGetGlobal(&p, &bytes, module_, name.c_str()),
                        "hipModuleGetGlobal(" + name + ")");
      !s.ok())
    return s;
  return std::pair(gpu::DevicePtr(uintptr_t(p)), bytes);
}

} // namespace qd::hip
