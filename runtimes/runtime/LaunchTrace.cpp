//===- LaunchTrace.cpp - A line per device launch and transfer ------------===//
#include "qd/runtime/LaunchTrace.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace qd {

bool launchTraceOn() {
  static const bool on = [] {
    const char *env = std::getenv("QD_TRACE_LAUNCHES");
    return env && *env && std::string_view(env) != "0";
  }();
  return on;
}

void launchTrace(std::string_view line) {
  static std::mutex mutex;
  static const auto start = std::chrono::steady_clock::now();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::string text = fmt::format("qd-trace: {:.3f} ms: ", ms);
  text.append(line);
  text.push_back('\n');
  std::lock_guard<std::mutex> lock(mutex);
  std::fputs(text.c_str(), stderr);
}

} // namespace qd
