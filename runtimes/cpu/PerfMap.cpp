//===- PerfMap.cpp - Names of JIT-compiled functions for perf -------------===//
#include "PerfMap.h"

#include <fmt/format.h>
#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>

#include <cstdio>
#include <mutex>
#include <unistd.h>

namespace qd::cpu {
namespace {

/// Appends the named symbols of each linked graph (one file per process,
/// shared by every backend that writes it).
llvm::Error appendSymbols(llvm::jitlink::LinkGraph &g) {
  static std::mutex mu;
  static FILE *file = std::fopen(fmt::format("/tmp/perf-{}.map", getpid()).c_str(), "a");
  std::lock_guard lock(mu);
  if (!file)
    return llvm::Error::success();
  for (llvm::jitlink::Symbol *sym : g.defined_symbols())
    if (sym->hasName() && sym->getSize() > 0)
      fmt::print(file, "{:x} {:x} {}\n", sym->getAddress().getValue(), sym->getSize(),
                 sym->getName().str());
  std::fflush(file);
  return llvm::Error::success();
}

class PerfMapPlugin final : public llvm::orc::ObjectLinkingLayer::Plugin {
public:
  void modifyPassConfig(llvm::orc::MaterializationResponsibility &, llvm::jitlink::LinkGraph &,
                        llvm::jitlink::PassConfiguration &config) override {
    config.PostFixupPasses.push_back(llvm::jitlink::LinkGraphPassFunction(appendSymbols));
  }
  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility &) override {
    return llvm::Error::success();
  }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey) override {
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey,
                                   llvm::orc::ResourceKey) override {}
};

} // namespace

void writePerfMap(llvm::orc::LLJIT &jit) {
  if (auto *layer = llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&jit.getObjLinkingLayer()))
    layer->addPlugin(std::make_unique<PerfMapPlugin>());
}

} // namespace qd::cpu
