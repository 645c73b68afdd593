//===- GradientOptions.h - qd-bench-gradients' command line -----*- C++ -*-===//
//
// The options of qd-bench-gradients (GradientBench.cpp) and their parser.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GradientKernels.h"

#include "qd/runtime/CpuBackend.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qdbench {

/// The command line (kUsage).
struct Options {
  unsigned threads = 2;
  unsigned width = 0; // the backend's choice
  int reps = 3;
  bool quick = false;
  std::string torchFile, only = "a,b,c", dump, json;
  int64_t dumpN = 1024;
  size_t fullLimit = qd::CpuBackendOptions().fullOptimizationLimit;
  std::string isa = "auto";
  std::vector<KernelShape> shapes = {KernelShape::Fields, KernelShape::Ndarray};
  bool cpuTime = false; // --cpu-time: time process CPU time, not the wall clock
};

/// Parses the command line into `o`; false after --help (printed). Dies on
/// an unknown option.
bool parseOptions(int argc, char **argv, Options &o);

} // namespace qdbench
