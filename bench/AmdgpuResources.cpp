//===- AmdgpuResources.cpp - Register and scratch use on AMD GPUs ---------===//
//
//   qd-bench-amdgpu-resources [--max-block-size=N]
//
// The gradient workloads of the benchmarks (GradientWorkloads.h: (a) sin,
// (b) triangular, (c) spring) compiled, forward and gradient (the kernel
// buildGradientKernel makes, as qd-bench-gpu runs it), to AMDGPU code
// objects for gfx90a, gfx942 and gfx1100, and what each code object's
// metadata says about every entry: VGPRs, SGPRs, spills and scratch bytes
// per thread (.vgpr_count, .sgpr_count, .vgpr_spill_count,
// .private_segment_fixed_size). Needs no GPU; docs/performance.md quotes
// its table.
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "GradientKernels.h"

#include "qd/codegen/llvm/Hsaco.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/ir/Parser.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace {

using qdbench::die;

/// One table row per entry of `kernel`'s code object for `arch`.
void report(const qd::Kernel &kernel, const std::string &workload, const std::string &arch,
            unsigned maxBlockSize) {
  llvm::LLVMContext context;
  qd::KernelLayout layout;
  auto module =
      qd::emitKernel(kernel, context, qd::CodegenOptions(), layout, qd::CodegenTarget::Amdgpu);
  if (!module.ok())
    die(fmt::format("@{}: {}", kernel.name(), std::string(module.status().message())));
  qd::HsacoOptions options;
  options.arch = arch;
  options.maxBlockSize = maxBlockSize;
  auto hsaco = qd::emitHsaco(**module, options);
  if (!hsaco.ok())
    die(fmt::format("@{} ({}): {}", kernel.name(), arch, std::string(hsaco.status().message())));
  auto kernels = qd::readHsacoKernels(*hsaco);
  if (!kernels.ok())
    die(std::string(kernels.status().message()));
  for (const qd::HsacoKernelInfo &k : *kernels)
    std::cout << fmt::format("| {} | @{} | {} | {} | {} | {} | {} | {} |\n", workload,
                             kernel.name(), k.name, arch, k.vgprCount, k.sgprCount,
                             k.vgprSpills + k.sgprSpills, k.privateSegmentBytes);
}

int run(int argc, char **argv) {
  unsigned maxBlockSize = qd::HsacoOptions().maxBlockSize;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--max-block-size=", 0) == 0)
      maxBlockSize = unsigned(std::strtoul(a.c_str() + 17, nullptr, 10));
    else
      die("unknown option '" + a + "' (takes --max-block-size=N)");
  }
  if (maxBlockSize == 0 || maxBlockSize > 1024)
    die("--max-block-size takes 1 to 1024");
  std::cout << "| workload | kernel | entry | arch | VGPRs | SGPRs | spills | scratch bytes |\n"
               "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const char *key : {"a", "b", "c"}) {
    const qdbench::KernelSpec &spec = qdbench::kernelSpec(key);
    auto parsed = qd::parseModule(spec.ir(1024, qdbench::KernelShape::Fields),
                                  {.filename = spec.key + ".qd"});
    if (!parsed.ok())
      die(std::string(parsed.status().message()));
    qd::Module &module = **parsed;
    qd::Kernel *fwd = module.findKernel(spec.kernel);
    if (!fwd)
      die("no kernel @" + spec.kernel);
    auto grad = qd::buildGradientKernel(module, *fwd);
    if (!grad.ok())
      die(std::string(grad.status().message()));
    for (const qd::AmdgpuArch &arch : qd::amdgpuArchs())
      for (const qd::Kernel *k :
           {static_cast<const qd::Kernel *>(fwd), static_cast<const qd::Kernel *>(*grad)})
        report(*k, "(" + spec.key + ")", std::string(arch.name), maxBlockSize);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-amdgpu-resources", argc, argv, run);
}
