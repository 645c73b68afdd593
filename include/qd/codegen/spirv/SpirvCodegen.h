//===- qd/codegen/spirv/SpirvCodegen.h - SPIR-V compute shaders -*- C++ -*-===//
//
// Lowers a verified kernel to one SPIR-V module (SPIR-V 1.3, Vulkan 1.1
// target environment, logical addressing, GLSL450 memory model) with one
// compute entry point per launch of KernelLayout::launches, named as the
// NVPTX target names its device entries:
//
//   qd_serial_<k>  a run of top-level statements and serial tasks (local
//                  size 1, dispatched as one workgroup);
//   qd_task_<n>    parallel task n as a grid-stride loop over the T
//                  invocations of a bounded grid (local size
//                  SpirvOptions::workgroupSize).
//
// Descriptor set 0 holds every buffer the code reads or writes:
//
//   binding 0  the launch data: `uint words[]` laid out as SpirvLaunchData
//              says (error record, T, adstack counters, capacities and
//              offsets, scalar arguments, ndarray extents, top-level values
//              shared between entries);
//   binding 1  the adstack heap, `uint words[]`: entry d of stack s of
//              invocation t starts at word offsets[s] * T + (d * T + t) *
//              entryWords (the interleaved layout of DESIGN.md, in words);
//   binding 2+i  global slot i of KernelLayout::slots, a runtime array of
//              its element type (i1 as a 32-bit 0/1, f32/f64 as uint/ulong
//              when a float atomic add needs a compare-exchange loop);
//   binding 2+S  with SpirvOptions::stopChecks (S slots): the stop word,
//              `uint words[]` whose word 0 the host sets to a StopReason
//              while the launch runs (SpirvKernel::stopBinding).
//
// Statements keep the interpreter's semantics, error sites included: a
// failing bounds check, an integer division by zero, a bad shift or an
// adstack underflow records the first site (a compare-exchange on word 0
// of the launch data) and returns; every entry returns at once when a site
// is recorded. A push past an adstack's capacity writes nothing and raises
// the stack's `needed` counter with an atomic max. With
// SpirvOptions::checkLoopExits every loop has an error site after it that
// fires where the driver, not the program, ended the loop (exit flags in a
// Workgroup array, `loop_exit_flags`). Math functions whose
// Vulkan precision is too loose (sin, cos, tan, exp, log, tanh, pow, atan2)
// are accurate implementations of our own (docs/runtime.md, "Vulkan").
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/abi/LaunchContext.h"
#include "qd/analysis/CooperativeTask.h"
#include "qd/ir/Module.h"

#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

/// What the device offers beyond core Vulkan 1.1 compute (a Vulkan backend
/// fills it from the device's features).
struct SpirvFeatures {
  bool int64 = true;        // shaderInt64
  bool float64 = true;      // shaderFloat64
  bool int64Atomics = true; // shaderBufferInt64Atomics
  /// VK_EXT_shader_atomic_float: shaderBufferFloat32AtomicAdd and
  /// shaderBufferFloat64AtomicAdd. Without them a float atomic add is a
  /// compare-exchange loop.
  bool atomicFloat32Add = false;
  bool atomicFloat64Add = false;
  /// VkPhysicalDeviceSubgroupProperties: basic, vote and arithmetic
  /// subgroup operations in compute shaders. With them an atomic add to an
  /// element the iteration does not choose is summed over the subgroup
  /// first where the whole subgroup updates that element.
  bool subgroupArithmetic = false;
};

struct SpirvOptions {
  /// Check every field/ndarray index (an error site instead of a wild
  /// access).
  bool boundsChecked = false;
  /// Invocations per workgroup of the parallel entries.
  unsigned workgroupSize = 64;
  SpirvFeatures features;
  /// Run SPIRV-Tools' performance passes over the module (and validate it
  /// again afterwards).
  bool optimize = true;
  /// Detect loops the driver ends before the program does: every loop
  /// (for, while, a parallel task's grid-stride loop, the compare-exchange
  /// loop of a float atomic add) sets a flag where it ends as the program
  /// says, and after its merge block an error site fires where the flag is
  /// not set (Mesa's lavapipe ends an invocation's loops after 65535
  /// iterations in all; docs/runtime.md, "Vulkan backend").
  bool checkLoopExits = false;
  /// Stop checks (LaunchOptions::timeout and ::cancel): each loop of the
  /// kernel's StopCheckPlan (every `while`, every `for` or task with a
  /// run-time trip count, and those with constant bounds whose nest runs
  /// at least `stopCheckMinWork` iterations) counts its iterations (one
  /// counter per entry) and, every `stopCheckInterval`-th (a power of
  /// two), reads the stop word with an atomic load; when the host has set
  /// it, the invocation records the loop's stop site (KernelLayout::ErrorSite::
  /// stopCheck) with the reason and returns.
  bool stopChecks = false;
  unsigned stopCheckInterval = abi::kDeviceStopCheckInterval;
  uint64_t stopCheckMinWork = abi::kStopCheckMinWork;
  /// One invocation in this many (a power of two; those whose index is a
  /// multiple of it) reads the word at its first iteration
  /// (abi::kDeviceStopCheckSpread).
  unsigned stopCheckSpread = abi::kDeviceStopCheckSpread;
  /// Local tapes: the stacks named here (by their alloca) live in an array
  /// of that many entries per invocation (Function storage, which a GPU
  /// keeps in its cached local memory) instead of the heap; their
  /// KernelLayout::Stack::localEntries says so to the runtime.
  std::map<const AdStackAllocaStmt *, int64_t> localAdStackEntries;
  /// Code for launches whose ndarray buffers do not overlap: every
  /// component of every ndarray argument is an alias class of its own
  /// (NdarrayAliasing::Distinct), so more atomics are private and more
  /// stores wait for the end of their iteration (CodegenOptions::
  /// distinctNdarrays is the LLVM targets' counterpart).
  bool distinctNdarrays = false;
  /// Declare the buffers of fields and ndarrays that no access of the
  /// kernel may write (WrittenAliasClasses under the aliasing above)
  /// NonWritable, so that the driver may read them through its read-only
  /// caches; not in a kernel with native float atomic adds, beside which
  /// NVIDIA's driver gave wrong gradients (docs/runtime.md, "SPIR-V code
  /// generation"). The Vulkan backend turns it on
  /// (VulkanBackendOptions::readOnlyBuffers).
  bool readOnlyBuffers = false;
  /// Cooperative tasks (qd/analysis/CooperativeTask.h; the LLVM targets'
  /// CodegenOptions::cooperativeTaskIterations and
  /// ::cooperativeScatteringIterations): a task of at most this many
  /// iterations around long serial loops runs a workgroup of
  /// `cooperativeGroupSize` invocations per iteration; 0: never. Not with
  /// boundsChecked, stopChecks or checkLoopExits (their error sites leave
  /// an invocation early, and its workgroup would wait for it at the next
  /// barrier).
  int64_t cooperativeTaskIterations = kDefaultCooperativeTaskIterations;
  int64_t cooperativeScatteringIterations = kDefaultCooperativeScatteringIterations;
  unsigned cooperativeGroupSize = 256;
};

/// Word offsets of the launch data buffer (binding 0) of a kernel, from its
/// layout: what the code reads and the runtime writes and reads back.
struct SpirvLaunchData {
  static constexpr uint32_t kErrorSite = 0; // QdErrorRecord::site
  static constexpr uint32_t kErrorData = 2; // QdErrorRecord::data, 2 words each
  static constexpr uint32_t kThreads = 2 + 2 * abi::kMaxErrorData; // T
  /// Always 0: what a loop bound that must not be a compile-time constant
  /// adds (SpirvEmitter::loopBound).
  static constexpr uint32_t kZero = kThreads + 1;
  /// Nonzero when the heap is compacted: 1 + log2 of the invocations per
  /// group (groups of 1-32); the heap starts with the table of regions and
  /// capacities per group and stack (an i64 each, group-major: the region's
  /// offset in words, then the capacity).
  static constexpr uint32_t kGroupTable = kZero + 1;
  /// A compacted heap run in windows (docs/runtime.md, "Windows"): the
  /// first invocation of this dispatch's window (a parallel task with
  /// adstacks adds it to its invocation index), and the words its regions
  /// start at in the table past where they start in the heap (subtracted
  /// from every region offset). Both 0 for a launch of one dispatch.
  static constexpr uint32_t kThreadOffset = kGroupTable + 1;
  static constexpr uint32_t kHeapShift = kThreadOffset + 1;
  uint32_t needed = 0;     // per stack: pushes past the capacity (u32, atomic max)
  uint32_t capacities = 0; // per stack (u32)
  uint32_t offsets = 0;    // per stack: its offset in an invocation's slice, in words
  uint32_t scalars = 0;    // per argument: 2 words (QdLaunchContext::scalars)
  uint32_t shapes = 0;     // per packed extent: 2 words (QdLaunchContext::ndShapes)
  uint32_t values = 0;     // per top-level value slot: 2 words
  uint32_t words = 0;      // the whole buffer

  static SpirvLaunchData of(const KernelLayout &layout, unsigned numArguments);
};

/// A compiled kernel: its module and what a runtime needs to launch it.
struct SpirvKernel {
  /// Empty for a kernel with no launches (nothing at its top level): a
  /// module needs an entry point.
  std::vector<uint32_t> words;
  KernelLayout layout;
  SpirvLaunchData data;
  /// Words per entry of each stack (KernelLayout::stacks order); its
  /// entryBytes is 4x this.
  std::vector<uint32_t> entryWords;
  unsigned workgroupSize = 64;
  /// The binding of the stop word (SpirvOptions::stopChecks), 0 without.
  uint32_t stopBinding = 0;
};

/// Emits `kernel` (verified). Fails with FailedPrecondition naming the
/// device feature when the kernel needs one `options.features` lacks.
absl::StatusOr<SpirvKernel> emitSpirv(const Kernel &kernel, const SpirvOptions &options = {});

/// Validates `words` for the Vulkan 1.1 environment: empty when valid, else
/// SPIRV-Tools' diagnostics.
std::string validateSpirv(std::span<const uint32_t> words);
/// SPIRV-Tools' assembly of `text` (a hand-written shader of a runtime),
/// validated as validateSpirv does, or the assembler's or validator's
/// error.
absl::StatusOr<std::vector<uint32_t>> assembleSpirv(std::string_view text);
/// SPIRV-Tools' disassembly of `words` (friendly names), or its error.
absl::StatusOr<std::string> disassembleSpirv(std::span<const uint32_t> words);

} // namespace qd
