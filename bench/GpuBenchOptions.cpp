//===- GpuBenchOptions.cpp - qd-bench-gpu's command line ------------------===//
//
// Parses qd-bench-gpu's options (GpuBenchOptions.h).
//
//===----------------------------------------------------------------------===//
#include "GpuBenchOptions.h"

#include "BenchMain.h"

#include <algorithm>
#include <set>

namespace qdbench {
namespace {

const char *kUsage =
    "usage: qd-bench-gpu [--reps N] [--warmup N] [--only a,b,c] [--shapes fields,ndarray] "
    "[--peers FILE]... [--max-n N] "
    "[--backends cuda,vulkan,cpu] [--device N] [--block-size N] [--max-registers N] "
    "[--cuda-threads N] [--cuda-grid-waves N] [--cuda-narrow-offsets] [--cuda-tape-bytes-per-sm N] "
    "[--json FILE] "
    "[--vulkan-device NAME] [--vulkan-threads N[,N...]] [--vulkan-workgroup N] "
    "[--vulkan-no-read-only-buffers] [--timeout-ms N]";

} // namespace

Options parseOptions(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return optionValue(argc, argv, i); };
    if (a == "--reps") {
      o.reps = std::max(1, std::stoi(next()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::stoi(next()));
    } else if (a == "--only") {
      o.only = next();
    } else if (a == "--shapes") {
      o.shapes = parseShapes(next());
      if (o.shapes.empty())
        die("--shapes takes at least one of fields, ndarray, ndarray-n");
    } else if (a == "--peers") {
      o.peerFiles.push_back(next());
    } else if (a == "--device") {
      o.device = std::stoi(next());
    } else if (a == "--max-n") {
      o.maxN = std::stoll(next());
    } else if (a == "--backends" || a == "--backend") {
      o.backends = splitList(next());
      o.backendsGiven = true;
    } else if (a == "--block-size") {
      o.blockSize = unsigned(std::stoul(next()));
    } else if (a == "--max-registers") {
      o.maxRegisters = unsigned(std::stoul(next()));
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--cuda-threads") {
      o.cudaThreads = std::stoll(next());
    } else if (a == "--cuda-grid-waves") {
      o.cudaGridWaves = std::stoll(next());
    } else if (a == "--cuda-narrow-offsets") {
      o.cudaNarrowOffsets = true;
    } else if (a == "--cuda-tape-bytes-per-sm") {
      o.cudaTapeBytesPerSm = std::stoll(next());
    } else if (a == "--vulkan-device") {
      o.vulkanDevice = next();
    } else if (a == "--vulkan-threads") {
      o.vulkanThreads.clear();
      for (const std::string &t : splitList(next()))
        o.vulkanThreads.push_back(std::max<int64_t>(1, std::stoll(t)));
    } else if (a == "--vulkan-no-read-only-buffers") {
      o.vulkanReadOnlyBuffers = false;
    } else if (a == "--vulkan-workgroup") {
      o.vulkanWorkgroup = unsigned(std::stoul(next()));
    } else if (a == "--timeout-ms") {
      o.timeoutMs = std::stoll(next());
    } else {
      die(kUsage);
    }
  }
  std::set<std::string> seen;
  for (const std::string &b : o.backends)
    if ((b != "cuda" && b != "vulkan" && b != "cpu") || !seen.insert(b).second)
      die("--backends: a list of cuda, vulkan and cpu, each at most once");
  if (o.backends.empty())
    die("--backends: a list of cuda, vulkan and cpu, each at most once");
  return o;
}

} // namespace qdbench
