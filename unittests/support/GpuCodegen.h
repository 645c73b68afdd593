//===- GpuCodegen.h - What the GPU code generator tests share ---*- C++ -*-===//
//
// A kernel of IR text emitted for a GPU target, and the check of its
// device launches.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/KernelLayout.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>

#include <string>

namespace qd {

/// "" when `layout`'s launches are well formed for `m`: every parallel task
/// once, in order, named qd_task_<n>; serial entries numbered in order and
/// never adjacent; every entry a kernel (a function of calling convention
/// `kernelConv`) of `m` and every kernel an entry or a task's cooperative
/// form (`<entry>_coop`).
inline std::string checkLaunches(const KernelLayout &layout, const llvm::Module &m,
                                 llvm::CallingConv::ID kernelConv) {
  int nextTask = 0, nextSerial = 0;
  size_t alternatives = 0;
  bool lastSerial = false;
  for (const KernelLayout::Launch &l : layout.launches) {
    const llvm::Function *f = m.getFunction(l.function);
    if (!f || f->getCallingConv() != kernelConv)
      return fmt::format("launch '{}' is not a kernel of the module", l.function);
    if (l.kind == KernelLayout::Launch::Parallel) {
      if (l.task != nextTask || l.function != fmt::format("qd_task_{}", nextTask))
        return fmt::format("parallel launch '{}' (task {}) out of order; expected task {}",
                           l.function, l.task, nextTask);
      // A task with a run-time trip count may have its cooperative form
      // too, a kernel of its own.
      if (!l.cooperativeFunction.empty()) {
        const llvm::Function *coop = m.getFunction(l.cooperativeFunction);
        if (!coop || coop->getCallingConv() != kernelConv ||
            l.cooperativeFunction != l.function + "_coop" || l.cooperativeIterations <= 0)
          return fmt::format("launch '{}': its cooperative form '{}' is not a kernel of the "
                             "module (or has no iterations)",
                             l.function, l.cooperativeFunction);
        ++alternatives;
      }
      ++nextTask;
      lastSerial = false;
    } else {
      if (lastSerial)
        return fmt::format("serial launch '{}' follows another serial launch", l.function);
      if (l.task != -1 || l.function != fmt::format("qd_serial_{}", nextSerial++))
        return fmt::format("serial launch '{}' misnamed", l.function);
      lastSerial = true;
    }
  }
  if (nextTask != static_cast<int>(layout.tasks.size()))
    return fmt::format("{} parallel launches for {} tasks", nextTask, layout.tasks.size());
  size_t kernels = 0;
  for (const llvm::Function &f : m)
    kernels += f.getCallingConv() == kernelConv;
  if (kernels != layout.launches.size() + alternatives)
    return fmt::format("{} kernels for {} launches and {} cooperative forms", kernels,
                       layout.launches.size(), alternatives);
  for (const KernelLayout::Task &t : layout.tasks)
    if (t.lanes != 1)
      return "a task with SIMD lanes";
  return "";
}

/// Serial runs (with values later entries use) between parallel tasks, one
/// of which calls exp: a kernel @k with five device launches.
inline constexpr const char *kMixed = R"(
field @x : f32[64]
field @n : i32

kernel @k(%m: i32, %s: f32) {
  %c = const 2.5 : f32
  %t = mul %s, %c : f32
  %nn = load @n[] : i32
  parallel for %i = 0 to %nn {
    %v = load @x[%i] : f32
    %w = mul %v, %t : f32
    store @x[%i], %w
  }
  %q = add %m, %m : i32
  serial {
    %z = const 0 : i32
    store @x[%z], %t
  }
  parallel for %j = 0 to %q {
    %u = load @x[%j] : f32
    %e = exp %u : f32
    store @x[%j], %e
  }
  parallel for %l = 0 to 4 {
    %r = load @x[%l] : f32
    store @x[%l], %r
  }
}
)";

/// A module parsed from text and one of its kernels emitted for a target.
struct EmittedKernel {
  std::unique_ptr<Module> module;
  llvm::LLVMContext context;
  KernelLayout layout;
  std::unique_ptr<llvm::Module> llvmModule;
};

/// Kernel `kernel` of module `text` emitted for `target` (null, with a test
/// failure, when that fails).
inline std::unique_ptr<EmittedKernel>
emitForTarget(const std::string &text, const std::string &kernel, CodegenTarget target) {
  auto e = std::make_unique<EmittedKernel>();
  auto parsed = parseModule(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  if (!parsed.ok())
    return nullptr;
  e->module = std::move(*parsed);
  EXPECT_TRUE(verify(*e->module).ok());
  auto m =
      emitKernel(*e->module->findKernel(kernel), e->context, CodegenOptions(), e->layout, target);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  e->llvmModule = std::move(*m);
  return e;
}

} // namespace qd
