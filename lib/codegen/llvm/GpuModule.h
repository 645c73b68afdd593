//===- GpuModule.h - Steps every GPU module goes through --------*- C++ -*-===//
//
// What emitPtx (Ptx.cpp) and the AMDGPU code objects (Hsaco.cpp) do alike:
// link a vendor math library's bitcode (libdevice, ocml), internalize all
// but the kernels, run the O3 pipeline of the target machine, verify, and
// ask the target machine for assembly or an object file.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/Support/CodeGen.h>

#include <memory>
#include <string>

namespace llvm {
class Module;
class Target;
class TargetMachine;
} // namespace llvm

namespace qd::gpu {

/// Whether `module` declares a function whose name starts with `prefix`.
bool declaresFunctionWithPrefix(const llvm::Module &module, const char *prefix);

/// Links the functions `module` uses from the bitcode file at `path`
/// (read once per process; only the functions called are materialised).
/// `library` names it in errors ("NVIDIA's libdevice"), `hint` says how to
/// provide it. NotFound when the file cannot be read.
absl::Status linkBitcodeLibrary(llvm::Module &module, const std::string &path,
                                const std::string &library, const std::string &hint);

/// The LLVM target of `triple` (`what` names it in the error).
absl::StatusOr<const llvm::Target *> lookupTarget(const std::string &triple, const char *what);

/// Internalizes everything but the functions of calling convention
/// `kernels` and the launch words (kLaunchWordsSymbol), runs the O3
/// pipeline of `tm` and verifies the result.
absl::Status optimizeKernels(llvm::Module &module, llvm::TargetMachine &tm,
                             llvm::CallingConv::ID kernels, const char *what);

/// What `tm` emits for `module`: assembly text or an object file.
absl::StatusOr<std::string> emitMachineCode(llvm::Module &module, llvm::TargetMachine &tm,
                                            llvm::CodeGenFileType type, const std::string &what);

} // namespace qd::gpu
