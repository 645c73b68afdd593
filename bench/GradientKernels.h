//===- GradientKernels.h - The qd kernels of the gradient benchmarks -*- C++ -*-===//
//
// The workloads of GradientWorkloads.h as qd IR text (f32 fields with grad
// companions), shared by qd-bench-gradients (CPU) and qd-bench-gpu (CUDA):
// the module text at N elements (chains for (c)), the forward kernel's name,
// the fields whose adjoints form the gradient, the output whose adjoint is
// seeded, and the inputs (the formulas of GradientWorkloads.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qdbench {

/// (a) kernel @sinloop: y[i] = f(x[i]), K from the field @n.
std::string sinIR(int64_t n);
/// (b) kernel @tri: y[i] = g(x[i]) with the bounds m[i] from the field @m.
std::string triIR(int64_t n);
/// (c) kernel @spring: out[i] from p[i, :], q[i, :], T from the field @steps.
std::string springIR(int64_t n);

/// What a benchmark needs to know about one workload's qd kernel.
struct KernelSpec {
  std::string key;    // "a", "b" or "c"
  std::string kernel; // the forward kernel
  std::string (*ir)(int64_t n) = nullptr;
  std::vector<std::string> gradFields; // input fields whose adjoints are the gradient
  std::string seed;                    // the output whose adjoint is seeded with 1
  int64_t gradElemsPerItem = 1;        // gradient floats per element and field (kChain for (c))
};

/// The spec of workload `key` ("a", "b", "c"); dies on another key.
const KernelSpec &kernelSpec(std::string_view key);

/// A field component's storage as floats / ints; dies when it is missing.
float *f32Field(qd::Program &p, std::string_view name, qd::Component c = qd::Component::Primal);
int32_t *i32Field(qd::Program &p, std::string_view name);

/// Fills the inputs of workload `key` (and its trip-count fields) into a
/// Program of the module `kernelSpec(key).ir(n)`.
void fillInputs(std::string_view key, qd::Program &p, int64_t n);

} // namespace qdbench
