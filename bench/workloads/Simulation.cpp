//===- Simulation.cpp - The kernels of a simulation and the registry -----===//
#include "Simulation.h"

#include "qd/ir/Verifier.h"

#include <fmt/format.h>

#include <cmath>

namespace qdsim {

qd::Argument *SimKernelArgs::operator[](std::string_view name) const {
  return kernel_->findArgument(name);
}

absl::StatusOr<std::unique_ptr<qd::Module>> Simulation::buildModule() {
  auto module = std::make_unique<qd::Module>();
  const std::vector<SimArray> arrays = this->arrays(1);
  for (const char *kernelName : {"step", "loss"}) {
    qd::Kernel *k = module->addKernel(std::make_unique<qd::Kernel>(kernelName));
    k->addScalarArgument("t", qd::ScalarType::I32);
    for (const SimScalar &s : scalars())
      k->addScalarArgument(s.name, qd::ScalarType::F32);
    for (const SimArray &a : arrays)
      k->addNdarrayArgument(a.name, a.type, static_cast<unsigned>(a.shape.size()), a.grad);
    qd::IRBuilder b(*k);
    SimKernelArgs args(*k);
    if (k->name() == "step")
      emitStep(b, args);
    else
      emitLoss(b, args);
  }
  if (absl::Status status = qd::verify(*module); !status.ok())
    return absl::InternalError(fmt::format("simulation '{}' built an invalid module: {}", name(),
                                           std::string(status.message())));
  return module;
}

double hashUniform(int64_t k, int salt) {
  double v = std::sin(double(k) * 12.9898 + double(salt) * 78.233) * 43758.5453;
  return 2.0 * (v - std::floor(v)) - 1.0;
}

std::string_view sizeName(SimSize size) {
  switch (size) {
  case SimSize::Small:
    return "small";
  case SimSize::Large:
    return "large";
  case SimSize::Gpu:
    return "gpu";
  }
  return "?";
}

std::optional<SimSize> parseSimSize(std::string_view name) {
  for (SimSize s : {SimSize::Small, SimSize::Large, SimSize::Gpu})
    if (sizeName(s) == name)
      return s;
  return std::nullopt;
}

std::vector<std::string> simulationNames() {
  return {"mass_spring", "mpm", "wave", "smoke", "billiards", "newton"};
}

std::unique_ptr<Simulation> makeSimulation(std::string_view name, SimSize size) {
  using Factory = std::unique_ptr<Simulation> (*)(SimSize);
  const std::pair<std::string_view, Factory> factories[] = {{"mass_spring", makeMassSpring},
                                                            {"mpm", makeMpm},
                                                            {"wave", makeWave},
                                                            {"smoke", makeSmoke},
                                                            {"billiards", makeBilliards},
                                                            {"newton", makeNewton}};
  for (const auto &[n, make] : factories)
    if (n == name)
      return make(size);
  return nullptr;
}

} // namespace qdsim
