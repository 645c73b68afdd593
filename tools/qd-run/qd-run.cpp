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

using json = nlohmann::json;

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

struct Failure {
  std::string message;
};

[[noreturn]] void die(std::string message) {
  throw Failure{std::move(message)};
}

std::string readFile(const std::string &path) {
  absl::StatusOr<std::string> text = qd::readTextFile(path);
  if (!text.ok())
    die(std::string(text.status().message()));
  return *std::move(text);
}

/// Deepest nesting of arrays and objects accepted in JSON input: far more
/// than any value qd-run takes (an ndarray of rank r nests r + 2 levels),
/// and shallow enough that handling the value never exhausts the stack.
constexpr int kMaxJsonNesting = 512;

json parseJson(const std::string &text, const std::string &what) {
  // Reject deep nesting before building the value (copying or printing a
  // json value recurses once per level).
  int depth = 0;
  bool inString = false, escaped = false;
  for (char ch : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        inString = false;
    } else if (ch == '"') {
      inString = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxJsonNesting)
        die("JSON in " + what + " nests arrays and objects more than " +
            std::to_string(kMaxJsonNesting) + " levels deep; qd-run's inputs need at most the " +
            "ndarray rank + 2");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    die("malformed JSON in " + what + ": '" + text.substr(0, 80) + "'");
  return j;
}

std::pair<std::string, qd::Component> splitName(const std::string &name) {
  size_t dot = name.rfind('.');
  if (dot != std::string::npos) {
    std::string suffix = name.substr(dot + 1);
    if (suffix == "grad")
      return {name.substr(0, dot), qd::Component::Grad};
    if (suffix == "dual")
      return {name.substr(0, dot), qd::Component::Dual};
  }
  return {name, qd::Component::Primal};
}

qd::Scalar toScalar(const json &j, qd::ScalarType t, const std::string &what) {
  using qd::ScalarType;
  if (t == ScalarType::I1) {
    if (j.is_boolean())
      return qd::Scalar::ofInt(t, j.get<bool>());
    if (j.is_number_integer() && (j.get<int64_t>() == 0 || j.get<int64_t>() == 1))
      return qd::Scalar::ofInt(t, j.get<int64_t>());
    die(what + " must be true or false, got " + j.dump());
  }
  if (qd::isInteger(t)) {
    if (!j.is_number_integer())
      die(what + " must be an integer (" + std::string(qd::toString(t)) + "), got " + j.dump());
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      die(what + " does not fit in " + std::string(qd::toString(t)) + ": " + j.dump());
    int64_t v = j.get<int64_t>();
    if (t == ScalarType::I32 && static_cast<int32_t>(v) != v)
      die(what + " does not fit in i32: " + j.dump());
    return qd::Scalar::ofInt(t, v);
  }
  if (j.is_number()) {
    // A number too large for the type is an error, not an infinity (JSON
    // has no infinities: write "inf").
    double d = j.get<double>();
    if (std::isinf(d) || (t == ScalarType::F32 && std::isinf(static_cast<float>(d))))
      die(fmt::format("{} is out of range for {} (largest finite value {}): {}; write \"inf\" or "
                      "\"-inf\" for an infinity",
                      what, qd::toString(t),
                      t == ScalarType::F32 ? "3.4028235e+38" : "1.7976931348623157e+308",
                      j.dump()));
    return qd::Scalar::ofFloat(t, d);
  }
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    double inf = std::numeric_limits<double>::infinity();
    if (s == "nan" || s == "-nan") // the sign of a NaN carries no meaning here
      return qd::Scalar::ofFloat(t, std::numeric_limits<double>::quiet_NaN());
    if (s == "inf")
      return qd::Scalar::ofFloat(t, inf);
    if (s == "-inf")
      return qd::Scalar::ofFloat(t, -inf);
  }
  die(what + " must be a number, got " + j.dump());
}

/// Shape of a rectangular nested JSON array (a scalar has shape []).
std::vector<int64_t> shapeOf(const json &j, const std::string &what) {
  std::vector<int64_t> shape;
  const json *cur = &j;
  while (cur->is_array()) {
    shape.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty())
      break;
    cur = &(*cur)[0];
  }
  (void)what;
  return shape;
}

void flatten(const json &j, const std::vector<int64_t> &shape, size_t dim,
             std::vector<const json *> &out, const std::string &what) {
  if (dim == shape.size()) {
    if (j.is_array())
      die(what + " is not rectangular: nested deeper than its first element");
    out.push_back(&j);
    return;
  }
  if (!j.is_array() || static_cast<int64_t>(j.size()) != shape[dim])
    die(what + " is not rectangular: expected " + std::to_string(shape[dim]) +
        " elements at depth " + std::to_string(dim));
  for (const json &e : j)
    flatten(e, shape, dim + 1, out, what);
}

void fillBuffer(qd::Buffer &buf, const json &j, const std::string &what) {
  std::vector<const json *> elems;
  if (buf.ndim() == 0 && !j.is_array()) {
    elems.push_back(&j);
  } else {
    flatten(j, buf.shape(), 0, elems, what);
  }
  for (size_t i = 0; i < elems.size(); ++i)
    buf.set(static_cast<int64_t>(i),
            toScalar(*elems[i], buf.elementType(), what + " element " + std::to_string(i)));
}

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

/// The whole of `text` as a decimal integer in [lo, hi], or a failure
/// naming `flag` (no trailing text, no silent wrap-around).
int64_t integerOption(const std::string &flag, const std::string &text, int64_t lo, int64_t hi) {
  size_t at = text.empty() || text[0] == '-' || text[0] == '+' ? 1 : 0;
  bool digits = at < text.size() && std::all_of(text.begin() + at, text.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    die(fmt::format("{} expects an integer in [{}, {}], got '{}'", flag, lo, hi, text));
  int64_t v = 0;
  try {
    v = std::stoll(text);
  } catch (const std::out_of_range &) {
    die(fmt::format("{} '{}' does not fit in a 64-bit integer", flag, text));
  }
  if (v < lo || v > hi)
    die(fmt::format("{} must be in [{}, {}], got {}", flag, lo, hi, v));
  return v;
}

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

  auto parsed = qd::parseModule(readFile(file), {file, 1});
  if (!parsed.ok())
    die(std::string(parsed.status().message()));
  qd::Module &module = **parsed;
  if (absl::Status v = qd::verify(module); !v.ok())
    die(std::string(v.message()));

  if (kernels.empty()) {
    if (module.kernels().size() != 1)
      die("the module has " + std::to_string(module.kernels().size()) +
          " kernels; choose with --kernel=NAME");
    kernels.push_back(module.kernels()[0]->name());
  }
  for (const std::string &k : kernels)
    if (!module.findKernel(k))
      die("no kernel named '@" + k + "' in " + file);

  auto program = qd::Program::create(module);
  if (!program.ok())
    die(std::string(program.status().message()));

  // Gather inputs: the file first, then command-line values override.
  std::map<std::string, json> fieldInputs, argInputs;
  if (!inputsFile.empty()) {
    json in = parseJson(readFile(inputsFile), "'" + inputsFile + "'");
    if (!in.is_object())
      die("'" + inputsFile + "' must hold a JSON object with \"fields\" and/or \"args\"");
    for (auto &[key, val] : in.items()) {
      if (key != "fields" && key != "args")
        die("unknown key \"" + key + "\" in '" + inputsFile + "' (expected fields, args)");
      if (!val.is_object())
        die("\"" + key + "\" in '" + inputsFile + "' must be an object");
      for (auto &[name, v] : val.items())
        (key == "fields" ? fieldInputs : argInputs)[name] = v;
    }
  }
  for (auto &[name, text] : sets)
    fieldInputs[name] = parseJson(text, "--set " + name);
  for (auto &[name, text] : argValues)
    argInputs[name] = parseJson(text, "--arg " + name);

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
  try {
    int rc = run(argc, argv);
    // A full disk or a closed pipe must not pass for success.
    if (!std::cout.flush())
      die("cannot write the output (standard output failed)");
    return rc;
  } catch (const Failure &f) {
    // Diagnostics that already carry `file:line:col: error:` stand alone.
    bool located = f.message.find(": error: ") != std::string::npos;
    std::cerr << (located ? "" : "qd-run: error: ") << f.message << '\n';
    return 1;
  }
}
