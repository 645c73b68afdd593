//===- GradientLaunch.cpp - A kernel and its gradient ---------------------===//
#include "qd/runtime/GradientLaunch.h"

#include "AdjointFill.h"

#include "qd/ir/Visitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace qd {

std::string_view AdjointRef::name() const {
  return field ? std::string_view(field->name()) : std::string_view(ndarray->name());
}

std::string AdjointRef::str() const {
  return fmt::format("{}{}.grad", field ? '@' : '%', name());
}

GradientAdjoints gradientAdjoints(const Kernel &gradient) {
  GradientAdjoints out;
  auto note = [](std::vector<AdjointRef> &list, const AdjointRef &r) {
    if (std::find(list.begin(), list.end(), r) == list.end())
      list.push_back(r);
  };
  walk(const_cast<Kernel &>(gradient).body(), [&](Stmt &s) {
    auto *g = dyn_cast<GlobalAccessStmt>(&s);
    if (!g || g->component() != Component::Grad)
      return;
    AdjointRef r{g->field(), g->isField() ? nullptr : cast<Argument>(g->ndarray())};
    if (isa<GlobalLoadStmt>(g))
      note(out.consumed, r);
    else if (isa<AtomicAddStmt>(g))
      note(out.accumulated, r);
  });
  return out;
}

namespace runtime_detail {

void fillWith(Buffer &b, double value) {
  std::byte *d = b.data();
  int64_t n = b.numElements();
  if (value == 0.0) {
    std::memset(d, 0, b.sizeInBytes());
    return;
  }
  if (b.elementType() == ScalarType::F32) {
    float *f = reinterpret_cast<float *>(d);
    std::fill(f, f + n, float(value));
  } else if (b.elementType() == ScalarType::F64) {
    double *f = reinterpret_cast<double *>(d);
    std::fill(f, f + n, value);
  } else {
    for (int64_t i = 0; i < n; ++i)
      b.set(i, Scalar::ofInt(b.elementType(), int64_t(value)));
  }
}

} // namespace runtime_detail

absl::Status launchWithGradient(Program &program, const Kernel &forward, const Kernel &gradient,
                                std::span<const LaunchArg> args, std::span<const AdjointSeed> seeds,
                                Backend &backend, const LaunchOptions &options) {
  GradientAdjoints adj = gradientAdjoints(gradient);
  auto bufferOf = [&](const AdjointRef &r) -> absl::StatusOr<Buffer *> {
    if (r.field) {
      if (Buffer *b = program.field(*r.field, Component::Grad))
        return b;
      return absl::InvalidArgumentError(
          fmt::format("kernel @{}: the program has no {}", gradient.name(), r.str()));
    }
    unsigned i = r.ndarray->index();
    if (i < args.size() && args[i].isNdarray() && args[i].ndarrayValue().grad)
      return args[i].ndarrayValue().grad;
    return absl::InvalidArgumentError(
        fmt::format("kernel @{}: argument {} ({}) needs a grad buffer for {}; pass "
                    "NdarrayArg::grad",
                    gradient.name(), i, r.ndarray->name(), r.str()));
  };
  // Everything is checked before anything is written.
  std::vector<std::pair<Buffer *, double>> writes;
  for (const AdjointSeed &s : seeds) {
    auto it = std::find_if(adj.consumed.begin(), adj.consumed.end(),
                           [&](const AdjointRef &r) { return r.name() == s.name; });
    if (it == adj.consumed.end()) {
      std::string names;
      for (const AdjointRef &r : adj.consumed)
        names += fmt::format("{}{}", names.empty() ? "" : ", ", r.name());
      return absl::InvalidArgumentError(fmt::format(
          "kernel @{}: the seed '{}' names no adjoint the gradient consumes (it consumes: {})",
          gradient.name(), s.name, names.empty() ? "none" : names));
    }
    if (std::count_if(seeds.begin(), seeds.end(),
                      [&](const AdjointSeed &o) { return o.name == s.name; }) > 1)
      return absl::InvalidArgumentError(
          fmt::format("kernel @{}: the seed '{}' is given twice", gradient.name(), s.name));
  }
  auto seedOf = [&](const AdjointRef &r) {
    for (const AdjointSeed &s : seeds)
      if (s.name == r.name())
        return s.value;
    return 0.0;
  };
  for (const AdjointRef &r : adj.accumulated) {
    absl::StatusOr<Buffer *> b = bufferOf(r);
    if (!b.ok())
      return b.status();
    writes.emplace_back(*b, 0.0);
  }
  for (const AdjointRef &r : adj.consumed) {
    absl::StatusOr<Buffer *> b = bufferOf(r);
    if (!b.ok())
      return b.status();
    // An array both accumulated and consumed starts from its seed.
    std::erase_if(writes, [&](const auto &w) { return w.first == *b; });
    writes.emplace_back(*b, seedOf(r));
  }
  if (absl::Status s = validateLaunchArgs(forward, args); !s.ok())
    return s;
  for (auto &[b, value] : writes)
    runtime_detail::fillWith(*b, value);
  if (absl::Status s = program.launch(forward.name(), args, backend, options); !s.ok())
    return s;
  return program.launch(gradient.name(), args, backend, options);
}

} // namespace qd
