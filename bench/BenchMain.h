//===- BenchMain.h - Error handling of the benchmark executables -*- C++ -*-===//
//
// A benchmark stops at the first failed step (a kernel that does not verify,
// a launch error, a bad command line). `die` unwinds to `benchMain`, which
// prints the message and makes `main` return 1, so destructors run and no
// process is ended from inside the benchmark code.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qdbench {

struct BenchFailure {
  std::string message;
};

[[noreturn]] inline void die(std::string msg) {
  throw BenchFailure{std::move(msg)};
}

/// The non-empty items of a comma-separated option value ("a,,b" -> a, b).
inline std::vector<std::string> splitList(std::string_view s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at)
      out.emplace_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

/// The value of option argv[i], which is argv[i + 1] (`i` moves onto it);
/// dies when the command line ends first.
inline std::string optionValue(int argc, char **argv, int &i) {
  if (i + 1 >= argc)
    die("missing value after " + std::string(argv[i]));
  return argv[++i];
}

/// Runs `body(argc, argv)`; a `die` anywhere below prints `tool: error: msg`
/// and gives exit status 1.
template <typename Body> int benchMain(const char *tool, int argc, char **argv, Body body) {
  try {
    return body(argc, argv);
  } catch (const BenchFailure &f) {
    std::fprintf(stderr, "%s: error: %s\n", tool, f.message.c_str());
    return 1;
  }
}

} // namespace qdbench
