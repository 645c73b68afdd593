//===- GradientOptions.cpp - qd-bench-gradients' command line -------------===//
//
// Parses qd-bench-gradients' options (GradientOptions.h); kUsage is its
// --help.
//
//===----------------------------------------------------------------------===//
#include "GradientOptions.h"

#include "BenchMain.h"

#include <fmt/format.h>

namespace qdbench {
namespace {

constexpr const char *kUsage =
    "usage: qd-bench-gradients [options]\n"
    "  --threads N        worker threads of qd-cpu and the hand-written loops (2)\n"
    "  --vector-width W   qd-cpu's lanes (default: the backend's choice for the host)\n"
    "  --vector-isa NAME  CpuBackendOptions::vectorIsa: auto, avx512, avx2, sse4, none\n"
    "  --reps N           runs per timing, the minimum is shown (3)\n"
    "  --only a,b,c       the workloads to run\n"
    "  --shapes LIST      the kernel shapes qd-cpu runs (GradientKernels.h): fields,\n"
    "                     ndarray (constant trip count), ndarray-n (trip count an\n"
    "                     argument); the first is the one compared with the peers, each\n"
    "                     other gets rows at the thread count and on one thread and a\n"
    "                     ratio to the first (fields,ndarray)\n"
    "  --torch FILE       PyTorch results of bench/torch_gradients.py (JSON) to merge\n"
    "  --quick            qd-cpu and the hand-written vectorised loop only (checked against\n"
    "                     the reference gradient of GradientReference.h): for iterating on\n"
    "                     code generation\n"
    "  --full-limit N     CpuBackendOptions::fullOptimizationLimit (0: every kernel\n"
    "                     with the light compile tier)\n"
    "  --cpu-time         time process CPU time (all threads: a run on T threads counts\n"
    "                     about T times its wall time) instead of the wall clock, which\n"
    "                     other work on a shared machine inflates\n"
    "  --json FILE        also write the tables' rows to FILE (BenchRecord.h)\n"
    "  --dump-ir a|b|c    print the module, its gradient kernel and the gradient's\n"
    "                     optimised LLVM IR at --dump-n N elements (1024), and exit\n";

} // namespace

bool parseOptions(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return optionValue(argc, argv, i); };
    if (a == "--threads")
      o.threads = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--vector-width")
      o.width = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--vector-isa") // CpuBackendOptions::vectorIsa
      o.isa = next();
    else if (a == "--reps")
      o.reps = std::stoi(next());
    else if (a == "--torch")
      o.torchFile = next();
    else if (a == "--only")
      o.only = next();
    else if (a == "--shapes")
      o.shapes = parseShapes(next());
    else if (a == "--json")
      o.json = next();
    else if (a == "--dump-ir")
      o.dump = next();
    else if (a == "--dump-n")
      o.dumpN = std::stoll(next());
    else if (a == "--full-limit") // CpuBackendOptions::fullOptimizationLimit
      o.fullLimit = std::stoull(next());
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--cpu-time")
      o.cpuTime = true;
    else if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return false;
    } else
      die(fmt::format("unknown option '{}'\n{}", a, kUsage));
  }
  return true;
}

} // namespace qdbench
