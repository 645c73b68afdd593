//===- qd-run.cpp - Run kernels from a .qd file ---------------------------===//
//
//   qd-run kernel.qd [--kernel=NAME]... [--script=FILE]
//          [--backend=NAME] [--backend-option KEY=VALUE]... [--list-backends]
//          [--amdgpu-arch=gfx90a|gfx942|gfx1100]
//          [--inputs=in.json] [--set FIELD=JSON]... [--arg [KERNEL:]NAME=JSON]...
//          [--print=a,b.grad,...] [--no-bounds-check] [--adstack-capacity=N]
//          [--adstack-memory-budget=BYTES]
//          [--backward NAME[=SEED]]... [--checkpoint-budget=BYTES]
//          [--checkpoint-interval=K]
//          [--report-adstacks] [--no-adstack-sizing] [--[no-]optimistic-adstacks]
//          [--refine-adstacks-above=BYTES]
//          [--vector-width=N]
//          [--no-vector-math] [--threads=N] [--light] [--timeout-ms=N] [--max-loop-iterations=N]
//          [--vulkan-device=NAME] [--vulkan-validation=off|if-installed|required]
//          [--vulkan-loop-checks=auto|on|off]
//
// Fields and ndarray arguments are given as (nested) JSON arrays, scalars as
// JSON numbers or booleans; `NAME.grad` / `NAME.dual` address companions.
// An inputs file is {"fields": {NAME: JSON}, "args": {NAME: JSON}}. After
// the kernels ran, the requested fields/ndarrays are printed as one JSON
// object (floats in shortest round-trip form; NaN and infinities as the
// strings "nan", "inf", "-inf"). A launch script (Script.h) lists launches
// with their own arguments, values to set, values to print and expected
// errors; each launch that prints or fails as expected prints one JSON
// object on its own line. Backends come from the registry
// (qd/runtime/BackendRegistry.h); the backend flags (--vector-width,
// --vulkan-device, ...) set its options.
//
//===----------------------------------------------------------------------===//
#include "Script.h"
#include "ToolSupport.h"

#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/runtime/LaunchTape.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <variant>

using namespace qdrun;
using namespace qd::tool;

namespace {

constexpr const char *kUsage =
    "usage: qd-run <kernel.qd> [options]\n"
    "\n"
    "Runs kernels of a qd module and prints fields/ndarrays as JSON.\n"
    "\n"
    "options:\n"
    "  --kernel=NAME          kernel to launch (repeat to launch several in order;\n"
    "                         default: the module's only kernel)\n"
    "  --script=FILE          launch script instead of --kernel: a JSON file\n"
    "                         {\"launches\": [LAUNCH, ...]}, each LAUNCH an object\n"
    "                         {\"kernel\": NAME, \"args\": {NAME: JSON}, \"set\": {NAME: JSON},\n"
    "                          \"print\": [NAME, ...] or true,\n"
    "                          \"expect_error\": true or TEXT, \"tape\": true}\n"
    "                         (only \"kernel\" is required), or a backward entry\n"
    "                         {\"backward\": {NAME: SEED}, \"print\": ...}; prints one JSON "
    "object\n"
    "                         per line for each launch that prints or fails as\n"
    "                         expected, and stops at the first unexpected error\n"
    "                         or expected error that did not happen\n"
    "  --backend=NAME         execution backend (the list below): cpu (the default),\n"
    "                         or interp (the default with --check-global-accesses),\n"
    "                         and where built cuda, amdgpu and vulkan\n"
    "  --backend-option KEY=VALUE\n"
    "                         an option of the backend (repeatable; listed below),\n"
    "                         e.g. --backend-option threads=4; the flags below\n"
    "                         that name a backend set one of them\n"
    "  --list-backends        print the backends of this build and their options\n"
    "  --amdgpu-arch=NAME     architecture the amdgpu backend compiles for: gfx90a,\n"
    "                         gfx942 or gfx1100 (default: the GPU's own)\n"
    "  --vulkan-device=NAME   vulkan: the device, by index or a substring of its name\n"
    "                         (default: QD_VULKAN_DEVICE, else the first discrete GPU)\n"
    "  --vulkan-validation=off|if-installed|required\n"
    "                         vulkan: run under the Khronos validation layer and\n"
    "                         print its warnings and errors on stderr; with any,\n"
    "                         qd-run exits with status 1 (default: off)\n"
    "  --vulkan-loop-checks=auto|on|off\n"
    "                         vulkan: check that every loop ended where the program\n"
    "                         says, and fail naming the loop where the driver ended\n"
    "                         it early (auto, the default: on llvmpipe only)\n"
    "  --inputs=FILE          JSON file {\"fields\": {...}, \"args\": {...}}\n"
    "  --set NAME=JSON        initial value of a field (or NAME.grad / NAME.dual)\n"
    "  --arg NAME=JSON        kernel argument of every launched kernel that has it:\n"
    "                         number, boolean or nested array (an ndarray, shared\n"
    "                         by name by all launches)\n"
    "  --arg KERNEL:NAME=JSON scalar argument of kernel KERNEL only (wins over NAME)\n"
    "  --backward NAME[=SEED] record every --kernel launch on a launch tape, then run\n"
    "                         their gradient kernels (@K_grad) backward with NAME's\n"
    "                         adjoint seeded (default 1; repeatable); the output\n"
    "                         follows the backward pass. A script says\n"
    "                         \"tape\": true per launch and {\"backward\": {NAME: SEED}}\n"
    "  --checkpoint-budget=BYTES\n"
    "                         bytes the launch tape may keep; it recomputes\n"
    "                         segments of launches to stay within them\n"
    "  --checkpoint-interval=K\n"
    "                         checkpointed loops (reverse-ad{checkpoint}) store their\n"
    "                         state every K iterations (default: chosen at launch)\n"
    "  --print=A,B.grad,...   what to print after the last launch (default: every\n"
    "                         field and ndarray; a script says it per launch)\n"
    "  --no-bounds-check      cpu: do not check field/ndarray indices (faster; an\n"
    "                         out-of-range index is then undefined behaviour).\n"
    "                         By default every index is checked, and the\n"
    "                         interpreter always checks\n"
    "  --bounds-check         the default (for shell scripts that spell it out)\n"
    "  --adstack-capacity=N   capacity of adstacks the sizing cannot bound (tier 3);\n"
    "                         with --no-adstack-sizing, of every capacity-0 adstack\n"
    "  --no-adstack-sizing    do not size adstacks before each launch\n"
    "  --adstack-memory-budget=BYTES\n"
    "                         the most adstack heap a launch may lay out; a launch\n"
    "                         whose heap does not fit runs fewer iterations at a\n"
    "                         time (waves). Default (0): half of the device's free\n"
    "                         memory (the host's available RAM on the cpu). An\n"
    "                         explicit budget also bounds one iteration's stacks\n"
    "                         of checkpointed loops (their interval fits it)\n"
    "  --optimistic-adstacks  adstacks measured at launch: after a kernel's first\n"
    "                         launch, run it with the capacities its last launch\n"
    "                         measured and rerun the iterations that overflow,\n"
    "                         where it can (docs/sizing.md), instead of counting\n"
    "                         before every launch (the default of the cpu, cuda and\n"
    "                         vulkan backends)\n"
    "  --no-optimistic-adstacks\n"
    "                         count before every launch (the interpreter's default)\n"
    "  --refine-adstacks-above=BYTES\n"
    "                         adstacks with a static upper bound run at it, unmeasured,\n"
    "                         where it holds at most BYTES over the launch's iterations\n"
    "                         (default 1048576; 0: always measure)\n"
    "  --check-global-accesses\n"
    "                         fail when a launch writes a field or ndarray element\n"
    "                         it read earlier in the same launch\n"
    "  --timeout-ms=N         stop each launch that runs longer than N ms, naming the\n"
    "                         loop it was in (every backend)\n"
    "  --max-loop-iterations=N\n"
    "                         interp: stop a launch after N loop iterations in all\n"
    "  --report-adstacks      print each adstack's capacity, where it lived (the heap,\n"
    "                         or a GPU thread's local tape) and its bytes per thread,\n"
    "                         or its maximum depth on the interpreter\n"
    "  --vector-width=N       cpu: SIMD lanes of vectorised parallel tasks (a power of\n"
    "                         two up to 64; default: 32 with AVX2 or AVX-512, else\n"
    "                         8; 1: scalar code only)\n"
    "  --no-vector-math       cpu: vectorised math calls the scalar libm functions\n"
    "                         per lane instead of glibc's libmvec\n"
    "  --vector-isa=NAME      cpu: libmvec variants to call: auto (the host's widest,\n"
    "                         the default), sse4, avx2, avx512 or none\n"
    "  --threads=N            cpu: worker threads of parallel tasks, 1 to 1024 (0, the\n"
    "                         default: one per hardware thread)\n"
    "  --light                cpu: compile every kernel with the light tier (few\n"
    "                         passes, unoptimised code generation: what very large or\n"
    "                         deeply nested kernels get, docs/performance.md)\n";

/// An ndarray argument's buffers, kept by name from launch to launch.
struct Ndarray {
  qd::Buffer primal, grad, dual;
  qd::NdarrayArg arg;
};

qd::Buffer makeBuffer(qd::ScalarType elem, const std::vector<int64_t> &shape,
                      const std::string &what) {
  absl::StatusOr<qd::Buffer> made = qd::Buffer::create(elem, shape);
  if (!made.ok())
    die(what + ": " + std::string(made.status().message()));
  return *std::move(made);
}

/// The `c` companion of `nd`, made (zero) if it has none yet.
qd::Buffer &companion(Ndarray &nd, qd::Component c, const std::string &what) {
  qd::Buffer *&bound = c == qd::Component::Grad ? nd.arg.grad : nd.arg.dual;
  if (!bound) {
    qd::Buffer &b = c == qd::Component::Grad ? nd.grad : nd.dual;
    b = makeBuffer(nd.primal.elementType(), nd.primal.shape(), what);
    bound = &b;
  }
  return *bound;
}

/// Gives `nd` the companions `param` declares and it lacks, zero.
void addCompanions(Ndarray &nd, const qd::Argument &param, const std::string &what) {
  for (qd::Component c : {qd::Component::Grad, qd::Component::Dual})
    if (param.hasComponent(c))
      companion(nd, c, what);
}

/// Runs planned launches in order on one backend, keeping the ndarrays
/// from launch to launch, and prints what they ask for: a command-line run
/// one JSON object after its last launch, a script one JSON object per line
/// for each launch that prints or fails as expected.
class Runner {
public:
  Runner(qd::Program &program, qd::Backend &backend, const qd::LaunchOptions &options, bool script,
         bool reportAdStacks, uint64_t checkpointBudget)
      : program_(program), backend_(backend), options_(options), script_(script),
        reportAdStacks_(reportAdStacks),
        tape_(program, backend, {.launch = options, .checkpointBudget = checkpointBudget}) {}

  void run(Launch &launch);

private:
  qd::Backend &backend() { return backend_; }
  qd::Buffer &buffer(const Slot &slot) {
    return slot.ndarray ? *ndarrays_.at(slot.base)->arg.component(slot.component)
                        : *program_.field(slot.base, slot.component);
  }
  std::optional<std::string> outcome(const Launch &launch, const absl::Status &status) const;
  void reportAdStacks(const Launch &launch);
  void print(const Launch &launch, const std::optional<std::string> &error);
  /// A backward entry: the recorded launches' gradients.
  void backward(const Launch &launch);

  qd::Program &program_;
  qd::Backend &backend_;
  const qd::LaunchOptions &options_;
  bool script_, reportAdStacks_;
  std::map<std::string, std::unique_ptr<Ndarray>> ndarrays_;
  std::set<const qd::Kernel *> warned_;
  std::vector<std::string> report_;
  /// The launches marked "tape" (every --kernel with --backward).
  qd::LaunchTape tape_;
};

void Runner::backward(const Launch &launch) {
  std::vector<qd::TapeSeed> seeds;
  for (const auto &[slot, value] : *launch.backward) {
    qd::TapeSeed seed{.value = value};
    if (slot.ndarray)
      seed.buffer = ndarrays_.at(slot.base)->arg.grad;
    else
      seed.field = slot.base;
    seeds.push_back(seed);
  }
  std::optional<std::string> error = outcome(launch, tape_.backward(seeds));
  if (launch.prints || error)
    print(launch, error);
}

void Runner::run(Launch &launch) {
  if (launch.backward)
    return backward(launch);
  const qd::Kernel &k = *launch.kernel;
  for (NewNdarray &n : launch.newNdarrays) {
    std::string what = launch.label + ": ndarray '" + n.param->name() + "'";
    auto nd = std::make_unique<Ndarray>();
    nd->primal = makeBuffer(n.param->type().element(), n.primal.shape, what);
    store(nd->primal, n.primal);
    nd->arg.primal = &nd->primal;
    addCompanions(*nd, *n.param, what);
    for (const auto &[c, value] : n.companions)
      store(companion(*nd, c, what), value);
    ndarrays_[n.param->name()] = std::move(nd);
  }
  launch.newNdarrays.clear(); // the values are in the buffers now
  std::vector<qd::LaunchArg> args;
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    const qd::Argument &p = *k.argument(i);
    if (!p.isNdarray()) {
      args.push_back(qd::LaunchArg::scalar(launch.scalars[i]));
      continue;
    }
    Ndarray &nd = *ndarrays_.at(p.name());
    addCompanions(nd, p, launch.label + ": ndarray '" + p.name() + "'");
    args.push_back(qd::LaunchArg::ndarray(&nd.arg));
  }
  // After the companions the launch needs exist: a value may be for one.
  for (const auto &[slot, value] : launch.sets)
    store(buffer(slot), value);
  launch.sets.clear();

  // What sizing says about stacks outside its grammar (measured at
  // launch, or the default), once per kernel, before its first launch.
  if (options_.sizeAdStacks && warned_.insert(&k).second) {
    absl::StatusOr<const qd::KernelSizing *> sizing = backend().adStackSizing(k);
    if (!sizing.ok())
      die((script_ ? launch.label + ": " : "") + std::string(sizing.status().message()));
    for (const std::string &w : (*sizing)->warnings())
      std::cerr << w << '\n';
  }
  absl::Status status = launch.tape ? tape_.launch(k.name(), args)
                                    : program_.launch(k.name(), args, backend(), options_);
  std::optional<std::string> error = outcome(launch, status);
  if (reportAdStacks_ && !error)
    reportAdStacks(launch);
  // The adstack report goes out before the output: after each launch of a
  // script, after the last launch of a command-line run.
  if (script_ || launch.prints) {
    for (const std::string &line : report_)
      std::cerr << (script_ ? fmt::format("launches[{}]: ", launch.index) : "") << line << '\n';
    report_.clear();
  }
  if (launch.prints || error)
    print(launch, error);
}

/// The message of an expected error; stops the run on an unexpected error
/// or on an expected one that did not happen.
std::optional<std::string> Runner::outcome(const Launch &launch, const absl::Status &status) const {
  std::string message(status.message());
  const std::optional<std::string> &expected = launch.expectError;
  if (status.ok() && !expected)
    return std::nullopt;
  if (!expected) {
    if (!script_)
      die(message);
    die("qd-run: error: " + launch.label +
        " failed (mark a launch that should fail with \"expect_error\"):\n" +
        diagnostic(message, "qd-run"));
  }
  if (status.ok())
    die(launch.label + " succeeded but was expected to fail (its \"expect_error\" is " +
        (expected->empty() ? std::string("true") : quoted(*expected)) + ")");
  if (message.find(*expected) == std::string::npos)
    die("qd-run: error: " + launch.label + " failed with an error that does not contain " +
        quoted(*expected) + " (its \"expect_error\"):\n" + diagnostic(message, "qd-run"));
  return message;
}

void Runner::reportAdStacks(const Launch &launch) {
  // One line per stack, in source order, named as qd-opt names it: the
  // capacity it got, and the depth it reached (interpreter); then the
  // sizing report (Backend::sizingReport), with where each stack lived
  // (cpu, cuda, amdgpu, vulkan), and the heap the launch used.
  const qd::Kernel &k = *launch.kernel;
  auto *interp = dynamic_cast<qd::Interpreter *>(&backend_);
  bool compiled = !interp;
  qd::ValueNamer names(k);
  std::vector<std::pair<std::string, std::string>> rows;
  auto row = [&](const qd::AdStackAllocaStmt *stack, int64_t cap, const std::string &more) {
    rows.emplace_back(stack->loc().str(),
                      fmt::format("kernel @{}: adstack {} ({}) at {}: capacity {}{}", k.name(),
                                  names[stack], qd::toString(stack->elementType()),
                                  stack->loc().str(), cap, more));
  };
  if (compiled && !options_.sizeAdStacks) {
    // Unsized: what the launch was given (declared, or the default).
    qd::walk(const_cast<qd::Kernel &>(k), [&](qd::Stmt &s) {
      if (auto *a = qd::dyn_cast<qd::AdStackAllocaStmt>(&s)) {
        int64_t cap = a->capacity() ? a->capacity() : options_.defaultAdStackCapacity;
        if (const qd::Value *arg = a->capacityArgument())
          cap = std::max<int64_t>(launch.scalars.at(qd::cast<qd::Argument>(arg)->index()).i, 1);
        row(a, cap, "");
      }
    });
  } else if (compiled ||
             program_.lastMeasuredLaunch().path == qd::Program::MeasuredLaunch::Path::Optimistic) {
    // (An optimistic launch ran variants of the kernel, whose stacks the
    // interpreter observed: the capacities are the kernel's.)
    for (auto &[stack, cap] : program_.lastAdStackCapacities())
      row(stack, cap, "");
  } else {
    for (auto &[stack, depth] : interp->adStackMaxDepths())
      row(stack, interp->adStackCapacities().at(stack), ", max depth " + std::to_string(depth));
  }
  std::sort(rows.begin(), rows.end());
  for (auto &r : rows)
    report_.push_back(r.second);
  // What sizing says about each stack and where the launch placed it: the
  // library's report, from the sizing the backend keeps with the kernel.
  if (!rows.empty()) {
    absl::StatusOr<std::string> sizing = backend_.sizingReport(k);
    if (!sizing.ok())
      die("qd-run: error: " + std::string(sizing.status().message()));
    for (std::string_view lines = *sizing; !lines.empty();) {
      size_t end = lines.find('\n');
      report_.emplace_back(lines.substr(0, end));
      lines.remove_prefix(end == std::string_view::npos ? lines.size() : end + 1);
    }
  }
  // Kernels without adstacks use no heap. (The threads are those the last
  // launch laid its heap out for: fewer than the grid where the task
  // bounds are fixed and short.)
  if (std::optional<qd::AdStackHeapUsage> heap = backend_.lastAdStackHeapUsage();
      heap && !rows.empty())
    report_.push_back(fmt::format(
        "kernel @{}: adstack heap {} bytes ({} {}), needs of the iterations in flight {} bytes, "
        "{} wave{}, checkpoint interval {}, budget {}",
        k.name(), heap->bytes, heap->threads, heap->threadKind, heap->needBytes, heap->waves,
        heap->waves == 1 ? "" : "s",
        heap->checkpointInterval == 0 ? std::string("none")
                                      : std::to_string(heap->checkpointInterval),
        heap->budgetBytes == INT64_MAX ? std::string("none")
                                       : fmt::format("{} bytes", heap->budgetBytes)));
}

void Runner::print(const Launch &launch, const std::optional<std::string> &error) {
  std::string values = "{";
  for (size_t i = 0; i < launch.print.size(); ++i)
    values +=
        (i ? ", " : "") + quoted(launch.print[i].name) + ": " + bufferText(buffer(launch.print[i]));
  values += "}";
  if (!script_) {
    std::cout << values << '\n';
    return;
  }
  std::string record = fmt::format("{{\"launch\": {}, {}", launch.index,
                                   launch.kernel ? "\"kernel\": " + quoted(launch.kernel->name())
                                                 : std::string("\"backward\": true"));
  if (error)
    record += ", \"error\": " + quoted(*error);
  if (launch.prints)
    record += ", \"values\": " + values;
  // Flushed: what a launch printed stays printed if a later one fails.
  std::cout << record << "}" << std::endl;
}

/// A backend flag of qd-run: the registry option it sets on its backend
/// (qd/runtime/BackendRegistry.h).
struct BackendFlag {
  const char *flag;
  const char *backend;
  const char *option;
  const char *fixed; // the value of a flag that takes none, else null
};

constexpr BackendFlag kBackendFlags[] = {
    {"--amdgpu-arch", "amdgpu", "arch", nullptr},
    {"--vulkan-device", "vulkan", "device", nullptr},
    {"--vulkan-validation", "vulkan", "validation", nullptr},
    {"--vulkan-loop-checks", "vulkan", "loop-checks", nullptr},
    {"--vector-width", "cpu", "vector-width", nullptr},
    {"--threads", "cpu", "threads", nullptr},
    {"--vector-isa", "cpu", "vector-isa", nullptr},
    {"--no-vector-math", "cpu", "vector-math", "false"},
    {"--light", "cpu", "light", "true"},
};

/// What the command line asks for.
struct Config {
  std::string file, backendName, inputsFile, scriptFile;
  std::vector<std::string> kernels, printList;
  std::vector<std::pair<std::string, std::string>> sets, argValues;
  /// --backward seeds (NAME, JSON value) and --checkpoint-budget.
  std::vector<std::pair<std::string, std::string>> backward;
  uint64_t checkpointBudget = 0;
  bool printGiven = false, reportAdStacks = false;
  qd::LaunchOptions options;
  /// --backend-option items, then the backend flags given (kBackendFlags)
  /// with their values.
  qd::BackendOptions backendOptions;
  std::vector<std::pair<const BackendFlag *, std::string>> backendFlags;
};

/// Reads the command line's arguments one at a time.
class ArgReader {
public:
  ArgReader(int argc, char **argv) : argc_(argc), argv_(argv) {}
  bool next() { return ++i_ < argc_ ? (arg_ = argv_[i_], true) : false; }
  const std::string &arg() const { return arg_; }
  /// The value of `flag` (`--flag=V` or `--flag V`) if this is it.
  std::optional<std::string> value(const std::string &flag) {
    if (arg_.rfind(flag + "=", 0) == 0)
      return arg_.substr(flag.size() + 1);
    if (arg_ != flag)
      return std::nullopt;
    if (i_ + 1 >= argc_)
      die(flag + " needs a value");
    return std::string(argv_[++i_]);
  }

private:
  int argc_, i_ = 0;
  char **argv_;
  std::string arg_;
};

std::pair<std::string, std::string> keyValue(const std::string &v, const std::string &flag) {
  size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0)
    die(flag + " expects NAME=JSON, got '" + v + "'");
  return std::pair(v.substr(0, eq), v.substr(eq + 1));
}

/// Takes the current argument if it is a backend flag (kBackendFlags).
bool backendFlag(ArgReader &args, Config &c) {
  for (const BackendFlag &f : kBackendFlags) {
    if (f.fixed && args.arg() == f.flag) {
      c.backendFlags.emplace_back(&f, f.fixed);
      return true;
    }
    if (!f.fixed)
      if (std::optional<std::string> v = args.value(f.flag)) {
        c.backendFlags.emplace_back(&f, *v);
        return true;
      }
  }
  return false;
}

/// Takes the current argument if it is a flag without a value that sets a
/// launch option.
bool launchSwitch(const std::string &a, qd::LaunchOptions &o) {
  if (a == "--bounds-check" || a == "--no-bounds-check")
    o.boundsChecked = a == "--bounds-check";
  else if (a == "--no-adstack-sizing")
    o.sizeAdStacks = false;
  else if (a == "--optimistic-adstacks" || a == "--no-optimistic-adstacks")
    o.optimisticAdStacks = a == "--optimistic-adstacks";
  else if (a == "--check-global-accesses")
    o.checkGlobalAccesses = true;
  else
    return false;
  return true;
}

/// Takes the current argument if it is a flag with a value that sets a
/// launch option.
bool launchValue(ArgReader &args, qd::LaunchOptions &o) {
  if (auto v = args.value("--adstack-capacity")) {
    o.defaultAdStackCapacity = integerOption("--adstack-capacity", *v, 0, INT64_MAX);
  } else if (auto v = args.value("--adstack-memory-budget")) {
    o.adStackMemoryBudget = integerOption("--adstack-memory-budget", *v, 0, INT64_MAX);
  } else if (auto v = args.value("--refine-adstacks-above")) {
    o.refineAdStacksAboveBytes = integerOption("--refine-adstacks-above", *v, 0, INT64_MAX);
  } else if (auto v = args.value("--timeout-ms")) {
    // Nanoseconds in 64 bits: about 292 years.
    o.timeout =
        std::chrono::milliseconds(integerOption("--timeout-ms", *v, 1, INT64_MAX / 1000000));
  } else if (auto v = args.value("--checkpoint-interval")) {
    o.checkpointInterval = integerOption("--checkpoint-interval", *v, 1, INT32_MAX);
  } else if (auto v = args.value("--max-loop-iterations")) {
    o.maxLoopIterations = integerOption("--max-loop-iterations", *v, 1, INT64_MAX);
  } else {
    return false;
  }
  return true;
}

/// Takes the current argument if it says what to run or print.
bool runValue(ArgReader &args, Config &c) {
  if (auto v = args.value("--kernel")) {
    c.kernels.push_back(*v);
  } else if (auto v = args.value("--script")) {
    c.scriptFile = *v;
  } else if (auto v = args.value("--backend")) {
    c.backendName = *v;
  } else if (auto v = args.value("--backend-option")) {
    if (absl::Status s = c.backendOptions.add(*v); !s.ok())
      die("--backend-option: " + std::string(s.message()));
  } else if (auto v = args.value("--inputs")) {
    c.inputsFile = *v;
  } else if (auto v = args.value("--set")) {
    c.sets.push_back(keyValue(*v, "--set"));
  } else if (auto v = args.value("--arg")) {
    c.argValues.push_back(keyValue(*v, "--arg"));
  } else if (auto v = args.value("--backward")) {
    c.backward.push_back(v->find('=') == std::string::npos ? std::pair(*v, std::string("1"))
                                                           : keyValue(*v, "--backward"));
  } else if (auto v = args.value("--checkpoint-budget")) {
    c.checkpointBudget = integerOption("--checkpoint-budget", *v, 1, INT64_MAX);
  } else if (auto v = args.value("--print")) {
    c.printGiven = true;
    std::stringstream ss(*v);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty() &&
          std::find(c.printList.begin(), c.printList.end(), item) == c.printList.end())
        c.printList.push_back(item); // each key once
  } else {
    return false;
  }
  return true;
}

/// The command line, or the exit status of --help or --list-backends.
std::variant<Config, int> parseArgs(int argc, char **argv) {
  Config c;
  c.options.boundsChecked = true; // a command-line run reports bad indices; --no-bounds-check
  ArgReader args(argc, argv);
  while (args.next()) {
    const std::string &a = args.arg();
    if (a == "-h" || a == "--help" || a == "--list-backends") {
      std::cout << (a == "--list-backends" ? "" : std::string(kUsage) + "\n") << backendUsage();
      return 0;
    }
    if (runValue(args, c) || backendFlag(args, c) || launchValue(args, c.options) ||
        launchSwitch(a, c.options))
      continue;
    if (a == "--report-adstacks")
      c.reportAdStacks = true;
    else if (a.size() > 1 && a[0] == '-')
      die("unknown option '" + a + "' (see --help)");
    else if (c.file.empty())
      c.file = a;
    else
      die("more than one input file given ('" + c.file + "' and '" + a + "')");
  }
  return c;
}

/// Checks the options against each other, chooses the default backend and
/// gives it the options of its flags.
void checkConfig(Config &c) {
  if (c.file.empty())
    die("no input file (see --help)");
  bool script = !c.scriptFile.empty();
  if (script && !c.kernels.empty())
    die("--kernel does not go with --script: the script names the kernel of each launch");
  if (script && c.printGiven)
    die("--print does not go with --script: list what to print in a launch's \"print\"");
  if (script && !c.backward.empty())
    die("--backward does not go with --script: run the tape backward in an entry "
        "{\"backward\": {NAME: SEED}}");
  if (c.backendName.empty()) // the exact access check is the interpreter's
    c.backendName = c.options.checkGlobalAccesses ? "interp" : "cpu";
  for (const auto &[flag, value] : c.backendFlags) {
    if (flag->backend == c.backendName)
      c.backendOptions.set(flag->option, value);
    else if (std::string_view(flag->backend) == "vulkan")
      die("the --vulkan-* options need --backend=vulkan");
    else if (std::string_view(flag->backend) == "amdgpu")
      die(std::string(flag->flag) + " goes with --backend=amdgpu");
    // The cpu flags do nothing on another backend (scripts pass them to
    // every backend alike).
  }
}

/// The launches: a script's, or one per --kernel with the output after the
/// last.
std::vector<LaunchSpec> launchSpecs(Config &c, const qd::Module &module) {
  if (!c.scriptFile.empty())
    return readScript(c.scriptFile);
  if (c.kernels.empty()) {
    if (module.kernels().size() != 1)
      die("the module has " + std::to_string(module.kernels().size()) +
          " kernels; choose with --kernel=NAME");
    c.kernels.push_back(module.kernels()[0]->name());
  }
  std::vector<LaunchSpec> specs;
  for (size_t i = 0; i < c.kernels.size(); ++i) {
    LaunchSpec spec;
    spec.index = static_cast<int>(i);
    spec.kernel = c.kernels[i];
    specs.push_back(std::move(spec));
  }
  if (!c.backward.empty()) { // every launch on the tape, then backward
    LaunchSpec back;
    back.index = static_cast<int>(specs.size());
    back.backward = json::object();
    for (auto &[name, text] : c.backward)
      (*back.backward)[name] = parseJson(text, "--backward " + name);
    for (LaunchSpec &spec : specs)
      spec.tape = true;
    specs.push_back(std::move(back));
  }
  specs.back().prints = true;
  specs.back().printAll = !c.printGiven;
  specs.back().print = c.printList;
  return specs;
}

/// The launches with their inputs: the inputs file first, then the
/// command line's values override it.
std::vector<Launch> planFromConfig(const Config &c, const std::vector<LaunchSpec> &specs,
                                   qd::Program &program) {
  json fieldInputs = json::object();
  ArgDefaults argInputs;
  if (!c.inputsFile.empty()) {
    JsonInputs file = readInputsFile(c.inputsFile);
    for (auto &[name, v] : file.fields)
      fieldInputs[name] = v;
    for (auto &[name, v] : file.args) {
      auto [kernel, arg] = parseArgKey(name, "\"args\" in '" + c.inputsFile + "'");
      argInputs[kernel][arg] = v;
    }
  }
  for (auto &[name, text] : c.sets)
    fieldInputs[name] = parseJson(text, "--set " + name);
  for (auto &[key, text] : c.argValues) {
    auto [kernel, arg] = parseArgKey(key, "--arg");
    argInputs[kernel][arg] = parseJson(text, "--arg " + key);
  }
  return planLaunches(specs, fieldInputs, argInputs, program, c.file);
}

int run(int argc, char **argv) {
  std::variant<Config, int> parsed = parseArgs(argc, argv);
  if (const int *exitCode = std::get_if<int>(&parsed))
    return *exitCode;
  Config &c = std::get<Config>(parsed);
  checkConfig(c);
  std::unique_ptr<qd::Module> module = readModule(c.file);
  std::vector<LaunchSpec> specs = launchSpecs(c, *module);
  std::unique_ptr<qd::Program> program = orDie(qd::Program::create(*module));
  std::vector<Launch> launches = planFromConfig(c, specs, *program);

  // Diagnostics the backend reports while it runs (the Vulkan validation
  // layer's messages): printed as they come, and counted.
  auto diagnostics = std::make_shared<std::atomic<int64_t>>(0);
  c.backendOptions.onDiagnostic = [diagnostics, name = c.backendName](const std::string &m) {
    ++*diagnostics;
    std::cerr << "qd-run: " << name << " validation: " << m << "\n";
  };
  std::unique_ptr<qd::Backend> backend = createBackendOrDie(c.backendName, c.backendOptions);
  Runner runner(*program, *backend, c.options, !c.scriptFile.empty(), c.reportAdStacks,
                c.checkpointBudget);
  for (Launch &launch : launches)
    runner.run(launch);
  if (int64_t n = *diagnostics; n > 0)
    die("the Vulkan validation layer reported " + std::to_string(n) +
        " message(s) (above); the launches' results were printed");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return qd::tool::toolMain("qd-run", run, argc, argv);
}
