//===- qd/runtime/GradientLaunch.h - A kernel and its gradient -*- C++ -*-===//
//
// What a front-end does around every reverse-mode launch, done once: find
// which adjoints a gradient kernel (qd::buildGradientKernel) adds into and
// which it consumes, zero the first, seed the second, and launch the
// forward kernel and then its gradient with the same arguments.
//
//   auto adj = qd::gradientAdjoints(*grad);   // x.grad accumulated, loss.grad consumed
//   qd::AdjointSeed seed{"loss", 1.0};
//   qd::launchWithGradient(program, *fwd, *grad, args, {&seed, 1}, backend);
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <absl/status/status.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

/// The adjoint companion of a field or of an ndarray argument.
struct AdjointRef {
  const Field *field = nullptr;
  const Argument *ndarray = nullptr;
  /// "@x.grad" or "%a.grad".
  std::string str() const;
  /// The field's or the argument's name (what AdjointSeed names).
  std::string_view name() const;
  bool operator==(const AdjointRef &o) const { return field == o.field && ndarray == o.ndarray; }
};

/// The adjoints a gradient kernel works with, read from its code, each
/// once, in the order the code first touches them.
struct GradientAdjoints {
  /// Added into (`atomic_add`): the input adjoints. A launch adds to what
  /// they hold, so they are zeroed before a gradient unless gradients are
  /// meant to accumulate over launches.
  std::vector<AdjointRef> accumulated;
  /// Read (and cleared after the read, by buildGradientKernel's code): the
  /// output adjoints, which the caller seeds (with 1 for a scalar loss).
  /// An adjoint may be in both lists (an array the kernel reads and writes).
  std::vector<AdjointRef> consumed;
};

/// The adjoints of `gradient` (any kernel: those of a kernel that touches
/// no `.grad` are empty).
GradientAdjoints gradientAdjoints(const Kernel &gradient);

/// A consumed adjoint and the value every element of it is seeded with.
struct AdjointSeed {
  std::string_view name; // the field or ndarray argument, without `@`/`%`
  double value = 1.0;
};

/// Launches `forward` and then `gradient` (its gradient kernel, in the same
/// module) with `args` on `backend`: before the forward launch it zeroes
/// every accumulated adjoint, sets every element of each consumed adjoint
/// named in `seeds` to the seed's value and zeroes the other consumed ones.
/// Ndarray adjoints are the `grad` buffers of `args`. InvalidArgument,
/// before anything is written, for a seed that names no consumed adjoint
/// (the message lists them), a seed given twice, or a missing ndarray
/// companion; the launches' own errors otherwise.
absl::Status launchWithGradient(Program &program, const Kernel &forward, const Kernel &gradient,
                                std::span<const LaunchArg> args, std::span<const AdjointSeed> seeds,
                                Backend &backend, const LaunchOptions &options = {});

} // namespace qd
