//===- Ptx.cpp - PTX for the NVPTX target ---------------------------------===//
#include "qd/codegen/llvm/Ptx.h"

#include "GpuModule.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include <cstdlib>
#include <mutex>
#include <optional>

// LLVM's NVPTX target (built into the shared libLLVM of the distributions
// qd builds with).
extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace qd {
namespace {
constexpr const char *kDefaultLibdevice = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
} // namespace

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> nvptxTargetMachine(const std::string &arch) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  llvm::Triple triple(kNvptxTriple);
  auto target = gpu::lookupTarget(triple.str(), "NVPTX");
  if (!target.ok())
    return target.status();
  // Checked first: LLVM warns on stderr about a processor it does not know.
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      (*target)->createMCSubtargetInfo(triple.str(), "", ""));
  if (arch.rfind("sm_", 0) != 0 || !subtarget || !subtarget->isCPUStringValid(arch))
    return absl::InvalidArgumentError(fmt::format(
        "unknown GPU architecture '{}' for the nvptx target; use sm_<version>, e.g. sm_80 or "
        "sm_90",
        arch));
  std::unique_ptr<llvm::TargetMachine> machine(
      (*target)->createTargetMachine(triple.str(), arch, "", llvm::TargetOptions(), std::nullopt,
                                     std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return absl::InternalError(fmt::format("cannot create an NVPTX target machine for '{}'", arch));
  return machine;
}

std::string libdevicePath(const PtxOptions &options) {
  if (!options.libdevice.empty())
    return options.libdevice;
  if (const char *env = std::getenv("QD_LIBDEVICE"); env && *env)
    return env;
  return kDefaultLibdevice;
}

absl::Status linkLibdevice(llvm::Module &module, const PtxOptions &options) {
  if (!gpu::declaresFunctionWithPrefix(module, "__nv_"))
    return absl::OkStatus();
  return gpu::linkBitcodeLibrary(
      module, libdevicePath(options), "NVIDIA's libdevice",
      "install the CUDA toolkit's nvvm/libdevice or set QD_LIBDEVICE to the path of "
      "libdevice.10.bc");
}

absl::StatusOr<std::string> emitPtx(llvm::Module &module, const PtxOptions &options) {
  auto machine = nvptxTargetMachine(options.arch);
  if (!machine.ok())
    return machine.status();
  llvm::TargetMachine &tm = **machine;
  module.setTargetTriple(tm.getTargetTriple().str());
  module.setDataLayout(tm.createDataLayout());
  if (absl::Status s = linkLibdevice(module, options); !s.ok())
    return s;
  // libdevice asks __nvvm_reflect whether to flush denormals: no, as on the
  // CPU (NVVMReflect, run by the NVPTX pipeline, folds the answer).
  if (!module.getModuleFlag("nvvm-reflect-ftz"))
    module.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t(0));
  if (absl::Status s = gpu::optimizeKernels(module, tm, llvm::CallingConv::PTX_Kernel, "NVPTX");
      !s.ok())
    return s;
  return gpu::emitMachineCode(module, tm, llvm::CodeGenFileType::AssemblyFile, "PTX");
}

} // namespace qd
