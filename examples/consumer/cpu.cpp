// Parses a kernel and runs it on the LLVM CPU backend: y[i] = 2 * x[i] + 1
// for x[i] = i. Links qd::runtime_cpu only.
#include <qd/ir/Parser.h>
#include <qd/ir/Verifier.h>
#include <qd/runtime/CpuBackend.h>

#include <iostream>

int main() {
  constexpr const char *text = R"(field @x : f32[8]
field @y : f32[8]

kernel @k() {
  parallel for %i = 0 to 8 {
    %xi = load @x[%i] : f32
    %two = const 2.0 : f32
    %one = const 1.0 : f32
    %a = mul %xi, %two : f32
    %b = add %a, %one : f32
    store @y[%i], %b
  }
}
)";
  auto module = qd::parseModule(text);
  if (!module.ok() || !qd::verify(**module).ok()) {
    std::cerr << "bad module\n";
    return 1;
  }
  auto program = qd::Program::create(**module);
  auto cpu = qd::CpuBackend::create();
  if (!program.ok() || !cpu.ok()) {
    std::cerr << (program.ok() ? cpu.status() : program.status()).message() << '\n';
    return 1;
  }
  qd::Buffer *x = (*program)->field("x");
  for (int64_t i = 0; i < 8; ++i)
    x->set(i, qd::Scalar::ofFloat(qd::ScalarType::F32, double(i)));
  if (absl::Status s = (*program)->launch("k", {}, **cpu); !s.ok()) {
    std::cerr << s.message() << '\n';
    return 1;
  }
  qd::Buffer *y = (*program)->field("y");
  std::cout << "y =";
  for (int64_t i = 0; i < 8; ++i)
    std::cout << ' ' << y->get(i).f;
  std::cout << '\n';
  return 0;
}
