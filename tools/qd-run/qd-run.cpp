//===- qd-run.cpp - Run kernels from a .qd file ---------------------------===//
//
//   qd-run kernel.qd [--kernel=NAME]... [--backend=cpu|cuda|interp] [--inputs=in.json]
//          [--set FIELD=JSON]... [--arg NAME=JSON]... [--print=a,b.grad,...]
//          [--no-bounds-check] [--adstack-capacity=N] [--report-adstacks]
//          [--no-adstack-sizing] [--vector-width=N] [--no-vector-math]
//          [--timeout-ms=N] [--max-loop-iterations=N]
//
// Fields and ndarray arguments are given as (nested) JSON arrays, scalars as
// JSON numbers or booleans; `NAME.grad` / `NAME.dual` address companions.
// An inputs file is {"fields": {NAME: JSON}, "args": {NAME: JSON}}. After
// the kernels ran, the requested fields/ndarrays are printed as one JSON
// object (floats in shortest round-trip form; NaN and infinities as the
// strings "nan", "inf", "-inf").
//
//===----------------------------------------------------------------------===//
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/CudaBackend.h"

#include "ToolSupport.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>

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
    "  --backend=NAME         execution backend: cpu (LLVM JIT, the default), cuda (an\n"
    "                         NVIDIA GPU through the CUDA driver) or interp\n"
    "                         (the reference interpreter; the default with\n"
    "                         --check-global-accesses)\n"
    "  --inputs=FILE          JSON file {\"fields\": {...}, \"args\": {...}}\n"
    "  --set NAME=JSON        initial value of a field (or NAME.grad / NAME.dual)\n"
    "  --arg NAME=JSON        kernel argument: number, boolean or nested array\n"
    "  --print=A,B.grad,...   what to print (default: every field and ndarray)\n"
    "  --no-bounds-check      cpu: do not check field/ndarray indices (faster; an\n"
    "                         out-of-range index is then undefined behaviour).\n"
    "                         By default every index is checked, and the\n"
    "                         interpreter always checks\n"
    "  --bounds-check         the default (kept for scripts)\n"
    "  --adstack-capacity=N   capacity of adstacks the sizing cannot bound (tier 3);\n"
    "                         with --no-adstack-sizing, of every capacity-0 adstack\n"
    "  --no-adstack-sizing    do not size adstacks before each launch\n"
    "  --check-global-accesses\n"
    "                         fail when a launch writes a field or ndarray element\n"
    "                         it read earlier in the same launch\n"
    "  --timeout-ms=N         stop each launch that runs longer than N ms, naming the\n"
    "                         loop it was in (every backend)\n"
    "  --max-loop-iterations=N\n"
    "                         interp: stop a launch after N loop iterations in all\n"
    "  --report-adstacks      print each adstack's capacity and maximum depth\n"
    "  --vector-width=N       cpu: SIMD lanes of vectorised parallel tasks (a power of\n"
    "                         two up to 64; default 8; 1: scalar code only)\n"
    "  --no-vector-math       cpu: vectorised sin/cos/exp/log call the scalar libm\n"
    "                         functions per lane instead of glibc's libmvec\n";

// Output is written as text, not through nlohmann::json: its number printer
// (Grisu2) is not always shortest and knows nothing of f32, so 0.89722383f
// would print as 0.8972238300000001.
std::string scalarText(const qd::Scalar &s) {
  if (!s.isFloat())
    return s.type == qd::ScalarType::I1 ? (s.i ? "true" : "false") : std::to_string(s.i);
  if (std::isnan(s.f)) // whatever its sign bit (x86 gives 0/0 a negative NaN)
    return "\"nan\"";
  std::string text = qd::formatFloat(s.f, s.type);
  if (std::isinf(s.f))
    return '"' + text + '"';
  return text;
}

std::string bufferText(const qd::Buffer &buf) {
  if (buf.ndim() == 0)
    return scalarText(buf.get(0));
  std::function<std::string(size_t, int64_t &)> build = [&](size_t dim, int64_t &flat) {
    std::string arr = "[";
    for (int64_t i = 0; i < buf.shape()[dim]; ++i) {
      if (i)
        arr += ',';
      arr += dim + 1 == buf.ndim() ? scalarText(buf.get(flat++)) : build(dim + 1, flat);
    }
    return arr + "]";
  };
  int64_t flat = 0;
  return build(0, flat);
}

struct Ndarray {
  qd::Buffer primal, grad, dual;
  qd::NdarrayArg arg;
};

int run(int argc, char **argv) {
  std::string file, backendName, inputsFile;
  std::vector<std::string> kernels, printList;
  std::vector<std::pair<std::string, std::string>> sets, argValues;
  bool printGiven = false, reportAdStacks = false;
  qd::CpuBackendOptions cpuOptions;
  qd::LaunchOptions options;
  options.boundsChecked = true; // a command-line run reports bad indices; --no-bounds-check
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string &flag) -> std::optional<std::string> {
      if (a.rfind(flag + "=", 0) == 0)
        return a.substr(flag.size() + 1);
      if (a == flag) {
        if (i + 1 >= argc)
          die(flag + " needs a value");
        return std::string(argv[++i]);
      }
      return std::nullopt;
    };
    auto keyValue = [&](const std::string &v, const std::string &flag) {
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        die(flag + " expects NAME=JSON, got '" + v + "'");
      return std::pair(v.substr(0, eq), v.substr(eq + 1));
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (auto v = value("--kernel"))
      kernels.push_back(*v);
    else if (auto v = value("--backend"))
      backendName = *v;
    else if (auto v = value("--inputs"))
      inputsFile = *v;
    else if (auto v = value("--set"))
      sets.push_back(keyValue(*v, "--set"));
    else if (auto v = value("--arg"))
      argValues.push_back(keyValue(*v, "--arg"));
    else if (auto v = value("--print")) {
      printGiven = true;
      std::stringstream ss(*v);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty() && std::find(printList.begin(), printList.end(), item) == printList.end())
          printList.push_back(item); // each key once
    } else if (auto v = value("--adstack-capacity")) {
      options.defaultAdStackCapacity = integerOption("--adstack-capacity", *v, 0, INT64_MAX);
    } else if (auto v = value("--timeout-ms")) {
      // Nanoseconds in 64 bits: about 292 years.
      int64_t ms = integerOption("--timeout-ms", *v, 1, INT64_MAX / 1000000);
      options.timeout = std::chrono::milliseconds(ms);
    } else if (auto v = value("--max-loop-iterations")) {
      options.maxLoopIterations = integerOption("--max-loop-iterations", *v, 1, INT64_MAX);
    } else if (auto v = value("--vector-width")) {
      cpuOptions.vectorWidth = static_cast<unsigned>(integerOption("--vector-width", *v, 1, 64));
    } else if (a == "--no-vector-math")
      cpuOptions.vectorMath = false;
    else if (a == "--bounds-check")
      options.boundsChecked = true;
    else if (a == "--no-bounds-check")
      options.boundsChecked = false;
    else if (a == "--report-adstacks")
      reportAdStacks = true;
    else if (a == "--no-adstack-sizing")
      options.sizeAdStacks = false;
    else if (a == "--check-global-accesses")
      options.checkGlobalAccesses = true;
    else if (a.size() > 1 && a[0] == '-')
      die("unknown option '" + a + "' (see --help)");
    else if (file.empty())
      file = a;
    else
      die("more than one input file given ('" + file + "' and '" + a + "')");
  }
  if (file.empty())
    die("no input file (see --help)");
  if (backendName.empty()) // the exact access check is the interpreter's
    backendName = options.checkGlobalAccesses ? "interp" : "cpu";
  if (backendName != "interp" && backendName != "cpu" && backendName != "cuda")
    die("unknown backend '" + backendName + "'; available backends: interp, cpu, cuda");

  std::unique_ptr<qd::Module> parsed = readModule(file);
  qd::Module &module = *parsed;

  if (kernels.empty())
    kernels.push_back(onlyKernel(module));
  for (const std::string &k : kernels)
    if (!module.findKernel(k))
      die("no kernel named '@" + k + "' in " + file);

  auto program = qd::Program::create(module);
  if (!program.ok())
    die(std::string(program.status().message()));

  // Gather inputs: the file first, then command-line values override.
  auto [fieldInputs, argInputs] = readJsonInputs(inputsFile, sets, argValues);

  for (auto &[name, value] : fieldInputs) {
    auto [base, comp] = splitName(name);
    qd::Buffer *buf = (*program)->field(base, comp);
    if (!buf)
      die("no field '@" + name + "' in " + file);
    fillBuffer(*buf, value, "field '@" + name + "'");
  }

  // Ndarray arguments are shared by name across the launched kernels.
  std::map<std::string, std::unique_ptr<Ndarray>> ndarrays;
  std::map<std::string, const qd::Argument *> ndarrayParams;
  for (const std::string &kname : kernels) {
    const qd::Kernel &k = *module.findKernel(kname);
    for (unsigned i = 0; i < k.numArguments(); ++i) {
      const qd::Argument *p = k.argument(i);
      if (!p->isNdarray() || ndarrays.count(p->name()))
        continue;
      auto it = argInputs.find(p->name());
      if (it == argInputs.end())
        die("missing ndarray argument '" + p->name() + "' of kernel @" + kname + " (pass --arg " +
            p->name() + "=[...])");
      std::vector<int64_t> shape = shapeOf(it->second, p->name());
      if (shape.size() != p->type().ndim())
        die("ndarray argument '" + p->name() + "' is " + p->type().str() + " but the value has " +
            std::to_string(shape.size()) + " dimension(s)");
      auto nd = std::make_unique<Ndarray>();
      auto make = [&](qd::Buffer &b) {
        auto r = qd::Buffer::create(p->type().element(), shape);
        if (!r.ok())
          die(std::string(r.status().message()));
        b = *std::move(r);
      };
      make(nd->primal);
      fillBuffer(nd->primal, it->second, "argument '" + p->name() + "'");
      nd->arg.primal = &nd->primal;
      for (qd::Component c : {qd::Component::Grad, qd::Component::Dual}) {
        if (!p->hasComponent(c))
          continue;
        qd::Buffer &b = c == qd::Component::Grad ? nd->grad : nd->dual;
        make(b);
        std::string cname = p->name() + "." + std::string(qd::toString(c));
        if (auto g = argInputs.find(cname); g != argInputs.end())
          fillBuffer(b, g->second, "argument '" + cname + "'");
        (c == qd::Component::Grad ? nd->arg.grad : nd->arg.dual) = &b;
      }
      ndarrayParams[p->name()] = p;
      ndarrays[p->name()] = std::move(nd);
    }
  }
  for (auto &[name, v] : argInputs) {
    std::string base = splitName(name).first;
    bool known = false;
    for (const std::string &kname : kernels)
      known |= module.findKernel(kname)->findArgument(base) != nullptr;
    if (!known)
      die("no kernel argument named '" + base + "' in the launched kernel(s)");
  }

  qd::Interpreter interp;
  std::unique_ptr<qd::CpuBackend> cpu;
  if (backendName == "cpu") {
    auto created = qd::CpuBackend::create(cpuOptions);
    if (!created.ok())
      die(std::string(created.status().message()));
    cpu = *std::move(created);
  }
  std::unique_ptr<qd::CudaBackend> cuda;
  if (backendName == "cuda") {
    auto created = qd::CudaBackend::create();
    if (!created.ok())
      die(std::string(created.status().message()));
    cuda = *std::move(created);
  }
  qd::Backend &backend = cpu    ? static_cast<qd::Backend &>(*cpu)
                         : cuda ? static_cast<qd::Backend &>(*cuda)
                                : interp;
  std::vector<std::string> adstackReport;
  std::set<std::string> warnedKernels;
  for (const std::string &kname : kernels) {
    const qd::Kernel &k = *module.findKernel(kname);
    std::vector<qd::LaunchArg> args;
    for (unsigned i = 0; i < k.numArguments(); ++i) {
      const qd::Argument *p = k.argument(i);
      if (p->isNdarray()) {
        args.push_back(qd::LaunchArg::ndarray(&ndarrays.at(p->name())->arg));
        continue;
      }
      auto it = argInputs.find(p->name());
      if (it == argInputs.end())
        die("missing argument '" + p->name() + "' of kernel @" + kname + " (pass --arg " +
            p->name() + "=VALUE)");
      args.push_back(qd::LaunchArg::scalar(
          toScalar(it->second, p->type().element(), "argument '" + p->name() + "'")));
    }
    // What sizing says about stacks outside its grammar (measured at
    // launch, or the default), once per kernel, before its first launch.
    if (options.sizeAdStacks && warnedKernels.insert(kname).second) {
      absl::StatusOr<const qd::KernelSizing *> sizing = backend.adStackSizing(k);
      if (!sizing.ok())
        die(std::string(sizing.status().message()));
      for (const std::string &w : (*sizing)->warnings())
        std::cerr << w << '\n';
    }
    if (absl::Status s = (*program)->launch(kname, args, backend, options); !s.ok())
      die(std::string(s.message()));
    if (reportAdStacks) {
      // One line per stack, in source order, named as qd-opt names it: the
      // capacity it got, and the depth it reached (interpreter) or the heap
      // the launch used (cpu, cuda).
      qd::ValueNamer names(k);
      std::vector<std::pair<std::string, std::string>> rows;
      auto row = [&](const qd::AdStackAllocaStmt *stack, int64_t cap, const std::string &more) {
        rows.emplace_back(stack->loc().str(),
                          fmt::format("kernel @{}: adstack {} ({}) at {}: capacity {}{}", kname,
                                      names[stack], qd::toString(stack->elementType()),
                                      stack->loc().str(), cap, more));
      };
      if ((cpu || cuda) && !options.sizeAdStacks) {
        // Unsized: what the launch was given (declared, or the default).
        qd::walk(const_cast<qd::Kernel &>(k), [&](qd::Stmt &s) {
          if (auto *a = qd::dyn_cast<qd::AdStackAllocaStmt>(&s))
            row(a, a->capacity() ? a->capacity() : options.defaultAdStackCapacity, "");
        });
      } else if (cpu || cuda) {
        for (auto &[stack, cap] : (*program)->lastAdStackCapacities())
          row(stack, cap, "");
      } else {
        for (auto &[stack, depth] : interp.adStackMaxDepths())
          row(stack, interp.adStackCapacities().at(stack), ", max depth " + std::to_string(depth));
      }
      std::sort(rows.begin(), rows.end());
      for (auto &r : rows)
        adstackReport.push_back(r.second);
      if (cpu && !rows.empty()) // kernels without adstacks use no heap
        adstackReport.push_back("kernel @" + kname + ": adstack heap " +
                                std::to_string(cpu->lastAdStackHeapBytes()) + " bytes (" +
                                std::to_string(cpu->numThreads()) + " workers)");
      if (cuda && !rows.empty()) {
        absl::StatusOr<int64_t> threads = cuda->gridThreads(k, options.boundsChecked);
        adstackReport.push_back("kernel @" + kname + ": adstack heap " +
                                std::to_string(cuda->lastAdStackHeapBytes()) + " bytes (" +
                                (threads.ok() ? std::to_string(*threads) : std::string("?")) +
                                " GPU threads)");
      }
    }
  }
  for (const std::string &line : adstackReport)
    std::cerr << line << '\n';

  // Output.
  if (!printGiven) {
    for (const auto &f : module.fields())
      for (qd::Component c : {qd::Component::Primal, qd::Component::Grad, qd::Component::Dual})
        if (f->hasComponent(c))
          printList.push_back(
              f->name() + (c == qd::Component::Primal ? "" : "." + std::string(qd::toString(c))));
    for (auto &[name, p] : ndarrayParams)
      for (qd::Component c : {qd::Component::Primal, qd::Component::Grad, qd::Component::Dual})
        if (p->hasComponent(c))
          printList.push_back(
              name + (c == qd::Component::Primal ? "" : "." + std::string(qd::toString(c))));
  }
  std::string text = "{";
  for (size_t i = 0; i < printList.size(); ++i) {
    const std::string &name = printList[i];
    auto [base, comp] = splitName(name);
    const qd::Buffer *buf = (*program)->field(base, comp);
    if (!buf) {
      auto it = ndarrays.find(base);
      if (it != ndarrays.end())
        buf = it->second->arg.component(comp);
    }
    if (!buf)
      die("cannot print '" + name + "': no such field or ndarray argument (or companion)");
    text += (i ? ", " : "") + json(name).dump() + ": " + bufferText(*buf);
  }
  std::cout << text << "}\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return toolMain("qd-run", run, argc, argv);
}
