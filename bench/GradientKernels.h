//===- GradientKernels.h - The qd kernels of the gradient benchmarks -*- C++ -*-===//
//
// The workloads of GradientWorkloads.h as qd IR text, shared by
// qd-bench-gradients (CPU) and qd-bench-gpu (CUDA, Vulkan), in the shapes a
// kernel reaches qd in:
//
//   fields     f32 fields of a fixed size with grad companions, the loop's
//              trip count read from an i32 field (qd's own benchmarks);
//   ndarray    what a DSL front-end emits: every array an ndarray argument
//              with a grad companion, the task bound its `shape`, the trip
//              count a constant;
//   ndarray-n  the same with the trip count a scalar i32 argument.
//
// A KernelSpec names the forward kernel, the arrays whose adjoints form the
// gradient and the output whose adjoint is seeded; WorkloadData holds the
// storage of one instance in either shape (the Program's fields, or buffers
// passed as ndarray arguments) and its launch arguments.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/runtime/Program.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qdbench {

enum class KernelShape { Fields, Ndarray, NdarrayArgTrip };

/// "fields", "ndarray", "ndarray-n".
std::string_view shapeName(KernelShape s);
/// Parses a comma-separated list of shape names; dies on an unknown one.
std::vector<KernelShape> parseShapes(std::string_view list);

/// (a) kernel @sinloop: y[i] = f(x[i]), K = kSinSteps.
std::string sinIR(int64_t n, KernelShape shape = KernelShape::Fields);
/// (b) kernel @tri: y[i] = g(x[i]) with the per-element bounds m[i].
std::string triIR(int64_t n, KernelShape shape = KernelShape::Fields);
/// (c) kernel @spring: out[i] from p[i, :], q[i, :], T = kSpringSteps.
std::string springIR(int64_t n, KernelShape shape = KernelShape::Fields);

/// What a benchmark needs to know about one workload's qd kernel.
struct KernelSpec {
  std::string key;    // "a", "b" or "c"
  std::string kernel; // the forward kernel
  std::string (*ir)(int64_t n, KernelShape shape) = nullptr;
  std::vector<std::string> gradFields; // input arrays whose adjoints are the gradient
  std::string seed;                    // the output whose adjoint is seeded with 1
  int64_t gradElemsPerItem = 1;        // gradient floats per element and array (kChain for (c))
};

/// The spec of workload `key` ("a", "b", "c"); dies on another key.
const KernelSpec &kernelSpec(std::string_view key);

/// The arrays of one instance of a workload's kernel, by name (without `@`
/// or `%`), in either shape, with its inputs filled.
class WorkloadData {
public:
  /// For the module `kernelSpec(key).ir(n, shape)` instantiated as `p`:
  /// fields resolve to `p`'s storage; ndarrays get buffers of their own.
  WorkloadData(std::string_view key, KernelShape shape, qd::Program &p, int64_t n);
  WorkloadData(const WorkloadData &) = delete;
  WorkloadData &operator=(const WorkloadData &) = delete;

  /// The array `name`'s component; dies when it is missing.
  qd::Buffer &buffer(std::string_view name, qd::Component c = qd::Component::Primal);
  /// Host storage of an f32 array (marks the host side newer).
  float *f32(std::string_view name, qd::Component c = qd::Component::Primal);
  /// The arguments of the forward and the gradient kernel (they take the
  /// same ones): none in the fields shape.
  std::span<const qd::LaunchArg> args() const { return args_; }
  /// Host bytes of the arrays (every field of the module in the fields shape).
  int64_t hostBytes();
  /// Zeroes the adjoints of the gradient arrays and seeds the output's with 1.
  void zeroGradsAndSeed();

private:
  void addNdarray(std::string_view name, qd::ScalarType elem, std::vector<int64_t> shape,
                  bool grad);
  qd::Program &program_;
  const KernelSpec &spec_;
  KernelShape shape_;
  std::map<std::string, qd::Buffer, std::less<>> owned_; // "name" and "name.grad"
  std::deque<qd::NdarrayArg> ndarrays_;                  // stable addresses for args_
  std::vector<qd::LaunchArg> args_;
};

} // namespace qdbench
