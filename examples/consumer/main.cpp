// Builds `y += sum_i sin(x[i]) * 2` with IRBuilder, verifies it and prints it.
#include <qd/ir/IRBuilder.h>
#include <qd/ir/Printer.h>
#include <qd/ir/Verifier.h>

#include <iostream>

int main() {
  qd::Module module;
  qd::Field *x = module.addField(
      std::make_unique<qd::Field>("x", qd::ScalarType::F32, std::vector<int64_t>{16}, true, false));
  qd::Field *y = module.addField(
      std::make_unique<qd::Field>("y", qd::ScalarType::F32, std::vector<int64_t>{}, true, false));
  qd::Kernel *kernel = module.addKernel(std::make_unique<qd::Kernel>("sum_sin"));

  qd::IRBuilder b(*kernel);
  {
    auto task = b.parallelFor(0, 16);
    qd::Value *xi = b.load(qd::GlobalRef::ofField(x), {task.index()});
    xi->setName("xi");
    qd::Value *s = b.sin(xi);
    s->setName("s");
    qd::Value *two = b.f32(2.0f);
    qd::Value *r = b.mul(s, two);
    r->setName("r");
    b.atomicAdd(qd::GlobalRef::ofField(y), {}, r);
  }

  if (absl::Status status = qd::verify(module); !status.ok()) {
    std::cerr << status.message() << '\n';
    return 1;
  }
  std::cout << qd::printModule(module);
  return 0;
}
