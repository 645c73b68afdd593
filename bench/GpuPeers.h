//===- GpuPeers.h - qd-bench-gpu's peer results -----------------*- C++ -*-===//
//
// The results of the peers qd-bench-gpu and qd-bench-sims compare with
// (hand-written CUDA, JAX, PyTorch), read from the JSON files
// bench/run-gpu.sh and bench/run-sims-gpu.sh write. A row of a simulation
// (bench/gpu/sims_peers.cu, sims_framework_peers.py) adds its forward time,
// loss, gradient norm, steps and device memory.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace qdbench {

/// The peers' implementations, in table order.
inline const std::vector<std::string> kPeerImpls = {"local_tape", "global_tape", "jax",
                                                    "torch_eager", "torch_compile"};

/// One peer's result on one workload and size.
struct PeerRow {
  /// The gradient (a simulation's: per time step, its forward included).
  double medianMs = 0, minMs = 0;
  std::optional<double> gradSum, compileS;
  std::string note;
  // Simulations only.
  std::optional<double> fwdMs, loss, gradNorm;
  std::optional<int64_t> steps, memBytes;
};

/// The results of the --peers files (bench/gpu: peers.cu, framework_peers.py).
struct Peers {
  std::map<std::tuple<std::string, int64_t, std::string>, PeerRow> rows;
  std::map<std::string, std::string> unavailable; // impl -> reason
  std::vector<std::string> info;                  // lines printed above the table

  const PeerRow *find(const std::string &key, int64_t n, const std::string &impl) const {
    auto it = rows.find({key, n, impl});
    return it == rows.end() ? nullptr : &it->second;
  }
};

/// Adds the results of a --peers file (an object or an array of them); an
/// unreadable one adds a line to `info`.
void loadPeers(Peers &peers, const std::string &file);
/// The same for JSON text from `source` (a program's output).
void loadPeersText(Peers &peers, const std::string &text, const std::string &source);

} // namespace qdbench
