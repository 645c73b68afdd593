//===- qd-translate.cpp - Print the code generated for qd kernels ---------===//
//
//   qd-translate [input.qd|-] [--target=cpu|nvptx|amdgpu|spirv] [--kernel=name]
//                [--passes=...] [--vector-width=N] [--bounds-check] [--stop-checks]
//                [--local-adstacks=N]
//                [--no-vector-math] [--optimize] [--emit=llvm|ptx|amdgcn|hsaco]
//                [--arch=sm_80|gfx90a|gfx942|gfx1100] [-o out]
//
// Reads a module (stdin by default), verifies it, optionally runs a pass
// pipeline, and prints the LLVM IR the code generator emits for one kernel
// or for every kernel (one LLVM module each, in module order). Without
// --optimize the IR is exactly what the code generator produced; with it,
// the IR after the O3 pipeline the CPU backend runs before JIT compilation
// (for nvptx: the pipeline of the NVPTX target machine; for amdgpu: ocml
// linked and the pipeline of the AMDGPU target machine, the IR the code
// object is made of). --emit=ptx prints the PTX of each kernel (nvptx only:
// libdevice linked, optimised); --emit=amdgcn the AMDGPU ISA assembly and
// --emit=hsaco the code object (an ELF file, linked with ld.lld; one
// kernel only) of the amdgpu target. --target=spirv prints the disassembly
// of each kernel's SPIR-V module (validated; with --optimize after
// SPIRV-Tools' performance passes; --atomic-float-add: for a device with
// SPV_EXT_shader_atomic_float_add; --check-loop-exits: with the checks
// after every loop that the Vulkan backend compiles for lavapipe).
// Any diagnostic goes to stderr and the exit code is 1.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/Hsaco.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/Optimize.h"
#include "qd/codegen/llvm/Ptx.h"
#include "qd/codegen/spirv/SpirvCodegen.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

namespace {

struct Options {
  std::string input = "-";
  std::string output = "-";
  std::string passes;
  std::string target = "cpu";
  bool targetGiven = false;
  std::string emit = "llvm";
  std::string arch; // the target's default when empty
  std::optional<std::string> kernel;
  unsigned vectorWidth = 1;
  bool boundsCheck = false;
  bool stopChecks = false;
  int64_t localAdStacks = 0;
  bool vectorMath = true;
  qd::VectorMathIsa vectorIsa = qd::VectorMathIsa::Avx2;
  bool optimize = false;
  bool light = false; // --light: the CPU backend's light tier
  bool atomicFloatAdd = false;
  bool checkLoopExits = false;
};

constexpr const char *kUsage =
    "usage: qd-translate [options] [input.qd|-]\n"
    "\n"
    "Parses a qd module (stdin by default), verifies it, optionally runs a pass\n"
    "pipeline, and prints the LLVM IR of its kernels for a target.\n"
    "\n"
    "options:\n"
    "  --target=<name>        code generation target: cpu, nvptx, amdgpu or spirv\n"
    "                         (default: cpu; spirv prints the disassembled SPIR-V\n"
    "                         module)\n"
    "  --atomic-float-add     spirv: the device has float atomic adds\n"
    "                         (SPV_EXT_shader_atomic_float_add)\n"
    "  --check-loop-exits     spirv: an error site after every loop that the driver\n"
    "                         ended before the program did (what the vulkan\n"
    "                         backend compiles for lavapipe, docs/runtime.md)\n"
    "  --emit=<what>          llvm (LLVM IR, the default), ptx (PTX text of the\n"
    "                         nvptx target; implies --target=nvptx), amdgcn (AMDGPU\n"
    "                         ISA assembly) or hsaco (an AMDGPU code object, for one\n"
    "                         kernel; both imply --target=amdgpu)\n"
    "  --arch=<name>          GPU architecture of the GPU outputs and --optimize:\n"
    "                         sm_<N> for nvptx (default: sm_80); gfx90a (the\n"
    "                         default), gfx942 or gfx1100 for amdgpu\n"
    "  --kernel=<name>        print only this kernel (default: every kernel)\n"
    "  --passes=<p1,p2,...>   qd pass pipeline to run first (see qd-opt --list-passes)\n"
    "  --vector-width=<n>     SIMD lanes of vectorised tasks, a power of two in\n"
    "                         [1, 64] (default: 1, scalar code only)\n"
    "  --bounds-check         check every global index (error sites)\n"
    "  --local-adstacks=N     nvptx, spirv: every adstack in a local array of N entries\n"
    "                         per thread instead of the heap (what the CUDA and Vulkan\n"
    "                         backends run when a launch's capacities fit,\n"
    "                         docs/runtime.md)\n"
    "  --stop-checks          loops check the launch's stop word (what a launch\n"
    "                         with a timeout or a cancel flag runs)\n"
    "  --no-vector-math       lanes call scalar math functions instead of glibc's\n"
    "                         libmvec\n"
    "  --vector-isa=<name>    libmvec variants to call: sse4, avx2 (the default,\n"
    "                         whatever the host) or avx512\n"
    "  --optimize             print the IR after the O3 pipeline of the CPU backend,\n"
    "                         tuned for the host (nvptx: of the NVPTX target;\n"
    "                         amdgpu: ocml linked, of the AMDGPU target)\n"
    "  --light                with --optimize: the light tier's pipeline instead\n"
    "                         of O3 (what the CPU backend runs for very large or\n"
    "                         deeply nested kernels, docs/performance.md)\n"
    "  -o <file>              write the output to <file> (default: stdout)\n"
    "  -h, --help             show this help\n";

int fail(const std::string &message) {
  std::cerr << "qd-translate: error: " << message << '\n';
  return 1;
}

int writeOutput(const Options &opts, const std::string &out);

/// Parses the command line; returns an exit code to stop with, or nullopt.
std::optional<int> parseArgs(int argc, char **argv, Options &opts) {
  bool sawInput = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *name) -> std::optional<std::string> {
      std::string prefix = std::string(name) + "=";
      if (arg.rfind(prefix, 0) != 0)
        return std::nullopt;
      return arg.substr(prefix.size());
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (auto v = value("--passes")) {
      opts.passes = *v;
    } else if (auto v = value("--target")) {
      opts.target = *v;
      opts.targetGiven = true;
    } else if (auto v = value("--emit")) {
      if (*v != "llvm" && *v != "ptx" && *v != "amdgcn" && *v != "hsaco")
        return fail("--emit takes 'llvm', 'ptx', 'amdgcn' or 'hsaco', got '" + *v + "'");
      opts.emit = *v;
    } else if (auto v = value("--arch")) {
      opts.arch = *v;
    } else if (auto v = value("--kernel")) {
      opts.kernel = *v;
    } else if (auto v = value("--vector-width")) {
      char *end = nullptr;
      long n = std::strtol(v->c_str(), &end, 10);
      if (v->empty() || *end || n < 1 || n > 64 || (n & (n - 1)))
        return fail("--vector-width takes a power of two in [1, 64], got '" + *v + "'");
      opts.vectorWidth = static_cast<unsigned>(n);
    } else if (arg == "--bounds-check") {
      opts.boundsCheck = true;
    } else if (arg == "--stop-checks") {
      opts.stopChecks = true;
    } else if (auto v = value("--local-adstacks")) {
      char *end = nullptr;
      long long n = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end || n < 1 || n > (1 << 20))
        return fail("--local-adstacks takes a number of entries in [1, 1048576], got '" + *v + "'");
      opts.localAdStacks = n;
    } else if (arg == "--no-vector-math") {
      opts.vectorMath = false;
    } else if (auto v = value("--vector-isa")) {
      bool known = false;
      for (qd::VectorMathIsa isa :
           {qd::VectorMathIsa::Sse4, qd::VectorMathIsa::Avx2, qd::VectorMathIsa::Avx512})
        if (*v == qd::toString(isa)) {
          opts.vectorIsa = isa;
          known = true;
        }
      if (!known)
        return fail("--vector-isa takes sse4, avx2 or avx512, got '" + *v + "'");
    } else if (arg == "--atomic-float-add") {
      opts.atomicFloatAdd = true;
    } else if (arg == "--check-loop-exits") {
      opts.checkLoopExits = true;
    } else if (arg == "--optimize") {
      opts.optimize = true;
    } else if (arg == "--light") {
      opts.light = true;
    } else if (arg == "-o") {
      if (i + 1 >= argc)
        return fail("-o needs a file name");
      opts.output = argv[++i];
    } else if (arg.size() > 1 && arg[0] == '-') {
      return fail("unknown option '" + arg + "' (see --help)");
    } else if (sawInput) {
      return fail("more than one input file given ('" + opts.input + "' and '" + arg + "')");
    } else {
      opts.input = arg;
      sawInput = true;
    }
  }
  return std::nullopt;
}

/// --local-adstacks: every adstack of `kernel` in a local array of
/// `entries` entries (none for 0).
std::map<const qd::AdStackAllocaStmt *, int64_t> localTapes(const qd::Kernel &kernel,
                                                            int64_t entries) {
  std::map<const qd::AdStackAllocaStmt *, int64_t> out;
  if (entries > 0)
    qd::walk(const_cast<qd::Kernel &>(kernel), [&](qd::Stmt &s) {
      if (auto *a = qd::dyn_cast<qd::AdStackAllocaStmt>(&s))
        out[a] = entries;
    });
  return out;
}

} // namespace

int main(int argc, char **argv) {
  Options opts;
  if (std::optional<int> code = parseArgs(argc, argv, opts))
    return *code;
  bool amdgpuOutput = opts.emit == "amdgcn" || opts.emit == "hsaco";
  if (!opts.targetGiven && (opts.emit == "ptx" || amdgpuOutput))
    opts.target = opts.emit == "ptx" ? "nvptx" : "amdgpu";
  bool spirv = opts.target == "spirv";
  if (spirv && opts.emit != "llvm")
    return fail("--emit=" + opts.emit + " does not go with --target=spirv (spirv prints SPIR-V)");
  if (!spirv && (opts.atomicFloatAdd || opts.checkLoopExits))
    return fail(std::string(opts.atomicFloatAdd ? "--atomic-float-add" : "--check-loop-exits") +
                " needs --target=spirv (options of the SPIR-V code)");
  absl::StatusOr<qd::CodegenTarget> target =
      spirv ? qd::CodegenTarget::Cpu : qd::parseCodegenTarget(opts.target);
  if (!target.ok())
    return fail(std::string(target.status().message()) + " (or spirv)");
  bool nvptx = *target == qd::CodegenTarget::Nvptx;
  bool amdgpu = *target == qd::CodegenTarget::Amdgpu;
  if (opts.emit == "ptx" && !nvptx)
    return fail("--emit=ptx needs --target=nvptx (the " + opts.target +
                " target does not print PTX)");
  if (amdgpuOutput && !amdgpu)
    return fail("--emit=" + opts.emit + " needs --target=amdgpu (the " + opts.target +
                " target does not make AMDGPU code)");
  if (opts.localAdStacks > 0 && !nvptx && !spirv)
    return fail("--local-adstacks needs --target=nvptx or spirv (the CUDA and Vulkan backends "
                "run local tapes; the " +
                opts.target + " target keeps adstacks in the heap)");
  if (opts.light && (!opts.optimize || opts.target != "cpu"))
    return fail("--light needs --optimize and --target=cpu (the CPU backend's light tier)");
  if (opts.arch.empty())
    opts.arch = amdgpu ? "gfx90a" : "sm_80";
  qd::PtxOptions ptx;
  ptx.arch = opts.arch;
  qd::HsacoOptions hsaco;
  hsaco.arch = opts.arch;
  // A bad --arch is reported before any input is read.
  if (nvptx)
    if (auto tm = qd::nvptxTargetMachine(opts.arch); !tm.ok())
      return fail(std::string(tm.status().message()));
  if (amdgpu)
    if (auto tm = qd::amdgpuTargetMachine(opts.arch); !tm.ok())
      return fail(std::string(tm.status().message()));
  // A bad pipeline is reported before any input is read.
  if (absl::Status s = qd::PassManager().addPipeline(opts.passes); !s.ok())
    return fail(std::string(s.message()));

  std::string text;
  if (opts.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    absl::StatusOr<std::string> read = qd::readTextFile(opts.input);
    if (!read.ok())
      return fail(std::string(read.status().message()));
    text = *std::move(read);
  }
  qd::ParseOptions parse;
  std::string filename = opts.input == "-" ? "<stdin>" : opts.input;
  parse.filename = filename;
  auto module = qd::parseModule(text, parse);
  if (!module.ok()) {
    std::cerr << module.status().message() << '\n';
    return 1;
  }
  if (absl::Status v = qd::verify(**module); !v.ok()) {
    std::cerr << v.message() << '\n';
    return 1;
  }
  qd::PassManager pm;
  if (absl::Status s = pm.addPipeline(opts.passes); !s.ok())
    return fail(std::string(s.message()));
  if (absl::Status s = pm.run(**module); !s.ok())
    return fail(std::string(s.message()));

  std::vector<const qd::Kernel *> kernels;
  if (opts.kernel) {
    const qd::Kernel *k = (*module)->findKernel(*opts.kernel);
    if (!k)
      return fail("no kernel named '@" + *opts.kernel + "' in '" + filename + "'");
    kernels.push_back(k);
  } else if (opts.emit == "hsaco" && (*module)->kernels().size() != 1) {
    return fail("--emit=hsaco writes one code object: pick a kernel of '" + filename +
                "' with --kernel");
  } else {
    for (const auto &k : (*module)->kernels())
      kernels.push_back(k.get());
  }

  if (spirv) {
    std::string out;
    qd::SpirvOptions options;
    options.boundsChecked = opts.boundsCheck;
    options.optimize = opts.optimize;
    options.features.atomicFloat32Add = options.features.atomicFloat64Add = opts.atomicFloatAdd;
    options.checkLoopExits = opts.checkLoopExits;
    options.stopChecks = opts.stopChecks;
    for (const qd::Kernel *kernel : kernels) {
      options.localAdStackEntries = localTapes(*kernel, opts.localAdStacks);
      auto emitted = qd::emitSpirv(*kernel, options);
      if (!emitted.ok())
        return fail("kernel @" + kernel->name() + ": " + std::string(emitted.status().message()));
      if (emitted->words.empty()) {
        out += "; kernel @" + kernel->name() + ": no launches, no module\n";
        continue;
      }
      auto text = qd::disassembleSpirv(emitted->words);
      if (!text.ok())
        return fail("kernel @" + kernel->name() + ": " + std::string(text.status().message()));
      out += "; kernel @" + kernel->name() + "\n" + *text;
    }
    return writeOutput(opts, out);
  }

  std::unique_ptr<llvm::TargetMachine> machine;
  if (amdgpu) {
    // prepareAmdgpuModule runs the AMDGPU pipeline.
  } else if (opts.optimize && nvptx) {
    auto gpu = qd::nvptxTargetMachine(opts.arch);
    if (!gpu.ok())
      return fail(std::string(gpu.status().message()));
    machine = std::move(*gpu);
  } else if (opts.optimize) {
    auto host = qd::hostTargetMachine();
    if (!host.ok())
      return fail(std::string(host.status().message()));
    machine = std::move(*host);
  }

  qd::CodegenOptions codegen;
  codegen.boundsChecked = opts.boundsCheck;
  codegen.stopChecks = opts.stopChecks;
  codegen.vectorWidth = opts.vectorWidth;
  // The backend also checks that the host can call libmvec; printing IR
  // needs no such check, and does not depend on the host.
  codegen.vectorMath = opts.vectorMath ? opts.vectorIsa : qd::VectorMathIsa::None;
  std::string out;
  llvm::raw_string_ostream os(out);
  for (const qd::Kernel *kernel : kernels) {
    codegen.localAdStackEntries = localTapes(*kernel, opts.localAdStacks);
    llvm::LLVMContext context;
    qd::KernelLayout layout;
    auto emitted = qd::emitKernel(*kernel, context, codegen, layout, *target);
    if (!emitted.ok())
      return fail("kernel @" + kernel->name() + ": " + std::string(emitted.status().message()));
    llvm::Module &m = **emitted;
    if (opts.emit == "ptx") {
      auto text = qd::emitPtx(m, ptx);
      if (!text.ok())
        return fail("kernel @" + kernel->name() + ": " + std::string(text.status().message()));
      os << *text;
      continue;
    }
    if (amdgpuOutput) {
      auto code = opts.emit == "hsaco" ? qd::emitHsaco(m, hsaco) : qd::emitAmdgpuAssembly(m, hsaco);
      if (!code.ok())
        return fail("kernel @" + kernel->name() + ": " + std::string(code.status().message()));
      os << *code;
      continue;
    }
    if (amdgpu && opts.optimize) {
      if (absl::Status s = qd::prepareAmdgpuModule(m, hsaco); !s.ok())
        return fail("kernel @" + kernel->name() + ": " + std::string(s.message()));
    } else if (machine) {
      m.setDataLayout(machine->createDataLayout());
      m.setTargetTriple(machine->getTargetTriple().str());
      qd::optimizeModule(m, machine.get(),
                         opts.light ? qd::OptimizationTier::Light : qd::OptimizationTier::Full);
    }
    m.print(os, nullptr);
  }
  os.flush();
  return writeOutput(opts, out);
}

namespace {

int writeOutput(const Options &opts, const std::string &out) {
  if (opts.output == "-") {
    // A full disk or a closed pipe must not pass for success.
    if (!(std::cout << out) || !std::cout.flush())
      return fail("cannot write the output (standard output failed)");
    return 0;
  }
  std::ofstream file(opts.output, std::ios::binary);
  if (!file || !(file << out) || !file.flush())
    return fail("cannot write '" + opts.output + "'");
  return 0;
}

} // namespace
