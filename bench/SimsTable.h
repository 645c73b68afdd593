//===- SimsTable.h - qd-bench-sims' rows, table and record ------*- C++ -*-===//
//
// What qd-bench-sims measures of one simulation at one size on one qd
// backend, and the table that sets it beside the peers (GpuPeers.h:
// hand-written CUDA, JAX, PyTorch) with the ratios, the checks of the
// peers' losses and gradients against qd's, and the targets of issue 42.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "BenchRecord.h"
#include "BenchStats.h"
#include "GpuPeers.h"
#include "Simulation.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qdbench {

/// One simulation at one size on one qd backend.
struct SimRow {
  std::string sim, parameter, backend;
  qdsim::SimSize size = qdsim::SimSize::Small;
  /// The first array's second axis: masses, particles, grid side, balls,
  /// elements (the key of the peers' rows).
  int64_t n = 0;
  int steps = 0;
  /// ms per time step: the forward launches, the gradient launches, and
  /// the two together (one gradient of the loss, as the peers time it).
  Timing fwd, rev, grad;
  double compileMs = 0, loss = 0;
  /// The sum and the L2 norm of d loss / d (the parameter's initial contents).
  double gradSum = 0, gradNorm = 0;
  /// tapeBytes: -1 where the tape did not run.
  int64_t heapBytes = 0, tapeBytes = 0, dataBytes = 0;
  /// The timed runs ended at the loss and gradient of the first run.
  bool stable = true;
  /// Why the case did not run (empty: it ran).
  std::string error;
  /// Why the run on a LaunchTape failed (tapeBytes is then -1).
  std::string tapeError;
};

/// Prints the table, each row's check against the peers, what did not run
/// and the targets, and adds the rows to `record`. A peer whose loss or
/// gradient checksum is off qd's by more than `rtol` (relative; a sum
/// relative to the larger of its magnitude and the norm) is marked '!'.
/// Returns whether every row ran, was stable and agrees with its peers.
bool printSimTable(const std::vector<SimRow> &rows, const Peers &peers, double rtol,
                   BenchRecord &record);

} // namespace qdbench
