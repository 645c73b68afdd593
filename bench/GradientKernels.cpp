//===- GradientKernels.cpp - The qd kernels of the gradient benchmarks ---===//
//
// See GradientKernels.h.
//
//===----------------------------------------------------------------------===//
#include "GradientKernels.h"

#include "BenchMain.h"
#include "GradientWorkloads.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace qdbench {
namespace {

/// One f32 or i32 array of a workload: its element type and extents.
struct ArrayDecl {
  std::string name;
  std::string type; // "f32" or "i32"
  std::vector<int64_t> extents;
  bool grad = true;
};

/// How one workload's text spells its arrays and its trip count in a shape.
class Spelling {
public:
  Spelling(KernelShape shape, std::string kernel, std::vector<ArrayDecl> arrays,
           std::string trip = {})
      : shape_(shape), kernel_(std::move(kernel)), arrays_(std::move(arrays)),
        trip_(std::move(trip)) {}

  /// The field declarations and the kernel's signature up to its `{`, then
  /// (ndarray shapes) `%N`, the first array's extent.
  std::string header() const {
    std::string out, params;
    for (const ArrayDecl &a : arrays_) {
      if (shape_ == KernelShape::Fields) {
        out += fmt::format("field @{} : {}[{}]{}\n", a.name, a.type, fmt::join(a.extents, ", "),
                           a.grad ? " grad" : "");
      } else {
        params += fmt::format("{}%{}: ndarray<{}, {}>{}", params.empty() ? "" : ", ", a.name,
                              a.type, a.extents.size(), a.grad ? " grad" : "");
      }
    }
    if (!trip_.empty() && shape_ == KernelShape::Fields)
      out += fmt::format("field @{} : i32\n", trip_);
    if (!trip_.empty() && shape_ == KernelShape::NdarrayArgTrip)
      params += fmt::format(", %{}: i32", trip_);
    out += fmt::format("\nkernel @{}({}) {{\n", kernel_, params);
    if (shape_ != KernelShape::Fields)
      out += fmt::format("  %N = shape %{}, 0 : i32\n", arrays_.front().name);
    return out;
  }
  /// The task's bound: the constant extent, or `%N`.
  std::string bound() const {
    return shape_ == KernelShape::Fields ? std::to_string(arrays_.front().extents.front()) : "%N";
  }
  /// `@name` or `%name`.
  std::string ref(std::string_view name) const {
    return fmt::format("{}{}", shape_ == KernelShape::Fields ? '@' : '%', name);
  }
  /// The statement (indented by `indent`) that defines the trip count
  /// `%{trip}` (none where it is an argument).
  std::string tripCount(int value, std::string_view indent) const {
    switch (shape_) {
    case KernelShape::Fields:
      return fmt::format("{}%{} = load @{}[] : i32\n", indent, trip_, trip_);
    case KernelShape::Ndarray:
      return fmt::format("{}%{} = const {} : i32\n", indent, trip_, value);
    case KernelShape::NdarrayArgTrip:
      return "";
    }
    return "";
  }

private:
  KernelShape shape_;
  std::string kernel_;
  std::vector<ArrayDecl> arrays_;
  std::string trip_;
};

} // namespace

std::string_view shapeName(KernelShape s) {
  switch (s) {
  case KernelShape::Fields:
    return "fields";
  case KernelShape::Ndarray:
    return "ndarray";
  case KernelShape::NdarrayArgTrip:
    return "ndarray-n";
  }
  return "?";
}

std::vector<KernelShape> parseShapes(std::string_view list) {
  std::vector<KernelShape> out;
  for (const std::string &name : splitList(list)) {
    bool known = false;
    for (KernelShape s : {KernelShape::Fields, KernelShape::Ndarray, KernelShape::NdarrayArgTrip})
      if (shapeName(s) == name) {
        out.push_back(s);
        known = true;
      }
    if (!known)
      die(fmt::format("unknown kernel shape '{}' (fields, ndarray or ndarray-n)", name));
  }
  return out;
}

std::string sinIR(int64_t n, KernelShape shape) {
  Spelling s(shape, "sinloop", {{"x", "f32", {n}}, {"y", "f32", {n}}}, "n");
  return s.header() + fmt::format(R"(  parallel for %i = 0 to {bound} {{
    %xi = load {x}[%i] : f32
    %v = alloca f32
    store %v, %xi
{trip}    for %j = 0 to %n {{
      %a = load %v : f32
      %s = sin %a : f32
      %c = const 0.1 : f32
      %b = add %s, %c : f32
      store %v, %b
    }}
    %r = load %v : f32
    store {y}[%i], %r
  }}
}}
)",
                                  fmt::arg("bound", s.bound()), fmt::arg("x", s.ref("x")),
                                  fmt::arg("y", s.ref("y")),
                                  fmt::arg("trip", s.tripCount(kSinSteps, "    ")));
}

std::string triIR(int64_t n, KernelShape shape) {
  Spelling s(shape, "tri", {{"x", "f32", {n}}, {"y", "f32", {n}}, {"m", "i32", {n}, false}});
  return s.header() + fmt::format(R"(  parallel for %i = 0 to {bound} {{
    %xi = load {x}[%i] : f32
    %v = alloca f32
    store %v, %xi
    %mi = load {m}[%i] : i32
    for %j = 0 to %mi {{
      for %k = 0 to %j {{
        %a = load %v : f32
        %kf = cast %k : i32 to f32
        %c = const 0.01 : f32
        %d = mul %kf, %c : f32
        %e = add %a, %d : f32
        %s = sin %e : f32
        %h = const 0.1 : f32
        %b = add %s, %h : f32
        store %v, %b
      }}
    }}
    %r = load %v : f32
    store {y}[%i], %r
  }}
}}
)",
                                  fmt::arg("bound", s.bound()), fmt::arg("x", s.ref("x")),
                                  fmt::arg("y", s.ref("y")), fmt::arg("m", s.ref("m")));
}

/// The spring chain, generated: locals %P0..%P7, %Q0..%Q7.
std::string springIR(int64_t n, KernelShape shape) {
  Spelling s(shape, "spring",
             {{"p", "f32", {n, kChain}}, {"q", "f32", {n, kChain}}, {"out", "f32", {n}}}, "T");
  std::ostringstream o;
  o << s.header() << "  parallel for %i = 0 to " << s.bound() << " {\n";
  auto c = [&](const char *name, float v) {
    o << fmt::format("    %{} = const {:.9g} : f32\n", name, v);
  };
  c("zero", 0.0f);
  c("L", kSpringRest);
  c("C", kSpringCubic);
  c("K", kSpringK);
  c("D", kSpringDamp);
  c("dt", kSpringDt);
  for (int k = 0; k < kChain; ++k) {
    o << fmt::format("    %k{0} = const {0} : i32\n", k);
    o << fmt::format("    %p{0}in = load {1}[%i, %k{0}] : f32\n", k, s.ref("p"));
    o << fmt::format("    %q{0}in = load {1}[%i, %k{0}] : f32\n", k, s.ref("q"));
    o << fmt::format("    %P{0} = alloca f32\n    store %P{0}, %p{0}in\n", k);
    o << fmt::format("    %Q{0} = alloca f32\n    store %Q{0}, %q{0}in\n", k);
  }
  o << s.tripCount(kSpringSteps, "    ");
  o << "    for %t = 0 to %T {\n";
  for (int k = 0; k < kChain; ++k)
    o << fmt::format("      %p{0} = load %P{0} : f32\n      %q{0} = load %Q{0} : f32\n", k);
  for (int k = 0; k < kChain; ++k) {
    if (k == 0)
      o << "      %e0 = sub %p0, %L : f32\n";
    else
      o << fmt::format("      %d{0} = sub %p{0}, %p{1} : f32\n"
                       "      %e{0} = sub %d{0}, %L : f32\n",
                       k, k - 1);
    o << fmt::format("      %ee{0} = mul %e{0}, %e{0} : f32\n"
                     "      %eee{0} = mul %ee{0}, %e{0} : f32\n"
                     "      %ec{0} = mul %eee{0}, %C : f32\n"
                     "      %g{0} = add %e{0}, %ec{0} : f32\n",
                     k);
  }
  for (int k = 0; k < kChain; ++k) {
    std::string next = k + 1 < kChain ? fmt::format("%g{}", k + 1) : "%zero";
    o << fmt::format("      %fd{0} = sub {1}, %g{0} : f32\n"
                     "      %f{0} = mul %fd{0}, %K : f32\n"
                     "      %dq{0} = mul %D, %q{0} : f32\n"
                     "      %a{0} = sub %f{0}, %dq{0} : f32\n"
                     "      %adt{0} = mul %a{0}, %dt : f32\n"
                     "      %qn{0} = add %q{0}, %adt{0} : f32\n"
                     "      store %Q{0}, %qn{0}\n"
                     "      %dp{0} = mul %dt, %qn{0} : f32\n"
                     "      %pn{0} = add %p{0}, %dp{0} : f32\n"
                     "      store %P{0}, %pn{0}\n",
                     k, next);
  }
  o << "    }\n";
  o << "    %s0 = load %P0 : f32\n";
  for (int k = 1; k < kChain; ++k)
    o << fmt::format("    %l{0} = load %P{0} : f32\n    %s{0} = add %s{1}, %l{0} : f32\n", k,
                     k - 1);
  o << fmt::format("    store {}[%i], %s{}\n", s.ref("out"), kChain - 1);
  o << "  }\n}\n";
  return o.str();
}

const KernelSpec &kernelSpec(std::string_view key) {
  static const std::vector<KernelSpec> specs = {
      {"a", "sinloop", sinIR, {"x"}, "y", 1},
      {"b", "tri", triIR, {"x"}, "y", 1},
      {"c", "spring", springIR, {"p", "q"}, "out", kChain},
  };
  for (const KernelSpec &s : specs)
    if (s.key == key)
      return s;
  die(fmt::format("unknown workload '{}' (a, b or c)", key));
}

WorkloadData::WorkloadData(std::string_view key, KernelShape shape, qd::Program &p, int64_t n)
    : program_(p), spec_(kernelSpec(key)), shape_(shape) {
  using qd::ScalarType;
  if (key == "c") {
    addNdarray("p", ScalarType::F32, {n, kChain}, true);
    addNdarray("q", ScalarType::F32, {n, kChain}, true);
    addNdarray("out", ScalarType::F32, {n}, true);
  } else {
    addNdarray("x", ScalarType::F32, {n}, true);
    addNdarray("y", ScalarType::F32, {n}, true);
    if (key == "b")
      addNdarray("m", ScalarType::I32, {n}, false);
  }
  int32_t trip = key == "a" ? kSinSteps : kSpringSteps;
  if (shape == KernelShape::Fields && key != "b")
    *reinterpret_cast<int32_t *>(buffer(key == "a" ? "n" : "T").data()) = trip;
  if (shape == KernelShape::NdarrayArgTrip && key != "b")
    args_.push_back(qd::LaunchArg::i32(trip));

  if (key == "a" || key == "b") {
    float *x = f32("x");
    for (int64_t i = 0; i < n; ++i)
      x[i] = sinInput(i);
  }
  if (key == "b") {
    int32_t *m = reinterpret_cast<int32_t *>(buffer("m").data());
    for (int64_t i = 0; i < n; ++i)
      m[i] = triBound(i);
  }
  if (key == "c") {
    float *pp = f32("p"), *qq = f32("q");
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < kChain; ++k) {
        pp[i * kChain + k] = springP(i, k);
        qq[i * kChain + k] = springQ(i, k);
      }
  }
}

void WorkloadData::addNdarray(std::string_view name, qd::ScalarType elem,
                              std::vector<int64_t> shape, bool grad) {
  if (shape_ == KernelShape::Fields)
    return;
  auto make = [&](std::string key) {
    auto b = qd::Buffer::create(elem, shape);
    if (!b.ok())
      die(fmt::format("ndarray {}: {}", key, b.status().ToString()));
    return &owned_.emplace(key, std::move(*b)).first->second;
  };
  qd::NdarrayArg &a = ndarrays_.emplace_back();
  a.primal = make(std::string(name));
  if (grad)
    a.grad = make(std::string(name) + ".grad");
  args_.push_back(qd::LaunchArg::ndarray(&a));
}

qd::Buffer &WorkloadData::buffer(std::string_view name, qd::Component c) {
  qd::Buffer *b = nullptr;
  if (shape_ == KernelShape::Fields) {
    b = program_.field(name, c);
  } else {
    std::string key(name);
    if (c == qd::Component::Grad)
      key += ".grad";
    auto it = owned_.find(key);
    b = it == owned_.end() || c == qd::Component::Dual ? nullptr : &it->second;
  }
  if (!b)
    die(fmt::format("workload {}: no array {}{}", spec_.key, name,
                    c == qd::Component::Grad ? ".grad" : ""));
  return *b;
}

float *WorkloadData::f32(std::string_view name, qd::Component c) {
  qd::Buffer &b = buffer(name, c);
  if (b.elementType() != qd::ScalarType::F32)
    die(fmt::format("workload {}: {} is not f32", spec_.key, name));
  return reinterpret_cast<float *>(b.data());
}

int64_t WorkloadData::hostBytes() {
  int64_t bytes = 0;
  for (const auto &[name, b] : owned_)
    bytes += int64_t(b.sizeInBytes());
  for (const auto &f : program_.module().fields())
    for (qd::Component c : {qd::Component::Primal, qd::Component::Grad, qd::Component::Dual})
      if (qd::Buffer *b = f->hasComponent(c) ? program_.field(*f, c) : nullptr)
        bytes += int64_t(b->sizeInBytes());
  return bytes;
}

void WorkloadData::zeroGradsAndSeed() {
  for (const std::string &f : spec_.gradFields) {
    qd::Buffer &b = buffer(f, qd::Component::Grad);
    std::memset(b.data(), 0, b.sizeInBytes());
  }
  qd::Buffer &seed = buffer(spec_.seed, qd::Component::Grad);
  float *s = f32(spec_.seed, qd::Component::Grad);
  std::fill(s, s + seed.numElements(), 1.0f);
}

} // namespace qdbench
