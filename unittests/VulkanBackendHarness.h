//===- VulkanBackendHarness.h - What the Vulkan backend tests share -*- C++ -*-===//
//
// Runs wherever the Vulkan loader finds a device: Mesa's lavapipe (a CPU
// driver) in CI, a GPU's driver elsewhere (QD_VULKAN_DEVICE picks one by
// index or name; by default the first discrete GPU, else device 0).
// Without a loader or a device every test that needs one skips, saying
// why. Every backend runs with the Khronos validation layer required, and
// every test asserts that it reported nothing (a device without the layer
// fails, naming the package). Floats are compared with the corpus
// tolerances (1e-5 relative for f32, 1e-12 for f64) and the random
// programs with 1e-4 (as on CUDA): docs/runtime.md ("Vulkan") gives the
// accuracy of the math functions. Included by VulkanBackendTest.cpp
// (kernels, heap, loops the driver ends) and VulkanBackendDeviceTest.cpp
// (residency, grid, timing, validation, atomics, random programs).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/VulkanBackend.h"

#include "Corpus.h"
#include "GpuBackendChecks.h"
#include "ProgramGen.h"
#include "RunawayKernels.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <numbers>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace qd {
namespace {

using namespace corpus;

using Validation = VulkanBackendOptions::Validation;

/// Whether the validation layer may be missing: QD_VULKAN_TEST_VALIDATION=
/// if-installed, for a GPU machine without Debian's vulkan-validationlayers
/// (docs/testing.md). CI never sets it.
inline bool validationOptional() {
  const char *v = std::getenv("QD_VULKAN_TEST_VALIDATION");
  return v && std::string_view(v) == "if-installed";
}

/// `o` with the validation layer required: every backend of these tests
/// runs under it, and a test fails on any warning or error it reports.
inline VulkanBackendOptions validated(VulkanBackendOptions o = {}) {
  o.validation = validationOptional() ? Validation::IfInstalled : Validation::Required;
  return o;
}

/// What the validation layer reported on `b` since the last call, as one
/// text ("" if nothing), and clears it.
inline std::string takeValidationMessages(VulkanBackend &b) {
  size_t n = b.validationMessageCount();
  if (n == 0)
    return "";
  std::vector<std::string> kept = b.validationMessages();
  b.clearValidationMessages();
  std::string text = fmt::format("the validation layer reported {} message(s):", n);
  for (const std::string &m : kept)
    text += "\n  " + m;
  if (kept.size() < n)
    text += fmt::format("\n  ... and {} more", n - kept.size());
  return text;
}

/// `b` runs under the validation layer, which reported nothing.
inline void expectValidatedAndClean(VulkanBackend &b, const std::string &which) {
  EXPECT_TRUE(b.validationActive() || validationOptional()) << which;
  EXPECT_EQ(takeValidationMessages(b), "") << which;
}

/// The backend most tests share, created with validation required.
struct Shared {
  std::unique_ptr<VulkanBackend> backend;
  std::string why;    // without a backend: why not
  bool fails = false; // a device without the validation layer: a failure, not a skip
};

inline const Shared &shared() {
  static Shared s = [] {
    Shared s;
    auto b = VulkanBackend::create(validated());
    if (!b.ok()) {
      s.why = message(b.status());
      // The device works without the layer: this suite's claim (no
      // validation messages) cannot be checked, which must not pass.
      s.fails = VulkanBackend::create().ok();
      std::cout << "[vulkan] " << s.why << "\n";
      return s;
    }
    const VulkanDeviceInfo &i = (*b)->deviceInfo();
    std::cout << fmt::format("[vulkan] device {}: {} (Vulkan {}.{}; int64 {}, float64 {}, int64 "
                             "atomics {}, float32 atomic add {}; validation layer on)\n",
                             i.index, i.name, i.apiVersion >> 22, (i.apiVersion >> 12) & 0x3ff,
                             i.features.int64, i.features.float64, i.features.int64Atomics,
                             i.features.atomicFloat32Add);
    s.backend = *std::move(b);
    return s;
  }();
  return s;
}

inline VulkanBackend *gpu() {
  return shared().backend.get();
}

#define REQUIRE_DEVICE()                                                                           \
  do {                                                                                             \
    if (shared().fails)                                                                            \
      FAIL() << shared().why;                                                                      \
    if (!gpu())                                                                                    \
      GTEST_SKIP() << "no Vulkan loader or device on this machine: " << shared().why;              \
  } while (0)

/// A backend with a small grid (one workgroup), so the property's large
/// tier-3 default capacity fits one storage buffer (lavapipe's
/// maxStorageBufferRange is 128 MiB). Null until the first smallGrid().
inline VulkanBackend *smallGridMade = nullptr;

inline VulkanBackend *smallGrid() {
  // A function's static, destroyed at exit before what was constructed
  // before it: the validation layer's own statics, which a backend's
  // destruction still calls into.
  static std::unique_ptr<VulkanBackend> backend = [] {
    VulkanBackendOptions o;
    o.maxThreads = 64;
    o.invocationPerIteration = false; // grid-stride loops of many iterations
    auto b = VulkanBackend::create(validated(o));
    return b.ok() ? *std::move(b) : nullptr;
  }();
  smallGridMade = backend.get();
  return backend.get();
}

/// After every test, nothing it did on the shared backends drew a warning
/// or an error from the validation layer (tests check the backends they
/// create themselves).
class VulkanBackendTest : public ::testing::Test {
protected:
  void TearDown() override {
    if (gpu())
      expectValidatedAndClean(*gpu(), "the shared backend");
    if (smallGridMade)
      expectValidatedAndClean(*smallGridMade, "the small-grid backend");
  }
};

/// The messages a VulkanBackendOptions::onValidationMessage received.
struct Received {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages;
  }
};

inline VulkanBackendOptions receivingInto(std::shared_ptr<Received> into) {
  VulkanBackendOptions o = validated();
  o.onValidationMessage = [into](const std::string &m) {
    std::lock_guard<std::mutex> lock(into->mutex);
    into->messages.push_back(m);
  };
  return o;
}

} // namespace
} // namespace qd
