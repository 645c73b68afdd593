//===- GradientKernels.cpp - The qd kernels of the gradient benchmarks ---===//
//
// See GradientKernels.h.
//
//===----------------------------------------------------------------------===//
#include "GradientKernels.h"

#include "BenchMain.h"
#include "GradientWorkloads.h"

#include <fmt/format.h>

#include <sstream>

namespace qdbench {

std::string sinIR(int64_t n) {
  return fmt::format(R"(field @x : f32[{0}] grad
field @y : f32[{0}] grad
field @n : i32

kernel @sinloop() {{
  parallel for %i = 0 to {0} {{
    %xi = load @x[%i] : f32
    %v = alloca f32
    store %v, %xi
    %n = load @n[] : i32
    for %j = 0 to %n {{
      %a = load %v : f32
      %s = sin %a : f32
      %c = const 0.1 : f32
      %b = add %s, %c : f32
      store %v, %b
    }}
    %r = load %v : f32
    store @y[%i], %r
  }}
}}
)",
                     n);
}

std::string triIR(int64_t n) {
  return fmt::format(R"(field @x : f32[{0}] grad
field @y : f32[{0}] grad
field @m : i32[{0}]

kernel @tri() {{
  parallel for %i = 0 to {0} {{
    %xi = load @x[%i] : f32
    %v = alloca f32
    store %v, %xi
    %mi = load @m[%i] : i32
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
    store @y[%i], %r
  }}
}}
)",
                     n);
}

/// The spring chain, generated: locals %P0..%P7, %Q0..%Q7.
std::string springIR(int64_t n) {
  std::ostringstream o;
  o << fmt::format("field @p : f32[{0}, {1}] grad\nfield @q : f32[{0}, {1}] grad\n"
                   "field @out : f32[{0}] grad\nfield @steps : i32\n\n",
                   n, kChain);
  o << "kernel @spring() {\n";
  o << fmt::format("  parallel for %i = 0 to {} {{\n", n);
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
    o << fmt::format("    %p{0}in = load @p[%i, %k{0}] : f32\n", k);
    o << fmt::format("    %q{0}in = load @q[%i, %k{0}] : f32\n", k);
    o << fmt::format("    %P{0} = alloca f32\n    store %P{0}, %p{0}in\n", k);
    o << fmt::format("    %Q{0} = alloca f32\n    store %Q{0}, %q{0}in\n", k);
  }
  o << "    %T = load @steps[] : i32\n";
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
  o << fmt::format("    store @out[%i], %s{}\n", kChain - 1);
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

float *f32Field(qd::Program &p, std::string_view name, qd::Component c) {
  qd::Buffer *b = p.field(name, c);
  if (!b || b->elementType() != qd::ScalarType::F32)
    die(fmt::format("no f32 field {}", name));
  return reinterpret_cast<float *>(b->data());
}

int32_t *i32Field(qd::Program &p, std::string_view name) {
  qd::Buffer *b = p.field(name);
  if (!b || b->elementType() != qd::ScalarType::I32)
    die(fmt::format("no i32 field {}", name));
  return reinterpret_cast<int32_t *>(b->data());
}

void fillInputs(std::string_view key, qd::Program &p, int64_t n) {
  if (key == "a") {
    float *x = f32Field(p, "x");
    for (int64_t i = 0; i < n; ++i)
      x[i] = sinInput(i);
    *i32Field(p, "n") = kSinSteps;
  } else if (key == "b") {
    float *x = f32Field(p, "x");
    int32_t *m = i32Field(p, "m");
    for (int64_t i = 0; i < n; ++i) {
      x[i] = sinInput(i);
      m[i] = triBound(i);
    }
  } else if (key == "c") {
    float *pp = f32Field(p, "p"), *qq = f32Field(p, "q");
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < kChain; ++k) {
        pp[i * kChain + k] = springP(i, k);
        qq[i * kChain + k] = springQ(i, k);
      }
    *i32Field(p, "steps") = kSpringSteps;
  } else {
    die(fmt::format("unknown workload '{}' (a, b or c)", key));
  }
}

} // namespace qdbench
