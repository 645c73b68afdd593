//===- qd/check/GradCheck.h - Checking a kernel's derivatives ---*- C++ -*-===//
//
// checkGradient differentiates a kernel in reverse mode (buildGradientKernel)
// and in forward mode (buildDualKernel) and compares both with central
// finite differences, for one scalar objective:
//
//   J = sum over the kernel's float outputs y of  w_y * y   (after the launch)
//
// with fixed pseudo-random weights w (cotangents, seeded, reproducible).
// Outputs are the float fields and ndarrays the kernel stores or
// atomically adds to; inputs are the float fields and ndarrays it loads and
// the float scalar arguments it uses. A derivative is taken with respect to
// the value an input element holds when the launch starts.
//
//  - Reverse mode: one launch of the kernel, then of its gradient kernel,
//    with the grad companions of the outputs seeded with w: the grad
//    companions of the inputs then hold dJ/dx for every element.
//  - Forward mode: one launch of the dual kernel per checked element, with
//    that element's dual set to 1: dJ/dx = sum w_y * y.dual.
//  - Finite differences: central differences of J with steps h, h/2 and
//    h/4 combined by Richardson extrapolation (error O(h^4)), trusted where
//    the one-sided differences agree too (not at a kink), evaluated on
//    a copy of the module with every f32 widened to f64
//    (cloneModuleWidenedToF64), so an f32 kernel is differenced without
//    f32 rounding noise. The difference is taken per output element before
//    the weighted sum, so unaffected outputs cancel exactly.
//
// Inputs with more than `maxElements` elements are sampled (seeded); a
// sampled input also gets one directional check along a random direction
// over all of its elements (one dual launch, one set of differences), so
// every element contributes to some check. docs/autodiff.md ("Checking a
// gradient") describes the scheme, the tolerances and the tool
// qd-check-grad.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"
#include "qd/runtime/Program.h"
#include "qd/transforms/AutoDiff.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

/// The value of a kernel argument or the initial contents of a field:
/// row-major elements and a shape ([] for a scalar argument or a 0-d
/// field). Elements are converted to the declared element type (a float
/// is rounded to f32 for an f32 global; an integer type takes integers
/// only).
struct GradCheckValue {
  std::vector<int64_t> shape;
  std::vector<Scalar> elements;

  static GradCheckValue scalar(double v);
  static GradCheckValue integer(int64_t v);
  static GradCheckValue array(std::vector<int64_t> shape, const std::vector<double> &values);
  static GradCheckValue integers(std::vector<int64_t> shape, const std::vector<int64_t> &values);
};

/// What the kernel is launched with. Fields not named start at zero; every
/// argument needs a value (an ndarray's value gives its shape).
struct GradCheckInputs {
  /// Initial field contents, by field name (without `@`).
  std::map<std::string, GradCheckValue> fields;
  /// Kernel arguments, by name (without `%`).
  std::map<std::string, GradCheckValue> args;
};

struct GradCheckOptions {
  /// The inputs to differentiate with respect to (default: all). A name
  /// is a field or an argument; `@x` and `%x` pick one when both exist.
  std::vector<std::string> wrt;
  /// The outputs the objective sums (default: all), named the same way.
  std::vector<std::string> outputs;
  /// Tolerances; 0 picks the default of the kernel's precision: f64
  /// rtol 1e-6, atol 1e-9; f32 (any f32 in the kernel) rtol 1e-3, atol
  /// 1e-5. A value a agrees with a reference b when
  ///   |a - b| <= max(rtol * |b|, atol, r),
  /// that is, when relativeError(a, b) = |a - b| / max(|b|, max(atol, r)
  /// / rtol) is at most rtol, where r is the entry's rounding allowance
  /// (GradCheckEntry::roundingAllowance): a directional derivative is a
  /// sum over every element of an input, whose terms may cancel, and the
  /// error of such a sum in f32 scales with the sum of |terms|, not with
  /// its value (1024 elements: up to 6e-5 of that sum).
  double rtol = 0;
  double atol = 0;
  /// Elements checked one by one per input; a larger input is sampled
  /// (the first, the last and a seeded random choice of the others) and
  /// gets a directional check. 0: directional checks only.
  int64_t maxElements = 64;
  /// Seeds the weights w, the sampling and the directions.
  uint64_t seed = 0;
  /// Which modes to check. With both, they must also agree with each
  /// other (under the same tolerance) wherever finite differences cannot
  /// decide.
  bool reverse = true;
  bool forward = true;
  /// Where kernels run; null: a private reference interpreter (qd::Interpreter:
  /// deterministic, checks every index). Pass a CpuBackend or CudaBackend to
  /// check the code they generate.
  Backend *backend = nullptr;
  /// Options of every launch (indices are checked by default).
  LaunchOptions launch = [] {
    LaunchOptions o;
    o.boundsChecked = true;
    return o;
  }();
  /// Run the kernel once on the interpreter with the exact global-access
  /// check first (LaunchOptions::checkGlobalAccesses): a kernel that writes
  /// an element after reading it has no correct reverse-mode gradient, and
  /// the check then fails naming both statements.
  bool checkGlobalAccesses = true;
  /// Base finite-difference step, relative: h = fdStep * max(1, |x|). A
  /// step whose three Richardson levels disagree (a kink or a jump nearby)
  /// or give a non-finite value is retried at fdStep / 10 and fdStep / 100.
  double fdStep = 1e-3;
  /// How reverse mode builds the gradient kernel.
  ReverseADOptions reverseOptions;
  /// Use these kernels of the module instead of building them: a gradient
  /// kernel with the kernel's arguments, launched after it, that adds dJ/dx
  /// into the inputs' grad companions given the outputs' seeded grad
  /// companions; a dual kernel launched instead of it. With either given,
  /// scalar arguments are not inputs of the check (a kernel written by hand
  /// has no companion for them).
  std::string gradientKernel;
  std::string dualKernel;
  /// Called on the gradient / dual kernel (built or named) in the checker's
  /// private copy of the module before anything runs; may rewrite it (a
  /// test of the checker breaks a derivative this way). The module is
  /// verified afterwards.
  std::function<absl::Status(Module &, Kernel &)> editGradient;
  std::function<absl::Status(Module &, Kernel &)> editDual;
};

/// One checked derivative: of J with respect to one element of an input,
/// or along a direction over all its elements.
struct GradCheckEntry {
  /// `@x` (a field), `%a` (an ndarray or scalar argument).
  std::string input;
  /// The element (empty for a scalar argument or a 0-d field).
  std::vector<int64_t> index;
  /// A directional check: the derivative of J along a seeded random
  /// direction v over every element of `input` (index is empty).
  bool direction = false;
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  double reverse = kNone;          ///< NaN when reverse mode is not checked
  double forward = kNone;          ///< NaN when forward mode is not checked
  double finiteDifference = kNone; ///< Richardson-extrapolated, in f64
  /// Estimated error of finiteDifference: the larger of the differences
  /// between its extrapolations from the finer and the coarser steps and
  /// between the one-sided (forward and backward) extrapolations; and the
  /// step it was taken with.
  double fdError = kNone;
  double fdStep = kNone;
  /// False where the finite difference could not be trusted to the
  /// tolerance (fdError above a quarter of it at every step tried: a kink,
  /// a jump or a non-finite value within the step); such an entry is
  /// checked only for the agreement of the two modes.
  bool fdReliable = false;
  /// The rounding the kernel's precision allows this derivative, absolute:
  /// a derivative is a sum of n terms t_k = c_k * dJ/dx_k over the
  /// elements of its direction (n = 1 for one element), and a sum in
  /// floating point may be off by gamma_n * sum |t_k| (gamma_n = n u /
  /// (1 - n u), u = 2^-24 in f32, 2^-53 in f64). The entry agrees when
  /// |a - b| <= max(rtol * |b|, atol, roundingAllowance). Computed from
  /// reverse mode's dJ/dx (0 when reverse mode is not checked).
  double roundingAllowance = 0;
  /// relativeError(reverse, finiteDifference) etc.; NaN when not compared.
  double reverseError = kNone;
  double forwardError = kNone;
  double modesError = kNone; ///< reverse against forward
  bool reverseAgrees = true;
  bool forwardAgrees = true;
  bool modesAgree = true;
  bool ok() const { return reverseAgrees && forwardAgrees && modesAgree; }
  /// `@x[1, 2]`, `%s`, `@x . v` for a direction.
  std::string name() const;
};

/// One input: its name, type, shape and how many elements were checked.
struct GradCheckInput {
  std::string name;
  ScalarType type = ScalarType::F64;
  std::vector<int64_t> shape;
  int64_t elements = 1;
  int64_t checked = 0;
  /// Reverse mode's dJ/dx of every element, row-major (checked or not;
  /// empty when reverse mode is not checked).
  std::vector<double> gradient;
};

/// One output: its name and the weight w of each of its elements in J.
struct GradCheckOutput {
  std::string name;
  std::vector<double> weights;
};

struct GradCheckReport {
  std::string kernel;
  std::string backend;
  /// f32 when the kernel uses any f32 (the tolerances' default), else f64.
  ScalarType precision = ScalarType::F64;
  double rtol = 0;
  double atol = 0;
  uint64_t seed = 0;
  bool reverseChecked = false;
  bool forwardChecked = false;
  std::vector<GradCheckInput> inputs;
  /// The outputs J sums (`@y`, `%o`).
  std::vector<GradCheckOutput> outputs;
  std::vector<GradCheckEntry> entries;
  /// The largest relative error of each mode against finite differences
  /// over the reliable entries, and the entry it was found at (-1: none).
  double worstReverseError = 0;
  double worstForwardError = 0;
  int worstReverseEntry = -1;
  int worstForwardEntry = -1;
  /// The largest relative difference between the kernel's outputs and
  /// those of its f64 copy (f32 rounding; large values mean the finite
  /// differences describe a different computation).
  double primalDifference = 0;
  /// Entries whose finite difference was not reliable.
  int64_t unreliable = 0;
  /// Entries that disagree.
  int64_t failures = 0;
  /// Every entry agrees and at least one was compared with finite
  /// differences.
  bool passed = false;
  /// One line: why it passed or failed.
  std::string verdict;
};

/// Checks the derivatives of kernel `kernel` of `module` (which is not
/// changed). Errors: no such kernel (NotFound); no float input or output,
/// an unknown or unsuitable name in `wrt`/`outputs`, a missing or
/// misshapen argument or field value (InvalidArgument); a kernel the
/// passes cannot differentiate or that breaks the global-access rule
/// (their error); a launch that fails (its error).
absl::StatusOr<GradCheckReport> checkGradient(const Module &module, std::string_view kernel,
                                              const GradCheckInputs &inputs,
                                              const GradCheckOptions &options = {});

/// |a - b| / max(|b|, floor), +inf when either is not finite (unless both
/// are the same infinity).
double gradCheckRelativeError(double a, double b, double floor);

/// A readable report: a summary line per input, the disagreeing entries
/// (every entry with `verbose`), the worst errors and the verdict.
std::string formatGradCheckReport(const GradCheckReport &report, bool verbose = false);

} // namespace qd
