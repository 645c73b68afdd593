//===- CudaReduction.cpp - Launch-time reductions on NVIDIA GPUs ----------===//
//
// The reduction kernels of gpu::Reducer (runtimes/gpu/GpuMemory.h) as
// hand-written PTX: a grid-stride loop, a warp reduction with shuffles, one
// atomic max per warp.
//
//===----------------------------------------------------------------------===//
#include "CudaReduction.h"

#include "../gpu/GpuMemory.h"

#include <fmt/format.h>

namespace qd::cuda {
namespace {

/// One reduction kernel: `name(data, begin, end, out)` folds elements
/// [begin, end) with a grid-stride loop, reduces each warp with shuffles
/// and lets lane 0 of each warp do one atomic max on *out (an int64 the
/// host initialised to INT64_MIN). Blocks must be whole warps.
std::string reductionKernel(const char *name, const char *load, unsigned shift) {
  return fmt::format(R"(
.visible .entry {0}(.param .u64 p_data, .param .u64 p_begin, .param .u64 p_end,
                    .param .u64 p_out)
{{
  .reg .pred %p<3>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [p_data];
  ld.param.u64 %rd2, [p_begin];
  ld.param.u64 %rd3, [p_end];
  ld.param.u64 %rd4, [p_out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd4, %rd4;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  mul.wide.u32 %rd5, %r1, %r2;
  cvt.u64.u32 %rd6, %r3;
  add.s64 %rd5, %rd5, %rd6;
  add.s64 %rd5, %rd5, %rd2;
  mul.wide.u32 %rd7, %r4, %r2;
  mov.b64 %rd8, 0x8000000000000000;
LOOP:
  setp.ge.s64 %p1, %rd5, %rd3;
  @%p1 bra REDUCE;
  shl.b64 %rd9, %rd5, {2};
  add.s64 %rd9, %rd1, %rd9;
  {1}
  max.s64 %rd8, %rd8, %rd10;
  add.s64 %rd5, %rd5, %rd7;
  bra LOOP;
REDUCE:
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 16, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 16, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 8, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 8, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 4, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 4, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 2, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 2, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  mov.b64 {{%r5, %r6}}, %rd8;
  shfl.sync.down.b32 %r7, %r5, 1, 31, -1;
  shfl.sync.down.b32 %r8, %r6, 1, 31, -1;
  mov.b64 %rd11, {{%r7, %r8}};
  max.s64 %rd8, %rd8, %rd11;
  and.b32 %r9, %r3, 31;
  setp.ne.u32 %p2, %r9, 0;
  @%p2 bra DONE;
  atom.global.max.s64 %rd12, [%rd4], %rd8;
DONE:
  ret;
}}
)",
                     name, load, shift);
}

} // namespace

std::string reductionPtx() {
  std::string out = ".version 7.0\n.target sm_70\n.address_size 64\n";
  out += reductionKernel(gpu::Reducer::kNames[0],
                         "ld.global.u8 %r10, [%rd9];\n  cvt.u64.u32 %rd10, %r10;", 0);
  out += reductionKernel(gpu::Reducer::kNames[1],
                         "ld.global.s32 %r10, [%rd9];\n  cvt.s64.s32 %rd10, %r10;", 2);
  out += reductionKernel(gpu::Reducer::kNames[2], "ld.global.s64 %rd10, [%rd9];", 3);
  return out;
}

} // namespace qd::cuda
