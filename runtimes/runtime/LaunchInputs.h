//===- LaunchInputs.h - What a launch's SizeExprs read ----------*- C++ -*-===//
//
// Private to qd::runtime: Program sizes adstacks (Program.cpp) and the
// measured task of an optimistic launch (OptimisticLaunch.cpp) from it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/analysis/SizeExpr.h"
#include "qd/runtime/Program.h"

#include <optional>
#include <span>
#include <string>

namespace qd::runtime_detail {

/// What a SizeExpr reads, taken from a launch's arguments and the program's
/// live field storage. A buffer whose current contents live on a device is
/// read there, element by element or reduced on the device, never copied
/// back whole; a failed device read is kept in `error()`.
class LaunchInputs : public SizeExprInputs {
public:
  LaunchInputs(Program &program, std::span<const LaunchArg> args)
      : program_(program), args_(args) {}

  const absl::Status &error() const { return error_; }
  /// Reads of the 0-d field `name` give `value` instead of its contents
  /// (the interval of a checkpointed gradient, tried before it is chosen).
  void overrideField(std::string name, int64_t value) {
    overridden_ = std::move(name);
    overrideValue_ = value;
  }

  std::optional<int64_t> scalarArg(unsigned i) const override {
    if (i >= args_.size() || args_[i].isNdarray() || isFloat(args_[i].scalarValue().type))
      return std::nullopt;
    return args_[i].scalarValue().i;
  }
  std::optional<int64_t> fieldElement(const std::string &name,
                                      std::span<const int64_t> idx) const override {
    if (overridden_ && name == *overridden_)
      return overrideValue_;
    return element(program_.field(name), idx);
  }
  std::optional<int64_t> ndarrayShape(unsigned i, unsigned axis) const override {
    const Buffer *b = ndarray(i);
    if (!b || axis >= b->ndim())
      return std::nullopt;
    return b->shape()[axis];
  }
  std::optional<int64_t> ndarrayElement(unsigned i, std::span<const int64_t> idx) const override {
    return element(ndarray(i), idx);
  }
  std::optional<SizeExprBufferView> fieldView(const std::string &name) const override {
    if (overridden_ && name == *overridden_)
      return std::nullopt;
    return view(program_.field(name));
  }
  std::optional<SizeExprBufferView> ndarrayView(unsigned i) const override {
    return view(ndarray(i));
  }
  std::optional<int64_t> fieldExtent(const std::string &name) const override {
    const Buffer *b = program_.field(name);
    if (!b || b->ndim() != 1)
      return std::nullopt;
    return b->shape()[0];
  }
  std::optional<int64_t> fieldRangeMax(const std::string &name, int64_t begin,
                                       int64_t end) const override {
    return rangeMax(program_.field(name), begin, end);
  }
  std::optional<int64_t> ndarrayRangeMax(unsigned i, int64_t begin, int64_t end) const override {
    return rangeMax(ndarray(i), begin, end);
  }

private:
  const Buffer *ndarray(unsigned i) const {
    if (i >= args_.size() || !args_[i].isNdarray())
      return nullptr;
    return args_[i].ndarrayValue().primal;
  }
  static std::optional<SizeExprBufferView> view(const Buffer *b) {
    if (!b || isFloat(b->elementType()) || !b->hostIsCurrent())
      return std::nullopt;
    // The maximum of a large range of a buffer a device holds too comes
    // from Buffer::maxInteger (rangeMax below): reduced on a GPU, and
    // remembered until the buffer is written, instead of a scan here before
    // every launch.
    bool elsewhere = b->ndim() == 1 && b->numElements() >= Buffer::kDeviceMaxElements &&
                     (b->prefersDeviceMax(b->numElements()) || b->remembersMax());
    return SizeExprBufferView{b->data(), b->elementType(), b->shape(), elsewhere};
  }
  std::optional<int64_t> element(const Buffer *b, std::span<const int64_t> idx) const {
    if (!b || isFloat(b->elementType()))
      return std::nullopt;
    std::optional<int64_t> flat = b->flatIndex(idx);
    if (!flat)
      return std::nullopt;
    return keep(b->readInteger(*flat));
  }
  std::optional<int64_t> rangeMax(const Buffer *b, int64_t begin, int64_t end) const {
    if (!b || isFloat(b->elementType()) || b->ndim() != 1)
      return std::nullopt;
    return keep(b->maxInteger(begin, end));
  }
  /// A device read that failed answers 0 and is reported after the
  /// evaluation (which then fails).
  std::optional<int64_t> keep(absl::StatusOr<int64_t> v) const {
    if (v.ok())
      return *v;
    if (error_.ok())
      error_ = v.status();
    return 0;
  }
  Program &program_;
  std::span<const LaunchArg> args_;
  mutable absl::Status error_;
  std::optional<std::string> overridden_;
  int64_t overrideValue_ = 0;
};

} // namespace qd::runtime_detail
