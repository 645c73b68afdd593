//===- BenchMain.h - Error handling of the benchmark executables -*- C++ -*-===//
//
// A benchmark stops at the first failed step (a kernel that does not verify,
// a launch error, a bad command line). `die` unwinds to `benchMain`, which
// prints the message and makes `main` return 1, so destructors run and no
// process is ended from inside the benchmark code.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdio>
#include <string>
#include <utility>

namespace qdbench {

struct BenchFailure {
  std::string message;
};

[[noreturn]] inline void die(std::string msg) {
  throw BenchFailure{std::move(msg)};
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
