//===- qd/runtime/Checkpointing.h - Choosing a checkpoint interval -*- C++ -*-===//
//
// A gradient's checkpointed loops (reverse-ad{checkpoint}) run with an
// interval k chosen at launch: k >= the trip count n tapes every
// iteration; a smaller k stores the loop's state every k iterations and
// tapes one segment of k iterations at a time. Program::launch fills
// CheckpointCosts from the kernel's sizing, evaluated for this launch, and
// takes k from chooseCheckpointInterval (docs/autodiff.md, "Checkpointing
// long loops").
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>

namespace qd {

/// What one iteration in flight (a thread of a parallel task) holds on its
/// adstacks, in bytes, as a function of k.
struct CheckpointCosts {
  /// n: the longest trip count of a checkpointed loop in this launch.
  int64_t tripCount = 0;
  /// The tapes of one iteration of the loop (a segment of k iterations
  /// holds k times this).
  int64_t tapeBytesPerIteration = 0;
  /// One stored state (the checkpoint stacks hold ceil(n / k) of them).
  int64_t checkpointBytes = 0;
  /// The stacks that do not depend on k.
  int64_t otherBytes = 0;
};

/// The bytes at interval `k` (k >= 1): `otherBytes + tapeBytesPerIteration
/// * n` when k >= n, else `otherBytes + tapeBytesPerIteration * k +
/// checkpointBytes * ceil(n / k)`; INT64_MAX where that overflows.
int64_t checkpointedBytes(const CheckpointCosts &costs, int64_t k);

/// k for a launch with `budget` bytes per iteration in flight (0 or less:
/// no budget): n when the full tape fits (or n <= 1); else the largest k
/// whose bytes fit, which stores the fewest states (every k < n recomputes
/// each iteration once); else, when none fits, the k that needs the least
/// memory (about sqrt(n * checkpointBytes / tapeBytesPerIteration)).
int64_t chooseCheckpointInterval(const CheckpointCosts &costs, int64_t budget);

/// Fully taped iterations in flight must be at least this fraction of the
/// device's parallelism before a launch that could run all of it
/// checkpointed tapes fully instead (checkpointing recomputes every
/// iteration once: 1.1x to 1.5x the time of the taped gradient, measured
/// on an H200 and on 2 CPU workers, docs/performance.md "Long loops under
/// a budget").
inline constexpr int64_t kCheckpointParallelismRatio = 2;

/// The interval of a launch whose device holds `parallelism` iterations at
/// once (1 or less: not known), `budget` bytes for them all, `fullBytes`
/// the bytes of one fully taped iteration and `one` the costs at k = 1
/// (called only when checkpointing is considered). Returns n (fully taped)
/// where every iteration in flight fits taped, or where at least 1 /
/// kCheckpointParallelismRatio of them does; else the largest k at which
/// all of them fit checkpointed; else chooseCheckpointInterval for one
/// iteration in flight (the launch then runs in waves).
int64_t chooseLaunchCheckpointInterval(int64_t fullBytes, int64_t budget, int64_t parallelism,
                                       const std::function<CheckpointCosts()> &one);

} // namespace qd
