//===- CudaReduction.h - Launch-time reductions on NVIDIA GPUs --*- C++ -*-===//
//
// Private to qd::runtime_cuda.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace qd::cuda {

/// The PTX of gpu::Reducer's kernels (sm_70 and later).
std::string reductionPtx();

} // namespace qd::cuda
