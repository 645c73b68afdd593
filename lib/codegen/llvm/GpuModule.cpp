//===- GpuModule.cpp - Steps every GPU module goes through ----------------===//
#include "GpuModule.h"

#include "qd/abi/KernelLayout.h"
#include "qd/codegen/llvm/Optimize.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <map>
#include <mutex>

namespace qd::gpu {
namespace {

/// The bytes of the file at `path`, read once (LLVM parses lazily from
/// them).
llvm::ErrorOr<llvm::MemoryBufferRef> cachedFile(const std::string &path) {
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

bool declaresFunctionWithPrefix(const llvm::Module &module, const char *prefix) {
  for (const llvm::Function &f : module)
    if (f.isDeclaration() && f.getName().starts_with(prefix))
      return true;
  return false;
}

absl::Status linkBitcodeLibrary(llvm::Module &module, const std::string &path,
                                const std::string &library, const std::string &hint) {
  auto buffer = cachedFile(path);
  if (!buffer)
    return absl::NotFoundError(fmt::format(
        "cannot read {} at '{}' ({}), which the math functions of module '{}' need; {}", library,
        path, buffer.getError().message(), module.getModuleIdentifier(), hint));
  auto lib = llvm::getLazyBitcodeModule(*buffer, module.getContext());
  if (!lib)
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not {} bitcode: {}", path, library, llvm::toString(lib.takeError())));
  (*lib)->setTargetTriple(module.getTargetTriple());
  (*lib)->setDataLayout(module.getDataLayout());
  if (llvm::Linker::linkModules(module, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
    return absl::InternalError(fmt::format("cannot link {} '{}' into module '{}'", library, path,
                                           module.getModuleIdentifier()));
  return absl::OkStatus();
}

absl::StatusOr<const llvm::Target *> lookupTarget(const std::string &triple, const char *what) {
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return absl::InternalError(
        fmt::format("the {} target is not part of this LLVM build: {}", what, error));
  return target;
}

absl::Status optimizeKernels(llvm::Module &module, llvm::TargetMachine &tm,
                             llvm::CallingConv::ID kernels, const char *what) {
  // The launch words keep their name: the runtime writes them.
  llvm::internalizeModule(module, [&](const llvm::GlobalValue &gv) {
    auto *f = llvm::dyn_cast<llvm::Function>(&gv);
    return (f && f->getCallingConv() == kernels) || gv.getName() == kLaunchWordsSymbol;
  });
  // NVPTX: the CPU backend's tiers (Optimize.h), the light one for very
  // large or deeply nested kernels, whose O3 pipeline and code generation
  // grow faster than linearly (the gradient of a loop carrying 500 values
  // took 160 s to reach PTX). AMDGPU stays at O3: without it, the kernels'
  // code objects declare the hidden implicit arguments besides the launch
  // context (the AMDGPU attributor proves them unused), which the HIP
  // runtime's launch was never run with on a device.
  OptimizationTier tier =
      tm.getTargetTriple().isNVPTX() ? chooseTier(module, TierLimits()) : OptimizationTier::Full;
  optimizeModule(module, &tm, tier);
  if (tier == OptimizationTier::Light)
    tm.setOptLevel(llvm::CodeGenOptLevel::None);
  std::string text;
  llvm::raw_string_ostream verifyOut(text);
  if (llvm::verifyModule(module, &verifyOut))
    return absl::InternalError(fmt::format("optimised {} module is invalid: {}", what, text));
  return absl::OkStatus();
}

absl::StatusOr<std::string> emitMachineCode(llvm::Module &module, llvm::TargetMachine &tm,
                                            llvm::CodeGenFileType type, const std::string &what) {
  llvm::SmallString<0> out;
  llvm::raw_svector_ostream os(out);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type))
    return absl::InternalError(
        fmt::format("the target machine for '{}' cannot emit {}", tm.getTargetCPU().str(), what));
  pm.run(module);
  return std::string(out.str());
}

} // namespace qd::gpu
