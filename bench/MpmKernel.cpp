//===- MpmKernel.cpp - An unrolled MLS-MPM step built with IRBuilder ------===//
#include "MpmKernel.h"

#include "workloads/MpmEmitter.h"

namespace qdbench {

std::unique_ptr<qd::Module> buildMpmModule(int steps) {
  auto m = std::make_unique<qd::Module>();
  qd::Kernel *k = m->addKernel(std::make_unique<qd::Kernel>("k"));
  auto arg = [&](const char *name, unsigned ndim, bool grad) {
    return k->addNdarrayArgument(name, qd::ScalarType::F32, ndim, grad);
  };
  qdsim::MpmArgs a;
  a.x = arg("x", 3, true);
  a.v = arg("v", 3, true);
  a.c = arg("C", 3, true);
  a.f = arg("F", 3, true);
  a.gridV = arg("grid_v", 4, true);
  a.gridM = arg("grid_m", 3, true);
  a.gridOut = arg("grid_o", 4, true);
  a.target = arg("target", 1, false);
  a.loss = arg("loss", 1, true);
  qd::IRBuilder b(*k);
  qd::Value *n = b.shape(a.x, 1);
  qdsim::MpmEmitter e(b, a, kMpmGrid);
  e.clearGrids(steps);
  for (int s = 0; s < steps; ++s) {
    e.p2g(s, n);
    e.gridUpdate(s);
    e.g2p(s, n);
  }
  e.loss(steps, n);
  return m;
}

} // namespace qdbench
