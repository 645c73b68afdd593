//===- Corpus.cpp - Differential testing of backends on the .qd corpus ----===//
#include "Corpus.h"

#include "ProgramGen.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

namespace qd::corpus {

bool hasFloatAtomic(Kernel &k) {
  bool found = false;
  walk(k, [&](Stmt &s) {
    if (auto *a = dyn_cast<AtomicAddStmt>(&s); a && isFloat(a->elementType()))
      found = true;
  });
  return found;
}

std::string message(const absl::Status &s) {
  return std::string(s.message());
}

/// `file:line:col` of an error message (`file:line:col: error: ...`).
std::string locationPrefix(const absl::Status &s) {
  std::string m = message(s);
  size_t at = m.find(": error:");
  return at == std::string::npos ? std::string() : m.substr(0, at);
}

size_t countOf(const std::string &haystack, const std::string &needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

using testgen::sameScalar;

/// Empty if equal, else the first difference.
std::string compareBuffers(const std::string &what, const Buffer &a, const Buffer &b, double rtol) {
  return testgen::compareBuffers(what, a, b, rtol, "interp ", "backend ");
}

double tolFor(ScalarType t) {
  return t == ScalarType::F32 ? 1e-5 : 1e-12;
}

std::string componentSuffix(Component c) {
  return c == Component::Primal ? "" : "." + std::string(toString(c));
}

/// Compares every field component of two programs of the same module.
std::string compareFields(const Module &m, Program &a, Program &b, bool exact) {
  for (auto &f : m.fields())
    for (Component c : kComponents) {
      Buffer *x = a.field(*f, c), *y = b.field(*f, c);
      if (!x || !y)
        continue;
      std::string d = compareBuffers("@" + f->name() + componentSuffix(c), *x, *y,
                                     exact ? 0 : tolFor(f->elementType()));
      if (!d.empty())
        return d;
    }
  return {};
}

Scalar randomScalar(ScalarType t, Rng &r) {
  if (isFloat(t))
    return Scalar::ofFloat(t, -2 + 4 * r.unit());
  if (t == ScalarType::I1)
    return Scalar::ofInt(t, r.intIn(0, 1));
  return Scalar::ofInt(t, r.intIn(0, 5));
}

void fill(Buffer &b, Rng &r) {
  for (int64_t i = 0; i < b.numElements(); ++i)
    b.set(i, randomScalar(b.elementType(), r));
}

std::unique_ptr<Instance> makeInstance(const Module &m, const Kernel &k, uint64_t seed,
                                       int variant) {
  auto inst = std::make_unique<Instance>();
  auto p = Program::create(m);
  if (!p.ok())
    return nullptr;
  inst->program = *std::move(p);
  Rng r{seed};
  for (auto &f : m.fields())
    for (Component c : kComponents)
      if (Buffer *b = inst->program->field(*f, c))
        fill(*b, r);
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    const Argument *a = k.argument(i);
    ScalarType t = a->type().element();
    if (!a->isNdarray()) {
      inst->args.push_back(LaunchArg::scalar(randomScalar(t, r)));
      continue;
    }
    unsigned nd = a->type().ndim();
    std::vector<int64_t> shape;
    for (unsigned d = 0; d < nd; ++d)
      shape.push_back(variant == 0 ? (nd <= 2 ? 4 : 2) : r.intIn(1, nd <= 2 ? 6 : 3));
    auto arg = std::make_unique<NdarrayArg>();
    for (Component c : kComponents) {
      if (c != Component::Primal && !a->hasComponent(c))
        continue;
      auto b = std::make_unique<Buffer>(*Buffer::create(t, shape));
      fill(*b, r);
      (c == Component::Primal ? arg->primal
       : c == Component::Grad ? arg->grad
                              : arg->dual) = b.get();
      inst->buffers.push_back(std::move(b));
    }
    inst->args.push_back(LaunchArg::ndarray(arg.get()));
    inst->named.emplace_back("%" + a->name(), arg.get());
    inst->ndarrays.push_back(std::move(arg));
  }
  return inst;
}

std::string compareInstances(const Module &m, Instance &a, Instance &b, bool exact) {
  std::string d = compareFields(m, *a.program, *b.program, exact);
  if (!d.empty())
    return d;
  for (size_t i = 0; i < a.named.size(); ++i)
    for (Component c : kComponents) {
      Buffer *x = a.named[i].second->component(c), *y = b.named[i].second->component(c);
      if (!x || !y)
        continue;
      d = compareBuffers(a.named[i].first + componentSuffix(c), *x, *y,
                         exact ? 0 : tolFor(x->elementType()));
      if (!d.empty())
        return d;
    }
  return {};
}

/// Runs the interpreter with a timeout (LaunchOptions::timeout).
absl::Status interpretWithTimeout(Program &program, const std::string &kernel,
                                  const std::vector<LaunchArg> &args, const LaunchOptions &opts,
                                  double seconds, bool &timedOut) {
  LaunchOptions timed = opts;
  timed.timeout =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
  Interpreter interp;
  absl::Status s = program.launch(kernel, args, interp, timed);
  timedOut = s.code() == absl::StatusCode::kDeadlineExceeded;
  return s;
}

/// A `while` whose body (outside nested loops) has no `break` never ends.
bool hasEndlessWhile(Kernel &k) {
  bool endless = false;
  walk(k, [&](Stmt &s) {
    if (s.kind() != StmtKind::While)
      return;
    bool found = false;
    std::function<void(Block &)> scan = [&](Block &b) {
      for (Stmt &t : b) {
        if (t.kind() == StmtKind::Break)
          found = true;
        if (t.kind() == StmtKind::If)
          for (unsigned i = 0; i < t.numBlocks(); ++i)
            scan(t.block(i));
      }
    };
    scan(s.block(0));
    endless |= !found;
  });
  return endless;
}

/// A parallel task whose result depends on the order of its iterations: a
/// stored global that is not indexed by the loop index (the same indices in
/// every access), or an atomically updated global that is also read.
bool mayRace(Kernel &k) {
  for (Stmt &t : k.body()) {
    auto *loop = dyn_cast<ForStmt>(&t);
    if (!loop || !loop->isParallel())
      continue;
    std::map<std::tuple<const Field *, const Value *, Component>, std::vector<GlobalAccessStmt *>>
        groups;
    walk(loop->body(), [&](Stmt &s) {
      if (auto *g = dyn_cast<GlobalAccessStmt>(&s))
        groups[{g->field(), g->ndarray(), g->component()}].push_back(g);
    });
    for (auto &[target, accesses] : groups) {
      bool stored = false, atomic = false, loaded = false;
      for (auto *g : accesses) {
        stored |= g->kind() == StmtKind::GlobalStore;
        atomic |= g->kind() == StmtKind::AtomicAdd;
        loaded |= g->kind() == StmtKind::GlobalLoad;
      }
      if (atomic && (loaded || stored))
        return true;
      if (!stored)
        continue;
      GlobalAccessStmt *first = accesses.front();
      bool byIndex = false;
      for (unsigned d = 0; d < first->numIndices(); ++d)
        byIndex |= first->index(d) == loop;
      if (!byIndex)
        return true;
      for (auto *g : accesses)
        for (unsigned d = 0; d < g->numIndices(); ++d)
          if (g->index(d) != first->index(d))
            return true;
    }
  }
  return false;
}

/// A loop the interpreter cannot finish in time (a constant range of more
/// than 10^7 iterations).
bool hasHugeLoop(Kernel &k) {
  bool huge = false;
  walk(k, [&](Stmt &s) {
    if (auto *f = dyn_cast<ForStmt>(&s); f && f->begin().isConstant() && f->end().isConstant())
      huge |= f->end().constant - f->begin().constant > 10'000'000;
  });
  return huge;
}

bool hasParallelTask(Kernel &k) {
  for (Stmt &s : k.body())
    if (auto *f = dyn_cast<ForStmt>(&s); f && f->isParallel())
      return true;
  return false;
}

std::vector<std::filesystem::path> corpusFiles() {
  std::vector<std::filesystem::path> files;
  for (const char *dir : {"test", "examples"})
    for (auto &e :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(QD_SOURCE_DIR) / dir))
      if (e.is_regular_file() && e.path().extension() == ".qd")
        files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string sinLoopKernel(const std::string &name) {
  return "kernel @" + name + R"((%n: i32, %x: ndarray<f32, 1>, %out: ndarray<f32, 1>) {
  %len = shape %x, 0 : i32
  parallel for %i = 0 to %len {
    %s = adstack.alloca f32, capacity 0
    %xi = load %x[%i] : f32
    %v = alloca f32
    store %v, %xi
    for %j = 0 to %n {
      %a = load %v : f32
      adstack.push %s, %a
      %sn = sin %a : f32
      %c = const 0.1 : f32
      %b = add %sn, %c : f32
      store %v, %b
    }
    %g = alloca f32
    %one = const 1.0 : f32
    store %g, %one
    for %j2 = 0 to %n {
      %t = adstack.load_top %s : f32
      %cs = cos %t : f32
      %g0 = load %g : f32
      %g1 = mul %g0, %cs : f32
      store %g, %g1
      adstack.pop %s
    }
    %gf = load %g : f32
    store %out[%i], %gf
  }
}
)";
}

SinLoop::SinLoop() {
  module = *parseModule(sinLoopKernel("g"), {"sin.qd", 1});
  program = *Program::create(*module);
}

absl::Status launchSinLoop(Program &program, Backend &b, const std::string &kernel, int n,
                           std::vector<float> &x, std::vector<float> &out,
                           const LaunchOptions &options) {
  auto bx = Buffer::borrow(ScalarType::F32, {int64_t(x.size())}, x.data());
  auto bo = Buffer::borrow(ScalarType::F32, {int64_t(out.size())}, out.data());
  NdarrayArg ax{&*bx}, ao{&*bo};
  std::vector<LaunchArg> args{LaunchArg::i32(n), LaunchArg::ndarray(&ax), LaunchArg::ndarray(&ao)};
  absl::Status s = program.launch(kernel, args, b, options);
  if (absl::Status t = bo->syncToHost(); s.ok())
    s = t;
  return s;
}

absl::Status SinLoop::run(Backend &b, int n, std::vector<float> &x, std::vector<float> &out,
                          const LaunchOptions &options) {
  return launchSinLoop(*program, b, "g", n, x, out, options);
}

CorpusStats runCorpus(Backend &backend, const std::string &name, const CorpusRun &run) {
  CorpusStats stats;
  int chunkIndex = 0;
  for (const auto &path : corpusFiles()) {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string rel = std::filesystem::relative(path, QD_SOURCE_DIR).string();
    for (const SourceChunk &chunk : splitSourceChunks(text)) {
      ++chunkIndex;
      auto parsed = parseModule(chunk.text, {rel, chunk.firstLine});
      if (!parsed.ok() || !verify(**parsed).ok())
        continue;
      std::unique_ptr<Module> module = *std::move(parsed);
      std::vector<Kernel *> all;
      for (auto &k : module->kernels())
        all.push_back(k.get());
      for (Kernel *k : std::vector<Kernel *>(all)) {
        if (module->findKernel(k->name() + "_grad") || module->findKernel(k->name() + "_dual"))
          continue;
        if (auto g = buildGradientKernel(*module, *k); g.ok())
          all.push_back(*g), ++stats.derived;
        if (auto d = buildDualKernel(*module, *k); d.ok())
          all.push_back(*d), ++stats.derived;
      }
      if (!verify(*module).ok())
        continue;
      for (Kernel *k : all) {
        if (hasEndlessWhile(*k) || hasHugeLoop(*k)) {
          ++stats.skippedEndless;
          continue;
        }
        ++stats.kernels;
        uint64_t seed = uint64_t(chunkIndex) * 7919 + std::hash<std::string>()(k->name());
        auto ref = makeInstance(*module, *k, seed, 0);
        auto dev = makeInstance(*module, *k, seed, 0);
        if (!ref || !dev)
          continue;
        LaunchOptions opts;
        opts.boundsChecked = true;
        bool timedOut = false;
        absl::Status si =
            interpretWithTimeout(*ref->program, k->name(), ref->args, opts, 2, timedOut);
        if (timedOut) {
          ++stats.timedOut;
          break;
        }
        ++stats.launches;
        std::string tag = fmt::format("{}:{} kernel @{}", rel, chunk.firstLine, k->name());
        absl::Status sg = dev->program->launch(k->name(), dev->args, backend, opts);
        if (run.afterLaunch)
          if (std::string after = run.afterLaunch(); !after.empty())
            stats.failures.push_back(tag + ": " + after);
        if (!sg.ok() && run.refused && run.refused(sg)) {
          ++stats.refused;
          continue;
        }
        if (!si.ok()) {
          bool same = locationPrefix(si) == locationPrefix(sg);
          if (sg.ok())
            stats.failures.push_back(fmt::format("{}: the interpreter failed ({}) but {} succeeded",
                                                 tag, message(si), name));
          else if (run.sameErrorSite && !same && !hasParallelTask(*k))
            stats.failures.push_back(fmt::format("{}: the interpreter failed with {}, {} with {}",
                                                 tag, message(si), name, message(sg)));
          else
            ++stats.bothErrored, stats.sameLocation += same;
          continue;
        }
        if (!sg.ok()) {
          stats.failures.push_back(fmt::format("{}: {} failed: {}", tag, name, message(sg)));
          continue;
        }
        // Parallel tasks run in any order on a device: float sums round
        // differently, and order-dependent kernels are not compared.
        if (hasParallelTask(*k) && mayRace(*k)) {
          ++stats.racy;
          continue;
        }
        if (std::string d = compareInstances(*module, *ref, *dev, /*exact=*/false); !d.empty())
          stats.failures.push_back(tag + ": " + d);
      }
    }
  }
  return stats;
}

} // namespace qd::corpus
