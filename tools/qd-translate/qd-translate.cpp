//===- qd-translate.cpp - Print the code generated for qd kernels ---------===//
//
//   qd-translate [input.qd|-] [--target=cpu|nvptx|amdgpu|spirv] [--kernel=name]
//                [--passes=...] [--vector-width=N] [--bounds-check] [--stop-checks]
//                [--local-adstacks=N]
//                [--no-vector-math] [--optimize] [--emit=llvm|ptx|amdgcn|hsaco]
//                [--arch=sm_80|gfx90a|gfx942|gfx1100] [-o out|-o DIR/]
//
// Reads a module (stdin by default), verifies it, optionally runs a pass
// pipeline, and prints the LLVM IR the code generator emits for one kernel
// or for every kernel (one LLVM module each, in module order). Without
// --optimize the IR is exactly what the code generator produced; with it,
// the IR after the O3 pipeline the CPU backend runs before JIT compilation,
// with its tasks that differ only in integer constants merged into one
// function as the backend merges them (mergeEquivalentTasks) (for nvptx: the pipeline of the NVPTX
// target machine; for amdgpu: ocml linked and the pipeline of the AMDGPU target machine, the IR the
// code object is made of). --emit=ptx prints the PTX of each kernel (nvptx only: libdevice linked,
// optimised); --emit=amdgcn the AMDGPU ISA assembly and
// --emit=hsaco the code object (an ELF file, linked with ld.lld; one
// kernel per module) of the amdgpu target; `-o DIR/` writes a file per
// kernel, which PTX and code objects of several kernels need. --target=spirv prints the disassembly
// of each kernel's SPIR-V module (validated; with --optimize after
// SPIRV-Tools' performance passes; --atomic-float-add: for a device with
// SPV_EXT_shader_atomic_float_add; --check-loop-exits: with the checks
// after every loop that the Vulkan backend compiles for lavapipe).
// Any diagnostic goes to stderr and the exit code is 1.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/llvm/Hsaco.h"
#include "qd/codegen/llvm/KernelCodegen.h"
#include "qd/codegen/llvm/MergeTasks.h"
#include "qd/codegen/llvm/Optimize.h"
#include "qd/codegen/llvm/Ptx.h"
#if QD_HAVE_SPIRV
#include "qd/codegen/spirv/SpirvCodegen.h"
#endif
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/ir/Visitor.h"
#include "qd/transforms/Passes.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

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
  bool distinctNdarrays = false;
  bool fusedEntry = false;
  bool narrowOffsets = false;
  bool readOnlyBuffers = false;
  int64_t cooperative = qd::CodegenOptions().cooperativeTaskIterations;
  int64_t localAdStacks = 0;
  bool vectorMath = true;
  qd::VectorMathIsa vectorIsa = qd::VectorMathIsa::Avx2;
  bool optimize = false;
  bool light = false; // --light: the CPU backend's light tier
  bool atomicFloatAdd = false;
  bool subgroupArithmetic = false;
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
    "  --subgroup-arithmetic  spirv: the device has subgroup vote and arithmetic\n"
    "                         operations (atomic adds to one element are summed\n"
    "                         over the subgroup first)\n"
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
    "  --distinct-ndarrays    code that takes every ndarray argument's buffers\n"
    "                         to be distinct (what the backends run when a\n"
    "                         launch's buffers do not overlap)\n"
    "  --narrow-ndarray-offsets  nvptx, amdgpu: ndarray element offsets in 32 bits\n"
    "                         (what the CUDA and HIP backends run when every ndarray\n"
    "                         buffer of a launch has at most 2^31 - 1 elements)\n"
    "  --read-only-buffers    spirv: buffers the kernel never writes are NonWritable\n"
    "  --fused-entry          nvptx, amdgpu: the entry qd_fused as well, which runs\n"
    "                         every launch in one group (what the CUDA backend\n"
    "                         compiles, docs/runtime.md \"Fused launches\")\n"
    "  --cooperative-tasks=N  nvptx, amdgpu, spirv: a parallel task of at most N\n"
    "                         iterations around a long serial loop runs a group\n"
    "                         of threads per iteration (default: 4096; 0: never)\n"
    "  --stop-checks          loops check the launch's stop word (what a launch\n"
    "                         with a timeout or a cancel flag runs)\n"
    "  --no-vector-math       lanes call scalar math functions instead of glibc's\n"
    "                         libmvec\n"
    "  --vector-isa=<name>    libmvec variants to call: sse4, avx2 (the default,\n"
    "                         whatever the host) or avx512\n"
    "  --optimize             print the IR after the O3 pipeline of the CPU backend,\n"
    "                         tuned for the host, its equivalent tasks merged (nvptx: of the NVPTX "
    "target;\n"
    "                         amdgpu: ocml linked, of the AMDGPU target)\n"
    "  --light                with --optimize: the light tier's pipeline instead\n"
    "                         of O3 (what the CPU backend runs for very large or\n"
    "                         deeply nested kernels, docs/performance.md)\n"
    "  -o <file>              write the output to <file> (default: stdout); a folder\n"
    "                         (an existing one, or a path ending in '/') gets a file\n"
    "                         per kernel, <kernel>.ll, .ptx, .s, .hsaco or .spvasm.\n"
    "                         PTX and code objects hold one kernel each: with\n"
    "                         several kernels they need --kernel or a folder\n"
    "  -h, --help             show this help\n";

int fail(const std::string &message) {
  std::cerr << "qd-translate: error: " << message << '\n';
  return 1;
}

struct KernelOutput;
using Outputs = std::vector<KernelOutput>;
bool isFolder(const std::string &path);
int writeOutputs(const Options &opts, const Outputs &outputs);

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
    } else if (arg == "--distinct-ndarrays") {
      opts.distinctNdarrays = true;
    } else if (arg == "--narrow-ndarray-offsets") {
      opts.narrowOffsets = true;
    } else if (arg == "--read-only-buffers") {
      opts.readOnlyBuffers = true;
    } else if (arg == "--fused-entry") {
      opts.fusedEntry = true;
    } else if (auto v = value("--cooperative-tasks")) {
      char *end = nullptr;
      long long n = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end || n < 0)
        return fail("--cooperative-tasks takes a number of iterations (0: none), got '" + *v + "'");
      opts.cooperative = n;
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
    } else if (arg == "--subgroup-arithmetic") {
      opts.subgroupArithmetic = true;
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

/// The emitted text (or object) of one kernel.
struct KernelOutput {
  std::string kernel;
  std::string text;
};

/// The file extension of an output kind, for `-o DIR/`.
std::string extensionOf(const Options &opts) {
  if (opts.target == "spirv")
    return "spvasm";
  if (opts.emit == "ptx")
    return "ptx";
  if (opts.emit == "amdgcn")
    return "s";
  if (opts.emit == "hsaco")
    return "hsaco";
  return "ll";
}

/// Why --target=spirv fails in a build without SPIR-V code generation.
[[maybe_unused]] constexpr const char *kNoSpirv =
    "--target=spirv: this qd was built without SPIR-V code generation "
    "(-DQD_ENABLE_VULKAN=OFF); reconfigure with -DQD_ENABLE_VULKAN=ON";

/// Checks the options against each other; an error message, or "".
std::string checkOptions(Options &opts) {
  bool amdgpuOutput = opts.emit == "amdgcn" || opts.emit == "hsaco";
  if (!opts.targetGiven && (opts.emit == "ptx" || amdgpuOutput))
    opts.target = opts.emit == "ptx" ? "nvptx" : "amdgpu";
  bool spirv = opts.target == "spirv";
  if (spirv && !QD_HAVE_SPIRV)
    return kNoSpirv;
  if (spirv && opts.emit != "llvm")
    return "--emit=" + opts.emit + " does not go with --target=spirv (spirv prints SPIR-V)";
  if (!spirv && (opts.atomicFloatAdd || opts.checkLoopExits || opts.subgroupArithmetic))
    return std::string(opts.atomicFloatAdd       ? "--atomic-float-add"
                       : opts.subgroupArithmetic ? "--subgroup-arithmetic"
                                                 : "--check-loop-exits") +
           " needs --target=spirv (options of the SPIR-V code)";
  if (opts.emit == "ptx" && opts.target != "nvptx")
    return "--emit=ptx needs --target=nvptx (the " + opts.target + " target does not print PTX)";
  if (amdgpuOutput && opts.target != "amdgpu")
    return "--emit=" + opts.emit + " needs --target=amdgpu (the " + opts.target +
           " target does not make AMDGPU code)";
  if (opts.localAdStacks > 0 && opts.target != "nvptx" && !spirv)
    return "--local-adstacks needs --target=nvptx or spirv (the CUDA and Vulkan backends run "
           "local tapes; the " +
           opts.target + " target keeps adstacks in the heap)";
  if (opts.light && (!opts.optimize || opts.target != "cpu"))
    return "--light needs --optimize and --target=cpu (the CPU backend's light tier)";
  if (opts.arch.empty())
    opts.arch = opts.target == "amdgpu" ? "gfx90a" : "sm_80";
  return "";
}

/// Reads, verifies and transforms the input; null after printing why not.
std::unique_ptr<qd::Module> loadModule(const Options &opts, const std::string &filename) {
  std::string text;
  if (opts.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    absl::StatusOr<std::string> read = qd::readTextFile(opts.input);
    if (!read.ok()) {
      fail(std::string(read.status().message()));
      return nullptr;
    }
    text = *std::move(read);
  }
  qd::ParseOptions parse;
  parse.filename = filename;
  auto module = qd::parseModule(text, parse);
  if (!module.ok()) {
    std::cerr << module.status().message() << '\n';
    return nullptr;
  }
  if (absl::Status v = qd::verify(**module); !v.ok()) {
    std::cerr << v.message() << '\n';
    return nullptr;
  }
  qd::PassManager pm;
  absl::Status s = pm.addPipeline(opts.passes);
  if (s.ok())
    s = pm.run(**module);
  if (!s.ok()) {
    fail(std::string(s.message()));
    return nullptr;
  }
  return *std::move(module);
}

/// The SPIR-V disassembly of each kernel; an error message, or "".
std::string emitSpirvOutputs(const Options &opts, const std::vector<const qd::Kernel *> &kernels,
                             Outputs &out) {
#if !QD_HAVE_SPIRV
  (void)opts, (void)kernels, (void)out;
  return kNoSpirv; // checkOptions refuses --target=spirv first
#else
  qd::SpirvOptions options;
  options.boundsChecked = opts.boundsCheck;
  options.optimize = opts.optimize;
  options.features.atomicFloat32Add = options.features.atomicFloat64Add = opts.atomicFloatAdd;
  options.features.subgroupArithmetic = opts.subgroupArithmetic;
  options.checkLoopExits = opts.checkLoopExits;
  options.stopChecks = opts.stopChecks;
  options.distinctNdarrays = opts.distinctNdarrays;
  options.readOnlyBuffers = opts.readOnlyBuffers;
  options.cooperativeTaskIterations = opts.cooperative;
  for (const qd::Kernel *kernel : kernels) {
    options.localAdStackEntries = localTapes(*kernel, opts.localAdStacks);
    auto emitted = qd::emitSpirv(*kernel, options);
    if (!emitted.ok())
      return "kernel @" + kernel->name() + ": " + std::string(emitted.status().message());
    if (emitted->words.empty()) {
      out.push_back({kernel->name(), "; kernel @" + kernel->name() + ": no launches, no module\n"});
      continue;
    }
    auto text = qd::disassembleSpirv(emitted->words);
    if (!text.ok())
      return "kernel @" + kernel->name() + ": " + std::string(text.status().message());
    out.push_back({kernel->name(), "; kernel @" + kernel->name() + "\n" + *text});
  }
  return "";
#endif
}

/// The LLVM IR, PTX, AMDGPU assembly or code object of each kernel; an
/// error message, or "".
std::string emitLlvmOutputs(const Options &opts, qd::CodegenTarget target,
                            const std::vector<const qd::Kernel *> &kernels, Outputs &out) {
  bool nvptx = target == qd::CodegenTarget::Nvptx, amdgpu = target == qd::CodegenTarget::Amdgpu;
  qd::PtxOptions ptx;
  ptx.arch = opts.arch;
  qd::HsacoOptions hsaco;
  hsaco.arch = opts.arch;
  std::unique_ptr<llvm::TargetMachine> machine;
  if (opts.optimize && !amdgpu) { // prepareAmdgpuModule runs the AMDGPU pipeline
    auto made = nvptx ? qd::nvptxTargetMachine(opts.arch) : qd::hostTargetMachine();
    if (!made.ok())
      return std::string(made.status().message());
    machine = std::move(*made);
  }
  qd::CodegenOptions codegen;
  codegen.boundsChecked = opts.boundsCheck;
  codegen.stopChecks = opts.stopChecks;
  codegen.distinctNdarrays = opts.distinctNdarrays;
  codegen.fusedEntry = opts.fusedEntry;
  codegen.narrowNdarrayOffsets = opts.narrowOffsets;
  codegen.cooperativeTaskIterations = opts.cooperative;
  codegen.vectorWidth = opts.vectorWidth;
  // The backend also checks that the host can call libmvec; printing IR
  // needs no such check, and does not depend on the host.
  codegen.vectorMath = opts.vectorMath ? opts.vectorIsa : qd::VectorMathIsa::None;
  for (const qd::Kernel *kernel : kernels) {
    auto failed = [&](const absl::Status &s) {
      return "kernel @" + kernel->name() + ": " + std::string(s.message());
    };
    codegen.localAdStackEntries = localTapes(*kernel, opts.localAdStacks);
    llvm::LLVMContext context;
    qd::KernelLayout layout;
    auto emitted = qd::emitKernel(*kernel, context, codegen, layout, target);
    if (!emitted.ok())
      return failed(emitted.status());
    llvm::Module &m = **emitted;
    absl::StatusOr<std::string> code = std::string(); // LLVM IR: printed below
    if (opts.emit == "ptx")
      code = qd::emitPtx(m, ptx);
    else if (opts.emit == "hsaco")
      code = qd::emitHsaco(m, hsaco);
    else if (opts.emit == "amdgcn")
      code = qd::emitAmdgpuAssembly(m, hsaco);
    if (!code.ok())
      return failed(code.status());
    if (opts.emit == "llvm") {
      if (amdgpu && opts.optimize) {
        if (absl::Status s = qd::prepareAmdgpuModule(m, hsaco); !s.ok())
          return failed(s);
      } else if (machine) {
        m.setDataLayout(machine->createDataLayout());
        m.setTargetTriple(machine->getTargetTriple().str());
        if (target == qd::CodegenTarget::Cpu)
          qd::mergeEquivalentTasks(m);
        qd::optimizeModule(m, machine.get(),
                           opts.light ? qd::OptimizationTier::Light : qd::OptimizationTier::Full);
      }
      llvm::raw_string_ostream os(*code);
      m.print(os, nullptr);
    }
    out.push_back({kernel->name(), *std::move(code)});
  }
  return "";
}

} // namespace

int main(int argc, char **argv) {
  Options opts;
  if (std::optional<int> code = parseArgs(argc, argv, opts))
    return *code;
  if (std::string bad = checkOptions(opts); !bad.empty())
    return fail(bad);
  bool spirv = opts.target == "spirv";
  absl::StatusOr<qd::CodegenTarget> target =
      spirv ? qd::CodegenTarget::Cpu : qd::parseCodegenTarget(opts.target);
  if (!target.ok())
    return fail(std::string(target.status().message()) + " (or spirv)");
  // A bad --arch or pipeline is reported before any input is read.
  if (*target == qd::CodegenTarget::Nvptx)
    if (auto tm = qd::nvptxTargetMachine(opts.arch); !tm.ok())
      return fail(std::string(tm.status().message()));
  if (*target == qd::CodegenTarget::Amdgpu)
    if (auto tm = qd::amdgpuTargetMachine(opts.arch); !tm.ok())
      return fail(std::string(tm.status().message()));
  if (absl::Status s = qd::PassManager().addPipeline(opts.passes); !s.ok())
    return fail(std::string(s.message()));

  std::string filename = opts.input == "-" ? "<stdin>" : opts.input;
  std::unique_ptr<qd::Module> module = loadModule(opts, filename);
  if (!module)
    return 1;
  std::vector<const qd::Kernel *> kernels;
  if (opts.kernel) {
    const qd::Kernel *k = module->findKernel(*opts.kernel);
    if (!k)
      return fail("no kernel named '@" + *opts.kernel + "' in '" + filename + "'");
    kernels.push_back(k);
  } else {
    for (const auto &k : module->kernels())
      kernels.push_back(k.get());
  }
  // A PTX module or a code object holds one kernel (their entries are named
  // per kernel: qd_task_0 ...): several go to a folder, a file each.
  bool oneModule = opts.emit == "ptx" || opts.emit == "hsaco";
  if (oneModule && kernels.size() > 1 && !isFolder(opts.output))
    return fail("--emit=" + opts.emit + " writes one module per kernel and '" + filename +
                "' has " + std::to_string(kernels.size()) +
                ": pick one with --kernel, or give a folder for a file per kernel (-o DIR/)");
  Outputs out;
  std::string bad =
      spirv ? emitSpirvOutputs(opts, kernels, out) : emitLlvmOutputs(opts, *target, kernels, out);
  if (!bad.empty())
    return fail(bad);
  return writeOutputs(opts, out);
}

namespace {

bool isFolder(const std::string &path) {
  std::error_code ec;
  return path != "-" && (path.ends_with('/') || std::filesystem::is_directory(path, ec));
}

int writeFile(const std::string &path, const std::string &text) {
  std::ofstream file(path, std::ios::binary);
  if (!file || !(file << text) || !file.flush())
    return fail("cannot write '" + path + "'");
  return 0;
}

int writeOutputs(const Options &opts, const Outputs &outputs) {
  if (isFolder(opts.output)) { // a file per kernel: DIR/<kernel>.<ext>
    std::error_code ec;
    std::filesystem::create_directories(opts.output, ec);
    if (ec)
      return fail("cannot create the folder '" + opts.output + "': " + ec.message());
    for (const KernelOutput &o : outputs) {
      std::filesystem::path file = std::filesystem::path(opts.output) / o.kernel;
      file += "." + extensionOf(opts);
      if (int rc = writeFile(file.string(), o.text))
        return rc;
    }
    return 0;
  }
  std::string all;
  for (const KernelOutput &o : outputs)
    all += o.text;
  if (opts.output != "-")
    return writeFile(opts.output, all);
  // A full disk or a closed pipe must not pass for success.
  if (!(std::cout << all) || !std::cout.flush())
    return fail("cannot write the output (standard output failed)");
  return 0;
}

} // namespace
