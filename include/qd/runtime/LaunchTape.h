//===- qd/runtime/LaunchTape.h - Gradients through several launches -*- C++ -*-===//
//
// A LaunchTape records a sequence of launches on one program and backend
// and runs their gradient kernels in reverse order (backward), or their
// tangent kernels in order (jvp). Each gradient sees the buffers as its own
// forward launch left them: where a later launch overwrites a buffer an
// earlier gradient reads, the tape copies it first (a snapshot), or, under
// a memory budget, keeps the state every k launches and recomputes the
// launches in between (checkpointing). docs/runtime.md, "Launch tapes".
//
//   qd::LaunchTape tape(*program, backend);
//   for (int t = 0; t < steps; ++t)
//     if (absl::Status s = tape.launch("step", args[t]); !s.ok()) // runs @step
//       return s;
//   if (absl::Status s = tape.launch("loss", {}); !s.ok())
//     return s;
//   qd::TapeSeed seed{.field = "loss"};
//   absl::Status s = tape.backward({&seed, 1}); // @loss_grad, @step_grad, ...
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <absl/status/status.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

namespace qd {

/// The kernels of a recorded launch, all of the program's module.
struct TapeKernels {
  const Kernel *forward = nullptr;
  /// Its gradient kernel (buildGradientKernel); without one, backward()
  /// refuses (naming the launch).
  const Kernel *gradient = nullptr;
  /// Its tangent kernel (buildDualKernel); without one, jvp() refuses.
  const Kernel *dual = nullptr;
};

/// A seed of backward() (an adjoint) or jvp() (a tangent): the contents of
/// one companion buffer.
struct TapeSeed {
  /// A field, by name without `@` (its grad or dual companion), or
  std::string_view field{};
  /// an ndarray's grad (backward) or dual (jvp) buffer, as passed in its
  /// NdarrayArg.
  const Buffer *buffer = nullptr;
  /// Every element's value, or, when `values` is not empty, one value per
  /// element in row-major order (as many as the buffer has).
  double value = 1.0;
  std::span<const double> values{};
};

struct LaunchTapeOptions {
  /// The options of every launch the tape makes (forward, gradient, dual).
  LaunchOptions launch{};
  /// Copy a buffer before a recorded launch overwrites contents an earlier
  /// launch's gradient reads (true), or refuse that launch, with an error
  /// naming both launches and the buffer (false).
  bool snapshots = true;
  /// Bytes the tape may hold between recording and backward (0: no limit).
  /// With a limit the tape checkpoints: it copies the buffers the recorded
  /// launches write every k launches (k grows, by doubling, to fit the
  /// budget) and recomputes each segment of k launches before reversing
  /// it. Gradients equal the fully recorded tape's bit for bit where the
  /// forward kernels are deterministic.
  uint64_t checkpointBudget = 0;
  /// Copy each buffer before the tape first writes it, so that jvp() can
  /// start from the state the tape started from (always kept when
  /// checkpointing).
  bool keepInitialState = false;
  /// Hash the buffers the tape still needs after each launch and check
  /// them before they are used, so that a change from outside the tape
  /// (between launches, or between recording and backward) is an error
  /// naming the buffer and the launch, never a wrong gradient. Costs one
  /// read of those buffers per launch.
  bool checkUnchanged = true;
};

/// Memory the tape holds (LaunchTape::memory).
struct TapeMemory {
  /// Bytes of the copies it holds now: snapshots, checkpoints and initial
  /// contents.
  uint64_t heldBytes = 0;
  /// The most it held at once, with the copies a backward or jvp makes
  /// while it runs (a checkpointed segment's snapshots, the final contents
  /// it puts back).
  uint64_t peakBytes = 0;
  /// Launches per checkpoint segment (0: not checkpointing).
  int64_t checkpointInterval = 0;
  /// Segments backward recomputes (checkpoints kept, the start included).
  int64_t checkpoints = 0;
  /// The adstack heap of the backend's last launch
  /// (Backend::lastAdStackHeapUsage).
  std::optional<AdStackHeapUsage> adStackHeap;
};

/// Records launches on one program and backend (both must outlive it, and
/// so must the buffers of recorded ndarray arguments) and runs them
/// backward. Not thread-safe.
class LaunchTape {
public:
  LaunchTape(Program &program, Backend &backend, LaunchTapeOptions options = {});
  ~LaunchTape();
  LaunchTape(const LaunchTape &) = delete;
  LaunchTape &operator=(const LaunchTape &) = delete;

  /// Runs `kernel` with `args` and records the launch, with `@kernel_grad`
  /// and `@kernel_dual` when the module has them.
  absl::Status launch(std::string_view kernel, std::span<const LaunchArg> args);
  /// Same, with the kernels given. Before the launch runs, the tape checks
  /// the arguments (and the gradient's adjoint companions), snapshots what
  /// the launch would overwrite that an earlier gradient reads, and checks
  /// that nothing it still needs changed from outside. An error leaves the
  /// tape as it was, except for a failed launch (which may have written
  /// part of its outputs): the tape then refuses everything until clear().
  absl::Status launch(const TapeKernels &kernels, std::span<const LaunchArg> args);

  /// Runs the recorded launches' gradients in reverse order. First zeroes
  /// every adjoint they accumulate into or consume (unless `zeroAdjoints`
  /// is false: then what the adjoints hold is added to), then sets each
  /// seeded adjoint; every gradient sees the buffers as its forward launch
  /// left them. Afterwards the buffers hold what the last launch left, so
  /// backward may run again (with other seeds) and recording may go on.
  /// InvalidArgument for a seed that names no adjoint of the recorded
  /// gradients (listing them) or a launch without a gradient kernel;
  /// FailedPrecondition for a buffer changed from outside the tape.
  absl::Status backward(std::span<const TapeSeed> seeds, bool zeroAdjoints = true);

  /// Forward mode: restores the state the tape started from (needs
  /// checkpointing or keepInitialState), zeroes the dual companions the
  /// recorded launches' tangent kernels touch, sets each seeded tangent
  /// and runs the tangent kernels in recording order. The duals then hold
  /// the Jacobian-vector product; the primal buffers are put back as the
  /// last launch left them.
  absl::Status jvp(std::span<const TapeSeed> tangents);

  /// Launches recorded.
  size_t size() const;
  /// Forgets every launch and copy (the buffers keep their contents).
  void clear();
  TapeMemory memory() const;

  class Impl;

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace qd
