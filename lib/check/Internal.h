//===- Internal.h - The gradient checker's steps ----------------*- C++ -*-===//
//
// checkGradient (GradCheck.cpp) runs four steps:
//  1. makePlan (Plan.cpp): which float globals and scalar arguments the
//     kernel reads and writes, which of them are the check's inputs and
//     outputs, the weights of the objective, the sampled elements, and the
//     launch values converted to their declared types;
//  2. prepareModules (Modules.cpp): the checker's copy of the module with
//     grad and dual companions, scalar-argument inputs lifted to 0-d fields,
//     and the gradient and dual kernels; and the f64 copy for finite
//     differences;
//  3. launches on fresh instances of either module (Instance.cpp);
//  4. comparison and the report (GradCheck.cpp, Report.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/check/GradCheck.h"

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace qd::gradcheck {

/// A float field or ndarray the kernel accesses, or a float scalar
/// argument it uses.
struct Global {
  enum class Kind : uint8_t { Field, Ndarray, Scalar };
  Kind kind = Kind::Field;
  /// Field or argument name, without the sigil.
  std::string name;
  /// The argument's index (ndarrays and scalars).
  unsigned arg = 0;
  ScalarType type = ScalarType::F64;
  std::vector<int64_t> shape;
  int64_t elements = 1;
  bool read = false;
  bool written = false;
  /// For a scalar argument that is an input: the 0-d field of the
  /// checker's module that stands for it in the differentiated kernels.
  std::string lifted;

  /// `@x` or `%a`.
  std::string display() const;
};

/// A direction in an input's elements: (flat index, coefficient) pairs.
using Direction = std::vector<std::pair<int64_t, double>>;

struct Plan {
  std::string kernel;
  std::vector<Global> globals;
  /// Indices into `globals`, in declaration order (fields, then arguments).
  std::vector<size_t> inputs;
  std::vector<size_t> outputs;
  /// The weight of every element of each output (parallel to `outputs`).
  std::vector<std::vector<double>> weights;
  /// The elements checked one by one, per input (parallel to `inputs`),
  /// and the direction of an input's directional check (empty: none).
  std::vector<std::vector<int64_t>> checked;
  std::vector<Direction> directions;
  /// Launch values in their declared types: initial field contents by
  /// field name, argument values by argument index.
  std::map<std::string, std::vector<Scalar>> fieldValues;
  std::vector<std::vector<Scalar>> argValues;
  std::vector<std::vector<int64_t>> argShapes;
  ScalarType precision = ScalarType::F64;
  double rtol = 0;
  double atol = 0;
};

absl::StatusOr<Plan> makePlan(const Module &module, const Kernel &kernel,
                              const GradCheckInputs &inputs, const GradCheckOptions &options);

/// The modules the checker launches.
struct Modules {
  /// A copy of the module with grad and dual companions on every float
  /// global the kernel touches, scalar-argument inputs lifted to fields,
  /// and the gradient and dual kernels.
  std::unique_ptr<Module> ad;
  /// A copy of the module with every f32 widened to f64.
  std::unique_ptr<Module> wide;
  /// Kernel names in `ad` (empty when that mode is not checked).
  std::string gradient;
  std::string dual;
};

/// `@a, @b`: the module's kernels, for messages.
std::string kernelList(const Module &m);

/// Builds the modules; sets Global::lifted in `plan` for the lifted
/// scalar arguments.
absl::StatusOr<Modules> prepareModules(const Module &module, Plan &plan,
                                       const GradCheckOptions &options);

/// A fresh program of one of the modules with the plan's launch values,
/// its ndarray buffers (with every companion the kernel declares) and its
/// launch arguments.
class Instance {
public:
  static absl::StatusOr<std::unique_ptr<Instance>> create(const Module &module, const Plan &plan);

  /// Element `flat` of a global's component. A scalar argument is read from
  /// and written to its lifted field when this module has one, else (the
  /// primal only) to the launch argument.
  double get(const Global &g, Component c, int64_t flat);
  void set(const Global &g, Component c, int64_t flat, double value);
  /// Adds `scale * coefficient` to the primal elements of `direction`.
  void perturb(const Global &g, const Direction &direction, double scale);
  /// Every element of a global's component, row-major.
  std::vector<double> all(const Global &g, Component c);

  absl::Status launch(const std::string &kernel, Backend &backend, const LaunchOptions &options);

private:
  Instance() = default;
  Buffer *buffer(const Global &g, Component c);

  const Module *module_ = nullptr;
  std::unique_ptr<Program> program_;
  std::vector<Buffer> primal_, grad_, dual_; // per argument (ndarrays only)
  std::vector<NdarrayArg> ndarrays_;
  std::vector<LaunchArg> args_;
};

/// Seeded pseudo-random numbers (splitmix64): reproducible on every
/// platform, unlike the standard distributions.
class Random {
public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next();
  /// Uniform in [0, n).
  uint64_t below(uint64_t n) { return next() % n; }
  /// +-(0.5 + k / 256) for k in [0, 256): never near zero, exact in f32.
  double weight();

private:
  uint64_t state_;
};

} // namespace qd::gradcheck
