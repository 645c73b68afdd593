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

  GroupIds groupIds(EmitContext &c, llvm::IRBuilderBase &eb) override {
    auto sreg = [&](llvm::Intrinsic::ID id) { return eb.CreateCall(c.intrinsic(id, {}), {}); };
    return {sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x),
            sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x),
            sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x)};
  }

  LV *groupCount(EmitContext &c, llvm::IRBuilderBase &eb, const GroupIds &) override {
    return eb.CreateCall(c.intrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, {}), {});
  }

  void groupBarrier(EmitContext &c) override {
    c.b.CreateCall(c.intrinsic(llvm::Intrinsic::nvvm_barrier0, {}), {});
  }

  std::string mathSymbol(MathFn fn, ScalarType type) const override {
    return fmt::format("__nv_{}{}", libmName(fn), type == ScalarType::F32 ? "f" : "");
  }

  llvm::SyncScope::ID atomicScope(EmitContext &) const override { return llvm::SyncScope::System; }

  /// When the whole warp is here and updates one address: a butterfly sum
  /// over its lanes (deterministic within the warp), then lane 0's update;
  /// otherwise each lane's own.
  void uniformAtomicUpdate(EmitContext &c, llvm::AtomicRMWInst::BinOp op, LV *ptr, LV *value,
                           llvm::Align align) override {
    if (op != llvm::AtomicRMWInst::FAdd && op != llvm::AtomicRMWInst::Add)
      return atomicUpdate(c, op, ptr, value, align);
    llvm::IRBuilder<> &b = c.b;
    auto call = [&](llvm::Intrinsic::ID id, llvm::ArrayRef<LV *> args) {
      return b.CreateCall(c.intrinsic(id, {}), args);
    };
    LV *all = b.getInt32(-1);
    LV *mask = call(llvm::Intrinsic::nvvm_activemask, {});
    LV *same = call(llvm::Intrinsic::nvvm_match_any_sync_i64, {mask, b.CreatePtrToInt(ptr, c.i64)});
    BasicBlock *warp = c.newBlock("warp.sum"), *lead = c.newBlock("warp.sum.lead");
    BasicBlock *own = c.newBlock("warp.sum.own"), *done = c.newBlock("warp.sum.done");
    b.CreateCondBr(b.CreateAnd(b.CreateICmpEQ(mask, all), b.CreateICmpEQ(same, all)), warp, own);
    b.SetInsertPoint(warp);
    llvm::Type *t = value->getType();
    unsigned words = unsigned(t->getPrimitiveSizeInBits() / 32);
    auto *wordsTy = llvm::FixedVectorType::get(c.i32, words);
    LV *sum = value;
    for (unsigned offset = 16; offset > 0; offset /= 2) {
      // The other lane's value, a 32-bit word at a time.
      LV *asWords = b.CreateBitCast(sum, wordsTy), *got = llvm::PoisonValue::get(wordsTy);
      for (unsigned w = 0; w < words; ++w)
        got = b.CreateInsertElement(
            got,
            call(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32,
                 {all, b.CreateExtractElement(asWords, w), b.getInt32(offset), b.getInt32(31)}),
            w);
      LV *other = b.CreateBitCast(got, t);
      sum = op == llvm::AtomicRMWInst::FAdd ? b.CreateFAdd(sum, other) : b.CreateAdd(sum, other);
    }
    LV *lane = call(llvm::Intrinsic::nvvm_read_ptx_sreg_laneid, {});
    b.CreateCondBr(b.CreateICmpEQ(lane, b.getInt32(0)), lead, done);
    b.SetInsertPoint(lead);
    atomicUpdate(c, op, ptr, sum, align);
    b.CreateBr(done);
    b.SetInsertPoint(own);
    atomicUpdate(c, op, ptr, value, align);
    b.CreateBr(done);
    b.SetInsertPoint(done);
  }
};

} // namespace

std::unique_ptr<LlvmTarget> createNvptxTarget() {
  return std::make_unique<NvptxTarget>();
}

} // namespace qd::codegen
