//===- Ptx.cpp - PTX for the NVPTX target ---------------------------------===//
#include "qd/codegen/llvm/Ptx.h"

#include "qd/abi/KernelLayout.h"

#include "qd/codegen/llvm/Optimize.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <cstdlib>
#include <map>
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

bool isEntry(const llvm::GlobalValue &gv) {
  auto *f = llvm::dyn_cast<llvm::Function>(&gv);
  return f && f->getCallingConv() == llvm::CallingConv::PTX_Kernel;
}

bool needsLibdevice(const llvm::Module &m) {
  for (const llvm::Function &f : m)
    if (f.isDeclaration() && f.getName().starts_with("__nv_"))
      return true;
  return false;
}

/// The bytes of the libdevice file at `path`, read once (LLVM parses
/// lazily from them: only the functions a kernel calls are materialised).
llvm::ErrorOr<llvm::MemoryBufferRef> libdeviceBytes(const std::string &path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<llvm::MemoryBuffer>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(path);
  if (it == cache.end()) {
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer)
      return buffer.getError();
    it = cache.emplace(path, std::move(*buffer)).first;
  }
  return it->second->getMemBufferRef();
}

} // namespace

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> nvptxTargetMachine(const std::string &arch) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string error;
  llvm::Triple triple(kNvptxTriple);
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple.str(), error);
  if (!target)
    return absl::InternalError(
        fmt::format("the NVPTX target is not part of this LLVM build: {}", error));
  // Checked first: LLVM warns on stderr about a processor it does not know.
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(triple.str(), "", ""));
  if (arch.rfind("sm_", 0) != 0 || !subtarget || !subtarget->isCPUStringValid(arch))
    return absl::InvalidArgumentError(fmt::format(
        "unknown GPU architecture '{}' for the nvptx target; use sm_<version>, e.g. sm_80 or "
        "sm_90",
        arch));
  std::unique_ptr<llvm::TargetMachine> machine(
      target->createTargetMachine(triple.str(), arch, "", llvm::TargetOptions(), std::nullopt,
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
  if (!needsLibdevice(module))
    return absl::OkStatus();
  std::string path = libdevicePath(options);
  auto buffer = libdeviceBytes(path);
  if (!buffer)
    return absl::NotFoundError(fmt::format(
        "cannot read NVIDIA's libdevice at '{}' ({}), which the math functions of module '{}' "
        "need; install the CUDA toolkit's nvvm/libdevice or set QD_LIBDEVICE to the path of "
        "libdevice.10.bc",
        path, buffer.getError().message(), module.getModuleIdentifier()));
  auto lib = llvm::getLazyBitcodeModule(*buffer, module.getContext());
  if (!lib)
    return absl::InvalidArgumentError(fmt::format("'{}' is not a libdevice bitcode file: {}", path,
                                                  llvm::toString(lib.takeError())));
  (*lib)->setTargetTriple(module.getTargetTriple());
  (*lib)->setDataLayout(module.getDataLayout());
  if (llvm::Linker::linkModules(module, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
    return absl::InternalError(fmt::format("cannot link libdevice '{}' into module '{}'", path,
                                           module.getModuleIdentifier()));
  return absl::OkStatus();
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
  // The launch words keep their name: the runtime writes them.
  llvm::internalizeModule(module, [](const llvm::GlobalValue &gv) {
    return isEntry(gv) || gv.getName() == kLaunchWordsSymbol;
  });
  optimizeModule(module, &tm);
  std::string text;
  llvm::raw_string_ostream verifyOut(text);
  if (llvm::verifyModule(module, &verifyOut))
    return absl::InternalError("optimised NVPTX module is invalid: " + text);
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    return absl::InternalError(
        fmt::format("the NVPTX target machine for '{}' cannot emit PTX", options.arch));
  pm.run(module);
  return std::string(ptx.str());
}

} // namespace qd
