//===- VulkanDevice.cpp - The Vulkan loader, a device, its buffers --------===//
#include "VulkanDevice.h"

#include "VulkanReduction.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qd::vk {

const char *resultName(VkResult r) {
  switch (r) {
  case VK_SUCCESS:
    return "VK_SUCCESS";
  case VK_NOT_READY:
    return "VK_NOT_READY";
  case VK_TIMEOUT:
    return "VK_TIMEOUT";
  case VK_ERROR_OUT_OF_HOST_MEMORY:
    return "VK_ERROR_OUT_OF_HOST_MEMORY";
  case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
  case VK_ERROR_INITIALIZATION_FAILED:
    return "VK_ERROR_INITIALIZATION_FAILED";
  case VK_ERROR_DEVICE_LOST:
    return "VK_ERROR_DEVICE_LOST";
  case VK_ERROR_MEMORY_MAP_FAILED:
    return "VK_ERROR_MEMORY_MAP_FAILED";
  case VK_ERROR_LAYER_NOT_PRESENT:
    return "VK_ERROR_LAYER_NOT_PRESENT";
  case VK_ERROR_EXTENSION_NOT_PRESENT:
    return "VK_ERROR_EXTENSION_NOT_PRESENT";
  case VK_ERROR_FEATURE_NOT_PRESENT:
    return "VK_ERROR_FEATURE_NOT_PRESENT";
  case VK_ERROR_INCOMPATIBLE_DRIVER:
    return "VK_ERROR_INCOMPATIBLE_DRIVER";
  case VK_ERROR_TOO_MANY_OBJECTS:
    return "VK_ERROR_TOO_MANY_OBJECTS";
  case VK_ERROR_OUT_OF_POOL_MEMORY:
    return "VK_ERROR_OUT_OF_POOL_MEMORY";
  case VK_ERROR_INVALID_SHADER_NV:
    return "VK_ERROR_INVALID_SHADER_NV";
  default:
    return "VkResult error";
  }
}

namespace {

absl::Status unavailable(const std::string &why) {
  return absl::FailedPreconditionError("vulkan: " + why);
}

/// The loader's vkGetInstanceProcAddr, or why there is none.
absl::StatusOr<PFN_vkGetInstanceProcAddr> openLoader() {
  static void *handle = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char *name : {"libvulkan.so.1", "libvulkan.so"})
      if ((handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        return;
    const char *e = dlerror();
    error = e ? e : "not found";
  });
  if (!handle)
    return unavailable(fmt::format(
        "cannot open the Vulkan loader (libvulkan.so.1: {}); install a Vulkan loader and driver "
        "(e.g. libvulkan1 and mesa-vulkan-drivers for lavapipe), or use another backend",
        error));
  auto get = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle, "vkGetInstanceProcAddr"));
  if (!get)
    return unavailable("the Vulkan loader has no vkGetInstanceProcAddr");
  return get;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool hasExtension(const std::vector<VkExtensionProperties> &exts, const char *name) {
  for (const VkExtensionProperties &e : exts)
    if (std::strcmp(e.extensionName, name) == 0)
      return true;
  return false;
}

constexpr const char *kValidationLayer = "VK_LAYER_KHRONOS_validation";

/// The instance extensions the loader, its implicit layers and `layer`
/// (when not null) offer.
std::vector<VkExtensionProperties> instanceExtensions(const Api &api, const char *layer) {
  uint32_t n = 0;
  if (api.EnumerateInstanceExtensionProperties(layer, &n, nullptr) != VK_SUCCESS)
    return {};
  std::vector<VkExtensionProperties> exts(n);
  if (api.EnumerateInstanceExtensionProperties(layer, &n, exts.data()) < 0)
    return {};
  exts.resize(n);
  return exts;
}

/// Why the validation layer cannot run with its messages collected, or ""
/// (then `*features`: whether VK_EXT_validation_features is offered).
std::string validationMissing(const Api &api, bool *features) {
  uint32_t n = 0;
  std::vector<VkLayerProperties> props;
  if (api.EnumerateInstanceLayerProperties &&
      api.EnumerateInstanceLayerProperties(&n, nullptr) == VK_SUCCESS) {
    props.resize(n);
    if (api.EnumerateInstanceLayerProperties(&n, props.data()) >= 0)
      props.resize(n);
  }
  if (std::none_of(props.begin(), props.end(), [](const VkLayerProperties &p) {
        return std::strcmp(p.layerName, kValidationLayer) == 0;
      }))
    return fmt::format("the Vulkan validation layer ({}) is not installed", kValidationLayer);
  if (!api.EnumerateInstanceExtensionProperties)
    return "the Vulkan loader has no vkEnumerateInstanceExtensionProperties";
  std::vector<VkExtensionProperties> exts = instanceExtensions(api, nullptr);
  std::vector<VkExtensionProperties> own = instanceExtensions(api, kValidationLayer);
  exts.insert(exts.end(), own.begin(), own.end());
  if (!hasExtension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
    return fmt::format("the Vulkan validation layer is installed but {}, which collects its "
                       "messages, is not available",
                       VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  *features = hasExtension(exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
  return "";
}

VKAPI_ATTR VkBool32 VKAPI_CALL onValidationMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                   void *log) {
  if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) // the bits grow with severity
    return VK_FALSE;
  const char *type = types & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT    ? "validation"
                     : types & VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT ? "performance"
                                                                               : "general";
  try { // nothing may unwind through the layer's frames
    static_cast<ValidationLog *>(log)->record(
        fmt::format("{} [{}] {}",
                    severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
                    type, data && data->pMessage ? data->pMessage : "(no text)"));
  } catch (...) {
  }
  return VK_FALSE; // the call goes on to the driver
}

} // namespace

void ValidationLog::record(std::string message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++count_;
    if (messages_.size() < kKept)
      messages_.push_back(message);
  }
  if (sink_)
    sink_(message);
}

std::vector<std::string> ValidationLog::messages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_;
}

size_t ValidationLog::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

void ValidationLog::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  messages_.clear();
  count_ = 0;
}

absl::Status Device::check(VkResult r, const std::string &what) const {
  if (r == VK_SUCCESS)
    return absl::OkStatus();
  std::string msg =
      fmt::format("vulkan: {} failed: {} ({}) on '{}'", what, resultName(r), int(r), info_.name);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::Status Device::createInstance(const VulkanBackendOptions &options, uint32_t version) {
  using Validation = VulkanBackendOptions::Validation;
  std::vector<const char *> layers, extensions;
  bool features = false;
  if (options.validation != Validation::Off) {
    std::string missing = validationMissing(api_, &features);
    if (missing.empty()) {
      layers.push_back(kValidationLayer);
      extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      if (features)
        extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
      validation_ = std::make_unique<ValidationLog>(options.onValidationMessage);
    } else if (options.validation == Validation::Required) {
      return unavailable(
          missing + "; install it (Debian: vulkan-validationlayers, which scripts/install-deps.sh "
                    "installs), or set VulkanBackendOptions::validation to IfInstalled or Off");
    }
  }
  auto app = vk::make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "qd";
  app.pEngineName = "qd";
  app.apiVersion = std::min<uint32_t>(version, VK_API_VERSION_1_3);
  auto ici = vk::make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ici.pApplicationInfo = &app;
  ici.enabledLayerCount = uint32_t(layers.size());
  ici.ppEnabledLayerNames = layers.data();
  ici.enabledExtensionCount = uint32_t(extensions.size());
  ici.ppEnabledExtensionNames = extensions.data();
  // Every warning and error, of every type; chained into the instance's
  // creation too, which reports what vkCreateInstance and
  // vkDestroyInstance find.
  auto messenger = vk::make<VkDebugUtilsMessengerCreateInfoEXT>(
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                              VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = onValidationMessage;
  messenger.pUserData = validation_.get();
  // Synchronisation validation (missing barriers) on top of the default
  // checks.
  VkValidationFeatureEnableEXT enables[] = {
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  auto enabled = vk::make<VkValidationFeaturesEXT>(VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT);
  enabled.enabledValidationFeatureCount = 1;
  enabled.pEnabledValidationFeatures = enables;
  if (validation_) {
    ici.pNext = &messenger;
    if (features) {
      enabled.pNext = &messenger;
      ici.pNext = &enabled;
    }
  }
  if (VkResult r = api_.CreateInstance(&ici, nullptr, &instance_); r != VK_SUCCESS)
    return unavailable(fmt::format("vkCreateInstance failed: {}; is a Vulkan driver installed?{}",
                                   resultName(r),
                                   validation_ ? " (with the validation layer)" : ""));
#define QD_VK_LOAD(name)                                                                           \
  api_.name = reinterpret_cast<PFN_vk##name>(api_.GetInstanceProcAddr(instance_, "vk" #name));     \
  if (!api_.name)                                                                                  \
    return unavailable("the Vulkan loader has no vk" #name);
  QD_VK_INSTANCE_FUNCTIONS(QD_VK_LOAD)
  if (!validation_)
    return absl::OkStatus();
  QD_VK_DEBUG_FUNCTIONS(QD_VK_LOAD)
#undef QD_VK_LOAD
  if (VkResult r = api_.CreateDebugUtilsMessengerEXT(instance_, &messenger, nullptr, &messenger_);
      r != VK_SUCCESS)
    return unavailable(
        fmt::format("vkCreateDebugUtilsMessengerEXT failed: {}; the validation layer's messages "
                    "cannot be collected",
                    resultName(r)));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Device>> Device::open(const VulkanBackendOptions &options) {
  auto get = openLoader();
  if (!get.ok())
    return get.status();
  std::shared_ptr<Device> d(new Device());
  if (absl::Status s = d->loadGlobals(*get); !s.ok())
    return s;
  uint32_t version = VK_API_VERSION_1_0;
  if (d->api_.EnumerateInstanceVersion)
    d->api_.EnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_1)
    return unavailable(fmt::format("the Vulkan loader supports Vulkan {}.{}; qd needs 1.1",
                                   VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version)));
  if (absl::Status s = d->createInstance(options, version); !s.ok())
    return s;
  absl::StatusOr<VkPhysicalDeviceProperties> p = d->choosePhysical(options);
  if (!p.ok())
    return p.status();
  VulkanDeviceInfo &info = d->info_;
  const Api &api = d->api_;
  uint32_t extCount = 0;
  api.EnumerateDeviceExtensionProperties(d->physical_, nullptr, &extCount, nullptr);
  std::vector<VkExtensionProperties> exts(extCount);
  api.EnumerateDeviceExtensionProperties(d->physical_, nullptr, &extCount, exts.data());
  d->memoryBudget_ = hasExtension(exts, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  d->identifyDriver(options, p->apiVersion >= VK_API_VERSION_1_2 ||
                                 hasExtension(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME));

  // A queue family with compute.
  uint32_t families = 0;
  api.GetPhysicalDeviceQueueFamilyProperties(d->physical_, &families, nullptr);
  std::vector<VkQueueFamilyProperties> fam(families);
  api.GetPhysicalDeviceQueueFamilyProperties(d->physical_, &families, fam.data());
  int family = -1;
  for (uint32_t i = 0; i < families && family < 0; ++i)
    if (fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
      family = int(i);
  if (family < 0)
    return unavailable(fmt::format("device '{}' has no compute queue", info.name));
  info.timestampValidBits = fam[family].timestampValidBits;
  info.timestampPeriodNs = p->limits.timestampPeriod;
  info.maxWorkgroupsX = p->limits.maxComputeWorkGroupCount[0];
  info.maxWorkgroupInvocations =
      std::min(p->limits.maxComputeWorkGroupInvocations, p->limits.maxComputeWorkGroupSize[0]);
  d->pollMicroseconds_ = info.cpu ? 0 : std::max<int64_t>(options.pollMicroseconds, 0);
  d->queryFeatures(exts);
  if (absl::Status s = d->createLogicalDevice(uint32_t(family)); !s.ok())
    return s;
  if (absl::Status s = d->createCommandObjects(uint32_t(family)); !s.ok())
    return s;
  d->reducer_ = std::make_unique<Reducer>(*d);
  return d;
}

absl::Status Device::loadGlobals(PFN_vkGetInstanceProcAddr get) {
  Api &api = api_;
  api.GetInstanceProcAddr = get;
  auto global = [&](const char *name) { return api.GetInstanceProcAddr(VK_NULL_HANDLE, name); };
  api.CreateInstance = reinterpret_cast<PFN_vkCreateInstance>(global("vkCreateInstance"));
  api.EnumerateInstanceVersion =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(global("vkEnumerateInstanceVersion"));
  api.EnumerateInstanceLayerProperties = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      global("vkEnumerateInstanceLayerProperties"));
  api.EnumerateInstanceExtensionProperties =
      reinterpret_cast<PFN_vkEnumerateInstanceExtensionProperties>(
          global("vkEnumerateInstanceExtensionProperties"));
  if (!api.CreateInstance)
    return unavailable("the Vulkan loader has no vkCreateInstance");
  return absl::OkStatus();
}

absl::StatusOr<VkPhysicalDeviceProperties>
Device::choosePhysical(const VulkanBackendOptions &options) {
  const Api &api = api_;
  uint32_t count = 0;
  api.EnumeratePhysicalDevices(instance_, &count, nullptr);
  std::vector<VkPhysicalDevice> physicals(count);
  api.EnumeratePhysicalDevices(instance_, &count, physicals.data());
  if (physicals.empty())
    return unavailable(
        "no Vulkan device: the loader found no driver (install one, e.g. mesa-vulkan-drivers "
        "for lavapipe, or point VK_ICD_FILENAMES at a driver's manifest)");
  std::vector<VkPhysicalDeviceProperties> props(physicals.size());
  std::string names;
  for (size_t i = 0; i < physicals.size(); ++i) {
    api.GetPhysicalDeviceProperties(physicals[i], &props[i]);
    names += fmt::format("{}{}: '{}'", i ? ", " : "", i, props[i].deviceName);
  }
  std::string selector = options.device;
  if (selector.empty())
    if (const char *env = std::getenv("QD_VULKAN_DEVICE"))
      selector = env;
  int chosen = -1;
  if (!selector.empty()) {
    bool digits = std::all_of(selector.begin(), selector.end(),
                              [](unsigned char c) { return std::isdigit(c); });
    for (size_t i = 0; i < physicals.size() && chosen < 0; ++i)
      if (digits ? std::stoul(selector) == i
                 : lower(props[i].deviceName).find(lower(selector)) != std::string::npos)
        chosen = int(i);
    if (chosen < 0)
      return unavailable(fmt::format("no Vulkan device matches '{}' (the devices: {}); pass an "
                                     "index or a part of a name (VulkanBackendOptions::device or "
                                     "QD_VULKAN_DEVICE)",
                                     selector, names));
  } else {
    for (size_t i = 0; i < physicals.size() && chosen < 0; ++i)
      if (props[i].deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU &&
          props[i].apiVersion >= VK_API_VERSION_1_1)
        chosen = int(i);
    for (size_t i = 0; i < physicals.size() && chosen < 0; ++i)
      if (props[i].apiVersion >= VK_API_VERSION_1_1)
        chosen = int(i);
    if (chosen < 0)
      chosen = 0;
  }
  physical_ = physicals[chosen];
  const VkPhysicalDeviceProperties &p = props[chosen];
  VulkanDeviceInfo &info = info_;
  info.name = p.deviceName;
  info.apiVersion = p.apiVersion;
  info.vendorId = p.vendorID;
  info.deviceId = p.deviceID;
  info.index = uint32_t(chosen);
  info.discrete = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  info.cpu = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  info.maxStorageBufferRange = p.limits.maxStorageBufferRange;
  if (p.apiVersion < VK_API_VERSION_1_1)
    return unavailable(fmt::format("device '{}' supports Vulkan {}.{}; qd needs 1.1", info.name,
                                   VK_API_VERSION_MAJOR(p.apiVersion),
                                   VK_API_VERSION_MINOR(p.apiVersion)));
  return p;
}

void Device::queryFeatures(const std::vector<VkExtensionProperties> &exts) {
  // The features qd's SPIR-V may use, where the device has them.
  bool hasAtomic64 = hasExtension(exts, VK_KHR_SHADER_ATOMIC_INT64_EXTENSION_NAME);
  bool hasAtomicFloat = hasExtension(exts, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
  auto atomic64 = vk::make<VkPhysicalDeviceShaderAtomicInt64Features>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES);
  auto atomicFloat = vk::make<VkPhysicalDeviceShaderAtomicFloatFeaturesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT);
  auto features = vk::make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  void **next = &features.pNext;
  if (hasAtomic64) {
    *next = &atomic64;
    next = &atomic64.pNext;
  }
  if (hasAtomicFloat) {
    *next = &atomicFloat;
    next = &atomicFloat.pNext;
  }
  api_.GetPhysicalDeviceFeatures2(physical_, &features);
  SpirvFeatures &f = info_.features;
  f.int64 = features.features.shaderInt64;
  f.float64 = features.features.shaderFloat64;
  f.int64Atomics = hasAtomic64 && atomic64.shaderBufferInt64Atomics;
  f.atomicFloat32Add = hasAtomicFloat && atomicFloat.shaderBufferFloat32AtomicAdd;
  f.atomicFloat64Add = hasAtomicFloat && atomicFloat.shaderBufferFloat64AtomicAdd;
  auto subgroup = vk::make<VkPhysicalDeviceSubgroupProperties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto props =
      vk::make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props.pNext = &subgroup;
  api_.GetPhysicalDeviceProperties2(physical_, &props);
  const VkSubgroupFeatureFlags wanted = VK_SUBGROUP_FEATURE_BASIC_BIT |
                                        VK_SUBGROUP_FEATURE_VOTE_BIT |
                                        VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
  f.subgroupArithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (subgroup.supportedOperations & wanted) == wanted;
}

absl::Status Device::createLogicalDevice(uint32_t family) {
  // Enable exactly the features queryFeatures found.
  Api &api = api_;
  const SpirvFeatures &f = info_.features;
  auto wantAtomic64 = vk::make<VkPhysicalDeviceShaderAtomicInt64Features>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES);
  wantAtomic64.shaderBufferInt64Atomics = f.int64Atomics;
  auto wantFloat = vk::make<VkPhysicalDeviceShaderAtomicFloatFeaturesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT);
  wantFloat.shaderBufferFloat32AtomicAdd = f.atomicFloat32Add;
  wantFloat.shaderBufferFloat64AtomicAdd = f.atomicFloat64Add;
  auto want = vk::make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  want.features.shaderInt64 = f.int64;
  want.features.shaderFloat64 = f.float64;
  std::vector<const char *> enabled;
  void **next = &want.pNext;
  if (f.int64Atomics) {
    enabled.push_back(VK_KHR_SHADER_ATOMIC_INT64_EXTENSION_NAME);
    *next = &wantAtomic64;
    next = &wantAtomic64.pNext;
  }
  if (f.atomicFloat32Add || f.atomicFloat64Add) {
    enabled.push_back(VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
    *next = &wantFloat;
    next = &wantFloat.pNext;
  }
  float priority = 1.0f;
  auto qci = vk::make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qci.queueFamilyIndex = family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  auto dci = vk::make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.pNext = &want;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = uint32_t(enabled.size());
  dci.ppEnabledExtensionNames = enabled.data();
  const std::string &name = info_.name;
  if (VkResult r = api.CreateDevice(physical_, &dci, nullptr, &device_); r != VK_SUCCESS)
    return unavailable(fmt::format("cannot create a device on '{}': {}", name, resultName(r)));
#define QD_VK_LOAD(fn)                                                                             \
  api.fn = reinterpret_cast<PFN_vk##fn>(api.GetDeviceProcAddr(device_, "vk" #fn));                 \
  if (!api.fn)                                                                                     \
    return unavailable("device '" + name + "' has no vk" #fn);
  QD_VK_DEVICE_FUNCTIONS(QD_VK_LOAD)
#undef QD_VK_LOAD
  return absl::OkStatus();
}

uint64_t Device::freeMemoryBytes() const {
  auto props = vk::make<VkPhysicalDeviceMemoryProperties2>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  auto budget = vk::make<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
  if (memoryBudget_)
    props.pNext = &budget;
  api_.GetPhysicalDeviceMemoryProperties2(physical_, &props);
  const VkPhysicalDeviceMemoryProperties &m = props.memoryProperties;
  uint64_t most = 0, anyHeap = 0;
  for (uint32_t i = 0; i < m.memoryHeapCount; ++i) {
    uint64_t left = m.memoryHeaps[i].size;
    if (memoryBudget_)
      left = budget.heapBudget[i] > budget.heapUsage[i] ? budget.heapBudget[i] - budget.heapUsage[i]
                                                        : 0;
    anyHeap = std::max(anyHeap, left);
    if (m.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      most = std::max(most, left);
  }
  return most ? most : anyHeap;
}

absl::Status Device::createCommandObjects(uint32_t family) {
  const Api &api = api_;
  api.GetDeviceQueue(device_, family, 0, &queue_);
  api.GetPhysicalDeviceMemoryProperties(physical_, &memory_);
  auto pci = vk::make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = family;
  if (absl::Status s =
          check(api.CreateCommandPool(device_, &pci, nullptr, &pool_), "vkCreateCommandPool");
      !s.ok())
    return s;
  auto cai = vk::make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  cai.commandPool = pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  if (absl::Status s =
          check(api.AllocateCommandBuffers(device_, &cai, &commands_), "vkAllocateCommandBuffers");
      !s.ok())
    return s;
  auto fci = vk::make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  return check(api.CreateFence(device_, &fci, nullptr, &fence_), "vkCreateFence");
}

void Device::identifyDriver(const VulkanBackendOptions &options, bool hasDriverProperties) {
  VulkanDeviceInfo &info = info_;
  if (hasDriverProperties) {
    auto driver = vk::make<VkPhysicalDeviceDriverProperties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
    auto props =
        vk::make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    props.pNext = &driver;
    api_.GetPhysicalDeviceProperties2(physical_, &props);
    info.driverId = uint32_t(driver.driverID);
    info.driverName = driver.driverName;
  }
  // gallivm's loop limiter (LP_MAX_TGSI_LOOP_ITERATIONS) ends the loops of
  // llvmpipe's shaders: docs/runtime.md, "Vulkan backend".
  info.endsLongLoops = info.driverId ? info.driverId == VK_DRIVER_ID_MESA_LLVMPIPE
                                     : lower(info.name).find("llvmpipe") != std::string::npos;
  switch (options.loopExitChecks) {
  case VulkanLoopExitChecks::Auto:
    info.checkLoopExits = info.endsLongLoops;
    break;
  case VulkanLoopExitChecks::On:
    info.checkLoopExits = true;
    break;
  case VulkanLoopExitChecks::Off:
    info.checkLoopExits = false;
    break;
  }
}

Device::~Device() {
  reducer_.reset();
  uploadStaging_.reset();
  downloadStaging_.reset();
  if (device_) {
    if (fence_)
      api_.DestroyFence(device_, fence_, nullptr);
    if (pool_)
      api_.DestroyCommandPool(device_, pool_, nullptr);
    api_.DestroyDevice(device_, nullptr);
  }
  if (messenger_)
    api_.DestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  if (instance_ && api_.DestroyInstance)
    api_.DestroyInstance(instance_, nullptr);
}

absl::StatusOr<uint32_t> Device::memoryType(uint32_t bits, VkMemoryPropertyFlags flags,
                                            VkMemoryPropertyFlags preferred) const {
  int fallback = -1;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    VkMemoryPropertyFlags have = memory_.memoryTypes[i].propertyFlags;
    if (!(bits & (1u << i)) || (have & flags) != flags)
      continue;
    if ((have & preferred) == preferred)
      return i;
    if (fallback < 0)
      fallback = int(i);
  }
  if (fallback < 0)
    return absl::InternalError(fmt::format(
        "vulkan: device '{}' has no memory type with flags {:#x} for a buffer", info_.name, flags));
  return uint32_t(fallback);
}

absl::Status Device::run(const std::function<void(VkCommandBuffer)> &record) const {
  std::lock_guard<std::mutex> lock(mutex_);
  VkCommandBuffer cb = commands_;
  if (absl::Status s = check(api_.ResetCommandBuffer(cb, 0), "vkResetCommandBuffer"); !s.ok())
    return s;
  auto begin = vk::make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (absl::Status s = check(api_.BeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer"); !s.ok())
    return s;
  record(cb);
  // What the commands wrote made visible to the host, which reads mapped
  // staging memory after the fence (the fence alone makes no device write
  // visible to the host).
  barrierAfterWrites(api_, cb, VK_ACCESS_HOST_READ_BIT, VK_PIPELINE_STAGE_HOST_BIT);
  if (absl::Status s = check(api_.EndCommandBuffer(cb), "vkEndCommandBuffer"); !s.ok())
    return s;
  auto submit = vk::make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cb;
  if (absl::Status s = check(api_.QueueSubmit(queue_, 1, &submit, fence_), "vkQueueSubmit");
      !s.ok())
    return s;
  // Polling first: the driver's wait wakes the thread late (Options::
  // pollMicroseconds).
  if (pollMicroseconds_ > 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(pollMicroseconds_);
    while (api_.GetFenceStatus(device_, fence_) == VK_NOT_READY &&
           std::chrono::steady_clock::now() < until) {
    }
  }
  absl::Status waited =
      check(api_.WaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  api_.ResetFences(device_, 1, &fence_);
  return waited;
}

void barrierAfterWrites(const Api &api, VkCommandBuffer cb, VkAccessFlags dstAccess,
                        VkPipelineStageFlags dstStages) {
  auto barrier = vk::make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = dstAccess;
  api.CmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         dstStages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

void fullBarrier(const Api &api, VkCommandBuffer cb) {
  barrierAfterWrites(api, cb,
                     VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT);
}

} // namespace qd::vk
