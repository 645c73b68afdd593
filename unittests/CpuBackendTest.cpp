//===- CpuBackendTest.cpp - The LLVM CPU backend against the interpreter --===//
//
// Differential tests: every kernel of the corpus (and their gradient and
// dual kernels), hand-written edge cases of docs/ir.md's semantics, adstack
// heap sizing and overflow, the compile cache and random kernels run on the
// reference interpreter and on the CPU backend, and must agree.
//
//===----------------------------------------------------------------------===//
#include "qd/runtime/CpuBackend.h"
#include "qd/analysis/Uniformity.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/AutoDiff.h"
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include "Corpus.h"
#include "ProgramGen.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <pthread.h>
#include <tuple>

namespace qd {
namespace {

using namespace corpus;
using testgen::sameScalar;

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

/// One process-wide backend of each flavour (JIT set-up is not free).
CpuBackend &cpuSerial() { // one worker, scalar code: the interpreter's order, bit for bit
  static std::unique_ptr<CpuBackend> b = [] {
    CpuBackendOptions o;
    o.threads = 1;
    o.vectorWidth = 1;
    return *CpuBackend::create(o);
  }();
  return *b;
}
/// Four workers taking one iteration at a time, with the light tier
/// (OptimizationTier::Light): the corpus and the properties run both tiers.
CpuBackend &cpuParallel() {
  static std::unique_ptr<CpuBackend> b = [] {
    CpuBackendOptions o;
    o.threads = 4;
    o.chunk = 1;
    o.vectorWidth = 1;
    o.fullOptimizationLimit = 0;
    return *CpuBackend::create(o);
  }();
  return *b;
}
/// One worker running vectorised tasks two lanes at a time, with the scalar
/// math functions: bit for bit the interpreter's results, except float
/// atomic sums (lanes add in statement order, not iteration order). Two
/// lanes vectorise the short tasks of the corpus and of generated kernels.
CpuBackend &cpuLanes() {
  static std::unique_ptr<CpuBackend> b = [] {
    CpuBackendOptions o;
    o.threads = 1;
    o.vectorWidth = 2;
    o.vectorMath = false;
    return *CpuBackend::create(o);
  }();
  return *b;
}
/// The default configuration on one worker: eight lanes and libmvec (where
/// the host has AVX2): a few ulps from the interpreter.
CpuBackend &cpuVector() {
  static std::unique_ptr<CpuBackend> b = [] {
    CpuBackendOptions o;
    o.threads = 1;
    return *CpuBackend::create(o);
  }();
  return *b;
}

/// Whether `k` atomically adds floats (their sums depend on the order).
void compareKernel(Module &m, Kernel &k, const std::string &where, uint64_t seedBase,
                   CorpusStats &stats) {
  if (hasEndlessWhile(k) || hasHugeLoop(k)) {
    // Both backends must stop it at a timeout (or, the CPU, finish first).
    ++stats.skippedEndless;
    auto ref = makeInstance(m, k, seedBase, 0);
    auto cpu = makeInstance(m, k, seedBase, 0);
    if (!ref || !cpu)
      return;
    LaunchOptions opts;
    opts.timeout = std::chrono::milliseconds(100);
    Interpreter interp;
    absl::Status si = ref->program->launch(k.name(), ref->args, interp, opts);
    absl::Status sc = cpu->program->launch(k.name(), cpu->args, cpuSerial(), opts);
    for (const absl::Status *s : {&si, &sc})
      if (s->code() == absl::StatusCode::kDeadlineExceeded &&
          s->message().find("was stopped in this loop") == std::string::npos)
        stats.failures.push_back(where + " @" + k.name() +
                                 ": a timeout without its loop: " + message(*s));
    if (si.code() != absl::StatusCode::kDeadlineExceeded && !si.ok() && sc.ok())
      stats.failures.push_back(where + " @" + k.name() + ": interpreter failed (" + message(si) +
                               ") but the cpu backend succeeded");
    stats.stopped += si.code() == absl::StatusCode::kDeadlineExceeded;
    return;
  }
  bool hasNd = false;
  for (unsigned i = 0; i < k.numArguments(); ++i)
    hasNd |= k.argument(i)->isNdarray();
  bool parallel = hasParallelTask(k) && !mayRace(k);
  stats.racy += hasParallelTask(k) && mayRace(k);
  ++stats.kernels;
  for (int variant = 0; variant < (hasNd ? 3 : 2); ++variant) {
    uint64_t seed = seedBase * 7919 + static_cast<uint64_t>(variant) * 104729 +
                    std::hash<std::string>()(k.name());
    auto ref = makeInstance(m, k, seed, variant);
    auto cpu = makeInstance(m, k, seed, variant);
    if (!ref || !cpu)
      return;
    LaunchOptions opts;
    opts.boundsChecked = true;
    bool timedOut = false;
    absl::Status si = interpretWithTimeout(*ref->program, k.name(), ref->args, opts, 2, timedOut);
    if (timedOut) {
      // A loop that does not end on this data (test/qd-run/runaway.qd):
      // the CPU backend must stop it too, naming a loop.
      ++stats.timedOut;
      LaunchOptions timed = opts;
      timed.timeout = std::chrono::milliseconds(200);
      absl::Status sc = cpu->program->launch(k.name(), cpu->args, cpuSerial(), timed);
      if (sc.code() == absl::StatusCode::kDeadlineExceeded) {
        if (sc.message().find("was stopped in this loop") == std::string::npos)
          stats.failures.push_back(fmt::format("{} @{}: the interpreter timed out, the cpu "
                                               "backend stopped without naming a loop: {}",
                                               where, k.name(), message(sc)));
        return;
      }
      // The CPU backend finished: the loop ends on this data and the
      // interpreter was only slow (a loaded machine). Give it the time to
      // finish and compare as usual.
      ref = makeInstance(m, k, seed, variant);
      cpu = makeInstance(m, k, seed, variant);
      si = interpretWithTimeout(*ref->program, k.name(), ref->args, opts, 120, timedOut);
      if (timedOut) {
        stats.failures.push_back(fmt::format("{} @{}: the cpu backend finished within 200 ms, "
                                             "the interpreter not within 120 s",
                                             where, k.name()));
        return;
      }
    }
    ++stats.launches;
    std::string tag = fmt::format("{} kernel @{} (data variant {})", where, k.name(), variant);
    absl::Status sc = cpu->program->launch(k.name(), cpu->args, cpuSerial(), opts);
    if (!si.ok()) {
      if (sc.ok()) {
        stats.failures.push_back(tag + ": interpreter failed (" + message(si) +
                                 ") but the cpu backend succeeded");
        continue;
      }
      ++stats.bothErrored;
      // One worker runs in the interpreter's order, so the first error site
      // is the same, unless the cpu backend reports an overflow (it checks
      // those after the run, before the error sites).
      if (locationPrefix(si) == locationPrefix(sc))
        ++stats.sameLocation;
      else if (message(sc).find("adstack overflow") == std::string::npos)
        stats.failures.push_back(tag + ": different errors:\n  interp: " + message(si) +
                                 "\n  cpu:    " + message(sc));
      continue;
    }
    if (!sc.ok()) {
      stats.failures.push_back(tag + ": cpu backend failed: " + message(sc));
      continue;
    }
    if (std::string d = compareInstances(m, *ref, *cpu, /*exact=*/true); !d.empty()) {
      stats.failures.push_back(tag + " (1 worker): " + d);
      continue;
    }
    // Vectorised: two lanes (exact but for float atomics), then the
    // default eight with libmvec.
    for (CpuBackend *vec : {&cpuLanes(), &cpuVector()}) {
      auto lanes = makeInstance(m, k, seed, variant);
      absl::Status sv = lanes->program->launch(k.name(), lanes->args, *vec, opts);
      std::string name = vec == &cpuLanes() ? "2 lanes" : "8 lanes";
      bool exact = vec == &cpuLanes() && !hasFloatAtomic(k);
      if (!sv.ok())
        stats.failures.push_back(tag + ": cpu backend (" + name + ") failed: " + message(sv));
      else if (std::string d = compareInstances(m, *ref, *lanes, exact); !d.empty())
        stats.failures.push_back(tag + " (" + name + "): " + d);
    }
    if (!parallel)
      continue;
    auto par = makeInstance(m, k, seed, variant);
    absl::Status sp = par->program->launch(k.name(), par->args, cpuParallel(), opts);
    if (!sp.ok())
      stats.failures.push_back(tag + ": cpu backend (4 workers) failed: " + message(sp));
    else if (std::string d = compareInstances(m, *ref, *par, /*exact=*/false); !d.empty())
      stats.failures.push_back(tag + " (4 workers): " + d);
  }
}

TEST(CpuBackendTest, CorpusKernelsMatchTheInterpreter) {
  CorpusStats stats;
  int chunkIndex = 0;
  auto files = corpusFiles();
  ASSERT_GT(files.size(), 20u);
  for (const auto &path : files) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::string rel = std::filesystem::relative(path, QD_SOURCE_DIR).string();
    for (const SourceChunk &chunk : splitSourceChunks(text.str())) {
      ++chunkIndex;
      auto parsed = parseModule(chunk.text, {rel, chunk.firstLine});
      if (!parsed.ok() || !verify(**parsed).ok())
        continue;
      std::unique_ptr<Module> module = *std::move(parsed);
      // Derived kernels first: they may add companions the programs need.
      std::vector<Kernel *> originals;
      for (auto &k : module->kernels())
        originals.push_back(k.get());
      std::vector<Kernel *> derived;
      for (Kernel *k : originals) {
        if (module->findKernel(k->name() + "_grad") || module->findKernel(k->name() + "_dual"))
          continue;
        if (auto g = buildGradientKernel(*module, *k); g.ok())
          derived.push_back(*g);
        if (auto d = buildDualKernel(*module, *k); d.ok())
          derived.push_back(*d);
      }
      if (absl::Status v = verify(*module); !v.ok()) {
        stats.failures.push_back(rel + ": derived kernels do not verify: " + message(v));
        continue;
      }
      std::vector<Kernel *> all = originals;
      all.insert(all.end(), derived.begin(), derived.end());
      stats.derived += static_cast<int>(derived.size());
      for (Kernel *k : all)
        compareKernel(*module, *k, fmt::format("{}:{}", rel, chunk.firstLine),
                      static_cast<uint64_t>(chunkIndex), stats);
    }
  }
  std::cout << fmt::format(
      "[corpus] {} kernels compared ({} gradient/dual), {} launches, {} "
      "where both backends failed ({} at the same statement), {} skipped "
      "(endless while or huge loop: run with a timeout; the interpreter stopped {}), {} "
      "order-dependent (1 worker only), {} "
      "interpreter timeouts\n",
      stats.kernels, stats.derived, stats.launches, stats.bothErrored, stats.sameLocation,
      stats.skippedEndless, stats.stopped, stats.racy, stats.timedOut);
  EXPECT_GT(stats.kernels, 150);
  EXPECT_GT(stats.derived, 30);
  EXPECT_GT(stats.launches - stats.bothErrored, 200); // most launches compare data
  for (const auto &f : stats.failures)
    ADD_FAILURE() << f;
}

//===----------------------------------------------------------------------===//
// Harness for hand-written kernels: one program per backend
//===----------------------------------------------------------------------===//

class Pair {
public:
  explicit Pair(std::string_view text, CpuBackend *cpu = nullptr) : cpu_(cpu ? cpu : &cpuSerial()) {
    auto m = parseModule(text, {"t.qd", 1});
    EXPECT_TRUE(m.ok()) << m.status().message();
    module = *std::move(m);
    absl::Status v = verify(*module);
    EXPECT_TRUE(v.ok()) << v.message();
  }
  /// Creates the programs (after any derived kernels were added).
  void instantiate() {
    ref = *Program::create(*module);
    cpu = *Program::create(*module);
  }
  /// Runs `kernel` on both; returns (interp, cpu) statuses.
  std::pair<absl::Status, absl::Status>
  run(std::string_view kernel, std::vector<LaunchArg> args = {}, LaunchOptions options = {}) {
    if (!ref)
      instantiate();
    absl::Status a = ref->launch(kernel, args, interp, options);
    absl::Status b = cpu->launch(kernel, args, *cpu_, options);
    return {a, b};
  }
  void runOk(std::string_view kernel, std::vector<LaunchArg> args = {},
             LaunchOptions options = {}) {
    auto [a, b] = run(kernel, args, options);
    ASSERT_TRUE(a.ok()) << a.message();
    ASSERT_TRUE(b.ok()) << b.message();
  }
  void set(std::string_view field, std::vector<double> values, Component c = Component::Primal) {
    if (!ref)
      instantiate();
    for (Program *p : {ref.get(), cpu.get()}) {
      Buffer *b = p->field(field, c);
      for (size_t i = 0; i < values.size(); ++i)
        b->set(static_cast<int64_t>(i),
               isFloat(b->elementType())
                   ? Scalar::ofFloat(b->elementType(), values[i])
                   : Scalar::ofInt(b->elementType(), static_cast<int64_t>(values[i])));
    }
  }
  void setRaw(std::string_view field, std::vector<Scalar> values) {
    if (!ref)
      instantiate();
    for (Program *p : {ref.get(), cpu.get()})
      for (size_t i = 0; i < values.size(); ++i)
        p->field(field)->set(static_cast<int64_t>(i), values[i]);
  }
  Scalar cpuValue(std::string_view field, int64_t i = 0, Component c = Component::Primal) {
    return cpu->field(field, c)->get(i);
  }
  Scalar refValue(std::string_view field, int64_t i = 0, Component c = Component::Primal) {
    return ref->field(field, c)->get(i);
  }
  /// Both backends computed exactly the same `field` component.
  void expectSameExactly(std::string_view field, Component c = Component::Primal) {
    std::string d =
        compareBuffers(std::string(field), *ref->field(field, c), *cpu->field(field, c), 0);
    EXPECT_TRUE(d.empty()) << d;
  }
  /// Both backends computed the same thing for every field.
  void expectSame(bool exact = true) {
    std::string d = compareFields(*module, *ref, *cpu, exact);
    EXPECT_TRUE(d.empty()) << d;
  }

  std::unique_ptr<Module> module;
  std::unique_ptr<Program> ref, cpu;
  Interpreter interp;
  CpuBackend *cpu_;
};

Scalar I32(int64_t v) {
  return Scalar::ofInt(ScalarType::I32, v);
}
Scalar F32(double v) {
  return Scalar::ofFloat(ScalarType::F32, v);
}
Scalar F64(double v) {
  return Scalar::ofFloat(ScalarType::F64, v);
}

/// Expects output element `i` of `field` to be `want` on both backends.
#define EXPECT_BOTH(p, field, i, want)                                                             \
  do {                                                                                             \
    Scalar w_ = (want);                                                                            \
    EXPECT_TRUE(sameScalar((p).refValue(field, i), w_, 0))                                         \
        << "interp " << field << "[" << i << "] = " << (p).refValue(field, i).str() << ", want "   \
        << w_.str();                                                                               \
    EXPECT_TRUE(sameScalar((p).cpuValue(field, i), w_, 0))                                         \
        << "cpu " << field << "[" << i << "] = " << (p).cpuValue(field, i).str() << ", want "      \
        << w_.str();                                                                               \
  } while (0)

//===----------------------------------------------------------------------===//
// 2. Semantics edge cases (the rest, and what every backend must get right,
//    are in BackendConformanceTest)
//===----------------------------------------------------------------------===//

// LLVM IR is checked by FileCheck in test/codegen/ (qd-translate).

TEST(CpuBackendTest, MathFunctionsAndPrecision) {
  Pair p(R"(
field @x : f32[4]
field @y : f32[4]
field @X : f64[4]
field @Y : f64[4]
field @o : f32[32]
field @O : f64[32]
kernel @k() {
  parallel for %i = 0 to 4 {
    %a = load @x[%i] : f32
    %b = load @y[%i] : f32
    %A = load @X[%i] : f64
    %B = load @Y[%i] : f64
    %c4 = const 4 : i32
    %p = pow %a, %b : f32
    store @o[%i], %p
    %P = pow %A, %B : f64
    store @O[%i], %P
    %j1 = add %i, %c4 : i32
    %t = atan2 %a, %b : f32
    store @o[%j1], %t
    %T = atan2 %A, %B : f64
    store @O[%j1], %T
    %j2 = add %j1, %c4 : i32
    %u = tan %a : f32
    store @o[%j2], %u
    %U = tan %A : f64
    store @O[%j2], %U
    %j3 = add %j2, %c4 : i32
    %h = tanh %a : f32
    store @o[%j3], %h
    %H = tanh %A : f64
    store @O[%j3], %H
    %j4 = add %j3, %c4 : i32
    %s = add %a, %b : f32
    store @o[%j4], %s
    %S = add %A, %B : f64
    store @O[%j4], %S
    %j5 = add %j4, %c4 : i32
    %e = sin %a : f32
    %l = exp %e : f32
    %q = sqrt %l : f32
    store @o[%j5], %q
    %E = sin %A : f64
    %L = exp %E : f64
    %Q = sqrt %L : f64
    store @O[%j5], %Q
    %j6 = add %j5, %c4 : i32
    %r = rem %a, %b : f32
    store @o[%j6], %r
    %R = rem %A, %B : f64
    store @O[%j6], %R
    %j7 = add %j6, %c4 : i32
    %ad = cast %a : f32 to f64
    %bd = cast %b : f32 to f64
    %sd = add %ad, %bd : f64
    %sf = cast %sd : f64 to f32
    store @o[%j7], %sf
    %Ad = cast %A : f64 to f32
    %Ab = cast %Ad : f32 to f64
    store @O[%j7], %Ab
  }
}
)");
  std::vector<double> x = {1.7, -0.5, 16777216, 0.1}, y = {2.3, 3, 1, 0.2};
  p.set("x", x);
  p.set("y", y);
  p.set("X", x);
  p.set("Y", y);
  p.runOk("k");
  p.expectSame();
  for (int i = 0; i < 4; ++i) {
    float a = static_cast<float>(x[i]), b = static_cast<float>(y[i]);
    double A = x[i], B = y[i];
    EXPECT_BOTH(p, "o", i, F32(std::pow(a, b)));
    EXPECT_BOTH(p, "O", i, F64(std::pow(A, B)));
    EXPECT_BOTH(p, "o", i + 4, F32(std::atan2(a, b)));
    EXPECT_BOTH(p, "O", i + 4, F64(std::atan2(A, B)));
    EXPECT_BOTH(p, "o", i + 8, F32(std::tan(a)));
    EXPECT_BOTH(p, "O", i + 8, F64(std::tan(A)));
    EXPECT_BOTH(p, "o", i + 12, F32(std::tanh(a)));
    EXPECT_BOTH(p, "O", i + 12, F64(std::tanh(A)));
    EXPECT_BOTH(p, "o", i + 16, F32(a + b)); // in f32
    EXPECT_BOTH(p, "O", i + 16, F64(A + B));
    EXPECT_BOTH(p, "o", i + 20, F32(std::sqrt(std::exp(std::sin(a)))));
    EXPECT_BOTH(p, "O", i + 20, F64(std::sqrt(std::exp(std::sin(A)))));
    EXPECT_BOTH(p, "o", i + 24, F32(std::fmod(a, b)));
    EXPECT_BOTH(p, "O", i + 24, F64(std::fmod(A, B)));
    EXPECT_BOTH(p, "o", i + 28, F32(static_cast<float>(double(a) + double(b))));
    EXPECT_BOTH(p, "O", i + 28, F64(static_cast<double>(static_cast<float>(A))));
  }
  // The documented precision examples.
  EXPECT_EQ(p.cpuValue("o", 16 + 2).f, 16777216.0); // 2^24 + 1 rounds back in f32
  EXPECT_EQ(p.cpuValue("O", 16 + 2).f, 16777217.0);
  EXPECT_EQ(p.cpuValue("o", 16 + 3).f, static_cast<double>(0.1f + 0.2f));
  EXPECT_EQ(p.cpuValue("O", 16 + 3).f, 0.1 + 0.2);
}

TEST(CpuBackendTest, BreakContinueWhileAndNestedIfs) {
  Pair p(R"(
field @x : i32[16]
field @o : i32[16]
field @w : i32[16]
field @cls : i32[16]
kernel @k() {
  parallel for %i = 0 to 16 {
    %acc = alloca i32
    for %j = 0 to 100 {
      %two = const 2 : i32
      %odd = rem %j, %two : i32
      %c0 = const 0 : i32
      %isOdd = cmp ne %odd, %c0 : i32
      if %isOdd {
        continue
      }
      %lim = load @x[%i] : i32
      %done = cmp ge %j, %lim : i32
      if %done {
        break
      }
      %a = load %acc : i32
      %a2 = add %a, %j : i32
      store %acc, %a2
    }
    %r = load %acc : i32
    store @o[%i], %r
    %cnt = alloca i32
    %v = alloca i32
    %start = load @x[%i] : i32
    store %v, %start
    while {
      %cur = load %v : i32
      %one = const 1 : i32
      %le = cmp le %cur, %one : i32
      if %le {
        break
      }
      %c = load %cnt : i32
      %cc = add %c, %one : i32
      store %cnt, %cc
      %two2 = const 2 : i32
      %half = div %cur, %two2 : i32
      store %v, %half
    }
    %steps = load %cnt : i32
    store @w[%i], %steps
    %xv = load @x[%i] : i32
    %t5 = const 5 : i32
    %t10 = const 10 : i32
    %lt5 = cmp lt %xv, %t5 : i32
    if %lt5 {
      %z = const 0 : i32
      %isz = cmp eq %xv, %z : i32
      if %isz {
        %m1 = const -1 : i32
        store @cls[%i], %m1
      } else {
        %k1 = const 1 : i32
        store @cls[%i], %k1
      }
    } else {
      %lt10 = cmp lt %xv, %t10 : i32
      if %lt10 {
        %c2 = const 2 : i32
        store @cls[%i], %c2
      } else {
        %c3 = const 3 : i32
        store @cls[%i], %c3
      }
    }
  }
}
)");
  std::vector<double> xs;
  for (int i = 0; i < 16; ++i)
    xs.push_back(i * 7 % 23);
  p.set("x", xs);
  p.runOk("k");
  for (int i = 0; i < 16; ++i) {
    int lim = i * 7 % 23, acc = 0, steps = 0;
    for (int j = 0; j < 100; ++j) {
      if (j % 2)
        continue;
      if (j >= lim)
        break;
      acc += j;
    }
    for (int v = lim; v > 1; v /= 2)
      ++steps;
    EXPECT_BOTH(p, "o", i, I32(acc));
    EXPECT_BOTH(p, "w", i, I32(steps));
    EXPECT_BOTH(p, "cls", i, I32(lim < 5 ? (lim == 0 ? -1 : 1) : lim < 10 ? 2 : 3));
  }
}

//===----------------------------------------------------------------------===//
// 3. Adstacks
//===----------------------------------------------------------------------===//

std::vector<const AdStackAllocaStmt *> stacksOf(Kernel &k) {
  std::vector<const AdStackAllocaStmt *> out;
  walk(k, [&](Stmt &s) {
    if (auto *a = dyn_cast<AdStackAllocaStmt>(&s))
      out.push_back(a);
  });
  return out;
}

const Stmt *topLevelOf(const Stmt *s) {
  while (s->parentStmt())
    s = s->parentStmt();
  return s;
}

/// sin iterated @n times on each of `elements` elements of @x, summed into
/// @y: the gradient pushes @n values per element onto one f64 stack.
std::string sinLoopF64(int elements = 4) {
  return fmt::format(R"(
field @x : f64[{0}] grad
field @y : f64 grad
field @n : i32
kernel @compute() {{
  parallel for %i = 0 to {0} {{
    %xi = load @x[%i] : f64
    %v = alloca f64
    store %v, %xi
    %n = load @n[] : i32
    for %j = 0 to %n {{
      %a = load %v : f64
      %s = sin %a : f64
      %c = const 0.1 : f64
      %b = add %s, %c : f64
      store %v, %b
    }}
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }}
}}
)",
                     elements);
}

TEST(CpuBackendTest, AdStacksLargerThan256KBPerThread) {
  Pair p(sinLoopF64(), &cpuParallel());
  auto g = buildGradientKernel(*p.module, *p.module->findKernel("compute"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto stacks = stacksOf(**g);
  ASSERT_FALSE(stacks.empty());
  p.instantiate();
  const int n = 40000;
  p.set("n", {n});
  p.set("x", {0.3, -1.2, 2.0, 0.7});
  p.runOk("compute");
  p.set("y", {1.0}, Component::Grad);
  p.runOk("compute_grad");
  p.expectSame(/*exact=*/false);             // @y: an atomic sum in any order
  p.expectSameExactly("x", Component::Grad); // one atomic_add per element
  // The capacity is the exact bound: 40000 f64 entries of 16 bytes.
  int64_t stride = 0;
  for (auto *s : stacks) {
    int64_t cap = p.cpu->lastAdStackCapacities().at(s);
    if (s->elementType() == ScalarType::F64) {
      EXPECT_EQ(cap, n);
    }
    stride += adStackBytes(*s, cap);
  }
  EXPECT_GT(stride, 256 * 1024);
  EXPECT_EQ(cpuParallel().lastAdStackHeapBytes(), stride * cpuParallel().numThreads());
  // d/dx of sin-iterates is finite and non-trivial.
  for (int i = 0; i < 4; ++i) {
    double gi = p.cpuValue("x", i, Component::Grad).f;
    EXPECT_TRUE(std::isfinite(gi));
  }
}

TEST(CpuBackendTest, GrowingBoundStaysExactAndReusesTheHeap) {
  std::unique_ptr<CpuBackend> backend = *CpuBackend::create({/*threads=*/3, /*chunk=*/1});
  auto text = sinLoopF64();
  Pair p(text, backend.get());
  auto g = buildGradientKernel(*p.module, *p.module->findKernel("compute"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto stacks = stacksOf(**g);
  p.instantiate();
  EXPECT_EQ(backend->adStackHeapCapacityBytes(), 0);
  int64_t lastCapacity = 0;
  for (int n : {1, 20, 50, 512, 20, 1}) {
    p.set("n", {static_cast<double>(n)});
    p.set("x", {0.3, -1.2, 2.0, 0.7});
    p.set("y", {0.0});
    p.set("x", {0, 0, 0, 0}, Component::Grad);
    p.runOk("compute");
    p.set("y", {1.0}, Component::Grad);
    p.runOk("compute_grad");
    p.expectSame(/*exact=*/false);
    p.expectSameExactly("x", Component::Grad);
    int64_t stride = 0;
    for (auto *s : stacks) {
      int64_t cap = p.cpu->lastAdStackCapacities().at(s);
      EXPECT_EQ(p.ref->lastAdStackCapacities().at(s), cap);
      if (s->elementType() == ScalarType::F64) {
        EXPECT_EQ(cap, n) << "n = " << n;
      }
      stride += adStackBytes(*s, cap);
    }
    EXPECT_EQ(backend->lastAdStackHeapBytes(), stride * 3) << "n = " << n;
    EXPECT_GE(backend->adStackHeapCapacityBytes(), backend->lastAdStackHeapBytes());
    EXPECT_GE(backend->adStackHeapCapacityBytes(), lastCapacity) << "the heap never shrinks";
    lastCapacity = backend->adStackHeapCapacityBytes();
    // Against a closed form: dv_{k+1}/dv_k = cos(v_k).
    for (int i = 0; i < 4; ++i) {
      double v = std::vector<double>{0.3, -1.2, 2.0, 0.7}[i], d = 1;
      for (int j = 0; j < n; ++j) {
        d *= std::cos(v);
        v = std::sin(v) + 0.1;
      }
      EXPECT_NEAR(p.cpuValue("x", i, Component::Grad).f, d, 1e-12);
    }
  }
  // Shrinking bounds reuse the grown heap.
  int64_t most = 0;
  for (auto *s : stacks)
    most += adStackBytes(*s, s->elementType() == ScalarType::F64 ? 512 : 1);
  EXPECT_GE(lastCapacity, most * 3);
}

TEST(CpuBackendTest, TheLightTierAgreesWithTheFullOne) {
  // fullOptimizationLimit 0 compiles every kernel with the light tier
  // (less work in code generation); results are the same bits.
  CpuBackendOptions lightOptions;
  lightOptions.fullOptimizationLimit = 0;
  auto light = CpuBackend::create(lightOptions);
  auto full = CpuBackend::create();
  ASSERT_TRUE(light.ok() && full.ok());
  SinLoop k;
  const Kernel &g = *k.module->findKernel("g");
  EXPECT_FALSE((*light)->compileTier(g).has_value()) << "not compiled yet";
  std::vector<float> x(1000), a(x.size(), -1.f), b(x.size(), -2.f), ref(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.003f * float(i) - 1.f;
  ASSERT_TRUE(k.run(**light, 30, x, a).ok());
  ASSERT_TRUE(k.run(**full, 30, x, b).ok());
  Interpreter interp;
  ASSERT_TRUE(k.run(interp, 30, x, ref).ok());
  EXPECT_EQ((*light)->compileTier(g), OptimizationTier::Light);
  EXPECT_EQ((*full)->compileTier(g), OptimizationTier::Full) << "a small kernel";
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(a[i], b[i]) << i;
    ASSERT_NEAR(a[i], ref[i], 1e-5) << i;
  }
}

TEST(CpuBackendTest, AnOverflowIsReportedWhenTheThreadThenFailsElsewhere) {
  // Every thread pushes past the capacity, then reads out of bounds. The
  // pushes went past the end without a branch; the error site returns
  // through the function's exit, which still reports the need, and the
  // overflow is the launch's error (as on every backend).
  for (unsigned width : {1u, 8u}) {
    CpuBackendOptions o;
    o.vectorWidth = width;
    auto cpu = CpuBackend::create(o);
    ASSERT_TRUE(cpu.ok());
    auto m = parseModule(R"(
field @x : f32[16]
field @at : i32
kernel @k() {
  parallel for %t = 0 to 16 {
    %s = adstack.alloca f32, capacity 0
    %v = load @x[%t] : f32
    for %j = 0 to 5 {
      adstack.push %s, %v
    }
    %at = load @at[] : i32
    %w = load @x[%at] : f32
    %top = adstack.load_top %s : f32
    %sum = add %w, %top : f32
    store @x[%t], %sum
  }
}
)",
                         {"over.qd", 1});
    ASSERT_TRUE(m.ok()) << m.status().message();
    auto p = Program::create(**m);
    ASSERT_TRUE(p.ok());
    Buffer *at = (*p)->field("at");
    at->set(0, Scalar::ofInt(ScalarType::I32, 100));
    LaunchOptions small;
    small.sizeAdStacks = false;
    small.defaultAdStackCapacity = 2;
    small.boundsChecked = true;
    absl::Status s = (*p)->launch("k", {}, **cpu, small);
    ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << width << ": " << s.message();
    EXPECT_NE(message(s).find("has capacity 2 and this launch needed 5"), std::string::npos)
        << message(s);
    // With room for the pushes, the bounds error is the launch's error.
    small.defaultAdStackCapacity = 5;
    s = (*p)->launch("k", {}, **cpu, small);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << width << ": " << s.message();
    EXPECT_NE(message(s).find("is out of range"), std::string::npos) << message(s);
    at->set(0, Scalar::ofInt(ScalarType::I32, 3));
    EXPECT_TRUE((*p)->launch("k", {}, **cpu, small).ok());
  }
}

TEST(CpuBackendTest, OverflowOfManyThreadsIsOneErrorAndTheNextLaunchIsClean) {
  std::unique_ptr<CpuBackend> cpu = *CpuBackend::create({/*threads=*/4, /*chunk=*/1});
  Pair p(R"(
field @x : f64[64] grad
field @y : f64 grad
field @n : i32
kernel @compute() {
  parallel for %i = 0 to 64 {
    %xi = load @x[%i] : f64
    %v = alloca f64
    store %v, %xi
    %n = load @n[] : i32
    for %j = 0 to %n {
      %a = load %v : f64
      %s = sin %a : f64
      %b = mul %s, %a : f64
      store %v, %b
    }
    %r = load %v : f64
    atomic_add @y[], %r : f64
  }
}
)",
         cpu.get());
  auto g = buildGradientKernel(*p.module, *p.module->findKernel("compute"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto stacks = stacksOf(**g);
  ASSERT_EQ(stacks.size(), 1u);
  const AdStackAllocaStmt *stack = stacks[0];
  p.instantiate();
  p.set("n", {10});
  std::vector<double> xs;
  for (int i = 0; i < 64; ++i)
    xs.push_back(0.5 + i / 64.0);
  p.set("x", xs);
  p.runOk("compute");
  p.set("y", {1.0}, Component::Grad);
  LaunchOptions small;
  small.sizeAdStacks = false;
  small.defaultAdStackCapacity = 2;
  absl::Status s = p.cpu->launch("compute_grad", {}, *cpu, small);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  std::string m = message(s);
  std::string loc = stack->loc().str();
  EXPECT_EQ(countOf(m, "adstack overflow"), 1u) << m;
  EXPECT_EQ(countOf(m, "error:"), 1u) << m;
  EXPECT_NE(m.find("the adstack declared at " + loc), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("kernel @compute_grad, task at {}", topLevelOf(stack)->loc().str())),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("has capacity 2 and this launch needed 10"), std::string::npos) << m;
  // The interpreter agrees that capacity 2 is too small.
  Interpreter interp;
  EXPECT_FALSE(p.ref->launch("compute_grad", {}, interp, small).ok());
  // Enough capacity: a clean, correct launch.
  LaunchOptions enough = small;
  enough.defaultAdStackCapacity = 10;
  p.set("x", std::vector<double>(64, 0.0), Component::Grad);
  p.runOk("compute_grad", {}, enough);
  p.expectSame(/*exact=*/false);
  p.expectSameExactly("x", Component::Grad);
  EXPECT_NE(p.cpuValue("x", 3, Component::Grad).f, 0.0);
  // An overflow again, then the backend and the program go away.
  EXPECT_FALSE(p.cpu->launch("compute_grad", {}, *cpu, small).ok());
  cpu.reset();
  p.cpu.reset();
}

// A loop carrying 20 values: its gradient has 20 stacks in one task, more
// than the CPU target keeps in registers (CpuTarget::registerStackStates),
// so most keep their state in memory. Scalar code (one worker, bit for bit
// the interpreter) and vector code (8 lanes) against the interpreter, then
// an overflow of every stack, then a clean launch again.
TEST(CpuBackendTest, StacksWhoseStateStaysInMemoryMatchTheInterpreter) {
  constexpr int kCarried = 20;
  std::string text = "field @x : f32[64] grad\nfield @y : f32 grad\nfield @n : i32\n\n"
                     "kernel @compute() {\n  parallel for %i = 0 to 64 {\n"
                     "    %x = load @x[%i] : f32\n    %n = load @n[] : i32\n";
  for (int j = 0; j < kCarried; ++j)
    text += fmt::format("    %a{0} = alloca f32\n    store %a{0}, %x\n", j);
  text += "    for %t = 0 to %n {\n";
  for (int j = 0; j < kCarried; ++j)
    text += fmt::format("      %l{0} = load %a{0} : f32\n      %m{0} = load %a{1} : f32\n"
                        "      %s{0} = sin %l{0} : f32\n      %p{0} = mul %s{0}, %m{0} : f32\n"
                        "      store %a{0}, %p{0}\n",
                        j, (j + 1) % kCarried);
  text += "    }\n    %r = load %a0 : f32\n    atomic_add @y[], %r : f32\n  }\n}\n";
  for (unsigned width : {1u, 8u}) {
    SCOPED_TRACE(fmt::format("vector width {}", width));
    std::unique_ptr<CpuBackend> cpu = *CpuBackend::create({1, 0, width});
    Pair p(text, cpu.get());
    auto g = buildGradientKernel(*p.module, *p.module->findKernel("compute"));
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_GE(stacksOf(**g).size(), size_t(kCarried));
    p.instantiate();
    std::vector<double> xs;
    for (int i = 0; i < 64; ++i)
      xs.push_back(0.5 + i / 128.0);
    for (int n : {7, 0}) {
      p.set("n", {double(n)});
      p.set("x", xs);
      p.set("y", {0.0});
      p.set("x", std::vector<double>(64, 0.0), Component::Grad);
      p.runOk("compute");
      p.set("y", {1.0}, Component::Grad);
      p.runOk("compute_grad");
      p.expectSame(/*exact=*/false); // @y: an atomic sum
      if (width == 1)
        p.expectSameExactly("x", Component::Grad);
      else
        p.expectSame(/*exact=*/false);
      EXPECT_NE(p.cpuValue("x", 5, Component::Grad).f, 0.0);
    }
    // Capacity 3 for a loop of 7: every stack overflows, the launch says
    // what it needed, and the next launch is clean.
    p.set("n", {7});
    LaunchOptions small;
    small.sizeAdStacks = false;
    small.defaultAdStackCapacity = 3;
    absl::Status s = p.cpu->launch("compute_grad", {}, *cpu, small);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(message(s).find("has capacity 3 and this launch needed 7"), std::string::npos)
        << message(s);
    p.set("x", std::vector<double>(64, 0.0), Component::Grad);
    p.set("y", {1.0}, Component::Grad);
    p.runOk("compute_grad");
    p.expectSame(/*exact=*/false);
  }
}

/// Runs `body` on a thread with `bytes` of stack (std::thread cannot
/// choose its stack).
void onSmallStack(size_t bytes, std::function<void()> body) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, bytes), 0);
  pthread_t thread;
  auto run = [](void *f) -> void * {
    (*static_cast<std::function<void()> *>(f))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, run, &body), 0);
  pthread_attr_destroy(&attr);
  pthread_join(thread, nullptr);
}

TEST(CpuBackendTest, KernelsWithLargeFramesRunOnStacksThatHoldThem) {
  // The gradient of a long chain keeps every value it tapes in its frame:
  // 64 lanes of 800 values. Before the frames were measured, a frame
  // larger than the stack of the launching thread or of a worker killed
  // the process (the 16 000-statement gradient of qd-bench-compile, with
  // 8 MB stacks). v += 0.001 sin(v) keeps the derivative near 1.
  constexpr int kChain = 800;
  std::string text = "field @x : f32[128] grad\nfield @y : f32[128] grad\n\n"
                     "kernel @chain() {\n  parallel for %i = 0 to 128 {\n"
                     "    %v0 = load @x[%i] : f32\n    %h = const 0.001 : f32\n";
  for (int k = 1; k <= kChain; ++k)
    text += fmt::format("    %s{0} = sin %v{1} : f32\n    %m{0} = mul %s{0}, %h : f32\n"
                        "    %v{0} = add %v{1}, %m{0} : f32\n",
                        k, k - 1);
  text += fmt::format("    store @y[%i], %v{}\n  }}\n}}\n", kChain);
  CpuBackendOptions o;
  o.threads = 2;
  o.vectorWidth = 64;
  o.workerStackBytes = 128 << 10;
  std::unique_ptr<CpuBackend> cpu = *CpuBackend::create(o);
  EXPECT_EQ(cpu->workerStackBytes(), size_t(128) << 10);
  Pair p(text, cpu.get());
  auto g = buildGradientKernel(*p.module, *p.module->findKernel("chain"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  p.instantiate();
  std::vector<double> xs;
  for (int i = 0; i < 128; ++i)
    xs.push_back(0.25 + i / 256.0);
  p.set("x", xs);
  p.set("x", std::vector<double>(128, 0.0), Component::Grad);
  p.set("y", std::vector<double>(128, 1.0), Component::Grad);
  // Launched from a thread with 512 KB of stack (the frame is about 900
  // KB): the kernel runs on a thread of its own, and the workers start
  // again with enough.
  onSmallStack(512 << 10, [&] { p.runOk("chain_grad"); });
  std::optional<uint64_t> frame = cpu->stackFrameBytes(**g);
  ASSERT_TRUE(frame.has_value());
  EXPECT_GT(*frame, uint64_t(512) << 10) << *frame;
  EXPECT_GE(cpu->workerStackBytes(), *frame);
  p.expectSame(/*exact=*/false);
  EXPECT_NE(p.cpuValue("x", 7, Component::Grad).f, 0.0);

  // A cap below the frame: a clear error, and other kernels still launch.
  o.maxStackBytes = 512 << 10;
  std::unique_ptr<CpuBackend> capped = *CpuBackend::create(o);
  Pair q(text, capped.get());
  ASSERT_TRUE(buildGradientKernel(*q.module, *q.module->findKernel("chain")).ok());
  q.instantiate();
  absl::Status s = q.cpu->launch("chain_grad", {}, *capped);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(message(s).find("kernel @chain_grad: its compiled code needs a stack frame of"),
            std::string::npos)
      << message(s);
  EXPECT_NE(message(s).find("fewer lanes"), std::string::npos) << message(s);
  q.runOk("chain");
}

//===----------------------------------------------------------------------===//
// 4. Compile cache
//===----------------------------------------------------------------------===//

TEST(CpuBackendTest, KernelsCompileOncePerBoundsCheckingMode) {
  std::unique_ptr<CpuBackend> cpu = *CpuBackend::create({2, 0});
  Pair p(R"(
field @x : f32[8]
kernel @k(%s: f32) {
  parallel for %i = 0 to 8 {
    %v = load @x[%i] : f32
    %w = mul %v, %s : f32
    store @x[%i], %w
  }
}
)",
         cpu.get());
  const Kernel &k = *p.module->findKernel("k");
  EXPECT_EQ(cpu->compileSeconds(k), 0.0);
  p.set("x", {1, 2, 3, 4, 5, 6, 7, 8});
  p.runOk("k", {LaunchArg::f32(2)});
  double once = cpu->compileSeconds(k);
  EXPECT_GT(once, 0.0);
  p.runOk("k", {LaunchArg::f32(0.5)});
  EXPECT_EQ(cpu->compileSeconds(k), once);
  LaunchOptions checked;
  checked.boundsChecked = true;
  p.runOk("k", {LaunchArg::f32(3)}, checked);
  double both = cpu->compileSeconds(k);
  EXPECT_GT(both, once);
  p.runOk("k", {LaunchArg::f32(1)}, checked);
  p.runOk("k", {LaunchArg::f32(1)});
  EXPECT_EQ(cpu->compileSeconds(k), both);
  for (int i = 0; i < 8; ++i)
    EXPECT_BOTH(p, "x", i, F32((i + 1) * 3));
  // The IR of both compilations is available; only one checks bounds.
  auto plain = cpu->llvmIR(k, false), withChecks = cpu->llvmIR(k, true);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(withChecks.ok());
  EXPECT_NE(*plain, *withChecks);
  EXPECT_EQ(cpu->compileSeconds(k), both);
}

TEST(CpuBackendTest, ANewKernelAtAFreedKernelsAddressIsCompiledAgain) {
  // Modules come and go while the backend lives; the allocator may hand a
  // new kernel the address of a freed one. Each must run its own code
  // against its own fields, never a cached entry of the freed kernel (the
  // corpus test hit that: a stale layout with dangling field pointers).
  std::unique_ptr<CpuBackend> cpu = *CpuBackend::create({1, 0});
  for (int round = 0; round < 12; ++round) {
    Pair p(fmt::format(R"(
field @x : i32[{}]
kernel @k() {{
  parallel for %i = 0 to {} {{
    %c = const {} : i32
    %v = add %i, %c : i32
    store @x[%i], %v
  }}
}}
)",
                       round + 1, round + 1, 100 * round),
           cpu.get());
    p.runOk("k", {}, {});
    for (int i = 0; i <= round; ++i)
      EXPECT_BOTH(p, "x", i, I32(100 * round + i));
  }
}

//===----------------------------------------------------------------------===//
// 5. Property: random kernels and their gradients
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Vectorised tasks
//===----------------------------------------------------------------------===//

/// Eight lanes with the scalar math functions: bit for bit the interpreter.
CpuBackend &cpuEightLanes() {
  static std::unique_ptr<CpuBackend> b = [] {
    CpuBackendOptions o;
    o.threads = 1;
    o.vectorWidth = 8;
    o.vectorMath = false;
    return *CpuBackend::create(o);
  }();
  return *b;
}

const KernelLayout::Task &onlyTask(CpuBackend &cpu, const Kernel &k) {
  auto layout = cpu.layout(k);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ((*layout)->tasks.size(), 1u);
  return (*layout)->tasks.at(0);
}

TEST(CpuVectorTest, TasksVectoriseUnlessLanesCouldSeeEachOthersWrites) {
  Pair p(R"(
field @x : f32[64]
field @y : f32[64]
field @s : f32
kernel @own() {
  parallel for %i = 0 to 64 {
    %a = load @x[%i] : f32
    store @y[%i], %a
    atomic_add @s[], %a : f32
  }
}
kernel @shared() {
  parallel for %i = 0 to 64 {
    %a = load @x[%i] : f32
    store @s[], %a
  }
}
kernel @sum_and_read() {
  parallel for %i = 0 to 64 {
    %a = load @s[] : f32
    atomic_add @s[], %a : f32
  }
}
)",
         &cpuEightLanes());
  EXPECT_EQ(onlyTask(cpuEightLanes(), *p.module->findKernel("own")).lanes, 8u);
  const auto &shared = onlyTask(cpuEightLanes(), *p.module->findKernel("shared"));
  EXPECT_EQ(shared.lanes, 1u);
  EXPECT_NE(shared.whyScalar.find("is stored to at an element that is not the iteration's own"),
            std::string::npos)
      << shared.whyScalar;
  EXPECT_NE(shared.whyScalar.find("t.qd:"), std::string::npos) << shared.whyScalar;
  const auto &sum = onlyTask(cpuEightLanes(), *p.module->findKernel("sum_and_read"));
  EXPECT_EQ(sum.lanes, 1u);
  EXPECT_NE(sum.whyScalar.find("both atomically updated and loaded"), std::string::npos);
  EXPECT_EQ(onlyTask(cpuSerial(), *p.module->findKernel("own")).lanes, 1u);
}

// Per-element trip counts, a break and a continue only some lanes take, a
// while loop whose lanes leave at different times, nested per-lane ifs and a
// division guarded by a per-lane condition (a zero divisor in an inactive
// lane is no error). 43 elements: five groups of 8 and a partial group of 3.
constexpr const char *kDivergent = R"(
field @m : i32[43]
field @x : f32[43] grad
field @y : f32[43] grad
field @q : i32[43]
kernel @k() {
  parallel for %i = 0 to 43 {
    %mi = load @m[%i] : i32
    %acc = alloca f32
    %xi = load @x[%i] : f32
    store %acc, %xi
    %c3 = const 3 : i32
    %r = rem %i, %c3 : i32
    %c0 = const 0 : i32
    %skip = cmp eq %r, %c0 : i32
    %c7 = const 7 : i32
    %late = cmp gt %mi, %c7 : i32
    %both = and %skip, %late : i1
    if %both {
      continue
    }
    for %j = 0 to %mi {
      %c5 = const 5 : i32
      %big = cmp gt %j, %c5 : i32
      %odd = rem %i, %c3 : i32
      %c1 = const 1 : i32
      %isOdd = cmp eq %odd, %c1 : i32
      %stop = and %big, %isOdd : i1
      if %stop {
        break
      }
      %jf = cast %j : i32 to f32
      %a = load %acc : f32
      %s = sin %a : f32
      %t = add %s, %jf : f32
      if %isOdd {
        %h = const 0.5 : f32
        %u = mul %t, %h : f32
        store %acc, %u
      } else {
        store %acc, %t
      }
    }
    %w = alloca i32
    store %w, %mi
    while {
      %wv = load %w : i32
      %done = cmp le %wv, %c0 : i32
      if %done {
        break
      }
      %c2 = const 2 : i32
      %wn = sub %wv, %c2 : i32
      store %w, %wn
    }
    %wf = load %w : i32
    %nz = cmp ne %mi, %c0 : i32
    if %nz {
      %c100 = const 100 : i32
      %d = div %c100, %mi : i32
      %e = add %d, %wf : i32
      store @q[%i], %e
    }
    %out = load %acc : f32
    store @y[%i], %out
  }
}
)";

std::vector<double> divergentBounds() {
  std::vector<double> m;
  for (int i = 0; i < 43; ++i)
    m.push_back(i % 5 == 0 ? 0 : (i * 7) % 13);
  return m;
}
std::vector<double> ramp(int n, double scale, double offset) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i)
    v.push_back(scale * i + offset);
  return v;
}

TEST(CpuVectorTest, DivergentControlFlowMatchesTheInterpreterExactly) {
  Pair p(kDivergent, &cpuEightLanes());
  EXPECT_EQ(onlyTask(cpuEightLanes(), *p.module->findKernel("k")).lanes, 8u);
  p.instantiate();
  p.set("m", divergentBounds());
  p.set("x", ramp(43, 0.05, -1));
  p.runOk("k");
  p.expectSame(/*exact=*/true);
  EXPECT_EQ(cpuEightLanes().lastTaskLanes(), std::vector<int32_t>{8});
  // Every element was written (none are zero) except the skipped ones.
  EXPECT_NE(p.cpuValue("y", 1).f, 0.0);
}

TEST(CpuVectorTest, GradientsWithPerLaneStacksMatchTheScalarCode) {
  Pair p(kDivergent, &cpuEightLanes());
  auto g = buildGradientKernel(*p.module, *p.module->findKernel("k"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  const auto &task = onlyTask(cpuEightLanes(), **g);
  ASSERT_EQ(task.lanes, 8u) << task.whyScalar;
  p.instantiate();
  p.set("m", divergentBounds());
  p.set("x", ramp(43, 0.05, -1));
  p.runOk("k");
  p.set("y", std::vector<double>(43, 1.0), Component::Grad);
  p.runOk("k_grad");
  p.expectSame(/*exact=*/true);
  EXPECT_NE(p.cpuValue("x", 4, Component::Grad).f, 0.0);
}

// Benchmark (b)'s shape: triangular nested loops with per-element bounds.
// Lanes leave both loops at different times, in the recording and in the
// reversed loops, so every stack operation is under a partial mask.
/// The triangular nest of benchmark (b) over `n` elements of type `t`:
/// `for j < m[i] { for k < j { v = sin(v + 0.01 k) + 0.1 } }`.
std::string triangularModule(const char *t, int n) {
  return fmt::format(R"(
field @m : i32[{1}]
field @x : {0}[{1}] grad
field @y : {0}[{1}] grad
kernel @k() {{
  parallel for %i = 0 to {1} {{
    %v = alloca {0}
    %xi = load @x[%i] : {0}
    store %v, %xi
    %mi = load @m[%i] : i32
    for %j = 0 to %mi {{
      for %k = 0 to %j {{
        %kf = cast %k : i32 to {0}
        %c = const 0.01 : {0}
        %o = mul %kf, %c : {0}
        %a = load %v : {0}
        %b = add %a, %o : {0}
        %s = sin %b : {0}
        %d = const 0.1 : {0}
        %e = add %s, %d : {0}
        store %v, %e
      }}
    }}
    %r = load %v : {0}
    store @y[%i], %r
  }}
}}
)",
                     t, n);
}

TEST(CpuVectorTest, TriangularGradientsMatchTheInterpreterExactly) {
  for (bool tape : {true, false}) {
    Pair p(triangularModule("f64", 29), &cpuEightLanes());
    ReverseADOptions options;
    options.tapeNestedLoops = tape;
    auto g = buildGradientKernel(*p.module, *p.module->findKernel("k"), options, "k_grad");
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_EQ(onlyTask(cpuEightLanes(), **g).lanes, 8u);
    p.instantiate();
    std::vector<double> m;
    for (int i = 0; i < 29; ++i)
      m.push_back(i % 7 == 3 ? 0 : 4 + (i * 7) % 13);
    p.set("m", m);
    p.set("x", ramp(29, 0.03, -0.4));
    p.runOk("k");
    p.set("y", std::vector<double>(29, 1.0), Component::Grad);
    p.runOk("k_grad");
    p.expectSame(/*exact=*/true);
    EXPECT_NE(p.cpuValue("x", 5, Component::Grad).f, 1.0) << "tape = " << tape;
    if (tape) {
      // The reversed loops replay `sin` only to restore `v`, which the next
      // reversed iteration overwrites: with stores that may write inactive
      // lanes, LLVM deletes it, and the vector code calls sin only in the
      // recording loop (once in each version of its body: rows and per
      // lane; the remainder loop calls the scalar sin).
      auto ir = cpuEightLanes().llvmIR(**g);
      ASSERT_TRUE(ir.ok());
      EXPECT_EQ(countOf(*ir, "@llvm.sin.v8f64("), 3u) << "a declaration and two calls";
    }
  }
}

/// `width` lanes on `threads` workers taking `chunk` iterations at a time
/// (0: the default chunks, whole groups), with the scalar math functions.
CpuBackend &cpuChunked(unsigned width, unsigned threads, int64_t chunk) {
  static std::map<std::tuple<unsigned, unsigned, int64_t>, std::unique_ptr<CpuBackend>> backends;
  auto &b = backends[{width, threads, chunk}];
  if (!b) {
    CpuBackendOptions o;
    o.threads = threads;
    o.vectorWidth = width;
    o.vectorMath = false;
    o.chunk = chunk;
    b = *CpuBackend::create(o);
  }
  return *b;
}

/// 8 lanes, and 32 lanes wider than the registers, both with the scalar math
/// functions: bit for bit the interpreter.
CpuBackend &cpuLanesOf(unsigned width) {
  return cpuChunked(width, 1, 0);
}

// The reversed loops of a taped nest with per-lane trip counts run their
// lanes in lockstep with the recording loops: a common counter counting
// down (descending loop), and the tape's rows read at one depth for all
// lanes. Bounds from 0 to 40 in one group (zero-trip lanes, one lane far
// longer than the others) give every lane its own depth; results must be
// the interpreter's, bit for bit.
TEST(CpuVectorTest, ReversedMaskedLoopsKeepTheLanesInLockstep) {
  for (unsigned width : {8u, 32u}) {
    Pair p(triangularModule("f32", 70), &cpuLanesOf(width));
    auto g = buildGradientKernel(*p.module, *p.module->findKernel("k"), {}, "k_grad");
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_EQ(onlyTask(cpuLanesOf(width), **g).lanes, width);
    // The reversed outer loop counts down; its `last - index` is uniform.
    std::ostringstream uniformity;
    printUniformity(**g, uniformity);
    EXPECT_EQ(countOf(uniformity.str(), "descending loop"), 1u) << uniformity.str();
    EXPECT_EQ(countOf(uniformity.str(), "descending counter"), 1u) << uniformity.str();
    auto ir = cpuLanesOf(width).llvmIR(**g);
    ASSERT_TRUE(ir.ok());
    // Its first counter value is the largest bound of the group.
    EXPECT_NE(ir->find(fmt::format("@llvm.vector.reduce.smax.v{}i32(", width)), std::string::npos);
    // Rows of the tape: contiguous loads, no gathers in the rows version.
    EXPECT_NE(ir->find(fmt::format("@llvm.masked.load.v{}f32", width)), std::string::npos);
    p.instantiate();
    std::vector<double> m;
    for (int i = 0; i < 70; ++i)
      m.push_back(i % 5 == 1 ? 0 : i % 11 == 4 ? 40 : (i * 7) % 13);
    p.set("m", m);
    p.set("x", ramp(70, 0.02, -0.6));
    p.runOk("k");
    p.set("y", std::vector<double>(70, 1.0), Component::Grad);
    p.runOk("k_grad");
    p.expectSame(/*exact=*/true);
    EXPECT_EQ(p.cpuValue("x", 1, Component::Grad).f, 1.0) << "a zero-trip lane";
    EXPECT_NE(p.cpuValue("x", 4, Component::Grad).f, 1.0) << "the 40-trip lane";
    EXPECT_NE(p.cpuValue("x", 7, Component::Grad).f, p.cpuValue("x", 8, Component::Grad).f);
  }
}

// Lanes whose stack depths differ where an operation runs (pops in a loop
// counting up after pushes in another, more pushes after) take the per-lane
// version of the loop body: gathers and scatters at each lane's own depth.
TEST(CpuVectorTest, LaneStacksOutOfLockstepMatchTheInterpreter) {
  Pair p(R"(
field @m : i32[40]
field @n : i32[40]
field @y : i32[40]
field @z : i32[40]
kernel @k() {
  parallel for %i = 0 to 40 {
    %s = adstack.alloca i32, capacity 64
    %mi = load @m[%i] : i32
    for %j = 0 to %mi {
      %v = mul %j, %i : i32
      adstack.push %s, %v
    }
    %acc = alloca i32
    %ni = load @n[%i] : i32
    for %q = 0 to %ni {
      %t = adstack.load_top %s : i32
      %a = load %acc : i32
      %b = add %a, %t : i32
      store %acc, %b
      adstack.pop %s
    }
    for %r = 0 to %ni {
      adstack.push %s, %r
    }
    %top = adstack.load_top %s : i32
    store @z[%i], %top
    %sum = load %acc : i32
    store @y[%i], %sum
  }
}
)",
         &cpuLanesOf(8));
  p.instantiate();
  std::vector<double> m, n;
  for (int i = 0; i < 40; ++i) {
    m.push_back(1 + (i * 5) % 17);
    n.push_back((i * 3) % (1 + (i * 5) % 17)); // below m: no underflow
  }
  p.set("m", m);
  p.set("n", n);
  p.runOk("k");
  p.expectSame(/*exact=*/true);
  EXPECT_NE(p.cpuValue("y", 9).i, 0);
}

// A local that a masked loop overwrites before reading it in every
// iteration, but that is read after the loop, keeps its masked stores: each
// lane must see the value of its own last iteration.
TEST(CpuVectorTest, LocalsReadAfterAMaskedLoopKeepTheirLanes) {
  Pair p(R"(
field @m : i32[16]
field @y : i32[16]
kernel @k() {
  parallel for %i = 0 to 16 {
    %x = alloca i32
    %mi = load @m[%i] : i32
    for %j = 0 to %mi {
      %c3 = const 3 : i32
      %t = mul %j, %c3 : i32
      store %x, %t
      %u = load %x : i32
      %c1 = const 1 : i32
      %v = add %u, %c1 : i32
      store %x, %v
    }
    %r = load %x : i32
    store @y[%i], %r
  }
}
)",
         &cpuEightLanes());
  p.instantiate();
  std::vector<double> m;
  for (int i = 0; i < 16; ++i)
    m.push_back((i * 5) % 7);
  p.set("m", m);
  p.runOk("k");
  p.expectSame(/*exact=*/true);
  EXPECT_EQ(p.cpuValue("y", 1).i, 3 * 4 + 1); // m[1] = 5: last j = 4
}

// An atomic add to an element no other iteration touches (every access of
// the global is at the iteration's own index) is a plain read-add-write in
// vector code; one to a shared element stays atomic, lane by lane.
TEST(CpuVectorTest, AtomicsToTheIterationsOwnElementNeedNoAtomicInstruction) {
  Pair p(R"(
field @x : f32[40]
field @g : f32[40]
field @s : f32
kernel @own() {
  parallel for %i = 0 to 40 {
    %a = load @x[%i] : f32
    atomic_add @g[%i], %a : f32
    atomic_add @g[%i], %a : f32
  }
}
kernel @shared() {
  parallel for %i = 0 to 40 {
    %a = load @x[%i] : f32
    atomic_add @s[], %a : f32
  }
}
)",
         &cpuEightLanes());
  // The atomics in the code: test/codegen/atomics.qd.
  p.instantiate();
  p.set("x", ramp(40, 0.25, -3));
  p.set("g", ramp(40, 1, 0));
  p.runOk("own");
  p.runOk("shared");
  p.expectSame(/*exact=*/true);
  EXPECT_EQ(p.cpuValue("g", 3).f, 3 + 2 * (0.25 * 3 - 3));
}

TEST(CpuVectorTest, AnOutOfRangeLaneNamesTheFirstFailingIndex) {
  Pair p(R"(
field @x : f32[20]
field @y : f32[20]
kernel @k() {
  parallel for %i = 0 to 16 {
    %c2 = const 2 : i32
    %j = mul %i, %c2 : i32
    %c9 = const 9 : i32
    %far = cmp gt %i, %c9 : i32
    if %far {
      %a = load @x[%j] : f32
      store @y[%i], %a
    }
  }
}
)",
         &cpuEightLanes());
  LaunchOptions opts;
  opts.boundsChecked = true;
  auto [a, b] = p.run("k", {}, opts);
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(message(a), message(b));
  EXPECT_NE(message(b).find("index [20] is out of range for '@x' of shape [20]"), std::string::npos)
      << message(b);
}

TEST(CpuVectorTest, LaneStackOverflowReportsTheCapacityTheLaunchNeeded) {
  Pair p(R"(
field @m : i32[16]
field @y : i32[16]
kernel @k() {
  parallel for %i = 0 to 16 {
    %s = adstack.alloca i32, capacity 4
    %mi = load @m[%i] : i32
    for %j = 0 to %mi {
      adstack.push %s, %j
    }
    %t = adstack.load_top %s : i32
    store @y[%i], %t
  }
}
)",
         &cpuEightLanes());
  auto *k = p.module->findKernel("k");
  ASSERT_NE(k, nullptr);
  p.instantiate();
  std::vector<double> m(16, 2);
  m[11] = 9; // lane 3 of the second group
  m[12] = 7;
  p.set("m", m);
  auto [a, b] = p.run("k");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(message(b).find("has capacity 4 and this launch needed 9"), std::string::npos)
      << message(b);
  // The next launch is clean.
  p.set("m", std::vector<double>(16, 3));
  p.runOk("k");
  p.expectSame();
}

/// Runs sin_loop (20 steps) over `x` and its gradient on both sides of `p`
/// (whose module has the gradient kernel) and checks x.grad bit for bit.
void runSinLoopGradient(Pair &p, int n) {
  p.instantiate();
  p.set("n", {20});
  p.set("x", ramp(n, 0.01, 0.2));
  p.runOk("compute");
  p.set("y", {1.0}, Component::Grad);
  p.runOk("compute_grad");
  p.expectSameExactly("x", Component::Grad);
}

// A task with a constant trip count below the vector width runs as many
// lanes as it has iterations, rounded up to a power of two (6 iterations:
// one partial group of 8 lanes; 4: one group of 4), not a group of the full
// width; its stacks get that many lane entries. There is no scalar copy of
// the body.
TEST(CpuVectorTest, TasksShorterThanAGroupRunOnlyTheLanesTheyNeed) {
  for (auto [n, lanes] : {std::pair{4, 4}, {6, 8}, {64, 8}}) {
    Pair p(sinLoopF64(n), &cpuEightLanes());
    auto g = buildGradientKernel(*p.module, *p.module->findKernel("compute"));
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto stacks = stacksOf(**g);
    ASSERT_EQ(stacks.size(), 1u);
    runSinLoopGradient(p, n);
    int64_t cap = p.cpu->lastAdStackCapacities().at(stacks[0]);
    EXPECT_EQ(cap, 20);
    EXPECT_EQ(cpuEightLanes().lastTaskLanes(), std::vector<int32_t>{lanes}) << "n = " << n;
    EXPECT_EQ(cpuEightLanes().lastAdStackHeapBytes(),
              adStackBytes(adStackEntryBytes(*stacks[0]) * lanes, cap))
        << "n = " << n;
  }
}

// Chunks of a vectorised task are whole groups of lanes, so only a task's
// last chunk has a partial group: 96 elements on 2 workers at 32 lanes make
// chunks of 32 (about 8 chunks per worker would be 6 elements), and the
// gradient still equals the scalar code's.
TEST(CpuVectorTest, ChunksAreWholeGroupsSoMidSizeTasksVectorise) {
  CpuBackendOptions o;
  o.threads = 2;
  o.vectorWidth = 32;
  o.vectorMath = false;
  auto cpu = CpuBackend::create(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const int n = 96;
  Pair p(sinLoopF64(n), cpu->get());
  ASSERT_TRUE(buildGradientKernel(*p.module, *p.module->findKernel("compute")).ok());
  runSinLoopGradient(p, n);
  EXPECT_EQ((*cpu)->lastTaskLanes(), std::vector<int32_t>{32});
}

//===----------------------------------------------------------------------===//
// Partial groups: a chunk's last group runs with its lanes past the end
// inactive from the start (there is no scalar copy of the body)
//===----------------------------------------------------------------------===//

/// Every lane past the task's end would fail if it were active: it loads
/// past the end of %a (exactly n elements; an index error when bounds are
/// checked; contiguous at %i, gathered at n - 1 - %i), divides by zero (i = n) or shifts by a
/// negative amount, pushes past the lane stack's capacity (@m is 100 beyond n) or reads it empty (a
/// masked load gives 0 pushes), stores over the sentinels of @y, @q and
/// @r and @z (a scatter), and adds to @total, @hist (also in a per-lane if),
/// @zh (its own element, by a gather and a scatter) and @hi. The stack %u is pushed and popped
/// with every lane of the group (one depth), %s under per-lane trip counts
/// (a depth per lane). @c continues per lane (the task is a masked loop) and
/// stores and adds in a per-lane if; @band runs lanes along a row of n (a
/// partial group per row).
constexpr const char *kPartialGroups = R"(
field @y : f32[200]
field @q : i32[200]
field @r : i32[200]
field @m : i32[200]
field @hist : i32[200]
field @total : f32
field @hi : i32
field @by : f32[3, 200]
field @z : f32[200, 2]
field @zh : i32[200, 2]
kernel @k(%n: i32, %a: ndarray<f32, 1>) {
  parallel for %i = 0 to %n {
    %v = load %a[%i] : f32
    %u = adstack.alloca f32, capacity 2
    adstack.push %u, %v
    %left = sub %n, %i : i32
    %c100 = const 100 : i32
    %d = div %c100, %left : i32
    %c1 = const 1 : i32
    %nm1 = sub %left, %c1 : i32
    %c7 = const 7 : i32
    %sh = min %nm1, %c7 : i32
    %p = shl %c1, %sh : i32
    %s = adstack.alloca i32, capacity 8
    %mi = load @m[%i] : i32
    for %j = 0 to %mi {
      adstack.push %s, %j
    }
    %top = adstack.load_top %s : i32
    %sum = alloca i32
    for %jj = 0 to %mi {
      %t = adstack.load_top %s : i32
      %old = load %sum : i32
      %new = add %old, %t : i32
      store %sum, %new
      adstack.pop %s
    }
    %tot = load %sum : i32
    %dp = add %d, %p : i32
    %c1000 = const 1000 : i32
    %top1000 = mul %top, %c1000 : i32
    %q = add %dp, %top1000 : i32
    store @q[%i], %q
    store @r[%i], %tot
    %uv = adstack.load_top %u : f32
    adstack.pop %u
    %two = const 2 : f32
    %w = mul %uv, %two : f32
    store @y[%i], %w
    %one = const 1 : f32
    atomic_add @total[], %one : f32
    atomic_add @hist[%i], %c1 : i32
    atomic_max @hi[], %i : i32
    %back = load %a[%nm1] : f32
    store @z[%i, %c1], %back
    atomic_add @zh[%i, %c1], %c1 : i32
    %c2 = const 2 : i32
    %half = rem %i, %c2 : i32
    %c0 = const 0 : i32
    %even = cmp eq %half, %c0 : i32
    if %even {
      atomic_add @hist[%i], %c1 : i32
    }
  }
}
kernel @c(%n: i32) {
  parallel for %i = 0 to %n {
    %c3 = const 3 : i32
    %rem = rem %i, %c3 : i32
    %c1 = const 1 : i32
    %skip = cmp eq %rem, %c1 : i32
    if %skip {
      continue
    }
    %c4 = const 4 : i32
    %quarter = rem %i, %c4 : i32
    %f = cast %i : i32 to f32
    store @y[%i], %f
    %c2 = const 2 : i32
    %low = cmp lt %quarter, %c2 : i32
    if %low {
      atomic_add @hist[%i], %c1 : i32
      %c5 = const 5 : i32
      %k5 = add %i, %c5 : i32
      store @q[%i], %k5
    }
    %one = const 1 : f32
    atomic_add @total[], %one : f32
  }
}
kernel @band(%n: i32, %b: ndarray<f32, 2>) {
  parallel for (%row, %j) = (0, 0) to (3, %n) {
    %v = load %b[%row, %j] : f32
    %c10 = const 10 : f32
    %w = add %v, %c10 : f32
    store @by[%row, %j], %w
    %one = const 1 : f32
    atomic_add @total[], %one : f32
  }
}
kernel @divLast(%n: i32) {
  parallel for %i = 0 to %n {
    %c1 = const 1 : i32
    %last = sub %n, %c1 : i32
    %left = sub %last, %i : i32
    %c100 = const 100 : i32
    %d = div %c100, %left : i32
    store @q[%i], %d
  }
}
kernel @indexLast(%n: i32, %a: ndarray<f32, 1>) {
  parallel for %i = 0 to %n {
    %c1 = const 1 : i32
    %k = add %i, %c1 : i32
    %v = load %a[%k] : f32
    store @y[%i], %v
  }
}
)";

constexpr double kSentinel = -7;
constexpr int kFieldSize = 200; // the fields of kPartialGroups

/// Task lengths around the width: 1, W - 1, W, W + 1, 2W + 3 (no repeats).
std::vector<int> lengthsAround(int w) {
  std::vector<int> out;
  for (int n : {1, w - 1, w, w + 1, 2 * w + 3})
    if (n >= 1 && std::find(out.begin(), out.end(), n) == out.end())
      out.push_back(n);
  return out;
}

/// Launches @k of kPartialGroups over `n` iterations on `cpu` (and the
/// interpreter) and checks every output element against its exact value.
void checkPartialGroupKernel(CpuBackend &cpu, int n, bool boundsChecked) {
  std::string where = fmt::format("n = {}, bounds checked {}", n, boundsChecked);
  Pair p(kPartialGroups, &cpu);
  p.instantiate();
  std::vector<double> m(kFieldSize, 100);
  for (int i = 0; i < n; ++i)
    m[i] = 1 + (i * 5) % 8; // 1 to 8 pushes: the lanes at different depths
  p.set("m", m);
  for (const char *f : {"y", "q", "r"})
    p.set(f, std::vector<double>(kFieldSize, kSentinel));
  p.set("z", std::vector<double>(2 * kFieldSize, kSentinel));
  p.set("hi", {-5});
  Buffer a = *Buffer::create(ScalarType::F32, {n});
  for (int i = 0; i < n; ++i)
    a.set(i, F32(i + 0.5));
  NdarrayArg nd{&a};
  LaunchOptions opts;
  opts.boundsChecked = boundsChecked;
  auto [ia, ca] = p.run("k", {LaunchArg::i32(n), LaunchArg::ndarray(&nd)}, opts);
  ASSERT_TRUE(ia.ok()) << where << ": " << ia.message();
  ASSERT_TRUE(ca.ok()) << where << ": " << ca.message();
  for (int i = 0; i < kFieldSize; ++i) {
    SCOPED_TRACE(fmt::format("{}, i = {}", where, i));
    if (i < n) {
      int mi = static_cast<int>(m[i]);
      int q = 100 / (n - i) + (1 << std::min(n - 1 - i, 7)) + 1000 * (mi - 1);
      EXPECT_BOTH(p, "y", i, F32(2 * (i + 0.5)));
      EXPECT_BOTH(p, "q", i, I32(q));
      EXPECT_BOTH(p, "r", i, I32(mi * (mi - 1) / 2));
      EXPECT_BOTH(p, "hist", i, I32(i % 2 == 0 ? 2 : 1));
      EXPECT_BOTH(p, "z", 2 * i + 1, F32(n - 1 - i + 0.5));
      EXPECT_BOTH(p, "zh", 2 * i + 1, I32(1));
    } else {
      EXPECT_BOTH(p, "y", i, F32(kSentinel));
      EXPECT_BOTH(p, "q", i, I32(kSentinel));
      EXPECT_BOTH(p, "r", i, I32(kSentinel));
      EXPECT_BOTH(p, "hist", i, I32(0));
      EXPECT_BOTH(p, "z", 2 * i + 1, F32(kSentinel));
      EXPECT_BOTH(p, "zh", 2 * i + 1, I32(0));
    }
    EXPECT_BOTH(p, "z", 2 * i, F32(kSentinel));
    EXPECT_BOTH(p, "zh", 2 * i, I32(0));
  }
  EXPECT_BOTH(p, "total", 0, F32(n));
  EXPECT_BOTH(p, "hi", 0, I32(n - 1));
  EXPECT_EQ(cpu.lastTaskLanes(), std::vector<int32_t>{static_cast<int32_t>(cpu.vectorWidth())});
}

TEST(CpuPartialGroupTest, InactiveLanesHaveNoEffectAndRaiseNothing) {
  for (unsigned w : {4u, 8u, 32u}) {
    CpuBackend &cpu = cpuLanesOf(w);
    Pair layout(kPartialGroups, &cpu);
    ASSERT_EQ(onlyTask(cpu, *layout.module->findKernel("k")).lanes, w);
    for (int n : lengthsAround(static_cast<int>(w)))
      for (bool checked : {true, false})
        checkPartialGroupKernel(cpu, n, checked);
  }
}

// Chunks that are not whole groups: every chunk ends in a partial group and
// the groups of the next chunk start between two groups' boundaries; two
// workers take them.
TEST(CpuPartialGroupTest, ChunksThatSplitGroups) {
  for (unsigned w : {4u, 8u, 32u}) {
    CpuBackend &cpu = cpuChunked(w, 2, w + w / 2 + 1);
    for (int n : {static_cast<int>(2 * w + 3), static_cast<int>(5 * w + 1)})
      checkPartialGroupKernel(cpu, n, /*boundsChecked=*/true);
  }
}

TEST(CpuPartialGroupTest, MaskedLoopTasksAndBandRows) {
  for (unsigned w : {4u, 8u, 32u}) {
    for (CpuBackend *cpu : {&cpuLanesOf(w), &cpuChunked(w, 2, w + 3)}) {
      Pair p(kPartialGroups, cpu);
      ASSERT_EQ(onlyTask(*cpu, *p.module->findKernel("c")).lanes, w);
      ASSERT_EQ(onlyTask(*cpu, *p.module->findKernel("band")).lanes, w);
      LaunchOptions checked;
      checked.boundsChecked = true;
      for (int n : lengthsAround(static_cast<int>(w))) {
        SCOPED_TRACE(fmt::format("width {}, n = {}", w, n));
        p.instantiate();
        p.set("y", std::vector<double>(kFieldSize, kSentinel));
        p.set("q", std::vector<double>(kFieldSize, kSentinel));
        p.runOk("c", {LaunchArg::i32(n)}, checked);
        int kept = 0;
        for (int i = 0; i < kFieldSize; ++i) {
          bool runs = i < n && i % 3 != 1;
          kept += runs;
          EXPECT_BOTH(p, "y", i, F32(runs ? i : kSentinel));
          EXPECT_BOTH(p, "hist", i, I32(runs && i % 4 < 2));
          EXPECT_BOTH(p, "q", i, I32(runs && i % 4 < 2 ? i + 5 : kSentinel));
        }
        EXPECT_BOTH(p, "total", 0, F32(kept));

        p.instantiate();
        p.set("by", std::vector<double>(3 * kFieldSize, kSentinel));
        Buffer b = *Buffer::create(ScalarType::F32, {3, n});
        for (int i = 0; i < 3 * n; ++i)
          b.set(i, F32(i));
        NdarrayArg nd{&b};
        p.runOk("band", {LaunchArg::i32(n), LaunchArg::ndarray(&nd)}, checked);
        for (int row = 0; row < 3; ++row)
          for (int j = 0; j < kFieldSize; ++j)
            EXPECT_BOTH(p, "by", row * kFieldSize + j, F32(j < n ? row * n + j + 10 : kSentinel));
        EXPECT_BOTH(p, "total", 0, F32(3 * n));
      }
    }
  }
}

// The errors of the last active lane of a partial group are raised: a
// division by zero, an index past the end, an empty stack read and a push
// past the capacity, each by lane n - 1 only.
TEST(CpuPartialGroupTest, ErrorsOfActiveLanesAreRaised) {
  for (unsigned w : {4u, 8u, 32u}) {
    CpuBackend &cpu = cpuLanesOf(w);
    for (int n : lengthsAround(static_cast<int>(w))) {
      SCOPED_TRACE(fmt::format("width {}, n = {}", w, n));
      Pair p(kPartialGroups, &cpu);
      LaunchOptions checked;
      checked.boundsChecked = true;
      auto expectError = [&](std::pair<absl::Status, absl::Status> r, const std::string &what) {
        ASSERT_FALSE(r.first.ok());
        ASSERT_FALSE(r.second.ok());
        EXPECT_EQ(message(r.second), message(r.first));
        EXPECT_NE(message(r.second).find(what), std::string::npos) << message(r.second);
      };
      expectError(p.run("divLast", {LaunchArg::i32(n)}), "integer division by zero");
      Buffer a = *Buffer::create(ScalarType::F32, {n});
      NdarrayArg nd{&a};
      expectError(p.run("indexLast", {LaunchArg::i32(n), LaunchArg::ndarray(&nd)}, checked),
                  fmt::format("index [{}] is out of range for '%a' of shape [{}]", n, n));
      std::vector<double> m(kFieldSize, 100);
      for (int i = 0; i + 1 < n; ++i)
        m[i] = 2;
      for (int last : {0, 9}) { // empty: an underflow; 9 pushes: an overflow
        m[n - 1] = last;
        p.set("m", m);
        expectError(p.run("k", {LaunchArg::i32(n), LaunchArg::ndarray(&nd)}, checked),
                    last == 0 ? "adstack underflow" : "has capacity 8 and this launch needed 9");
      }
    }
  }
}

// The gradient of sin_loop (one f64 stack of 20 entries per lane) over task
// lengths around the width, bit for bit the interpreter's.
TEST(CpuPartialGroupTest, GradientsOverPartialGroups) {
  for (unsigned w : {4u, 8u, 32u})
    for (int n : lengthsAround(static_cast<int>(w))) {
      SCOPED_TRACE(fmt::format("width {}, n = {}", w, n));
      Pair p(sinLoopF64(n), &cpuLanesOf(w));
      ASSERT_TRUE(buildGradientKernel(*p.module, *p.module->findKernel("compute")).ok());
      runSinLoopGradient(p, n);
    }
}

TEST(CpuVectorTest, VectorMathIsWithinFourUlpsOfTheScalarFunctions) {
  if (!cpuVector().usesVectorMath())
    GTEST_SKIP() << "libmvec is not used on this host (no AVX2 or no libmvec.so.1)";
  Pair p(R"(
field @x : f32[256]
field @X : f64[256]
field @o : f32[4, 256]
field @O : f64[4, 256]
kernel @k() {
  parallel for %i = 0 to 256 {
    %a = load @x[%i] : f32
    %A = load @X[%i] : f64
    %c0 = const 0 : i32
    %c1 = const 1 : i32
    %c2 = const 2 : i32
    %c3 = const 3 : i32
    %s = sin %a : f32
    store @o[%c0, %i], %s
    %c = cos %a : f32
    store @o[%c1, %i], %c
    %e = exp %a : f32
    store @o[%c2, %i], %e
    %l = log %a : f32
    store @o[%c3, %i], %l
    %S = sin %A : f64
    store @O[%c0, %i], %S
    %C = cos %A : f64
    store @O[%c1, %i], %C
    %E = exp %A : f64
    store @O[%c2, %i], %E
    %L = log %A : f64
    store @O[%c3, %i], %L
  }
}
)",
         &cpuVector());
  // The libmvec calls in the code: test/codegen/vector.qd.
  p.instantiate();
  std::vector<double> xs = ramp(256, 0.37, 0.01); // up to ~95: large sin arguments too
  p.set("x", xs);
  p.set("X", xs);
  p.runOk("k");
  auto ulps = [](double a, double b, bool f32) {
    if (f32) {
      float fa = static_cast<float>(a), fb = static_cast<float>(b);
      int32_t ia, ib;
      std::memcpy(&ia, &fa, 4);
      std::memcpy(&ib, &fb, 4);
      return std::abs(int64_t(ia) - int64_t(ib));
    }
    int64_t ia, ib;
    std::memcpy(&ia, &a, 8);
    std::memcpy(&ib, &b, 8);
    return std::abs(ia - ib);
  };
  int64_t worst = 0;
  for (const char *f : {"o", "O"})
    for (int64_t e = 0; e < 4 * 256; ++e)
      worst = std::max(worst, ulps(p.refValue(f, e).f, p.cpuValue(f, e).f, f[0] == 'o'));
  EXPECT_LE(worst, 4);
}

/// A generated program's module, parsed and verified (or the case fails).
std::unique_ptr<Module> parseGenerated(const testgen::GenProgram &p,
                                       const testgen::Printed &printed) {
  auto parsed = parseModule(printed.text, {"gen.qd", 1});
  if (!parsed.ok())
    testgen::fail(p, "does not parse: " + message(parsed.status()));
  std::unique_ptr<Module> m = *std::move(parsed);
  if (absl::Status v = verify(*m); !v.ok())
    testgen::fail(p, "does not verify: " + message(v));
  return m;
}

// Random kernels (GenConfig::cpu: float and integer locals with wrapping,
// bitwise and shift operations, every differentiable operation, f32 round
// trips, nested loops with bounds of every kind, while loops, breaks and
// continues, several tasks, fields and ndarrays) and their gradients run on
// the interpreter and the CPU backend. A quarter of the cases have adstack
// pushes, pops and adjoint operations instead of a gradient (a kernel with
// adstacks cannot be differentiated). Each case compiles up to four
// kernels: 25 cases keep the property at a few seconds.
QD_PROPERTY(CpuBackendTest, RandomKernelsAndGradientsMatchTheInterpreter, 25) {
  bool stacks = *rc::gen::inRange(0, 4) == 0;
  // A quarter of the cases have tasks of up to 21 iterations (fields of 20
  // elements): whole groups of 8 lanes, run by the 8-lane flavour below.
  bool wide = *rc::gen::inRange(0, 4) == 0;
  testgen::GenConfig config = testgen::GenConfig::cpu(stacks);
  if (wide)
    config.threads = 20;
  testgen::GenProgram p = *testgen::genProgram(config);
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed);
  bool withGrad = !printed.hasStacks;
  std::string gradText;
  if (withGrad) {
    auto g = buildGradientKernel(*m, *m->findKernel("k"));
    if (!g.ok())
      testgen::fail(p, "no gradient: " + message(g.status()));
    gradText = printKernel(**g);
  }
  RC_CLASSIFY(printed.hasWhile, "while");
  RC_CLASSIFY(printed.hasJump, "break/continue");
  RC_CLASSIFY(printed.hasStacks, "adstacks");
  RC_CLASSIFY(wide, "wide tasks");
  // One worker: the interpreter's order, bit-identical results.
  std::string d = testgen::runAgainstInterpreter(p, *m, withGrad, cpuSerial(), 0);
  if (!d.empty())
    testgen::fail(p, "1 worker: " + d + "\ngradient:\n" + gradText);
  // Four workers: atomic sums in another order.
  d = testgen::runAgainstInterpreter(p, *m, withGrad, cpuParallel(), 1e-9);
  if (!d.empty())
    testgen::fail(p, "4 workers: " + d + "\ngradient:\n" + gradText);
  // Two lanes (generated tasks run 2 or 3 iterations): float atomic sums in
  // statement order.
  d = testgen::runAgainstInterpreter(p, *m, withGrad, cpuLanes(), 1e-9);
  if (!d.empty())
    testgen::fail(p, "2 lanes: " + d + "\ngradient:\n" + gradText);
  if (wide) {
    d = testgen::runAgainstInterpreter(p, *m, withGrad, cpuEightLanes(), 1e-9);
    if (!d.empty())
      testgen::fail(p, "8 lanes: " + d + "\ngradient:\n" + gradText);
    bool vectorised = false;
    if (auto layout = cpuEightLanes().layout(*m->findKernel("k")); layout.ok())
      for (const auto &t : (*layout)->tasks)
        vectorised |= t.lanes == 8;
    RC_CLASSIFY(vectorised, "wide, vectorised");
  }
}

// The program generator's nesting-depth and size dimensions (issue 20):
// cases at RapidCheck size 120 with blocks nested 5 deep in a task and up
// to 4 statements a block (200 statements and more; bounds of at most 2,
// so loop nests stay short to run), their gradients, on the interpreter and
// the CPU backend's scalar and 8-lane code. Deeper programs are where
// compile time goes wrong: at 6 to 8 levels a case spends 40 to 60 s in
// LLVM (docs/performance.md, "Compile time"), too long for every CI run.
// Gradients with nested `while` loops also compile the counting kernels of
// each stage (docs/sizing.md), so a case costs 10 to 120 s here, and one
// case is all a sanitizer build affords (several times slower).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kDeepCases = 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int kDeepCases = 1;
#else
constexpr int kDeepCases = 4;
#endif
#else
constexpr int kDeepCases = 4;
#endif
QD_PROPERTY(CpuBackendTest, LargeDeeplyNestedRandomKernelsMatchTheInterpreter, kDeepCases) {
  testgen::GenConfig config = testgen::GenConfig::cpu(false);
  config.maxDepth = 5;
  config.maxBlock = 4;
  config.maxTasks = 2;
  config.maxBoundValue = 2;
  testgen::GenProgram p = *rc::gen::resize(120, testgen::genProgram(config));
  testgen::Printed printed = testgen::print(p);
  std::unique_ptr<Module> m = parseGenerated(p, printed);
  auto g = buildGradientKernel(*m, *m->findKernel("k"));
  if (!g.ok())
    testgen::fail(p, "no gradient: " + message(g.status()));
  int statements = 0, depth = 0;
  walk(*m->findKernel("k"), [&](Stmt &s) {
    ++statements;
    int d = 0;
    for (const Stmt *q = &s; q; q = q->parentStmt())
      ++d;
    depth = std::max(depth, d);
  });
  RC_TAG(statements >= 200 ? "200+ statements" : statements >= 100 ? "100+ statements" : "smaller");
  RC_CLASSIFY(depth >= 7, "statements 5 blocks deep in the task");
  std::string d = testgen::runAgainstInterpreter(p, *m, true, cpuSerial(), 0);
  if (!d.empty())
    testgen::fail(p, "1 worker: " + d);
  d = testgen::runAgainstInterpreter(p, *m, true, cpuEightLanes(), 1e-9);
  if (!d.empty())
    testgen::fail(p, "8 lanes: " + d);
}

} // namespace
} // namespace qd

namespace qd {
namespace {

/// A task whose loop carries `n` f32 locals and, with `f64`, one f64 local
/// more, plus a local written only inside the loop (not carried).
std::string carryingKernel(int n, bool f64) {
  std::string s = "field @x : f32[256]\nfield @m : i32\n\nkernel @k() {\n"
                  "  parallel for %i = 0 to 256 {\n    %x = load @x[%i] : f32\n"
                  "    %m = load @m[] : i32\n";
  for (int j = 0; j < n; ++j)
    s += fmt::format("    %a{0} = alloca f32\n    store %a{0}, %x\n", j);
  if (f64)
    s += "    %d = alloca f64\n    %zero = const 0.0 : f64\n    store %d, %zero\n";
  s += "    for %t = 0 to %m {\n      %tmp = alloca f32\n      store %tmp, %x\n";
  for (int j = 0; j < n; ++j)
    s += fmt::format("      %l{0} = load %a{0} : f32\n      %s{0} = sin %l{0} : f32\n"
                     "      store %a{0}, %s{0}\n",
                     j);
  if (f64)
    s += "      %dl = load %d : f64\n      %one = const 1.0 : f64\n"
         "      %dn = add %dl, %one : f64\n      store %d, %dn\n";
  s += "    }\n";
  for (int j = 0; j < n; ++j)
    s += fmt::format("    %r{0} = load %a{0} : f32\n    store @x[%i], %r{0}\n", j);
  return s + "  }\n}\n";
}

const ForStmt &taskOf(const Module &m) {
  for (Stmt &s : m.findKernel("k")->body())
    if (auto *f = dyn_cast<ForStmt>(&s))
      return *f;
  throw std::logic_error("no task");
}

// CodegenOptions::fitLanesToRegisters, the CPU backend's automatic width:
// a task gets the ISA's lanes times the largest power of two of registers
// per carried value, between one register's lanes and vectorWidth.
TEST(CpuVectorWidthTest, TheAutomaticWidthFitsWhatLoopsCarryToTheRegisters) {
  for (auto [n, f64, carried] : {std::tuple{1, false, 1u}, {16, false, 16u}, {31, true, 33u}}) {
    auto m = parseModule(carryingKernel(n, f64), {"carry.qd", 1});
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(loopCarriedValues(taskOf(**m)), carried) << n;
  }
  CodegenOptions o;
  o.vectorWidth = 64;
  o.vectorMath = VectorMathIsa::Avx512;
  EXPECT_EQ(lanesForTask(o, 16), 64u) << "without fitting: vectorWidth";
  o.fitLanesToRegisters = true;
  EXPECT_EQ(lanesForTask(o, 0), 64u);
  EXPECT_EQ(lanesForTask(o, 1), 64u);
  EXPECT_EQ(lanesForTask(o, 8), 64u);
  EXPECT_EQ(lanesForTask(o, 9), 32u);
  EXPECT_EQ(lanesForTask(o, 16), 32u);
  EXPECT_EQ(lanesForTask(o, 17), 16u);
  EXPECT_EQ(lanesForTask(o, 33), 16u) << "never below 16 lanes";
  o.vectorWidth = 32;
  o.vectorMath = VectorMathIsa::Avx2;
  EXPECT_EQ(lanesForTask(o, 2), 32u);
  EXPECT_EQ(lanesForTask(o, 4), 32u);
  EXPECT_EQ(lanesForTask(o, 5), 16u);
  EXPECT_EQ(lanesForTask(o, 16), 16u) << "never below 16 lanes";
  o.vectorWidth = 4; // below 16 lanes: the width stays
  EXPECT_EQ(lanesForTask(o, 16), 4u);
  o.vectorMath = VectorMathIsa::Sse4;
  o.vectorWidth = 8;
  EXPECT_EQ(lanesForTask(o, 16), 8u) << "SSE4 keeps the width";

  // On this host: the automatic width gives the task those lanes, and the
  // results are the scalar code's.
  auto autoCpu = CpuBackend::create({.threads = 2});
  ASSERT_TRUE(autoCpu.ok()) << autoCpu.status().message();
  auto scalar = CpuBackend::create({.threads = 2, .vectorWidth = 1, .vectorMath = false});
  ASSERT_TRUE(scalar.ok());
  std::string isa((*autoCpu)->vectorMathIsa());
  // The automatic width on this host, and capped at AVX2 where it has more.
  std::vector<std::unique_ptr<CpuBackend>> autos;
  autos.push_back(std::move(*autoCpu));
  if (isa == "avx512")
    autos.push_back(*CpuBackend::create({.threads = 2, .vectorIsa = "avx2"}));
  for (auto &a : autos) {
    std::string aIsa(a->vectorMathIsa());
    for (int n : {1, 16, 24}) {
      auto m = *parseModule(carryingKernel(n, false), {"carry.qd", 1});
      std::vector<float> results[2];
      for (int b = 0; b < 2; ++b) {
        CpuBackend &cpu = b ? **scalar : *a;
        auto p = *Program::create(*m);
        for (int i = 0; i < 256; ++i)
          p->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.01 * i));
        p->field("m")->set(0, Scalar::ofInt(ScalarType::I32, 3));
        ASSERT_TRUE(p->launch("k", {}, cpu).ok());
        for (int i = 0; i < 256; ++i)
          results[b].push_back(float(p->field("x")->get(i).f));
      }
      unsigned expect = a->vectorWidth();
      if (aIsa == "avx512")
        expect = n <= 8 ? 64 : n <= 16 ? 32 : 16;
      else if (aIsa == "avx2")
        expect = n <= 4 ? 32 : 16;
      EXPECT_EQ(a->lastTaskLanes(), std::vector<int32_t>{int32_t(expect)})
          << n << " values on " << aIsa;
      for (int i = 0; i < 256; ++i)
        EXPECT_NEAR(results[0][i], results[1][i], 4e-6f * std::max(1.0f, std::fabs(results[1][i])))
            << n << " " << i;
    }
  }
  std::unique_ptr<CpuBackend> &firstAuto = autos.front();

  // Two tasks of one kernel with different lanes, and their gradient
  // (lane stacks laid out per task): the scalar code's results.
  std::string two = carryingKernel(24, false);
  two.insert(two.rfind("}\n"), "  parallel for %i2 = 0 to 256 {\n    %x2 = load @y[%i2] : f32\n"
                               "    %m2 = load @m[] : i32\n    %v = alloca f32\n"
                               "    store %v, %x2\n    for %t2 = 0 to %m2 {\n"
                               "      %l = load %v : f32\n      %c = cos %l : f32\n"
                               "      store %v, %c\n    }\n    %r = load %v : f32\n"
                               "    store @z[%i2], %r\n  }\n");
  two = "field @y : f32[256] grad\nfield @z : f32[256] grad\n" + two;
  two.replace(two.find("field @x : f32[256]"), 19, "field @x : f32[256] grad");
  auto m2 = parseModule(two, {"two.qd", 1});
  ASSERT_TRUE(m2.ok()) << m2.status().message();
  ASSERT_TRUE(buildGradientKernel(**m2, *(*m2)->findKernel("k")).ok());
  std::vector<float> grads[2];
  for (int b = 0; b < 2; ++b) {
    CpuBackend &cpu = b ? **scalar : *firstAuto;
    auto p = *Program::create(**m2);
    for (int i = 0; i < 256; ++i) {
      p->field("x")->set(i, Scalar::ofFloat(ScalarType::F32, 0.01 * i));
      p->field("y")->set(i, Scalar::ofFloat(ScalarType::F32, 0.02 * i));
      p->field("x", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
      p->field("z", Component::Grad)->set(i, Scalar::ofFloat(ScalarType::F32, 1.0));
    }
    p->field("m")->set(0, Scalar::ofInt(ScalarType::I32, 3));
    absl::Status st = p->launch("k_grad", {}, cpu);
    ASSERT_TRUE(st.ok()) << st.message();
    for (const char *f : {"x", "y"})
      for (int i = 0; i < 256; ++i)
        grads[b].push_back(float(p->field(f, Component::Grad)->get(i).f));
  }
  if (isa == "avx512") {
    // The gradient runs the tasks in reverse order: the cos chain first.
    EXPECT_EQ(firstAuto->lastTaskLanes(), (std::vector<int32_t>{64, 16}));
  }
  for (size_t i = 0; i < grads[1].size(); ++i)
    EXPECT_NEAR(grads[0][i], grads[1][i], 1e-5f * std::max(1.0f, std::fabs(grads[1][i]))) << i;
}

} // namespace
} // namespace qd
