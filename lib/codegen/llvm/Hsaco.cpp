//===- Hsaco.cpp - Code objects for AMD GPUs ------------------------------===//
#include "qd/codegen/llvm/Hsaco.h"

#include "GpuModule.h"

#include <fmt/format.h>
#include <llvm/BinaryFormat/ELF.h>
#include <llvm/BinaryFormat/MsgPackDocument.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/Program.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>

// LLVM's AMDGPU target (built into the shared libLLVM of the distributions
// qd builds with).
extern "C" void LLVMInitializeAMDGPUTargetInfo();
extern "C" void LLVMInitializeAMDGPUTarget();
extern "C" void LLVMInitializeAMDGPUTargetMC();
extern "C" void LLVMInitializeAMDGPUAsmPrinter();

namespace qd {
namespace {

constexpr std::array<AmdgpuArch, 3> kArchs = {{
    {"gfx90a", 9010, 64},
    {"gfx942", 9402, 64},
    {"gfx1100", 11000, 32},
}};

constexpr const char *kDefaultDeviceLibs = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";

/// Removes a temporary file when it goes out of scope.
struct TempFile {
  llvm::SmallString<128> path;
  ~TempFile() {
    if (!path.empty())
      llvm::sys::fs::remove(path);
  }
};

absl::Status makeTemp(TempFile &file, const char *suffix) {
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("qd-amdgpu", suffix, file.path))
    return absl::InternalError(
        fmt::format("cannot create a temporary .{} file for ld.lld: {}", suffix, ec.message()));
  return absl::OkStatus();
}

/// Defines the `__oclc_*` control constants the linked ocml functions read
/// (what the oclc_*.bc files of the device libraries each hold) for `arch`.
/// Denormals are kept and math is IEEE, as on the CPU.
void defineControlConstants(llvm::Module &module, const AmdgpuArch &arch) {
  const std::pair<const char *, int> values[] = {
      {"__oclc_ISA_version", arch.isaVersion},
      {"__oclc_wavefrontsize64", arch.waveSize == 64},
      {"__oclc_ABI_version", kAmdgpuCodeObjectVersion * 100},
      {"__oclc_daz_opt", 0},
      {"__oclc_finite_only_opt", 0},
      {"__oclc_unsafe_math_opt", 0},
      {"__oclc_correctly_rounded_sqrt32", 1},
  };
  for (auto [name, value] : values) {
    llvm::GlobalVariable *gv = module.getGlobalVariable(name, /*AllowInternal=*/true);
    if (!gv || !gv->isDeclaration())
      continue;
    gv->setInitializer(llvm::ConstantInt::get(gv->getValueType(), value));
    gv->setConstant(true);
    gv->setLinkage(llvm::GlobalValue::InternalLinkage);
    gv->setVisibility(llvm::GlobalValue::DefaultVisibility);
  }
}

/// The entries' kernel attributes for a launch of at most `maxBlockSize`
/// threads per block, in whole blocks (grid-stride tasks never launch a
/// partial one).
void setKernelAttributes(llvm::Module &module, unsigned maxBlockSize) {
  for (llvm::Function &f : module) {
    if (f.getCallingConv() != llvm::CallingConv::AMDGPU_KERNEL)
      continue;
    f.addFnAttr("amdgpu-flat-work-group-size", fmt::format("1,{}", maxBlockSize));
    f.addFnAttr("uniform-work-group-size", "true");
  }
}

} // namespace

std::span<const AmdgpuArch> amdgpuArchs() {
  return kArchs;
}

absl::StatusOr<AmdgpuArch> findAmdgpuArch(std::string_view name) {
  for (const AmdgpuArch &a : kArchs)
    if (a.name == name)
      return a;
  return absl::InvalidArgumentError(
      fmt::format("unknown GPU architecture '{}' for the amdgpu target; use gfx90a (MI200), gfx942 "
                  "(MI300) or gfx1100 (RDNA3)",
                  name));
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> amdgpuTargetMachine(const std::string &arch) {
  auto known = findAmdgpuArch(arch);
  if (!known.ok())
    return known.status();
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTarget();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter();
  });
  auto target = gpu::lookupTarget(kAmdgpuTriple, "AMDGPU");
  if (!target.ok())
    return target.status();
  std::string features = known->waveSize == 64 ? "+wavefrontsize64" : "+wavefrontsize32";
  std::unique_ptr<llvm::TargetMachine> machine((*target)->createTargetMachine(
      kAmdgpuTriple, arch, features, llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return absl::InternalError(
        fmt::format("cannot create an AMDGPU target machine for '{}'", arch));
  return machine;
}

std::string ocmlPath(const HsacoOptions &options) {
  std::string dir = options.deviceLibs;
  if (dir.empty())
    if (const char *env = std::getenv("QD_ROCM_DEVICE_LIBS"); env && *env)
      dir = env;
  if (dir.empty())
    dir = kDefaultDeviceLibs;
  return dir + "/ocml.bc";
}

absl::StatusOr<std::string> ldLldPath(const HsacoOptions &options) {
  if (!options.ldLld.empty())
    return options.ldLld;
  if (const char *env = std::getenv("QD_LD_LLD"); env && *env)
    return std::string(env);
  if (llvm::sys::fs::can_execute("/usr/lib/llvm-19/bin/ld.lld"))
    return std::string("/usr/lib/llvm-19/bin/ld.lld");
  for (const char *name : {"ld.lld-19", "ld.lld"})
    if (auto found = llvm::sys::findProgramByName(name))
      return *found;
  return absl::NotFoundError(
      "cannot find ld.lld, which links AMDGPU code objects: looked at "
      "/usr/lib/llvm-19/bin/ld.lld and for ld.lld-19 and ld.lld on PATH; install lld-19 or set "
      "QD_LD_LLD to an ld.lld");
}

namespace {

/// prepareAmdgpuModule, returning the target machine it prepared for.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> prepare(llvm::Module &module,
                                                             const HsacoOptions &options) {
  auto machine = amdgpuTargetMachine(options.arch);
  if (!machine.ok())
    return machine.status();
  llvm::TargetMachine &tm = **machine;
  module.setTargetTriple(tm.getTargetTriple().str());
  module.setDataLayout(tm.createDataLayout());
  if (!module.getModuleFlag("amdhsa_code_object_version"))
    module.addModuleFlag(llvm::Module::Error, "amdhsa_code_object_version",
                         uint32_t(kAmdgpuCodeObjectVersion * 100));
  setKernelAttributes(module, options.maxBlockSize);
  if (gpu::declaresFunctionWithPrefix(module, "__ocml_")) {
    if (absl::Status s = gpu::linkBitcodeLibrary(
            module, ocmlPath(options), "the ROCm device libraries' ocml",
            "install Debian's rocm-device-libs or set QD_ROCM_DEVICE_LIBS to the directory of "
            "ocml.bc");
        !s.ok())
      return s;
    defineControlConstants(module, *findAmdgpuArch(options.arch));
    // ocml.bc is built as OpenCL and brings its version along, which would
    // make the code object say its kernels are OpenCL C; they are not.
    if (llvm::NamedMDNode *ocl = module.getNamedMetadata("opencl.ocl.version"))
      module.eraseNamedMetadata(ocl);
  }
  if (absl::Status s = gpu::optimizeKernels(module, tm, llvm::CallingConv::AMDGPU_KERNEL, "AMDGPU");
      !s.ok())
    return s;
  return machine;
}

} // namespace

absl::Status prepareAmdgpuModule(llvm::Module &module, const HsacoOptions &options) {
  return prepare(module, options).status();
}

absl::StatusOr<std::string> emitAmdgpuAssembly(llvm::Module &module, const HsacoOptions &options) {
  auto machine = prepare(module, options);
  if (!machine.ok())
    return machine.status();
  return gpu::emitMachineCode(module, **machine, llvm::CodeGenFileType::AssemblyFile,
                              "AMDGPU assembly");
}

absl::StatusOr<std::string> emitHsaco(llvm::Module &module, const HsacoOptions &options) {
  auto machine = prepare(module, options);
  if (!machine.ok())
    return machine.status();
  auto object = gpu::emitMachineCode(module, **machine, llvm::CodeGenFileType::ObjectFile,
                                     "an AMDGPU object file");
  if (!object.ok())
    return object.status();
  return linkHsaco(*object, options);
}

absl::StatusOr<std::string> linkHsaco(const std::string &object, const HsacoOptions &options) {
  auto lld = ldLldPath(options);
  if (!lld.ok())
    return lld.status();
  TempFile in, out, log;
  for (auto [file, suffix] : {std::pair{&in, "o"}, {&out, "hsaco"}, {&log, "log"}})
    if (absl::Status s = makeTemp(*file, suffix); !s.ok())
      return s;
  {
    std::ofstream os(in.path.c_str(), std::ios::binary);
    if (!(os << object) || !os.flush())
      return absl::InternalError(fmt::format("cannot write '{}' for ld.lld", in.path.str()));
  }
  llvm::StringRef args[] = {*lld, "-shared", "--no-undefined", "-o", out.path, in.path};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.path.str(), log.path.str()};
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(*lld, args, std::nullopt, redirects, 0, 0, &error);
  if (rc != 0) {
    auto text = llvm::MemoryBuffer::getFile(log.path);
    return absl::InternalError(
        fmt::format("'{}' could not link the AMDGPU code object (exit {}{}{}): {}", *lld, rc,
                    error.empty() ? "" : ", ", error, text ? (*text)->getBuffer().str() : ""));
  }
  auto linked = llvm::MemoryBuffer::getFile(out.path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!linked)
    return absl::InternalError(fmt::format("cannot read the code object '{}' ld.lld wrote: {}",
                                           out.path.str(), linked.getError().message()));
  return (*linked)->getBuffer().str();
}

absl::StatusOr<std::vector<HsacoKernelInfo>> readHsacoKernels(std::string_view hsaco) {
  auto bad = [](const std::string &why) {
    return absl::InvalidArgumentError("not an AMDGPU code object: " + why);
  };
  auto elf = llvm::object::ELF64LEFile::create(llvm::StringRef(hsaco.data(), hsaco.size()));
  if (!elf)
    return bad(llvm::toString(elf.takeError()));
  if (elf->getHeader().e_machine != llvm::ELF::EM_AMDGPU)
    return bad("its ELF machine is not EM_AMDGPU");
  auto sections = elf->sections();
  if (!sections)
    return bad(llvm::toString(sections.takeError()));
  llvm::msgpack::Document doc;
  bool found = false;
  std::vector<std::string> symbols;
  for (const auto &section : *sections) {
    if (section.sh_type == llvm::ELF::SHT_DYNSYM || section.sh_type == llvm::ELF::SHT_SYMTAB) {
      auto syms = elf->symbols(&section);
      auto strtab = elf->getStringTableForSymtab(section);
      if (syms && strtab)
        for (const auto &sym : *syms)
          if (auto n = sym.getName(*strtab))
            symbols.push_back(n->str());
      continue;
    }
    if (section.sh_type != llvm::ELF::SHT_NOTE)
      continue;
    llvm::Error err = llvm::Error::success();
    for (const auto &note : elf->notes(section, err))
      if (note.getName() == "AMDGPU" && note.getType() == llvm::ELF::NT_AMDGPU_METADATA) {
        llvm::ArrayRef<uint8_t> desc = note.getDesc(section.sh_addralign);
        found = doc.readFromBlob(
            llvm::StringRef(reinterpret_cast<const char *>(desc.data()), desc.size()), false);
      }
    if (err)
      return bad(llvm::toString(std::move(err)));
  }
  if (!found)
    return bad("it has no NT_AMDGPU_METADATA note");
  std::vector<HsacoKernelInfo> kernels;
  llvm::msgpack::DocNode &list = doc.getRoot().getMap(true)["amdhsa.kernels"];
  if (!list.isArray())
    return bad("its metadata has no amdhsa.kernels list");
  for (llvm::msgpack::DocNode &k : list.getArray()) {
    if (!k.isMap())
      return bad("a kernel's metadata is not a map");
    llvm::msgpack::MapDocNode &m = k.getMap();
    auto integer = [&](const char *key) -> int64_t {
      auto it = m.find(key);
      if (it == m.end())
        return -1;
      const llvm::msgpack::DocNode &v = it->second;
      return v.getKind() == llvm::msgpack::Type::Int ? v.getInt() : int64_t(v.getUInt());
    };
    auto text = [](llvm::msgpack::MapDocNode &map, const char *key) -> std::string {
      auto it = map.find(key);
      return it != map.end() && it->second.isString() ? it->second.getString().str() : "";
    };
    HsacoKernelInfo info;
    info.name = text(m, ".name");
    info.hasDescriptor =
        std::find(symbols.begin(), symbols.end(), text(m, ".symbol")) != symbols.end() &&
        text(m, ".symbol") == info.name + ".kd";
    info.wavefrontSize = integer(".wavefront_size");
    info.vgprCount = integer(".vgpr_count");
    info.sgprCount = integer(".sgpr_count");
    info.vgprSpills = integer(".vgpr_spill_count");
    info.sgprSpills = integer(".sgpr_spill_count");
    info.privateSegmentBytes = integer(".private_segment_fixed_size");
    info.kernargBytes = integer(".kernarg_segment_size");
    info.maxFlatWorkgroupSize = integer(".max_flat_workgroup_size");
    if (auto args = m.find(".args"); args != m.end() && args->second.isArray())
      for (llvm::msgpack::DocNode &a : args->second.getArray())
        if (a.isMap())
          info.args.emplace_back(text(a.getMap(), ".value_kind"),
                                 text(a.getMap(), ".address_space"));
    kernels.push_back(std::move(info));
  }
  return kernels;
}

} // namespace qd
