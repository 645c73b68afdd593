//===- qd/codegen/llvm/Ptx.h - PTX for the NVPTX target ---------*- C++ -*-===//
//
// Turns a module emitted for CodegenTarget::Nvptx into PTX text a CUDA
// driver loads (cuModuleLoadDataEx) or `ptxas` assembles: links the math
// functions the kernel calls from NVIDIA's libdevice, internalizes
// everything but the entries (KernelLayout::launches), runs the O3
// pipeline for the NVPTX target machine and prints PTX for an architecture.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <memory>
#include <string>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace qd {

struct PtxOptions {
  /// The GPU architecture: sm_80 (Ampere), sm_90 (Hopper), sm_90a, ...
  std::string arch = "sm_80";
  /// libdevice.10.bc; empty: $QD_LIBDEVICE, else the CUDA toolkit's
  /// /usr/local/cuda/nvvm/libdevice/libdevice.10.bc.
  std::string libdevice;
};

/// The triple of the NVPTX target.
inline constexpr const char *kNvptxTriple = "nvptx64-nvidia-cuda";

/// A TargetMachine for NVPTX code of `arch` (InvalidArgument for an
/// architecture LLVM does not know). Initialises LLVM's NVPTX target.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> nvptxTargetMachine(const std::string &arch);

/// The libdevice file `options` selects (see PtxOptions::libdevice).
std::string libdevicePath(const PtxOptions &options);

/// Links the libdevice functions `module` declares (`__nv_*`) into it.
/// NotFound, naming the path looked at, when the file is missing.
absl::Status linkLibdevice(llvm::Module &module, const PtxOptions &options);

/// PTX text for `module` (emitted for CodegenTarget::Nvptx; it is changed:
/// linked, internalized, optimised).
absl::StatusOr<std::string> emitPtx(llvm::Module &module, const PtxOptions &options);

} // namespace qd
