// Parses a kernel, adds its gradient with the `reverse-ad` pass and prints
// the module. Links qd::transforms only.
#include <qd/ir/Parser.h>
#include <qd/ir/Printer.h>
#include <qd/transforms/Pass.h>

#include <iostream>

int main() {
  constexpr const char *text = R"(field @x : f32[4] grad
field @y : f32 grad

kernel @k() {
  parallel for %i = 0 to 4 {
    %xi = load @x[%i] : f32
    %s = sin %xi : f32
    atomic_add @y[], %s : f32
  }
}
)";
  auto module = qd::parseModule(text);
  if (!module.ok()) {
    std::cerr << module.status().message() << '\n';
    return 1;
  }
  qd::PassManager pm;
  if (absl::Status s = pm.addPipeline("reverse-ad"); !s.ok()) {
    std::cerr << s.message() << '\n';
    return 1;
  }
  if (absl::Status s = pm.run(**module); !s.ok()) {
    std::cerr << s.message() << '\n';
    return 1;
  }
  std::cout << qd::printModule(**module);
  return 0;
}
