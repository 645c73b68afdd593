//===- HipBackend.cpp - AMD GPUs through HIP ------------------------------===//
//
// The HIP specifics of the GPU runtime (runtimes/gpu/GpuRuntime.h): code
// objects from the AMDGPU target, loaded with hipModuleLoadData, and the
// launch-time reductions as LLVM IR compiled for the device's architecture
// on first use.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/HipBackend.h"

#include "../gpu/GpuRuntime.h"

#include <fmt/format.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>

namespace qd {
namespace {

/// gpu::Reducer's kernel `name`: each thread folds a grid-stride share of
/// [begin, end) (the grid size is the dispatch packet's grid_size_x, at
/// byte 12) and does one device-wide atomic max on *out.
std::string reductionKernel(const char *name, const char *type, const char *extend) {
  return fmt::format(R"(
define amdgpu_kernel void @{0}(ptr addrspace(1) %data, i64 %begin, i64 %end,
                                ptr addrspace(1) %out) {{
entry:
  %group = call i32 @llvm.amdgcn.workgroup.id.x()
  %item = call i32 @llvm.amdgcn.workitem.id.x()
  %packet = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %size.at = getelementptr inbounds i8, ptr addrspace(4) %packet, i64 4
  %size16 = load i16, ptr addrspace(4) %size.at, align 4
  %size = zext i16 %size16 to i32
  %grid.at = getelementptr inbounds i8, ptr addrspace(4) %packet, i64 12
  %grid = load i32, ptr addrspace(4) %grid.at, align 4
  %stride = zext i32 %grid to i64
  %base = mul i32 %group, %size
  %id32 = add i32 %base, %item
  %id = zext i32 %id32 to i64
  %start = add i64 %begin, %id
  br label %loop
loop:
  %i = phi i64 [ %start, %entry ], [ %next, %body ]
  %best = phi i64 [ -9223372036854775808, %entry ], [ %max, %body ]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %at = getelementptr inbounds {1}, ptr addrspace(1) %data, i64 %i
  %raw = load {1}, ptr addrspace(1) %at
  %value = {2}
  %max = call i64 @llvm.smax.i64(i64 %best, i64 %value)
  %next = add i64 %i, %stride
  br label %loop
done:
  %old = atomicrmw max ptr addrspace(1) %out, i64 %best syncscope("agent") monotonic, align 8
  ret void
}}
)",
                     name, type, extend);
}

} // namespace

std::string HipBackend::reductionIR() {
  std::string ir = fmt::format("target triple = \"{}\"\n", kAmdgpuTriple);
  ir += "declare i32 @llvm.amdgcn.workgroup.id.x()\n"
        "declare i32 @llvm.amdgcn.workitem.id.x()\n"
        "declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()\n"
        "declare i64 @llvm.smax.i64(i64, i64)\n";
  ir += reductionKernel(gpu::Reducer::kNames[0], "i8", "zext i8 %raw to i64");
  ir += reductionKernel(gpu::Reducer::kNames[1], "i32", "sext i32 %raw to i64");
  ir += reductionKernel(gpu::Reducer::kNames[2], "i64", "add i64 %raw, 0");
  return ir;
}

absl::StatusOr<std::string> HipBackend::reductionCodeObject(const std::string &arch) {
  llvm::LLVMContext context;
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> module =
      llvm::parseAssemblyString(reductionIR(), diagnostic, context);
  if (!module)
    return absl::InternalError(fmt::format("amdgpu backend: the reduction kernels do not parse: {}",
                                           diagnostic.getMessage().str()));
  HsacoOptions options;
  options.arch = arch;
  options.maxBlockSize = gpu::Reducer::kBlock;
  return emitHsaco(*module, options);
}

struct HipBackend::Impl final : gpu::GpuRuntime {
  Impl(const HipBackendOptions &options, std::shared_ptr<const hip::Device> device,
       std::shared_ptr<gpu::Reducer> reducer, std::string arch)
      : GpuRuntime("amdgpu", "HipBackendOptions", device, std::move(reducer), options.blockSize,
                   options.maxThreads),
        options(options), hipDevice(std::move(device)), arch(std::move(arch)) {}

  CodegenTarget target() const override { return CodegenTarget::Amdgpu; }
  absl::StatusOr<std::string> translate(llvm::Module &module) override {
    HsacoOptions hsaco;
    hsaco.arch = arch;
    hsaco.maxBlockSize = options.blockSize;
    return emitHsaco(module, hsaco);
  }
  absl::StatusOr<std::unique_ptr<gpu::LoadedModule>> load(const std::string &code) override {
    auto loaded = hip::Module::load(*hipDevice, code);
    if (!loaded.ok())
      return absl::Status(loaded.status().code(),
                          fmt::format("HIP rejected its {} code object: {}", arch,
                                      std::string(loaded.status().message())));
    return std::unique_ptr<gpu::LoadedModule>(*std::move(loaded));
  }

  HipBackendOptions options;
  std::shared_ptr<const hip::Device> hipDevice;
  std::string arch;
};

HipBackend::HipBackend(std::unique_ptr<Impl> impl) : GpuBackend(std::move(impl)) {}

HipBackend::Impl &HipBackend::impl() const {
  return static_cast<Impl &>(runtime());
}

absl::StatusOr<std::unique_ptr<HipBackend>> HipBackend::create(const HipBackendOptions &options) {
  if (options.blockSize == 0 || options.blockSize > 1024)
    return absl::InvalidArgumentError(
        fmt::format("amdgpu backend: block size {} is outside [1, 1024]", options.blockSize));
  if (!options.arch.empty())
    if (auto known = findAmdgpuArch(options.arch); !known.ok())
      return known.status();
  auto opened = hip::Device::open(options.device);
  if (!opened.ok())
    return opened.status();
  std::shared_ptr<const hip::Device> device(*std::move(opened));
  std::string arch = options.arch.empty() ? device->info().arch : options.arch;
  if (arch.empty())
    return absl::FailedPreconditionError(
        fmt::format("amdgpu backend: HIP does not say which architecture GPU {} ({}) is; set "
                    "HipBackendOptions::arch (qd-run --amdgpu-arch)",
                    device->info().ordinal, device->info().name));
  if (auto known = findAmdgpuArch(arch); !known.ok())
    return absl::FailedPreconditionError(fmt::format(
        "amdgpu backend: GPU {} ({}) is a {}, which qd does not compile for: {}",
        device->info().ordinal, device->info().name, arch, std::string(known.status().message())));
  auto reducer = std::make_shared<gpu::Reducer>(
      device, [device, arch]() -> absl::StatusOr<std::unique_ptr<gpu::LoadedModule>> {
        auto code = reductionCodeObject(arch);
        if (!code.ok())
          return code.status();
        auto m = hip::Module::load(*device, *code);
        if (!m.ok())
          return m.status();
        return std::unique_ptr<gpu::LoadedModule>(*std::move(m));
      });
  return std::unique_ptr<HipBackend>(
      new HipBackend(std::make_unique<Impl>(options, device, std::move(reducer), arch)));
}

const hip::DeviceInfo &HipBackend::deviceInfo() const {
  return impl().hipDevice->info();
}
const std::string &HipBackend::arch() const {
  return impl().arch;
}

} // namespace qd
