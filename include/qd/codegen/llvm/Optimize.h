//===- qd/codegen/llvm/Optimize.h - The optimisation pipeline ---*- C++ -*-===//
//
// The LLVM pipeline generated kernels go through before machine code
// generation, in one place so that the CPU backend and qd-translate
// --optimize run the same passes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/statusor.h>

#include <memory>

namespace llvm {
class Function;
class Module;
class TargetMachine;
} // namespace llvm

namespace qd {

/// A TargetMachine for the host CPU with aggressive code generation, as the
/// CPU backend's JIT compiles for. Initialises LLVM's native target.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> hostTargetMachine();

/// How hard LLVM works on a module.
///  - Full: the O3 pipeline and aggressive code generation.
///  - Light, for kernels so large or so deeply nested that parts of those
///    grow faster than linearly (docs/performance.md, "Compile time"): one
///    run each of SROA, EarlyCSE, InstCombine and SimplifyCFG, blocks cut to
///    2000 instructions (splitLongBlocks), and code generation at
///    CodeGenOptLevel::None (the fast register allocator, no machine
///    scheduling). Compiles the gradient of a loop carrying 500 values 14x
///    faster than Full (0.6 s) for 10-20% more run time. A function of more
///    than kLightCseInstructions instructions skips EarlyCSE, the most
///    costly of the four (72% of them on a straight-line gradient of 450 000
///    instructions), which finds little there once locals are values.
enum class OptimizationTier { Full, Light };

/// Above this many instructions in its largest function, the light tier's
/// pipeline has no EarlyCSE.
inline constexpr size_t kLightCseInstructions = 250000;

/// Where the light tier starts (chooseTier).
struct TierLimits {
  /// Instructions of the largest function (before optimisation).
  size_t fullInstructions = 20000;
  /// Loops nested in one another (O3's loop passes grow with the depth
  /// times the nest's size: 0.75 s at depth 32, 9 s at 64).
  unsigned fullLoopDepth = 16;
};

/// Seconds a kernel's compilation spent per step: adstack sizing, emitting
/// LLVM IR, the optimisation pipeline and machine code generation.
struct CompileTimes {
  double sizing = 0, emit = 0, optimize = 0, codegen = 0;
  double total() const { return sizing + emit + optimize + codegen; }
  CompileTimes &operator+=(const CompileTimes &o) {
    sizing += o.sizing;
    emit += o.emit;
    optimize += o.optimize;
    codegen += o.codegen;
    return *this;
  }
};

/// Turns LLVM's pass timers (-time-passes) on or off for the whole process:
/// the optimisation pipeline reports on stderr after each module, code
/// generation's passes (summed) at reportLlvmPassTimes. For compile-time
/// studies.
void timeLlvmPasses(bool on);
void reportLlvmPassTimes();

/// Instructions in the largest function of `module`.
size_t largestFunctionSize(const llvm::Module &module);

/// Cuts `f`'s blocks longer than `most` instructions into blocks of at most
/// `most` (an unconditional branch joins the pieces), leaving phis and the
/// entry block's allocas in place. Returns how many cuts it made.
size_t splitLongBlocks(llvm::Function &f, size_t most);

/// The deepest loop nest of `module`'s functions (1: a loop, no loop in it).
unsigned deepestLoopNest(const llvm::Module &module);

/// Light when `module`'s largest function or its deepest loop nest is past
/// `limits`, else Full.
OptimizationTier chooseTier(const llvm::Module &module, const TierLimits &limits);

/// What promoteLocals did, summed over the functions it was given.
struct PromoteStats {
  size_t phisPlaced = 0; // phis the placement created
  size_t phisKept = 0;   // phis left after removing those of one value and dead ones
};

/// Promotes `f`'s locals (entry-block allocas used only by simple loads and
/// stores of their own type) to SSA values in time linear in the function
/// and the phis placed, where LLVM's mem2reg rescans a block per local
/// (quadratic in a loop body carrying many values) and walks the dominator
/// subtree of every store (quadratic in a deep loop nest); see
/// PromoteLocals.cpp. Returns how many it promoted.
size_t promoteLocals(llvm::Function &f, PromoteStats *stats = nullptr);

/// Promotes every function's locals (promoteLocals), then runs the
/// pipeline of `tier` over `module` (Full: LLVM's O3), with the cost models
/// of `machine` (null: target-independent defaults).
void optimizeModule(llvm::Module &module, llvm::TargetMachine *machine,
                    OptimizationTier tier = OptimizationTier::Full);

} // namespace qd
