//===- SelfBoundedStack.h - A stack bounded by its own values ---*- C++ -*-===//
//
// The text of the smallest stack the counting kernel must keep as a real
// stack with a bound (docs/sizing.md, "Measured at launch"), shared by the
// sizing, optimistic-launch and budget tests.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace qd::testtext {

/// Statements of a stack whose pushes depend on its own values: it counts
/// from 0 up to `%n` (a value the caller defines) and stores its top in
/// `out` (a store target: `@out[%i]`; empty: nowhere).
inline std::string selfBoundedStack(std::string_view out = {}) {
  return fmt::format(R"(
    %s = adstack.alloca i32, capacity 0
    %zero = const 0 : i32
    %one = const 1 : i32
    adstack.push %s, %zero
    while {{
      %t = adstack.load_top %s : i32
      %done = cmp ge %t, %n : i32
      if %done {{
        break
      }}
      %t1 = add %t, %one : i32
      adstack.push %s, %t1
    }}
{})",
                     out.empty() ? std::string()
                                 : fmt::format("    %top = adstack.load_top %s : i32\n"
                                               "    store {}, %top\n",
                                               out));
}

} // namespace qd::testtext
