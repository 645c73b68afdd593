//===- RunawayKernels.h - Kernels that run long -------------------*- C++ -*-===//
//
// Shared by the tests of stop checks (RunawayLaunchTest, VulkanBackendTest).
//
//===----------------------------------------------------------------------===//
#pragma once

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

} // namespace qd
