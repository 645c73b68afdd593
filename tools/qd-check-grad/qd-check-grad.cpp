//===- qd-check-grad.cpp - Check a kernel's derivatives -------------------===//
//
//   qd-check-grad kernel.qd [--kernel=NAME] [--inputs=in.json] [--set FIELD=JSON]...
//                 [--arg NAME=JSON]... [--backend=NAME] [--backend-option KEY=VALUE]...
//                 [--list-backends] [--rtol=X] [--atol=X]
//                 [--wrt=a,b] [--outputs=y,z] [--max-elements=N] [--seed=N]
//                 [--fd-step=X] [--mode=both|reverse|forward]
//                 [--grad-kernel=NAME] [--dual-kernel=NAME] [--timeout-ms=N|none]
//                 [--verbose]
//
// Differentiates the kernel in reverse and forward mode and compares both
// with Richardson-extrapolated central differences of its f64 copy
// (qd/check/GradCheck.h). Prints a summary per input, the derivatives that
// disagree and the worst relative errors; exits with 0 when every checked
// derivative agrees, 1 otherwise (and on any error).
//
//===----------------------------------------------------------------------===//
#include "qd/check/GradCheck.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include "ToolSupport.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

using namespace qd::tool;

namespace {

constexpr const char *kUsage =
    "usage: qd-check-grad <kernel.qd> [options]\n"
    "\n"
    "Checks the derivatives of a kernel: reverse mode (its gradient kernel) and\n"
    "forward mode (its dual kernel) against central finite differences with\n"
    "Richardson extrapolation, taken on a copy of the module widened to f64. The\n"
    "objective is the sum of the kernel's float outputs weighted by seeded\n"
    "pseudo-random cotangents. Exits with 0 when every derivative agrees, 1\n"
    "otherwise.\n"
    "\n"
    "options:\n"
    "  --kernel=NAME        the kernel to check (default: the module's only kernel)\n"
    "  --inputs=FILE        JSON file {\"fields\": {...}, \"args\": {...}}\n"
    "  --set NAME=JSON      initial value of a field (fields not set start at 0)\n"
    "  --arg NAME=JSON      kernel argument: number or nested array (every argument\n"
    "                       needs one; an ndarray's value gives its shape)\n"
    "  --backend=NAME       a backend of this build (--list-backends): interp (the\n"
    "                       reference interpreter, the default), cpu, and where\n"
    "                       built cuda, amdgpu and vulkan\n"
    "  --backend-option KEY=VALUE\n"
    "                       an option of the backend (repeatable; --list-backends\n"
    "                       lists them), e.g. --backend-option threads=4\n"
    "  --list-backends      print the backends of this build and their options\n"
    "  --wrt=A,B            inputs to differentiate with respect to (default: every\n"
    "                       float field and ndarray the kernel reads and every float\n"
    "                       scalar argument it uses); @x or %x when a field and an\n"
    "                       argument share a name\n"
    "  --outputs=A,B        outputs the objective sums (default: every float field\n"
    "                       and ndarray the kernel writes)\n"
    "  --rtol=X, --atol=X   a derivative a agrees with the finite difference b when\n"
    "                       |a - b| <= max(rtol * |b|, atol); default rtol 1e-6,\n"
    "                       atol 1e-9 for f64 kernels, rtol 1e-3, atol 1e-5 for\n"
    "                       kernels using f32; atol is raised to the error bound\n"
    "                       of the derivative's sum of n terms in the kernel's\n"
    "                       precision, n u / (1 - n u) * sum |terms|, where that is\n"
    "                       larger (a directional check over many elements)\n"
    "  --max-elements=N     elements checked one by one per input (default 64); a\n"
    "                       larger input is sampled and also checked along one\n"
    "                       random direction\n"
    "  --seed=N             seed of the weights, the sampling and the directions\n"
    "                       (default 0)\n"
    "  --fd-step=X          base finite-difference step, relative to max(1, |x|)\n"
    "                       (default 1e-3; retried at 1/10 and 1/100 of it where the\n"
    "                       differences are not smooth)\n"
    "  --mode=MODE          both (the default), reverse or forward\n"
    "  --grad-kernel=NAME   check this kernel of the module as the gradient instead of\n"
    "                       building one with reverse-ad (it runs after the kernel and\n"
    "                       adds into the grad companions of the inputs, given the\n"
    "                       seeded grad companions of the outputs)\n"
    "  --dual-kernel=NAME   check this kernel as the forward-mode (dual) kernel\n"
    "  --timeout-ms=N       stop each launch that runs longer than N ms, naming the\n"
    "                       kernel and the loop it was in (default 60000; none: no\n"
    "                       limit)\n"
    "  --verbose            print every checked derivative, not only those that\n"
    "                       disagree\n";

/// `text` as a positive finite number, or a failure naming `flag`.
double positiveOption(const std::string &flag, const std::string &text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !std::isfinite(v) || !(v > 0))
    die(fmt::format("{} expects a positive number, got '{}'", flag, text));
  return v;
}

std::vector<std::string> commaList(const std::string &text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// The contents of `b` as a checker value.
qd::GradCheckValue valueOf(const qd::Buffer &b) {
  qd::GradCheckValue v{b.shape(), {}};
  for (int64_t i = 0; i < b.numElements(); ++i)
    v.elements.push_back(b.get(i));
  return v;
}

/// The checker's inputs from the JSON values, checked against the module.
qd::GradCheckInputs checkerInputs(const qd::Module &module, const qd::Kernel &k,
                                  const JsonInputs &json, const std::string &file) {
  qd::GradCheckInputs in;
  for (auto &[name, value] : json.fields) {
    auto [base, component] = splitName(name);
    if (component != qd::Component::Primal)
      die("--set " + name +
          ": the checker seeds the grad and dual companions itself; give "
          "primal values only");
    const qd::Field *f = module.findField(base);
    if (!f)
      die("no field '@" + name + "' in " + file);
    qd::Buffer b = orDie(qd::Buffer::create(f->elementType(), f->shape()));
    fillBuffer(b, value, "field '@" + name + "'");
    in.fields[name] = valueOf(b);
  }
  for (auto &[name, value] : json.args)
    if (!k.findArgument(name))
      die("no argument named '" + name + "' in kernel @" + k.name());
  for (unsigned i = 0; i < k.numArguments(); ++i) {
    const qd::Argument *p = k.argument(i);
    auto it = json.args.find(p->name());
    if (it == json.args.end())
      die("missing argument '" + p->name() + "' of kernel @" + k.name() + " (pass --arg " +
          p->name() + (p->isNdarray() ? "=[...])" : "=VALUE)"));
    std::string what = "argument '" + p->name() + "'";
    if (!p->isNdarray()) {
      in.args[p->name()] = {{}, {toScalar(it->second, p->type().element(), what)}};
      continue;
    }
    std::vector<int64_t> shape = shapeOf(it->second);
    if (shape.size() != p->type().ndim())
      die("ndarray argument '" + p->name() + "' is " + p->type().str() + " but the value has " +
          std::to_string(shape.size()) + " dimension(s)");
    qd::Buffer b = orDie(qd::Buffer::create(p->type().element(), shape));
    fillBuffer(b, it->second, what);
    in.args[p->name()] = valueOf(b);
  }
  return in;
}

/// Every launch of the check stops after this long unless --timeout-ms
/// says otherwise: a kernel that never ends fails instead of hanging.
constexpr int64_t kDefaultTimeoutMs = 60000;

int run(int argc, char **argv) {
  std::string file, kernel, backendName = "interp", inputsFile;
  qd::BackendOptions backendOptions;
  std::vector<std::pair<std::string, std::string>> sets, argValues;
  bool verbose = false;
  qd::GradCheckOptions options;
  options.launch.timeout = std::chrono::milliseconds(kDefaultTimeoutMs);
  auto pair = [](const std::string &flag, const std::string &v) {
    size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0)
      die(flag + " expects NAME=JSON, got '" + v + "'");
    return std::pair(v.substr(0, eq), v.substr(eq + 1));
  };
  // Options that take a value, `--flag=value` or `--flag value`.
  std::map<std::string, std::function<void(const std::string &)>> valued = {
      {"--kernel", [&](const std::string &v) { kernel = v; }},
      {"--inputs", [&](const std::string &v) { inputsFile = v; }},
      {"--set", [&](const std::string &v) { sets.push_back(pair("--set", v)); }},
      {"--arg", [&](const std::string &v) { argValues.push_back(pair("--arg", v)); }},
      {"--backend", [&](const std::string &v) { backendName = v; }},
      {"--backend-option",
       [&](const std::string &v) {
         if (absl::Status s = backendOptions.add(v); !s.ok())
           die("--backend-option: " + std::string(s.message()));
       }},
      {"--rtol", [&](const std::string &v) { options.rtol = positiveOption("--rtol", v); }},
      {"--atol", [&](const std::string &v) { options.atol = positiveOption("--atol", v); }},
      {"--fd-step", [&](const std::string &v) { options.fdStep = positiveOption("--fd-step", v); }},
      {"--wrt", [&](const std::string &v) { options.wrt = commaList(v); }},
      {"--outputs", [&](const std::string &v) { options.outputs = commaList(v); }},
      {"--max-elements",
       [&](const std::string &v) {
         options.maxElements = integerOption("--max-elements", v, 0, INT64_MAX);
       }},
      {"--seed",
       [&](const std::string &v) {
         options.seed = static_cast<uint64_t>(integerOption("--seed", v, 0, INT64_MAX));
       }},
      {"--mode",
       [&](const std::string &v) {
         if (v != "both" && v != "reverse" && v != "forward")
           die("--mode expects both, reverse or forward, got '" + v + "'");
         options.reverse = v != "forward";
         options.forward = v != "reverse";
       }},
      {"--grad-kernel", [&](const std::string &v) { options.gradientKernel = v; }},
      {"--dual-kernel", [&](const std::string &v) { options.dualKernel = v; }},
      {"--timeout-ms",
       [&](const std::string &v) {
         // Nanoseconds in 64 bits: about 292 years.
         options.launch.timeout = v == "none" ? std::chrono::nanoseconds(0)
                                              : std::chrono::milliseconds(integerOption(
                                                    "--timeout-ms", v, 1, INT64_MAX / 1000000));
       }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--list-backends") {
      std::cout << backendUsage();
      return 0;
    }
    if (a == "--verbose") {
      verbose = true;
      continue;
    }
    size_t eq = a.find('=');
    std::string flag = a.substr(0, eq);
    if (auto it = valued.find(flag); it != valued.end()) {
      if (eq == std::string::npos && i + 1 >= argc)
        die(flag + " needs a value");
      it->second(eq == std::string::npos ? std::string(argv[++i]) : a.substr(eq + 1));
    } else if (a.size() > 1 && a[0] == '-') {
      die("unknown option '" + a + "' (see --help)");
    } else if (file.empty()) {
      file = a;
    } else {
      die("more than one input file given ('" + file + "' and '" + a + "')");
    }
  }
  if (file.empty())
    die("no input file (see --help)");

  std::unique_ptr<qd::Module> parsed = readModule(file);
  qd::Module &module = *parsed;
  if (kernel.empty())
    kernel = onlyKernel(module);
  const qd::Kernel *k = module.findKernel(kernel);
  if (!k)
    die("no kernel named '@" + kernel + "' in " + file);
  qd::GradCheckInputs inputs =
      checkerInputs(module, *k, readJsonInputs(inputsFile, sets, argValues), file);

  // The interpreter by default: the checker's own (null) unless options
  // were given for it.
  std::unique_ptr<qd::Backend> backend;
  if (backendName != "interp" || !backendOptions.entries().empty())
    backend = createBackendOrDie(backendName, backendOptions);
  options.backend = backend.get();

  qd::GradCheckReport report = orDie(qd::checkGradient(module, kernel, inputs, options));
  std::cout << qd::formatGradCheckReport(report, verbose);
  return report.passed ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  return toolMain("qd-check-grad", run, argc, argv);
}
