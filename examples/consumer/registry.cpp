// Lists the backends of the installed qd (qd/runtime/AllBackends.h) and
// runs a kernel on one chosen by name with an option: x[i] = i * i on
// `cpu` with threads=2. Links qd::backends only.
#include <qd/ir/Parser.h>
#include <qd/runtime/AllBackends.h>
#include <qd/runtime/BackendRegistry.h>

#include <iostream>

int main() {
  qd::registerAllBackends();
  std::cout << "backends:";
  for (const std::string &name : qd::registeredBackends())
    std::cout << ' ' << name;
  std::cout << '\n';
  auto module = qd::parseModule(R"(field @x : i32[4]
kernel @k() {
  parallel for %i = 0 to 4 {
    %s = mul %i, %i : i32
    store @x[%i], %s
  }
}
)");
  qd::BackendOptions options;
  options.set("threads", "2");
  auto backend = qd::createBackend("cpu", options);
  if (!module.ok() || !backend.ok()) {
    std::cerr << (module.ok() ? backend.status() : module.status()).message() << '\n';
    return 1;
  }
  auto program = qd::Program::create(**module);
  if (absl::Status s = (*program)->launch("k", {}, **backend); !s.ok()) {
    std::cerr << s.message() << '\n';
    return 1;
  }
  std::cout << "x =";
  for (int64_t i = 0; i < 4; ++i)
    std::cout << ' ' << (*program)->field("x")->get(i).i;
  std::cout << '\n';
  return 0;
}
