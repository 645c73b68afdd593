//===- qd-opt.cpp - Parse, verify, transform and print qd IR -------------===//
//
//   qd-opt [input.qd|-] [--passes=fold,reverse-ad{tape-nested-loops=false}]
//          [--print-after-all] [--print-after-change] [--verify-each=false]
//          [--time-passes] [--split-input-file] [-o out]
//
// Reads a module (stdin by default), verifies it, runs the pipeline and
// prints the result. Any diagnostic goes to stderr and the exit code is 1.
//
//===----------------------------------------------------------------------===//
#include "qd/analysis/AdStackSizing.h"
#include "qd/analysis/CFG.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Printer.h"
#include "qd/ir/Verifier.h"
#include "qd/transforms/Passes.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string input = "-";
  std::string output = "-";
  std::string passes;
  bool printAfterAll = false;
  bool printAfterChange = false;
  bool verifyEach = true;
  bool timePasses = false;
  bool splitInputFile = false;
  bool listPasses = false;
  bool reportAdStacks = false;
  bool dumpCfg = false;
  int64_t defaultCapacity = 256;
};
Options opts;

constexpr const char *kUsage =
    "usage: qd-opt [options] [input.qd|-]\n"
    "\n"
    "Parses a qd module (stdin by default), verifies it, runs a pass pipeline and\n"
    "prints the result.\n"
    "\n"
    "options:\n"
    "  --passes=<p1,p2,...>   pass pipeline to run (see --list-passes); options in\n"
    "                         braces: reverse-ad{tape-nested-loops=false}\n"
    "  --print-after-all      print the IR to stderr after every pass\n"
    "  --print-after-change   print the IR to stderr after every pass that changed it\n"
    "  --verify-each[=false]  verify the IR after every pass (default: on)\n"
    "  --time-passes          report the wall time of every pass on stderr\n"
    "  --split-input-file     process each '// -----' separated chunk on its own\n"
    "  --list-passes          list the registered passes, their options and aliases,\n"
    "                         and exit\n"
    "  --report-ad-stacks     after the passes, print how every adstack is sized\n"
    "                         (tier, method, bound) instead of the module, and the\n"
    "                         counting kernel of stacks measured at launch and\n"
    "                         their optimistic launch (or why there is none)\n"
    "  --adstack-default-capacity=<n>\n"
    "                         capacity of stacks outside the sizing grammar (256)\n"
    "  --dump-cfg             after the passes, print each kernel's control-flow\n"
    "                         graph as Graphviz instead of the module\n"
    "  -o <file>              write the output to <file> (default: stdout)\n"
    "  -h, --help             show this help\n";

/// Parses `--flag`, `--flag=true|false`; returns false for a bad value.
bool parseBoolFlag(const std::string &arg, const std::string &name, bool &out, bool &matched) {
  matched = false;
  if (arg == name) {
    out = matched = true;
    return true;
  }
  if (arg.rfind(name + "=", 0) != 0)
    return true;
  matched = true;
  std::string v = arg.substr(name.size() + 1);
  if (v == "true" || v == "1")
    out = true;
  else if (v == "false" || v == "0")
    out = false;
  else
    return false;
  return true;
}

/// Returns 0 to continue, or an exit code (help: 0 via `exitNow`).
bool parseArgs(int argc, char **argv, bool &exitNow, int &exitCode) {
  exitNow = false;
  bool sawInput = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool matched = false;
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      exitNow = true;
      exitCode = 0;
      return true;
    }
    if (arg.rfind("--passes=", 0) == 0) {
      opts.passes = arg.substr(9);
      continue;
    }
    if (arg.rfind("--adstack-default-capacity=", 0) == 0) {
      std::string v = arg.substr(27);
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (errno == ERANGE) {
        std::cerr << "qd-opt: error: --adstack-default-capacity '" << v
                  << "' does not fit in a 64-bit integer\n";
        return false;
      }
      if (v.empty() || *end || n <= 0) {
        std::cerr << "qd-opt: error: --adstack-default-capacity takes a positive integer, got '"
                  << v << "'\n";
        return false;
      }
      opts.defaultCapacity = n;
      continue;
    }
    if (arg == "-o") {
      if (i + 1 >= argc) {
        std::cerr << "qd-opt: error: -o needs a file name\n";
        return false;
      }
      opts.output = argv[++i];
      continue;
    }
    for (auto [name, flag] : {std::pair{"--print-after-all", &opts.printAfterAll},
                              std::pair{"--print-after-change", &opts.printAfterChange},
                              std::pair{"--verify-each", &opts.verifyEach},
                              std::pair{"--time-passes", &opts.timePasses},
                              std::pair{"--split-input-file", &opts.splitInputFile},
                              std::pair{"--list-passes", &opts.listPasses},
                              std::pair{"--report-ad-stacks", &opts.reportAdStacks},
                              std::pair{"--dump-cfg", &opts.dumpCfg}}) {
      if (!parseBoolFlag(arg, name, *flag, matched)) {
        std::cerr << "qd-opt: error: " << name << " takes true or false, got '" << arg << "'\n";
        return false;
      }
      if (matched)
        break;
    }
    if (matched)
      continue;
    if (arg.size() > 1 && arg[0] == '-') {
      std::cerr << "qd-opt: error: unknown option '" << arg << "' (see --help)\n";
      return false;
    }
    if (sawInput) {
      std::cerr << "qd-opt: error: more than one input file given ('" << opts.input << "' and '"
                << arg << "')\n";
      return false;
    }
    opts.input = arg;
    sawInput = true;
  }
  return true;
}

/// Parses, verifies and transforms one chunk; prints the result to `out`.
bool processChunk(std::string_view text, unsigned firstLine, const std::string &filename,
                  std::ostream &out) {
  qd::ParseOptions options;
  options.filename = filename;
  options.firstLine = firstLine;
  auto module = qd::parseModule(text, options);
  if (!module.ok()) {
    std::cerr << module.status().message() << '\n';
    return false;
  }
  if (absl::Status v = qd::verify(**module); !v.ok()) {
    std::cerr << v.message() << '\n';
    return false;
  }
  qd::PassManagerOptions pmOptions;
  pmOptions.verifyEach = opts.verifyEach;
  pmOptions.timePasses = opts.timePasses;
  std::ostringstream afterAll;
  if (opts.printAfterAll)
    pmOptions.printAfterAll = &afterAll;
  else if (opts.printAfterChange)
    pmOptions.printAfterChange = &afterAll;
  qd::PassManager pm(pmOptions);
  if (absl::Status s = pm.addPipeline(opts.passes); !s.ok()) {
    std::cerr << "qd-opt: error: " << s.message() << '\n';
    return false;
  }
  std::set<const qd::Kernel *> before;
  for (const auto &kernel : (*module)->kernels())
    before.insert(kernel.get());
  absl::Status result = pm.run(**module);
  std::cerr << afterAll.str();
  if (opts.timePasses)
    pm.printTimings(std::cerr);
  if (!result.ok()) {
    std::cerr << "qd-opt: error: " << result.message() << '\n';
    return false;
  }
  if (opts.dumpCfg) {
    for (const auto &kernel : (*module)->kernels()) {
      qd::ControlFlowGraph cfg = qd::ControlFlowGraph::build(*kernel);
      cfg.simplify();
      out << cfg.toDot();
    }
  }
  // Kernels the pipeline made (gradients, duals): what sizing says about
  // their stacks outside the grammar, as --report-ad-stacks does.
  if (!opts.reportAdStacks)
    for (const auto &kernel : (*module)->kernels())
      if (!before.count(kernel.get())) {
        qd::KernelSizing sizing = qd::sizeAdStacks(*kernel);
        for (const std::string &w : sizing.warnings())
          std::cerr << w << '\n';
      }
  if (opts.reportAdStacks) {
    qd::SizingOptions sizing;
    sizing.defaultCapacity = opts.defaultCapacity;
    for (const auto &kernel : (*module)->kernels()) {
      qd::KernelSizing result = qd::sizeAdStacks(*kernel, sizing);
      for (const std::string &w : result.warnings())
        std::cerr << w << '\n';
      out << result.report(kernel->name());
      if (const qd::Kernel *counter = result.countKernel())
        out << "// the counting kernel of @" << kernel->name() << ":\n"
            << qd::printKernel(*counter) << "\n";
      if (const qd::OptimisticLaunch *o = result.optimistic())
        out << "// the optimistic launch of @" << kernel->name() << ", tried:\n"
            << qd::printKernel(*o->tryKernel) << "\n// rerun for the iterations that overflowed:\n"
            << qd::printKernel(*o->rerunKernel) << "\n";
      else if (!result.optimisticRefusal().empty())
        out << "// " << result.optimisticRefusal() << "\n";
    }
  }
  if (!opts.dumpCfg && !opts.reportAdStacks)
    qd::printModule(**module, out);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  bool exitNow;
  int exitCode = 1;
  if (!parseArgs(argc, argv, exitNow, exitCode))
    return 1;
  if (exitNow)
    return exitCode;

  if (opts.listPasses) {
    qd::PassRegistry::global().printList(std::cout);
    return 0;
  }

  // A bad pipeline is reported once, before any input is read.
  if (absl::Status s = qd::PassManager().addPipeline(opts.passes); !s.ok()) {
    std::cerr << "qd-opt: error: " << s.message() << '\n';
    return 1;
  }

  std::string text;
  if (opts.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    absl::StatusOr<std::string> read = qd::readTextFile(opts.input);
    if (!read.ok()) {
      std::cerr << "qd-opt: error: " << read.status().message() << '\n';
      return 1;
    }
    text = *std::move(read);
  }
  std::string filename = opts.input == "-" ? "<stdin>" : opts.input;

  std::ostringstream out;
  bool ok = true;
  if (opts.splitInputFile) {
    std::vector<qd::SourceChunk> chunks = qd::splitSourceChunks(text);
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i)
        out << "// -----\n";
      ok &= processChunk(chunks[i].text, chunks[i].firstLine, filename, out);
    }
  } else { // the text as read: no copy of it
    ok = processChunk(text, 1, filename, out);
  }

  if (opts.output == "-") {
    std::cout << out.str();
  } else if (ok) { // a failed run leaves no output file that looks valid
    std::ofstream file(opts.output, std::ios::binary);
    file << out.str();
    file.close(); // the last bytes are written (or fail to be) here
    if (file.fail()) {
      std::cerr << "qd-opt: error: cannot write '" << opts.output << "'\n";
      return 1;
    }
  }
  // A full disk or a closed pipe must not pass for success.
  if (!std::cout.flush()) {
    std::cerr << "qd-opt: error: cannot write the output (standard output failed)\n";
    return 1;
  }
  return ok ? 0 : 1;
}
