//===- AmdgpuTarget.cpp - The AMDGPU hooks of the LLVM emitter ------------===//
//
// AMD's names for what GpuTarget.h describes: entries are AMDGPU kernels
// (the AMDGPU_KERNEL calling convention) whose context argument is a
// global-space pointer (kernel arguments in the kernarg segment, read with
// scalar loads), the global thread id comes from the work-group id, the
// work-group size in the dispatch packet and the work-item id, atomics are
// device-wide ("agent" scope: every buffer a launch binds is device
// memory; LLVM expands the float adds a GPU lacks into compare-and-swap
// loops), and math calls the ROCm device libraries' ocml (`__ocml_sin_f32`;
// linked by emitHsaco, qd/codegen/llvm/Hsaco.h). The wave size and the
// kernel attributes of the launch are the architecture's, set by emitHsaco:
// the emitted module does not depend on the architecture.
//
//===----------------------------------------------------------------------===//
#include "GpuTarget.h"

#include "qd/codegen/llvm/Hsaco.h"

#include <fmt/format.h>
#include <llvm/IR/IntrinsicsAMDGPU.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

namespace qd::codegen {
namespace {

/// The global address space of the AMDGPU target.
constexpr unsigned kGlobal = 1;
/// hsa_kernel_dispatch_packet_t::workgroup_size_x (a u16).
constexpr uint64_t kDispatchWorkgroupSizeX = 4;
/// hsa_kernel_dispatch_packet_t::grid_size_x (a u32, in work-items).
constexpr uint64_t kDispatchGridSizeX = 12;

class AmdgpuTarget final : public GpuTarget {
protected:
  const char *targetName() const override { return "amdgpu"; }

  std::string prepareModule(EmitContext &c) override {
    auto machine = amdgpuTargetMachine("gfx90a"); // the data layout does not depend on it
    if (!machine.ok())
      return std::string(machine.status().message());
    c.module->setTargetTriple(kAmdgpuTriple);
    c.module->setDataLayout((*machine)->createDataLayout());
    return "";
  }

  llvm::Function *declareEntry(EmitContext &c, const std::string &name) override {
    auto *type =
        llvm::FunctionType::get(c.b.getVoidTy(), {llvm::PointerType::get(c.llvm, kGlobal)}, false);
    llvm::Function *fn =
        llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, c.module.get());
    fn->setCallingConv(llvm::CallingConv::AMDGPU_KERNEL);
    fn->addParamAttr(0, llvm::Attribute::NoAlias);
    return fn;
  }

  LV *contextArgument(llvm::IRBuilderBase &eb, llvm::Function *fn) override {
    return eb.CreateAddrSpaceCast(fn->getArg(0), llvm::PointerType::get(eb.getContext(), 0), "ctx");
  }

  GroupIds groupIds(EmitContext &c, llvm::IRBuilderBase &eb) override {
    LV *block = eb.CreateCall(c.intrinsic(llvm::Intrinsic::amdgcn_workgroup_id_x, {}), {});
    LV *lane = eb.CreateCall(c.intrinsic(llvm::Intrinsic::amdgcn_workitem_id_x, {}), {});
    return {block, dispatchField(c, eb, kDispatchWorkgroupSizeX, eb.getInt16Ty()), lane};
  }

  LV *groupCount(EmitContext &c, llvm::IRBuilderBase &eb, const GroupIds &ids) override {
    // The grid's size is in work-items.
    return eb.CreateUDiv(dispatchField(c, eb, kDispatchGridSizeX, eb.getInt32Ty()), ids.size);
  }

  /// A field of the dispatch packet, as an i32.
  static LV *dispatchField(EmitContext &c, llvm::IRBuilderBase &eb, uint64_t at, llvm::Type *t) {
    LV *packet = eb.CreateCall(c.intrinsic(llvm::Intrinsic::amdgcn_dispatch_ptr, {}), {});
    LV *p = eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), packet, at);
    llvm::LoadInst *v = eb.CreateAlignedLoad(t, p, llvm::Align(4));
    v->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(c.llvm, {}));
    return eb.CreateZExt(v, c.i32);
  }

  void groupBarrier(EmitContext &c) override {
    llvm::SyncScope::ID group = c.llvm.getOrInsertSyncScopeID("workgroup");
    c.b.CreateFence(llvm::AtomicOrdering::Release, group);
    c.b.CreateCall(c.intrinsic(llvm::Intrinsic::amdgcn_s_barrier, {}), {});
    c.b.CreateFence(llvm::AtomicOrdering::Acquire, group);
  }

  std::string mathSymbol(MathFn fn, ScalarType type) const override {
    return fmt::format("__ocml_{}_f{}", libmName(fn), type == ScalarType::F32 ? 32 : 64);
  }

  llvm::SyncScope::ID atomicScope(EmitContext &c) const override {
    return c.llvm.getOrInsertSyncScopeID("agent");
  }
};

} // namespace

std::unique_ptr<LlvmTarget> createAmdgpuTarget() {
  return std::make_unique<AmdgpuTarget>();
}

} // namespace qd::codegen
