//===- qd/codegen/llvm/Hsaco.h - Code objects for AMD GPUs ------*- C++ -*-===//
//
// Turns a module emitted for CodegenTarget::Amdgpu into an AMDGPU code
// object (HSACO: the ELF shared object hipModuleLoadData loads) or its ISA
// assembly, for one GPU architecture:
//
//   1. the module is set up for the architecture (LLVM's AMDGPU target,
//      wave64 on gfx90a and gfx942, wave32 on gfx1100) and every entry gets
//      the kernel attributes of the launch (work-group size bound, uniform
//      work groups);
//   2. the math functions it calls (`__ocml_*`) are linked from the ROCm
//      device libraries' ocml.bc, and the `__oclc_*` control constants ocml
//      reads (ISA version, wave size, denormal and finite-math modes) are
//      defined for the architecture by qd itself: Debian's device libraries
//      (ROCm 5.2) have no oclc_isa_version_942.bc or _1100.bc, and each
//      oclc_*.bc file holds nothing but one such constant (docs/runtime.md);
//   3. everything but the entries is internalized and the O3 pipeline of
//      the AMDGPU target machine runs;
//   4. the target machine emits an object file, which `ld.lld -shared`
//      links into the code object (or emits the ISA assembly).
//
// Nothing here needs an AMD GPU, ROCm installed system-wide or hipcc: the
// device libraries are Debian's rocm-device-libs and the linker lld-19.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace qd {

/// An AMD GPU architecture qd generates code for.
struct AmdgpuArch {
  /// LLVM's processor name: gfx90a (MI200), gfx942 (MI300), gfx1100 (RDNA3).
  std::string_view name;
  /// __oclc_ISA_version: major * 1000 + minor * 100 + stepping.
  int isaVersion;
  /// Threads of a wavefront: 64 or 32.
  unsigned waveSize;
};

/// The architectures qd supports, in this order: gfx90a, gfx942, gfx1100.
std::span<const AmdgpuArch> amdgpuArchs();
/// The architecture named `name`, or InvalidArgument listing the known ones.
absl::StatusOr<AmdgpuArch> findAmdgpuArch(std::string_view name);

struct HsacoOptions {
  /// The GPU architecture (see amdgpuArchs()).
  std::string arch = "gfx90a";
  /// The directory of the ROCm device libraries' bitcode (ocml.bc); empty:
  /// $QD_ROCM_DEVICE_LIBS, else Debian's
  /// /usr/lib/x86_64-linux-gnu/amdgcn/bitcode.
  std::string deviceLibs;
  /// The `ld.lld` that links code objects; empty: $QD_LD_LLD, else LLVM
  /// 19's /usr/lib/llvm-19/bin/ld.lld, else ld.lld-19 or ld.lld on PATH.
  std::string ldLld;
  /// The most threads per block a launch uses (the entries'
  /// amdgpu-flat-work-group-size is 1 to this): a smaller bound leaves more
  /// registers per thread.
  unsigned maxBlockSize = 256;
};

/// The triple of the AMDGPU target.
inline constexpr const char *kAmdgpuTriple = "amdgcn-amd-amdhsa";
/// The code object version qd emits (and the __oclc_ABI_version it
/// defines).
inline constexpr int kAmdgpuCodeObjectVersion = 5;

/// A TargetMachine for code of `arch` (InvalidArgument for one qd does not
/// support). Initialises LLVM's AMDGPU target.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> amdgpuTargetMachine(const std::string &arch);

/// The ocml.bc file `options` selects (see HsacoOptions::deviceLibs).
std::string ocmlPath(const HsacoOptions &options);
/// The ld.lld `options` selects (see HsacoOptions::ldLld), or NotFound
/// naming the places looked at.
absl::StatusOr<std::string> ldLldPath(const HsacoOptions &options);

/// Steps 1 to 3 above: `module` (emitted for CodegenTarget::Amdgpu) linked,
/// internalized and optimised for `options.arch`, ready for the target
/// machine. qd-translate --target=amdgpu --optimize prints it.
absl::Status prepareAmdgpuModule(llvm::Module &module, const HsacoOptions &options);

/// The ISA assembly of `module` (it is changed: prepared as above).
absl::StatusOr<std::string> emitAmdgpuAssembly(llvm::Module &module, const HsacoOptions &options);

/// The code object of `module`, an ELF shared object (it is changed:
/// prepared as above).
absl::StatusOr<std::string> emitHsaco(llvm::Module &module, const HsacoOptions &options);

/// The code object linked by ld.lld from `object`, an ELF relocatable
/// object the AMDGPU target machine emitted.
absl::StatusOr<std::string> linkHsaco(const std::string &object, const HsacoOptions &options);

/// What a code object's metadata (its NT_AMDGPU_METADATA note) says about
/// one kernel.
struct HsacoKernelInfo {
  std::string name;
  /// Whether the object defines the kernel's descriptor (`<name>.kd`).
  bool hasDescriptor = false;
  int64_t wavefrontSize = 0;
  int64_t vgprCount = 0, sgprCount = 0, vgprSpills = 0, sgprSpills = 0;
  /// Scratch (private segment) bytes per thread.
  int64_t privateSegmentBytes = 0;
  int64_t kernargBytes = 0;
  int64_t maxFlatWorkgroupSize = 0;
  /// Its arguments: ".value_kind" and ".address_space" of each.
  std::vector<std::pair<std::string, std::string>> args;
};

/// The kernels of code object `hsaco` (emitHsaco's output), or
/// InvalidArgument when it is not an AMDGPU code object with metadata.
absl::StatusOr<std::vector<HsacoKernelInfo>> readHsacoKernels(std::string_view hsaco);

} // namespace qd
