//===- qd/ir/Module.h - Fields, kernels and modules -------------*- C++ -*-===//
#pragma once

#include "qd/ir/Stmt.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qd {

class Module;

/// A named dense global array (`field @x : f32[16] grad`). An empty shape is
/// a 0-d scalar field. Optional grad (adjoint) and dual (tangent) companions
/// have the same shape and element type.
class Field {
public:
  Field(std::string name, ScalarType elem, std::vector<int64_t> shape, bool grad, bool dual)
      : name_(std::move(name)), elem_(elem), shape_(std::move(shape)), grad_(grad), dual_(dual) {}

  const std::string &name() const { return name_; }
  ScalarType elementType() const { return elem_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  unsigned ndim() const { return static_cast<unsigned>(shape_.size()); }
  /// Number of elements (1 for a 0-d field).
  int64_t numElements() const;
  bool hasGrad() const { return grad_; }
  bool hasDual() const { return dual_; }
  void setHasGrad(bool v) { grad_ = v; }
  void setHasDual(bool v) { dual_ = v; }
  bool hasComponent(Component c) const;
  const Location &loc() const { return loc_; }
  void setLoc(Location l) { loc_ = std::move(l); }
  Module *module() const { return module_; }

private:
  friend class Module;
  std::string name_;
  ScalarType elem_;
  std::vector<int64_t> shape_;
  bool grad_;
  bool dual_;
  Location loc_;
  Module *module_ = nullptr;
};

/// A kernel parameter: a scalar (`%n: i32`) or an ndarray
/// (`%a: ndarray<f32, 2> grad`) whose shape is given at launch.
class Argument : public Value {
public:
  Argument(std::string name, Type type, bool grad = false, bool dual = false);

  unsigned index() const { return index_; }
  Kernel *kernel() const { return kernel_; }
  bool isNdarray() const { return type().isNdarray(); }
  bool hasGrad() const { return grad_; }
  bool hasDual() const { return dual_; }
  void setHasGrad(bool v) { grad_ = v; }
  void setHasDual(bool v) { dual_ = v; }
  bool hasComponent(Component c) const;
  const Location &loc() const { return loc_; }
  void setLoc(Location l) { loc_ = std::move(l); }

  static bool classof(const Value *v) { return v->valueKind() == ValueKind::Argument; }

private:
  friend class Kernel;
  unsigned index_ = 0;
  Kernel *kernel_ = nullptr;
  bool grad_;
  bool dual_;
  Location loc_;
};

/// A kernel: arguments and a top-level block holding tasks (`parallel for`,
/// `serial`) and launch-time scalar statements that compute task bounds.
class Kernel {
public:
  explicit Kernel(std::string name);
  ~Kernel();
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;

  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  Module *module() const { return module_; }
  /// A number no other kernel of this process has had or will have (unlike
  /// the kernel's address, which a later kernel may reuse): a key for caches
  /// of compiled code.
  uint64_t uniqueId() const { return uniqueId_; }
  const Location &loc() const { return loc_; }
  void setLoc(Location l) { loc_ = std::move(l); }

  Argument *addArgument(std::unique_ptr<Argument> arg);
  /// Shorthands a front-end writes one line per parameter with (`name`
  /// without the `%`): a scalar `%name: type`, and an ndarray
  /// `%name: ndarray<elem, rank>` with optional grad and dual companions.
  /// The verifier checks the rest (rank 1 to 8, unique names).
  Argument *addScalarArgument(std::string name, ScalarType type) {
    return addArgument(std::make_unique<Argument>(std::move(name), Type::scalar(type)));
  }
  Argument *addNdarrayArgument(std::string name, ScalarType elem, unsigned rank, bool grad = false,
                               bool dual = false) {
    return addArgument(
        std::make_unique<Argument>(std::move(name), Type::ndarray(elem, rank), grad, dual));
  }
  unsigned numArguments() const { return static_cast<unsigned>(args_.size()); }
  Argument *argument(unsigned i) const { return args_[i].get(); }
  Argument *findArgument(std::string_view name) const;
  Block &body() { return *body_; }
  const Block &body() const { return *body_; }

private:
  friend class Module;
  uint64_t uniqueId_;
  std::string name_;
  Module *module_ = nullptr;
  Location loc_;
  std::vector<std::unique_ptr<Argument>> args_;
  std::unique_ptr<Block> body_;
};

/// The unit of compilation: fields plus kernels that read and write them.
class Module {
public:
  Module() = default;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  ~Module();

  /// Adds a field; the caller ensures the name is unique (the parser and
  /// IRBuilder report duplicates).
  Field *addField(std::unique_ptr<Field> field);
  Field *findField(std::string_view name) const;
  const std::vector<std::unique_ptr<Field>> &fields() const { return fields_; }

  Kernel *addKernel(std::unique_ptr<Kernel> kernel);
  Kernel *findKernel(std::string_view name) const;
  const std::vector<std::unique_ptr<Kernel>> &kernels() const { return kernels_; }
  /// Removes and destroys a kernel.
  void eraseKernel(Kernel *kernel);

private:
  std::vector<std::unique_ptr<Field>> fields_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

} // namespace qd
