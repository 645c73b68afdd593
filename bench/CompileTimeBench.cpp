//===- CompileTimeBench.cpp - Compile cost against kernel size ------------===//
//
// qd-bench-compile: how the cost of parsing, differentiating (reverse-ad)
// and compiling a gradient on the CPU backend grows with the kernel. Three
// generated series:
//
//   statements  a parallel task of S statements: v_k = sin(v_{k-1}) and
//               cos alternately, S = 1k ... 100k;
//   nesting     D loops nested in a task (run-time trip counts), each
//               with a sin chain step (D up to 254: with the kernel and
//               the task, the IR's limit kMaxBlockNesting = 256);
//   carried     a task whose dynamic-trip loop carries N f32 locals,
//               v_j = sin(v_j) * v_{j+1} (N stacks in the gradient);
//   chain       a task of 8 iterations whose body is one straight line of
//               S statements, v_{k+1} = v_k * v_0 and v_k + v_0
//               alternately, summed into @y with an atomic add: huge
//               kernels, S = 37.5k ... 300k (--min-chain, --max-chain);
//   mpm         S unrolled steps of a 2-D MLS-MPM simulation (particle to
//               grid scatter with atomic adds, grid update, grid to
//               particle gather; bench/MpmKernel.h), 3S + 2 tasks over
//               nine ndarrays, built with IRBuilder, S = 4 ... 64
//               (--max-mpm-steps): a kernel of many tasks; `fns` is
//               the task functions compiled for its gradient's tasks
//               (CpuBackend::taskFunctions).
//
// Each row prints the wall time of every step (the compile also split
// into the optimisation pipeline and machine code, CpuBackend::
// compileTimes, and one launch of the compiled gradient: what its tier
// buys), and for each step its growth against the previous row of the
// series (time ratio / size ratio: 1.0 is linear, 2.0 means doubling the
// kernel quadrupled the time). The baseline of each row is parsing the
// same text (linear by construction).
//
// Usage: qd-bench-compile [--max-statements 100000] [--max-compile 4000]
//                         [--max-carried 1000] [--max-compile-carried 400]
//                         [--max-compile-depth 32] [--full-limit N]
//                         [--vector-width W] [--reps N] [--time-passes]
//                         [--min-chain 37500] [--max-chain 300000]
//                         [--min-mpm-steps 4] [--max-mpm-steps 64]
//                         [--only statements,nesting,carried,chain,mpm]
//                         [--no-merge-tasks] [--json FILE]
//   --max-compile*: the largest kernels whose gradient is also compiled on
//   the CPU backend (LLVM's time dominates above them: see
//   docs/performance.md, "Compile time").
//   --full-limit: CpuBackendOptions::fullOptimizationLimit (the largest
//   function, in LLVM instructions, that gets the full tier; the column
//   `tier` says which one each gradient got).
//   --reps: runs per row, the minimum of each column is shown (1).
//   --time-passes: LLVM's pass timers on stderr (qd::timeLlvmPasses).
//   --no-merge-tasks: a function per task (CpuBackendOptions::mergeTasks
//   off), to compare with the merged compile.
//
//===----------------------------------------------------------------------===//
#include "BenchMain.h"
#include "BenchRecord.h"
#include "MpmKernel.h"

#include "qd/analysis/AdStackSizing.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/transforms/AutoDiff.h"

#include <algorithm>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

using qdbench::BenchRecord;
using qdbench::die;
using qdbench::optionValue;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string statementsKernel(int n) {
  std::string s = "field @x : f32[1024] grad\nfield @y : f32[1024] grad\n\n"
                  "kernel @k() {\n  parallel for %i = 0 to 1024 {\n    %v0 = load @x[%i] : f32\n";
  for (int k = 1; k <= n; ++k)
    s += fmt::format("    %v{} = {} %v{} : f32\n", k, k % 2 ? "cos" : "sin", k - 1);
  return s + fmt::format("    store @y[%i], %v{}\n  }}\n}}\n", n);
}

std::string nestingKernel(int depth) {
  // Run-time trip counts: LLVM would fully unroll nested constant ones.
  std::string s = "field @x : f32[64] grad\nfield @y : f32[64] grad\nfield @m : i32\n\n"
                  "kernel @k() {\n  parallel for %i = 0 to 64 {\n    %v = load @x[%i] : f32\n"
                  "    %m = load @m[] : i32\n    %a = alloca f32\n    store %a, %v\n";
  // Indented 8 levels at most: the text grows as the nest does (indenting
  // every level made it quadratic, and the parse column with it).
  auto indent = [](int d) { return std::string(4 + 2 * std::min(d, 8), ' '); };
  for (int d = 0; d < depth; ++d)
    s += fmt::format("{0}for %j{1} = 0 to %m {{\n{2}%l{1} = load %a : f32\n"
                     "{2}%s{1} = sin %l{1} : f32\n{2}store %a, %s{1}\n",
                     indent(d), d, indent(d + 1));
  for (int d = depth; d-- > 0;)
    s += indent(d) + "}\n";
  return s + "    %r = load %a : f32\n    store @y[%i], %r\n  }\n}\n";
}

std::string carriedKernel(int n) {
  std::string s = "field @x : f32[1024] grad\nfield @y : f32[1024] grad\nfield @m : i32\n\n"
                  "kernel @k() {\n  parallel for %i = 0 to 1024 {\n    %x = load @x[%i] : f32\n"
                  "    %m = load @m[] : i32\n";
  for (int j = 0; j < n; ++j)
    s += fmt::format("    %a{0} = alloca f32\n    store %a{0}, %x\n", j);
  s += "    for %t = 0 to %m {\n";
  for (int j = 0; j < n; ++j)
    s += fmt::format("      %l{0} = load %a{0} : f32\n      %n{0} = load %a{1} : f32\n"
                     "      %s{0} = sin %l{0} : f32\n      %p{0} = mul %s{0}, %n{0} : f32\n"
                     "      store %a{0}, %p{0}\n",
                     j, (j + 1) % n);
  return s + "    }\n    %r = load %a0 : f32\n    store @y[%i], %r\n  }\n}\n";
}

std::string chainKernel(int n) {
  std::string s = "field @x : f32[8] grad\nfield @y : f32 grad\n\n"
                  "kernel @k() {\n  parallel for %i = 0 to 8 {\n    %v0 = load @x[%i] : f32\n";
  for (int k = 1; k < n - 1; ++k)
    s += fmt::format("    %v{} = {} %v{}, %v0 : f32\n", k, k % 2 ? "mul" : "add", k - 1);
  return s + fmt::format("    atomic_add @y[], %v{} : f32\n  }}\n}}\n", n - 2);
}

struct Row {
  int size = 0;
  double parse = 0, reverse = 0;
  std::optional<double> compile;
  qd::CompileTimes steps; // of `compile`
  double run = 0;         // one launch of the compiled gradient, min of 3
  std::string tier = "-";
};

std::optional<size_t> fullLimit; // --full-limit
unsigned vectorWidth = 0;        // --vector-width (0: the backend's choice)
int reps = 1;                    // --reps: runs per row, the minimum is shown
bool mergeTasks = true;          // --no-merge-tasks: CpuBackendOptions::mergeTasks off
int tripCount = 16;              // @m of the generated kernels (timeGradient)

/// The run time the tier buys: one launch of the compiled gradient (the
/// minimum of 3), with x = 0.5, a seed of 1 on y, and @m (the trip count of
/// the generated loops, where there is one) = 1 in the nesting series (its
/// loops multiply) and 16 in the others.
double timeGradient(qd::Module &m, const qd::Kernel &grad, qd::CpuBackend &cpu) {
  auto program = qd::Program::create(m);
  if (!program.ok())
    die(std::string(program.status().message()));
  qd::Program &p = **program;
  auto fill = [&](std::string_view name, qd::Component c, float v) {
    qd::Buffer *b = p.field(name, c);
    float *d = reinterpret_cast<float *>(b->data());
    std::fill(d, d + b->numElements(), v);
  };
  fill("x", qd::Component::Primal, 0.5f);
  fill("y", qd::Component::Grad, 1.0f);
  if (qd::Buffer *trips = p.field("m"))
    *reinterpret_cast<int32_t *>(trips->data()) = tripCount;
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    auto t = Clock::now();
    if (absl::Status s = p.launch(grad.name(), {}, cpu); !s.ok())
      die(std::string(s.message()));
    best = std::min(best, since(t));
  }
  return best;
}

Row measure(const std::string &text, int size, bool compile) {
  Row r;
  r.size = size;
  auto t = Clock::now();
  auto parsed = qd::parseModule(text, {"generated.qd", 1});
  if (!parsed.ok())
    die(std::string(parsed.status().message()));
  if (absl::Status v = qd::verify(**parsed); !v.ok())
    die(std::string(v.message()));
  r.parse = since(t);
  qd::Module &m = **parsed;
  t = Clock::now();
  auto grad = qd::buildGradientKernel(m, *m.findKernel("k"));
  if (!grad.ok())
    die(std::string(grad.status().message()));
  r.reverse = since(t);
  if (compile) {
    qd::CpuBackendOptions o;
    o.threads = 1;
    o.vectorWidth = vectorWidth;
    o.mergeTasks = mergeTasks;
    if (fullLimit)
      o.fullOptimizationLimit = *fullLimit;
    auto cpu = qd::CpuBackend::create(o);
    if (!cpu.ok())
      die(std::string(cpu.status().message()));
    if (auto layout = (*cpu)->layout(**grad); !layout.ok())
      die(std::string(layout.status().message()));
    r.steps = (*cpu)->compileTimes(**grad);
    r.compile = r.steps.total();
    std::optional<qd::OptimizationTier> tier = (*cpu)->compileTier(**grad);
    r.tier = !tier ? "?" : *tier == qd::OptimizationTier::Full ? "full" : "light";
    r.run = timeGradient(m, **grad, **cpu);
  }
  return r;
}

std::string growth(double now, double before, int size, int beforeSize) {
  if (before <= 0 || beforeSize <= 0)
    return "-";
  return fmt::format("{:.2f}", (now / before) / (double(size) / beforeSize));
}

void series(const char *name, const char *unit, const std::vector<int> &sizes, int maxCompile,
            std::string (*make)(int)) {
  fmt::print("\n{} series\n{:>10} {:>9} {:>11} {:>11} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} "
             "{:>8} {:>8}\n",
             name, unit, "parse ms", "reverse ms", "compile ms", "size ms", "emit ms", "opt ms",
             "mc ms", "tier", "run ms", "g.parse", "g.rev", "g.comp");
  std::optional<Row> prev;
  for (int size : sizes) {
    std::string text = make(size);
    Row r = measure(text, size, size <= maxCompile);
    for (int rep = 1; rep < reps; ++rep) { // the minimum of each column
      Row again = measure(text, size, size <= maxCompile);
      r.parse = std::min(r.parse, again.parse);
      r.reverse = std::min(r.reverse, again.reverse);
      r.run = std::min(r.run, again.run);
      if (r.compile && *again.compile < *r.compile) {
        r.compile = again.compile;
        r.steps = again.steps;
      }
    }
    auto ms = [&](double s) { return r.compile ? fmt::format("{:.0f}", s * 1e3) : "-"; };
    std::string comp = ms(r.compile.value_or(0));
    std::string gp = prev ? growth(r.parse, prev->parse, r.size, prev->size) : "-";
    std::string gr = prev ? growth(r.reverse, prev->reverse, r.size, prev->size) : "-";
    std::string gc = prev && r.compile && prev->compile
                         ? growth(*r.compile, *prev->compile, r.size, prev->size)
                         : "-";
    fmt::print("{:>10} {:>9.1f} {:>11.1f} {:>11} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8} "
               "{:>8}\n",
               size, r.parse * 1e3, r.reverse * 1e3, comp, ms(r.steps.sizing), ms(r.steps.emit),
               ms(r.steps.optimize), ms(r.steps.codegen), r.tier,
               r.compile ? fmt::format("{:.2f}", r.run * 1e3) : "-", gp, gr, gc);
    std::fflush(stdout);
    prev = r;
  }
}

/// A row of the mpm series: building and compiling the gradient of `steps`
/// unrolled MLS-MPM steps, and its first launch.
struct MpmRow {
  int steps = 0;
  size_t stacks = 0;
  size_t functions = 0;  // task functions compiled for @k_grad's tasks
  size_t statements = 0; // of @k_grad, nested ones included
  double build = 0, verify = 0, reverse = 0, sizing = 0, launch = 0;
  qd::CompileTimes compile; // of @k_grad, by its first launch
};

constexpr int kMpmParticles = 64;

/// The first launch of @k_grad on a fresh CPU backend (it sizes, compiles
/// and runs the gradient), on kMpmParticles particles of a lattice in the
/// middle of the grid, at rest (every step's positions set, so the
/// gradient reads valid nodes without the primal having run), F = I, and a
/// seed of 1 on the loss.
void launchMpmGradient(qd::Module &m, const qd::Kernel &grad, int steps, MpmRow &r) {
  qd::CpuBackendOptions o;
  o.threads = 1;
  o.mergeTasks = mergeTasks;
  auto cpu = qd::CpuBackend::create(o);
  if (!cpu.ok())
    die(std::string(cpu.status().message()));
  auto program = qd::Program::create(m);
  if (!program.ok())
    die(std::string(program.status().message()));
  const int64_t s1 = steps + 1, n = kMpmParticles, g = qdbench::kMpmGrid;
  std::vector<std::vector<int64_t>> shapes = {
      {s1, n, 2},    {s1, n, 2},       {s1, n, 4}, {s1, n, 4}, {steps, g, g, 2},
      {steps, g, g}, {steps, g, g, 2}, {2},        {1}};
  std::vector<qd::Buffer> buffers; // primal and grad of each argument
  for (const std::vector<int64_t> &shape : shapes)
    for (int c = 0; c < 2; ++c) {
      auto b = qd::Buffer::create(qd::ScalarType::F32, shape);
      if (!b.ok())
        die(std::string(b.status().message()));
      buffers.push_back(std::move(*b));
    }
  auto data = [&](int arg, int component) {
    return reinterpret_cast<float *>(buffers[2 * arg + component].data());
  };
  for (int64_t t = 0; t < s1; ++t)
    for (int64_t p = 0; p < n; ++p) {
      data(0, 0)[(t * n + p) * 2] = 0.3f + 0.4f * float(p % 8) / 8;
      data(0, 0)[(t * n + p) * 2 + 1] = 0.3f + 0.4f * float(p / 8) / 8;
      data(3, 0)[(t * n + p) * 4] = data(3, 0)[(t * n + p) * 4 + 3] = 1.0f;
    }
  data(8, 1)[0] = 1.0f;
  std::vector<qd::NdarrayArg> nds(shapes.size());
  std::vector<qd::LaunchArg> args;
  for (size_t a = 0; a < shapes.size(); ++a) {
    nds[a] = {&buffers[2 * a], grad.argument(a)->hasGrad() ? &buffers[2 * a + 1] : nullptr};
    args.push_back(qd::LaunchArg::ndarray(&nds[a]));
  }
  auto t = Clock::now();
  if (absl::Status st = (*program)->launch(grad.name(), args, **cpu); !st.ok())
    die(std::string(st.message()));
  r.launch = since(t);
  r.compile = (*cpu)->compileTimes(grad);
  r.functions = (*cpu)->taskFunctions(grad).value_or(qd::TaskMergeStats()).functions;
}

MpmRow measureMpm(int steps) {
  MpmRow r;
  r.steps = steps;
  auto t = Clock::now();
  std::unique_ptr<qd::Module> m = qdbench::buildMpmModule(steps);
  r.build = since(t);
  t = Clock::now();
  if (absl::Status v = qd::verify(*m); !v.ok())
    die(std::string(v.message()));
  r.verify = since(t);
  t = Clock::now();
  auto grad = qd::buildGradientKernel(*m, *m->findKernel("k"));
  if (!grad.ok())
    die(std::string(grad.status().message()));
  r.reverse = since(t);
  qd::walk((*grad)->body(), [&](qd::Stmt &) { ++r.statements; });
  t = Clock::now();
  qd::KernelSizing sizing = qd::sizeAdStacks(**grad);
  r.sizing = since(t);
  r.stacks = sizing.stacks().size();
  launchMpmGradient(*m, **grad, steps, r);
  return r;
}

/// The mpm series: S = 4, 8, ... up to `maxSteps`, each column the minimum
/// of --reps runs. Rows of `--json`: series "mpm", steps, tasks, stacks,
/// functions (compiled for the gradient's tasks), and build, verify, reverse, sizing, emit, opt, mc
/// and first_launch in ms.
void mpmSeries(int minSteps, int maxSteps, BenchRecord &record) {
  fmt::print("\nmpm series (3S + 2 tasks; {} particles for the launch)\n{:>5} {:>6} {:>9} {:>9} "
             "{:>10} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>5} {:>10} {:>8} {:>6} {:>6} {:>6} "
             "{:>6}\n",
             kMpmParticles, "S", "tasks", "build ms", "verify ms", "reverse ms", "stacks", "stmts",
             "size ms", "emit ms", "opt ms", "mc ms", "fns", "launch ms", "g.verify", "g.rev",
             "g.size", "g.emit", "g.lnch");
  std::optional<MpmRow> prev;
  for (int steps = minSteps; steps <= maxSteps; steps *= 2) {
    MpmRow r = measureMpm(steps);
    for (int rep = 1; rep < reps; ++rep) {
      MpmRow again = measureMpm(steps);
      for (auto f :
           {&MpmRow::build, &MpmRow::verify, &MpmRow::reverse, &MpmRow::sizing, &MpmRow::launch})
        r.*f = std::min(r.*f, again.*f);
      if (again.compile.total() < r.compile.total())
        r.compile = again.compile;
    }
    auto g = [&](auto get) {
      return prev ? growth(get(r), get(*prev), r.steps, prev->steps) : std::string("-");
    };
    fmt::print(
        "{:>5} {:>6} {:>9.1f} {:>9.1f} {:>10.1f} {:>6} {:>8} {:>8.1f} {:>8.1f} {:>8.0f} {:>8.0f} "
        "{:>5} {:>10.0f} {:>8} {:>6} {:>6} {:>6} {:>6}\n",
        steps, 3 * steps + 2, r.build * 1e3, r.verify * 1e3, r.reverse * 1e3, r.stacks,
        r.statements, r.sizing * 1e3, r.compile.emit * 1e3, r.compile.optimize * 1e3,
        r.compile.codegen * 1e3, r.functions, r.launch * 1e3,
        g([](const MpmRow &x) { return x.verify; }), g([](const MpmRow &x) { return x.reverse; }),
        g([](const MpmRow &x) { return x.sizing; }),
        g([](const MpmRow &x) { return x.compile.emit; }),
        g([](const MpmRow &x) { return x.launch; }));
    std::fflush(stdout);
    record.add({{"series", "mpm"},
                {"steps", steps},
                {"tasks", 3 * steps + 2},
                {"stacks", r.stacks},
                {"statements", r.statements},
                {"functions", r.functions},
                {"build_ms", r.build * 1e3},
                {"verify_ms", r.verify * 1e3},
                {"reverse_ms", r.reverse * 1e3},
                {"sizing_ms", r.sizing * 1e3},
                {"emit_ms", r.compile.emit * 1e3},
                {"opt_ms", r.compile.optimize * 1e3},
                {"mc_ms", r.compile.codegen * 1e3},
                {"first_launch_ms", r.launch * 1e3}});
    prev = r;
  }
}

int run(int argc, char **argv) {
  BenchRecord record("compile", argc, argv);
  int maxStatements = 100000, maxCompile = 4000, maxCarried = 1000, maxCompileCarried = 400;
  int maxCompileDepth = 32, maxChain = 300000, minChain = 37500, maxMpmSteps = 64, minMpmSteps = 4;
  std::string only = "statements,nesting,carried,chain,mpm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::atoi(optionValue(argc, argv, i).c_str()); };
    if (a == "--max-statements")
      maxStatements = next();
    else if (a == "--max-compile")
      maxCompile = next();
    else if (a == "--vector-width")
      vectorWidth = static_cast<unsigned>(next());
    else if (a == "--reps")
      reps = std::max(1, next());
    else if (a == "--no-merge-tasks")
      mergeTasks = false;
    else if (a == "--time-passes")
      qd::timeLlvmPasses(true); // LLVM reports the timings on stderr
    else if (a == "--max-carried")
      maxCarried = next();
    else if (a == "--max-compile-carried")
      maxCompileCarried = next();
    else if (a == "--max-compile-depth")
      maxCompileDepth = next();
    else if (a == "--max-chain")
      maxChain = next();
    else if (a == "--min-chain")
      minChain = std::max(1, next());
    else if (a == "--max-mpm-steps")
      maxMpmSteps = next();
    else if (a == "--min-mpm-steps")
      minMpmSteps = std::max(1, next());
    else if (a == "--full-limit")
      fullLimit = static_cast<size_t>(next());
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      record.setPath(argv[++i]);
    else
      die("usage: qd-bench-compile [--max-statements N] [--max-compile N] [--max-carried N] "
          "[--max-compile-carried N] [--max-compile-depth N] [--full-limit N] [--vector-width W] "
          "[--reps N] [--time-passes] [--min-chain N] [--max-chain N] [--max-mpm-steps N] "
          "[--no-merge-tasks] "
          "[--only statements,nesting,carried,chain,mpm] [--json FILE]");
  }
  fmt::print("qd-bench-compile: wall seconds, the minimum of --reps runs per row; growth g = (time "
             "ratio) / "
             "(size ratio) against the row above (1.00: linear)\n");
  // The kernel and its task take two levels of the 256 the IR allows.
  std::vector<int> statements, nesting = {16, 32, 64, 127, 254}, carried, chain;
  for (int s = 1000; s <= maxStatements; s *= 2)
    statements.push_back(s);
  if (statements.empty() || statements.back() != maxStatements)
    statements.push_back(maxStatements);
  for (int n = 50; n <= maxCarried; n *= 2)
    carried.push_back(n);
  if (carried.empty() || carried.back() != maxCarried) // e.g. issue 20's N = 500
    carried.push_back(maxCarried);
  for (int s = minChain; s <= maxChain; s *= 2)
    chain.push_back(s);
  auto wanted = [&](const char *name) { return only.find(name) != std::string::npos; };
  if (wanted("statements"))
    series("statements", "stmts", statements, maxCompile, statementsKernel);
  tripCount = 1;
  if (wanted("nesting"))
    series("nesting", "depth", nesting, maxCompileDepth, nestingKernel);
  tripCount = 16;
  if (wanted("carried"))
    series("carried", "N", carried, maxCompileCarried, carriedKernel);
  if (wanted("chain"))
    series("chain", "stmts", chain, maxChain, chainKernel);
  if (wanted("mpm"))
    mpmSeries(minMpmSteps, maxMpmSteps, record);
  qd::reportLlvmPassTimes();
  record.write();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qdbench::benchMain("qd-bench-compile", argc, argv, run);
}
