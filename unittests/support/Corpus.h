//===- Corpus.h - Differential testing of backends on the .qd corpus -*- C++ -*-===//
//
// What the backend tests share to run every kernel of test/ and examples/
// (and its gradient and dual kernels) on a backend and on the interpreter
// with the same random data, and compare the results.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Module.h"
#include "qd/runtime/Program.h"

#include <absl/status/status.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qd::corpus {

bool hasFloatAtomic(Kernel &k);

std::string message(const absl::Status &s);

/// `file:line:col` of an error message (`file:line:col: error: ...`).
std::string locationPrefix(const absl::Status &s);

size_t countOf(const std::string &haystack, const std::string &needle);

/// Empty if equal, else the first difference.
std::string compareBuffers(const std::string &what, const Buffer &a, const Buffer &b, double rtol);

double tolFor(ScalarType t);

constexpr Component kComponents[] = {Component::Primal, Component::Grad, Component::Dual};

std::string componentSuffix(Component c);

/// Compares every field component of two programs of the same module.
std::string compareFields(const Module &m, Program &a, Program &b, bool exact);

/// splitmix64: deterministic data for both backends.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int64_t intIn(int64_t lo, int64_t hi) { // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double unit() { return static_cast<double>(next() >> 11) / static_cast<double>(1ull << 53); }
};

Scalar randomScalar(ScalarType t, Rng &r);

void fill(Buffer &b, Rng &r);

/// A program of a module plus launch arguments for one kernel, filled with
/// data from `seed` (two instances with the same seed hold the same data).
struct Instance {
  std::unique_ptr<Program> program;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<std::unique_ptr<NdarrayArg>> ndarrays;
  std::vector<LaunchArg> args;
  std::vector<std::pair<std::string, NdarrayArg *>> named;
};

std::unique_ptr<Instance> makeInstance(const Module &m, const Kernel &k, uint64_t seed,
                                       int variant);

/// Empty if the two instances hold equal data (within tolerance unless
/// `exact`), else the first difference.
std::string compareInstances(const Module &m, Instance &a, Instance &b, bool exact);

/// Runs the interpreter with a timeout of `seconds` (LaunchOptions::timeout:
/// a kernel that loops forever on random data stops with an error).
absl::Status interpretWithTimeout(Program &program, const std::string &kernel,
                                  const std::vector<LaunchArg> &args, const LaunchOptions &opts,
                                  double seconds, bool &timedOut);

/// A `while` whose body (outside nested loops) has no `break` never ends.
bool hasEndlessWhile(Kernel &k);

/// A parallel task whose result depends on the order of its iterations: a
/// stored global that is not indexed by the loop index (the same indices in
/// every access), or an atomically updated global that is also read.
bool mayRace(Kernel &k);

/// A loop the interpreter cannot finish in time (a constant range of more
/// than 10^7 iterations).
bool hasHugeLoop(Kernel &k);

/// Whether the kernel has a parallel task.
bool hasParallelTask(Kernel &k);

/// Counts of a corpus run, and its failures.
struct CorpusStats {
  int kernels = 0;        // kernels (incl. derived) compared
  int launches = 0;       // launches compared
  int bothErrored = 0;    // launches where both backends reported an error
  int sameLocation = 0;   // ... with the same statement location
  int derived = 0;        // gradient/dual kernels among `kernels`
  int skippedEndless = 0; // kernels with a `while` that has no break
  int timedOut = 0;
  int stopped = 0; // endless kernels the interpreter stopped at a timeout
  int racy = 0;    // parallel kernels compared with one worker only
  int refused = 0; // launches the backend refused for a reason CorpusRun::refused accepts
  std::vector<std::string> failures;
};

/// How runCorpus treats a backend.
struct CorpusRun {
  /// A failed launch for which this returns true is counted in
  /// CorpusStats::refused instead of failing (a device feature it lacks).
  std::function<bool(const absl::Status &)> refused;
  /// Where both fail, a kernel without parallel tasks must fail at the
  /// interpreter's statement (iterations of a parallel task may fail in
  /// another order).
  bool sameErrorSite = false;
  /// Called after each launch on the backend, whatever its result: a
  /// non-empty result is a failure of that kernel (the Vulkan test returns
  /// what the validation layer reported).
  std::function<std::string()> afterLaunch;
};

/// Runs every kernel of the corpus, and the gradient and dual kernels
/// autodiff builds for it, on `backend` (called `name` in failures) and on
/// the interpreter with the same data, bounds checked, and compares them:
/// integers exactly, floats within tolFor. Order-dependent parallel kernels
/// (mayRace) are run but not compared; endless and huge ones are skipped.
CorpusStats runCorpus(Backend &backend, const std::string &name, const CorpusRun &run = {});

/// The text of kernel @`name`(%n: i32, %x: ndarray<f32, 1>, %out:
/// ndarray<f32, 1>): per element, the derivative of x -> sin(x) + 0.1
/// applied %n times, with the loop's values on an adstack of capacity 0
/// (sized at launch from %n; the stack at line 4).
std::string sinLoopKernel(const std::string &name);
/// Launches a sinLoopKernel named `kernel` of `program` on `b` over `x`
/// into `out` (borrowed: read when it returns).
absl::Status launchSinLoop(Program &program, Backend &b, const std::string &kernel, int n,
                           std::vector<float> &x, std::vector<float> &out,
                           const LaunchOptions &options = {});

/// A module holding sinLoopKernel("g"), parsed from "sin.qd".
struct SinLoop {
  std::unique_ptr<Module> module;
  std::unique_ptr<Program> program;
  SinLoop();
  absl::Status run(Backend &b, int n, std::vector<float> &x, std::vector<float> &out,
                   const LaunchOptions &options = {});
};

/// Every .qd file under test/ and examples/, sorted.
std::vector<std::filesystem::path> corpusFiles();

} // namespace qd::corpus
