//===- RunawayKernels.h - Kernels that run long -------------------*- C++ -*-===//
//
// Shared by the tests of stop checks (RunawayLaunchTest, VulkanBackendTest).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string_view>

namespace qd {

/// @short(%m, %n): %m task iterations (one thread each on a GPU), each
/// counting to %n in a `while` (never ending for a negative %n) and storing
/// the count to @x[i % 64], a field of 64 f32 the module declares: short
/// loops, but as many as the caller wants. The text starts with a line
/// break: the task is at its line 3, column 3, the `while` at line 7,
/// column 5.
inline constexpr const char *kShortLoopsKernel = R"(
kernel @short(%m: i32, %n: i32) {
  parallel for %i = 0 to %m {
    %zero = const 0 : i32
    %c = alloca i32
    store %c, %zero
    while {
      %v = load %c : i32
      %one = const 1 : i32
      %w = add %v, %one : i32
      store %c, %w
      %done = cmp eq %w, %n : i32
      if %done {
        break
      }
    }
    %sixtyfour = const 64 : i32
    %r = rem %i, %sixtyfour : i32
    %f = load %c : i32
    %g = cast %f : i32 to f32
    store @x[%r], %g
  }
}
)";

/// Loops that run long with constant bounds (or bounds given at launch to
/// a band), each adding 1 to @count (an i32 field): a task of 2^31 - 1
/// iterations, a band of about 2^62 points, the same band with its
/// extents from %n, and a serial loop of 2^31 - 1 iterations, plus
/// @nest, a task over a nest of constant loops, none of them long alone
/// (2^6 x 2^7 x 2^8 iterations in all).
inline constexpr const char *kLongConstantLoops = R"(
field @count : i32
kernel @task() {
  parallel for %i = 0 to 2147483647 {
    %c = const 1 : i32
    atomic_add @count[], %c : i32
  }
}

kernel @band() {
  parallel for (%i, %j) = (0, 0) to (2147483647, 2147483647) {
    %c = const 1 : i32
    atomic_add @count[], %c : i32
  }
}

kernel @band_n(%n: i32) {
  parallel for (%i, %j) = (0, 0) to (%n, %n) {
    %c = const 1 : i32
    atomic_add @count[], %c : i32
  }
}

kernel @serial() {
  serial {
    for %j = 0 to 2147483647 {
      %c = const 1 : i32
      atomic_add @count[], %c : i32
    }
  }
}

kernel @nest() {
  parallel for %i = 0 to 64 {
    for %j = 0 to 128 {
      for %k = 0 to 256 {
        %c = const 1 : i32
        atomic_add @count[], %c : i32
      }
    }
  }
}
)";

/// How long after its start a launch with a 400 ms timeout may end: twice
/// the timeout, or 5 s in a sanitizer build (instrumented host code, and
/// the tests beside it on the same cores, delay the watchdog and the
/// device's threads: lavapipe under AddressSanitizer ended such a launch
/// after 2.6 s).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr std::chrono::milliseconds kLongLoopStopBound{5000};
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr std::chrono::milliseconds kLongLoopStopBound{5000};
#else
inline constexpr std::chrono::milliseconds kLongLoopStopBound{800};
#endif
#else
inline constexpr std::chrono::milliseconds kLongLoopStopBound{800};
#endif

/// Expects kernel `kernel` of kLongConstantLoops (its @band_n gets
/// n = 2^31 - 1) to stop at a timeout of 400 ms within `bound`, once a
/// first launch whose cancel flag is already set compiled its code.
inline void expectLongLoopStops(Program &p, Backend &backend, std::string_view kernel,
                                std::chrono::milliseconds bound = kLongLoopStopBound) {
  using namespace std::chrono_literals;
  SCOPED_TRACE(kernel);
  LaunchArg n = LaunchArg::i32(INT32_MAX);
  std::span<const LaunchArg> args;
  if (kernel == "band_n")
    args = std::span(&n, 1);
  std::atomic<bool> cancel{true};
  LaunchOptions o;
  o.cancel = &cancel;
  absl::Status s = p.launch(kernel, args, backend, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  o.cancel = nullptr;
  o.timeout = 400ms;
  auto start = std::chrono::steady_clock::now();
  s = p.launch(kernel, args, backend, o);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("error: the launch ran past its timeout of 400 ms"), std::string::npos)
      << s;
  EXPECT_LT(took, bound);
}

} // namespace qd
