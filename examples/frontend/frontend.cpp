// A DSL front-end in miniature, built against an installed qd: it lowers
// the kernels of its user's source to qd IR with IRBuilder, differentiates
// one, runs it and its gradient on a backend chosen by name, and reports an
// error in the user's source by file:line:col. The source it pretends to
// have parsed, model.py:
//
//    1  @kernel
//    2  def energy(x: ndarray[f32, 2], w: f32, loss: ndarray[f32, 1]):
//    3      for i, j in grid(x):
//    4          v = x[i, j]
//    5          loss[0] += w * v * v
//    6
//    7  @kernel
//    8  def row_sums(x: ndarray[f32, 2], out: ndarray[f32, 1]):
//    9      for i in range(x.shape[0]):
//   10          out[i] = x[i]
//
// Usage: qd-frontend [backend]   (a name of `qd-run --list-backends`;
// default cpu). docs/getting-started.md, "Embedding qd in a front-end",
// walks through it.
#include <qd/ir/IRBuilder.h>
#include <qd/ir/Printer.h>
#include <qd/ir/Verifier.h>
#include <qd/runtime/AllBackends.h>
#include <qd/runtime/BackendRegistry.h>
#include <qd/runtime/GradientLaunch.h>
#include <qd/transforms/AutoDiff.h>

#include <iostream>
#include <memory>
#include <string>

namespace {

constexpr qd::ScalarType kF32 = qd::ScalarType::F32;

// Every statement carries the position in model.py it was lowered from;
// the verifier's and the passes' errors name it.
const auto kSource = std::make_shared<const std::string>("model.py");
qd::Location at(uint32_t line, uint32_t col) {
  return qd::Location(kSource, line, col);
}

// energy: loss[0] += w * x[i, j]^2 over the cells of x.
qd::Kernel *lowerEnergy(qd::Module &module) {
  qd::Kernel *kernel = module.addKernel(std::make_unique<qd::Kernel>("energy"));
  qd::Argument *x = kernel->addNdarrayArgument("x", kF32, 2, /*grad=*/true);
  qd::Argument *w = kernel->addScalarArgument("w", kF32);
  qd::Argument *loss = kernel->addNdarrayArgument("loss", kF32, 1, /*grad=*/true);
  qd::IRBuilder b(*kernel);
  b.setLocation(at(3, 5)); // for i, j in grid(x):
  qd::Bound begins[] = {0, 0};
  qd::Value *rows = b.shape(x, 0), *cols = b.shape(x, 1);
  rows->setName("rows");
  cols->setName("cols");
  qd::Bound ends[] = {rows, cols};
  auto cells = b.parallelBand(begins, ends);
  cells.index(0)->setName("i");
  cells.index(1)->setName("j");
  b.setLocation(at(4, 13)); // x[i, j]
  qd::Value *v = b.load(qd::GlobalRef::ofNdarray(x), {cells.index(0), cells.index(1)});
  v->setName("v");
  b.setLocation(at(5, 20)); // w * v * v
  qd::Value *wv = b.mul(w, v), *e = b.mul(wv, v);
  wv->setName("wv");
  e->setName("e");
  b.setLocation(at(5, 9)); // loss[0] += ...
  qd::Value *zero = b.i32(0);
  zero->setName("zero");
  b.atomicAdd(qd::GlobalRef::ofNdarray(loss), {zero}, e);
  return kernel;
}

// row_sums, with the user's mistake: x[i] indexes a 2-D array with one
// index. The front-end passes it on; the verifier names model.py:10:18.
void lowerRowSums(qd::Module &module) {
  qd::Kernel *kernel = module.addKernel(std::make_unique<qd::Kernel>("row_sums"));
  qd::Argument *x = kernel->addNdarrayArgument("x", kF32, 2);
  qd::Argument *out = kernel->addNdarrayArgument("out", kF32, 1);
  qd::IRBuilder b(*kernel);
  b.setLocation(at(9, 5)); // for i in range(x.shape[0]):
  auto rows = b.parallelFor(0, b.shape(x, 0));
  b.setLocation(at(10, 18)); // x[i]
  qd::Value *row = b.load(qd::GlobalRef::ofNdarray(x), {rows.index()});
  b.setLocation(at(10, 9)); // out[i] = ...
  b.store(qd::GlobalRef::ofNdarray(out), {rows.index()}, row);
}

int fail(const absl::Status &status) {
  std::cerr << "qd-frontend: " << status.message() << '\n';
  return 1;
}

void printValues(const char *name, const qd::Buffer &buffer) {
  std::cout << name << " =";
  for (int64_t i = 0; i < buffer.numElements(); ++i)
    std::cout << ' ' << buffer.get(i).f;
  std::cout << '\n';
}

} // namespace

int main(int argc, char **argv) {
  // 1. Lower, verify, differentiate.
  qd::Module module;
  qd::Kernel *energy = lowerEnergy(module);
  if (absl::Status status = qd::verify(module); !status.ok())
    return fail(status);
  std::cout << qd::printKernel(*energy);
  absl::StatusOr<qd::Kernel *> gradient = qd::buildGradientKernel(module, *energy);
  if (!gradient.ok())
    return fail(gradient.status());
  qd::GradientAdjoints adjoints = qd::gradientAdjoints(**gradient);
  std::cout << "@" << (*gradient)->name() << " adds into";
  for (const qd::AdjointRef &ref : adjoints.accumulated)
    std::cout << ' ' << ref.str();
  std::cout << ", reads";
  for (const qd::AdjointRef &ref : adjoints.consumed)
    std::cout << ' ' << ref.str();
  std::cout << '\n';

  // 2. A backend by name, and the arrays the user passes.
  qd::registerAllBackends();
  absl::StatusOr<std::unique_ptr<qd::Backend>> backend =
      qd::createBackend(argc > 1 ? argv[1] : "cpu");
  if (!backend.ok())
    return fail(backend.status());
  absl::StatusOr<std::unique_ptr<qd::Program>> program = qd::Program::create(module);
  if (!program.ok())
    return fail(program.status());
  auto x = qd::Buffer::create(kF32, {2, 3}), xGrad = qd::Buffer::create(kF32, {2, 3});
  auto loss = qd::Buffer::create(kF32, {1}), lossGrad = qd::Buffer::create(kF32, {1});
  if (!x.ok() || !xGrad.ok() || !loss.ok() || !lossGrad.ok())
    return fail(absl::InternalError("cannot allocate the arrays"));
  for (int64_t i = 0; i < 6; ++i)
    x->set(i, qd::Scalar::ofFloat(kF32, double(i + 1))); // x = [[1, 2, 3], [4, 5, 6]]
  qd::NdarrayArg xArg{&*x, &*xGrad}, lossArg{&*loss, &*lossGrad};
  const qd::NamedLaunchArg args[] = {{"x", qd::LaunchArg::ndarray(&xArg)},
                                     {"w", qd::LaunchArg::f32(0.25f)},
                                     {"loss", qd::LaunchArg::ndarray(&lossArg)}};

  // 3. The kernel, with its arguments by name.
  if (absl::Status status = (*program)->launchByName("energy", args, **backend); !status.ok())
    return fail(status);
  printValues("loss", *loss);

  // 4. The kernel again and its gradient, loss.grad seeded with 1.
  loss->fill(qd::Scalar::ofFloat(kF32, 0.0));
  absl::StatusOr<std::vector<qd::LaunchArg>> ordered = qd::orderLaunchArgs(*energy, args);
  if (!ordered.ok())
    return fail(ordered.status());
  const qd::AdjointSeed seed{"loss", 1.0};
  if (absl::Status status =
          qd::launchWithGradient(**program, *energy, **gradient, *ordered, {&seed, 1}, **backend);
      !status.ok())
    return fail(status);
  printValues("loss", *loss);
  printValues("x.grad", *xGrad);

  // 5. An error in the user's source, reported where it is.
  qd::Module bad;
  lowerRowSums(bad);
  if (absl::Status status = qd::verify(bad); !status.ok())
    std::cout << "row_sums rejected:\n" << status.message() << '\n';
  return 0;
}
