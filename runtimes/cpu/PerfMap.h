//===- PerfMap.h - Names of JIT-compiled functions for perf ----*- C++ -*-===//
//
// `perf record` samples code the JIT compiled as anonymous addresses. perf
// reads /tmp/perf-<pid>.map ("start size name" per line, hexadecimal) to
// name them; CpuBackendOptions::perfMap appends every function the JIT
// links to it, so `perf report` shows qdk<n>_qd_task_<t> (kernel n's
// compilation, its parallel task t).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <llvm/ExecutionEngine/Orc/LLJIT.h>

namespace qd::cpu {

/// Makes `jit` append what it links to /tmp/perf-<pid>.map.
void writePerfMap(llvm::orc::LLJIT &jit);

} // namespace qd::cpu
