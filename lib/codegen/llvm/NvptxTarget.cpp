//===- NvptxTarget.cpp - The NVPTX hooks of the LLVM emitter --------------===//
//
// NVIDIA's names for what GpuTarget.h describes: entries are PTX kernels
// (the PTX_Kernel calling convention and an nvvm.annotations "kernel"
// entry), the global thread id comes from %ctaid, %ntid and %tid, and math
// calls libdevice (`__nv_sinf`; linked by emitPtx, qd/codegen/llvm/Ptx.h).
//
//===----------------------------------------------------------------------===//
#include "GpuTarget.h"

#include "qd/codegen/llvm/Ptx.h"

#include <fmt/format.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

namespace qd::codegen {
namespace {

class NvptxTarget final : public GpuTarget {
protected:
  const char *targetName() const override { return "nvptx"; }

  std::string prepareModule(EmitContext &c) override {
    auto machine = nvptxTargetMachine("sm_80"); // the data layout does not depend on it
    if (!machine.ok())
      return std::string(machine.status().message());
    c.module->setTargetTriple(kNvptxTriple);
    c.module->setDataLayout((*machine)->createDataLayout());
    return "";
  }

  llvm::Function *declareEntry(EmitContext &c, const std::string &name) override {
    auto *type = llvm::FunctionType::get(c.b.getVoidTy(), {c.ptrTy}, false);
    llvm::Function *fn =
        llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, c.module.get());
    fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn->addParamAttr(0, llvm::Attribute::NoAlias);
    llvm::Metadata *kernelMd[] = {llvm::ValueAsMetadata::get(fn),
                                  llvm::MDString::get(c.llvm, "kernel"),
                                  llvm::ValueAsMetadata::get(c.b.getInt32(1))};
    c.module->getOrInsertNamedMetadata("nvvm.annotations")
        ->addOperand(llvm::MDNode::get(c.llvm, kernelMd));
    return fn;
  }

  LV *globalThreadId(EmitContext &c, llvm::IRBuilderBase &eb) override {
    auto sreg = [&](llvm::Intrinsic::ID id) { return eb.CreateCall(c.intrinsic(id, {}), {}); };
    LV *block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    LV *size = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    LV *lane = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    return eb.CreateAdd(eb.CreateMul(block, size), lane, "thread");
  }

  std::string mathSymbol(MathFn fn, ScalarType type) const override {
    return fmt::format("__nv_{}{}", libmName(fn), type == ScalarType::F32 ? "f" : "");
  }

  llvm::SyncScope::ID atomicScope(EmitContext &) const override { return llvm::SyncScope::System; }
};

} // namespace

std::unique_ptr<LlvmTarget> createNvptxTarget() {
  return std::make_unique<NvptxTarget>();
}

} // namespace qd::codegen
