//===- ProgramGen.h - Random well-formed qd programs for properties -*- C++ -*-===//
//
// The one random-program generator of the property tests. A generated
// program is a structured description (tasks, nested statements, and for
// every statement a vector of small "choices") plus the launch inputs. The
// description is printed as qd text; every choice is resolved against what
// is in scope when the statement is printed (an operand index modulo the
// values in scope, a loop bound kind that falls back to a constant when its
// source is disabled, ...), so every description prints a well-formed,
// verifying module, and so does every shrink of it.
//
// Shrinking (custom, through rc::shrinkable::shrinkRecur) removes tasks and
// statements, replaces loops and ifs by their bodies, drops else arms, moves
// choices towards 0 (the simplest option of each choice) and shrinks the
// inputs. RapidCheck shows a counterexample in the text format, with a
// `qd-run` command line for its inputs, so it can be saved as a `.qd`
// regression test; `reportCounterexample` also writes it into
// $QD_COUNTEREXAMPLE_DIR when that is set.
//
// The semantics of generated programs are deterministic on the interpreter
// and race-free on parallel backends (per-thread stores, atomics only on
// outputs nobody reads); every loop has a small bounded trip count; every
// float value stays in [-1.25, 1.25] (every operation has a bounded form),
// so values stay finite whatever the inputs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/interp/Interpreter.h"
#include "qd/ir/Module.h"
#include "qd/runtime/Program.h"

#include <gtest/gtest.h> // before rapidcheck/gtest.h, which uses FAIL()
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace qd::testgen {

/// The statements a description holds. Each kind reads its choices at
/// fixed slots (ProgramGen.cpp documents the layout).
enum class StmtKind : uint8_t {
  Assign,    // store a float local: an expression of the operands in scope
  Let,       // a float SSA value, an operand of later statements in its block
  Output,    // atomic_add @y, store @zK[idx], store %w[idx], store @flag[idx] (i1)
  IntUpdate, // update the i32 local %ic (small, non-negative) or the i64 local %im (wraps)
  Stack,     // adstack.alloca of f32, f64 or i32, visible in the rest of its block
  Push,      // adstack.push onto a stack in scope
  Pop,       // adstack.pop of a value this block pushed (with load_top / acc_adjoint)
  WriteData, // store %n into @cnt (a bound the kernel writes: sizing tier 3)
  For,       // range-for with constant, argument, field, shape, ndarray-read,
             // guarded-read, enclosing-index or local-variable bounds
  If,        // if/else on a float comparison, an index, a parity or data
  While,     // while with a counter bound (and a data break)
  Jump,      // if cond { [body] break|continue } inside a loop
};
constexpr int kNumStmtKinds = 12;
const char *toString(StmtKind k);

struct GenStmt {
  StmtKind kind = StmtKind::Assign;
  std::vector<uint8_t> c; // choices; missing ones read as 0
  std::vector<GenStmt> body, orelse;
};

struct GenTask {
  bool parallel = true;
  std::vector<uint8_t> c; // top bound, locals, local initialisation and final outputs
  std::vector<GenStmt> body;
};

/// Launch inputs, as choices too (shrinking moves them towards 0). What the
/// values mean: `GenInputs` accessors below.
struct GenInputs {
  std::vector<uint8_t> x;   // @x[k] = (x[k] - 100 + 0.5) / 97 in (-1.04, 1.04), never 0
  std::vector<uint8_t> cnt; // @cnt[k] in [0, maxBoundValue]; @bit[k] = cnt[k] / 7 % 2
  uint8_t n = 0;            // %n in [0, maxBoundValue]
  uint8_t s = 0;            // %s = (s - 100) / 101
  uint8_t aLen = 0;         // %a: length in [1, maxNdarrayLen], values in [0, maxBoundValue]
  std::vector<uint8_t> a;
  uint8_t rows = 0, cols = 0; // %m: [1, 3] x [1, 3], values in [0, maxBoundValue]
  std::vector<uint8_t> m;
  uint8_t uLen = 0; // %u: length in [1, maxNdarrayLen], values like @x
  std::vector<uint8_t> u;
};

/// What a generated program may contain. The presets below are what each
/// suite asks for; every flag can be changed.
struct GenConfig {
  std::string name = "custom";
  // Structure.
  int maxTasks = 1;           // tasks per kernel
  bool serialTasks = false;   // tasks other than the first may be `serial`
  int threads = 2;            // extent of @z*, @ci, %w (parallel tasks run up to this many)
  bool launchTimeTop = false; // parallel bounds from shape(%a) or %n
  int maxDepth = 3;           // nesting of for/while/if/jump inside a task
  int maxBlock = 3;           // statements per nested block (a task body: twice this)
  // Features.
  bool floatLocals = true; // f64 locals %v*, loop-carried
  bool intLocals = true;   // %ic (i32) and %im (i64)
  bool whileLoops = true;
  bool jumps = true;
  bool ifs = true;
  bool adstacks = false;
  int adstackPercent = 100; // with `adstacks`: the share of programs that have any
  bool writesBoundData = false;
  bool ndarrays = true;        // %a, %m (i32 bounds data), %u (f64 input), %w (f64 output)
  bool f32 = true;             // f64 -> f32 -> f64 round trips
  bool dualCompanions = false; // float globals with `grad` also get `dual`
  bool integerOutputs = true;  // @ci, @cx (atomic_max) and @cm receive the integer locals
  bool bands = true;           // parallel tasks may be 2-D bands with an extent-1 dimension
  // Data.
  int xLen = 4;          // @x
  int maxBoundValue = 3; // @cnt, %n, %a, %m values in [0, this]
  int maxNdarrayLen = 4; // %a, %u lengths in [1, this]
  // Relative frequencies of the statement kinds (0 = never).
  //                           asg let out int stk psh pop wrt for if whl jmp
  int weights[kNumStmtKinds] = {3, 1, 1, 1, 0, 0, 0, 0, 3, 2, 2, 1};

  /// Reverse/forward mode against finite differences: only f64 differentiable
  /// operations, no adstacks, the global-access rule holds.
  static GenConfig autodiff();
  /// Adstack sizing: stacks, pushes and pops, bounds of every kind, while
  /// loops, a kernel that may write a bound.
  static GenConfig sizing();
  /// CPU backend against the interpreter: everything race-free (optionally
  /// with adstacks, which rules out the gradient).
  static GenConfig cpu(bool adstacks = false);
  /// Passes: everything, with dual companions (forward-ad has tangents to
  /// compute) and adstacks.
  static GenConfig everything();
};

/// A generated program: description, inputs and the configuration it was
/// generated for.
struct GenProgram {
  GenConfig config;
  std::vector<GenTask> tasks;
  GenInputs inputs;
};

/// The printed program plus facts about it.
struct Printed {
  std::string text; // the module, in the text format
  bool hasWhile = false, hasFor = false, hasIf = false, hasJump = false, hasStacks = false,
       writesBoundData = false, hasNdarrayBound = false, hasLaunchTimeBound = false;
  int statements = 0; // printed statements (not counting field/kernel lines)
};
Printed print(const GenProgram &p);

/// Decoded inputs.
double xValue(const GenProgram &p, int k);
std::vector<double> xValues(const GenProgram &p);
std::vector<int64_t> cntValues(const GenProgram &p);
std::vector<int64_t> bitValues(const GenProgram &p); // @bit (i1)
int64_t nValue(const GenProgram &p);
double sValue(const GenProgram &p);
std::vector<int64_t> aShape(const GenProgram &p);
std::vector<int64_t> aValues(const GenProgram &p);
std::vector<int64_t> mShape(const GenProgram &p);
std::vector<int64_t> mValues(const GenProgram &p);
std::vector<int64_t> uShape(const GenProgram &p);
std::vector<double> uValues(const GenProgram &p);
std::vector<int64_t> wShape(const GenProgram &p);

/// `qd-run` options that set this program's inputs (`--arg n=2 --set 'x=[...]' ...`).
std::string qdRunInputs(const GenProgram &p);

/// Random programs for `config`; larger as RapidCheck's size grows.
rc::Gen<GenProgram> genProgram(GenConfig config);
/// The presets above (autodiff, sizing, cpu, cpu with adstacks, everything).
std::vector<GenConfig> presetConfigs();
/// Random programs of any preset.
rc::Gen<GenProgram> genAnyProgram();

/// The simpler programs RapidCheck tries when `p` fails.
std::vector<GenProgram> shrinks(const GenProgram &p);

/// The Ops.def rows a set of programs uses: what the operator coverage test
/// asks of the generator.
struct OperatorUse {
  std::set<BinaryOp> binary;
  std::set<UnaryOp> unary;
  std::set<CmpPredicate> cmp;
  std::set<AtomicOp> atomic;
};
/// Adds the operators of every kernel of `m` to `use`.
void collectOperators(const Module &m, OperatorUse &use);
/// The operators of `count` random programs of every preset (from `seed`,
/// so the same each run), of sizes up to RapidCheck's default maximum.
OperatorUse generatedOperators(int count, uint64_t seed);

/// RapidCheck's display of a program: its text and inputs.
void showValue(const GenProgram &p, std::ostream &os);

/// A task that carries one f32 through `depth` nested loops with run-time
/// trip counts (@m), each level applying sin: the shape of the compile
/// benchmark's nesting series, for tests of work that must grow linearly
/// with the depth.
std::string nestedLoopsKernel(int depth);

//===----------------------------------------------------------------------===//
// Running generated programs
//===----------------------------------------------------------------------===//

/// A program's module instantiated with its inputs: fields set, ndarray
/// buffers (with zeroed grad/dual companions as declared) and the launch
/// arguments of kernel `k`'s signature (also valid for @k_grad and @k_dual).
struct Instance {
  std::unique_ptr<Program> program;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<std::unique_ptr<NdarrayArg>> ndarrays;
  std::vector<LaunchArg> args;
  std::map<std::string, NdarrayArg *> byName; // "%a" -> its buffers
};
absl::StatusOr<std::unique_ptr<Instance>> instantiate(const GenProgram &p, const Module &m,
                                                      const std::string &kernel = "k");

/// Seeds the adjoints of every output (@y, @z*, %w) with fixed values.
void seedOutputAdjoints(const Module &m, Instance &in);
/// Seeds the tangents (dual companions) of the float inputs (@x, %u).
void seedInputTangents(const Module &m, Instance &in);

/// Empty when every field component and ndarray of `a` and `b` is equal:
/// bit for bit when `rtol` is 0 (NaNs of any payload equal), else within
/// rtol * max(|a|, |b|, 1) (at least 1e-5 for f32). Only components both
/// instances have are compared.
std::string compareInstances(const Module &ma, Instance &a, const Module &mb, Instance &b,
                             double rtol = 0, bool primalOnly = false);

/// Launch options every generated program runs with: bounds checks, and a
/// large tier-3 adstack default (while loops are short; soundness of the
/// sized capacities is checked separately).
LaunchOptions defaultLaunchOptions();

/// Runs @k (and @k_grad when `withGrad`, after seeding the output
/// adjoints) on the interpreter and on `backend`, each in a fresh instance,
/// and compares every buffer after each launch (see compareInstances).
/// Empty when they agree; otherwise what differs.
std::string runAgainstInterpreter(const GenProgram &p, Module &m, bool withGrad, Backend &backend,
                                  double rtol,
                                  const LaunchOptions &options = defaultLaunchOptions());

/// Launches `kernel` (after @k, with the output adjoints seeded, when it is
/// not @k) twice in two fresh instances of `p`: counting its measured
/// adstacks on `counting`, and with the optimistic launch on `optimistic`
/// (the first at capacity 1, so that every iteration that pushes more runs
/// twice; the iterations it reran are added to `*reruns`). Empty when both
/// give the same results (within `rtol`: the iterations run in another
/// order) and the same capacities, and a kernel outside the optimistic
/// launch's static condition counted; otherwise what differs.
std::string checkOptimisticLaunch(const GenProgram &p, const Module &module,
                                  const std::string &kernel, Backend &counting, Backend &optimistic,
                                  double rtol, int64_t *reruns);

//===----------------------------------------------------------------------===//
// Properties
//===----------------------------------------------------------------------===//

/// The number of cases a property runs: the max_success of RC_PARAMS when it
/// sets one (campaigns), else `fallback`.
int caseCount(int fallback);

/// Runs `property` as the current GoogleTest test with RapidCheck's
/// configuration and `caseCount(defaultCases)` cases.
void checkProperty(void (*property)(), int defaultCases);

/// A RapidCheck property with its own default number of cases (RC_PARAMS'
/// max_success overrides it).
#define QD_PROPERTY(Suite, Name, DefaultCases)                                                     \
  void qdProperty_##Suite##_##Name();                                                              \
  TEST(Suite, Name) {                                                                              \
    ::qd::testgen::checkProperty(&qdProperty_##Suite##_##Name, DefaultCases);                      \
  }                                                                                                \
  void qdProperty_##Suite##_##Name()

/// Fails the current property case with `what` followed by the program (text
/// and inputs); with $QD_COUNTEREXAMPLE_DIR set, also writes the program as
/// `<dir>/<Suite>.<Test>.qd` (each failing case overwrites it, so after
/// shrinking it holds the minimal counterexample).
[[noreturn]] void fail(const GenProgram &p, const std::string &what);

/// Writes the counterexample file (see `fail`) without failing.
void reportCounterexample(const GenProgram &p, const std::string &what);

/// Equal values: integers exactly; floats exactly (NaNs of any payload are
/// equal, -0 differs from +0) when `rtol` is 0, else within
/// rtol * max(|a|, |b|, 1).
bool sameScalar(const Scalar &a, const Scalar &b, double rtol);
/// Empty if the buffers are equal element by element (`sameScalar`), else
/// the first difference, each side's value prefixed by its name
/// (`"interp "`, say).
std::string compareBuffers(const std::string &what, const Buffer &a, const Buffer &b, double rtol,
                           std::string_view aName = "", std::string_view bName = "");

} // namespace qd::testgen
