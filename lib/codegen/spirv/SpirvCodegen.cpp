//===- SpirvCodegen.cpp - SPIR-V compute shaders for kernels --------------===//
//
// The public entry points: emit (SpirvEmitter), validate, optimise with
// SPIRV-Tools' performance passes, validate again, disassemble.
//
//===----------------------------------------------------------------------===//
#include "qd/codegen/spirv/SpirvCodegen.h"

#include "SpirvEmitter.h"

#include <fmt/format.h>
#include <spirv-tools/libspirv.hpp>
#include <spirv-tools/optimizer.hpp>

namespace qd {

namespace {

constexpr spv_target_env kTargetEnv = SPV_ENV_VULKAN_1_1;

/// Collects SPIRV-Tools' messages.
struct Diagnostics {
  std::string text;
  void attach(spvtools::SpirvTools &tools) {
    tools.SetMessageConsumer(
        [this](spv_message_level_t, const char *, const spv_position_t &pos, const char *message) {
          text += fmt::format("{}(word {}): {}\n", text.empty() ? "" : "", pos.index, message);
        });
  }
};

} // namespace

SpirvLaunchData SpirvLaunchData::of(const KernelLayout &layout, unsigned numArguments) {
  SpirvLaunchData d;
  uint32_t stacks = uint32_t(layout.stacks.size());
  d.needed = kHeapShift + 1;
  d.capacities = d.needed + stacks;
  d.offsets = d.capacities + stacks;
  d.scalars = d.offsets + stacks;
  d.shapes = d.scalars + 2 * numArguments;
  d.values = d.shapes + 2 * layout.numShapes;
  d.words = d.values + 2 * layout.numValues;
  return d;
}

std::string validateSpirv(std::span<const uint32_t> words) {
  spvtools::SpirvTools tools(kTargetEnv);
  Diagnostics diag;
  diag.attach(tools);
  spvtools::ValidatorOptions options;
  if (tools.Validate(words.data(), words.size(), options))
    return "";
  return diag.text.empty() ? "invalid SPIR-V" : diag.text;
}

absl::StatusOr<std::vector<uint32_t>> assembleSpirv(std::string_view text) {
  spvtools::SpirvTools tools(kTargetEnv);
  Diagnostics diag;
  diag.attach(tools);
  std::vector<uint32_t> words;
  if (!tools.Assemble(text.data(), text.size(), &words))
    return absl::InvalidArgumentError("cannot assemble SPIR-V: " + diag.text);
  if (std::string invalid = validateSpirv(words); !invalid.empty())
    return absl::InvalidArgumentError("the assembled SPIR-V is not valid: " + invalid);
  return words;
}

absl::StatusOr<std::string> disassembleSpirv(std::span<const uint32_t> words) {
  spvtools::SpirvTools tools(kTargetEnv);
  Diagnostics diag;
  diag.attach(tools);
  std::string text;
  if (!tools.Disassemble(words.data(), words.size(), &text,
                         SPV_BINARY_TO_TEXT_OPTION_FRIENDLY_NAMES |
                             SPV_BINARY_TO_TEXT_OPTION_NO_HEADER))
    return absl::InvalidArgumentError("cannot disassemble SPIR-V: " + diag.text);
  return text;
}

absl::StatusOr<SpirvKernel> emitSpirv(const Kernel &kernel, const SpirvOptions &options) {
  SpirvKernel out;
  out.workgroupSize = options.workgroupSize;
  if (options.workgroupSize == 0 || options.workgroupSize > 1024)
    return absl::InvalidArgumentError(fmt::format(
        "spirv codegen: workgroup size {} is outside [1, 1024]", options.workgroupSize));
  auto powerOfTwo = [](unsigned v) { return v != 0 && (v & (v - 1)) == 0; };
  if (options.stopChecks &&
      (!powerOfTwo(options.stopCheckInterval) || !powerOfTwo(options.stopCheckSpread)))
    return absl::InvalidArgumentError(
        fmt::format("spirv codegen: the stop check interval ({}) and spread ({}) must be powers "
                    "of two",
                    options.stopCheckInterval, options.stopCheckSpread));
  spirv::SpirvEmitter emitter(kernel, options, out);
  if (absl::Status s = emitter.run(); !s.ok())
    return s;
  if (out.layout.launches.empty()) { // nothing to run: no module (it would have no entry point)
    out.words.clear();
    return out;
  }
  if (std::string bad = validateSpirv(out.words); !bad.empty())
    return absl::InternalError(
        fmt::format("spirv codegen: kernel @{} produced invalid SPIR-V: {}", kernel.name(), bad));
  if (!options.optimize)
    return out;
  spvtools::Optimizer optimizer(kTargetEnv);
  std::string diag;
  optimizer.SetMessageConsumer(
      [&](spv_message_level_t level, const char *, const spv_position_t &, const char *message) {
        if (level <= SPV_MSG_ERROR)
          diag += std::string(message) + "\n";
      });
  optimizer.RegisterPerformancePasses();
  std::vector<uint32_t> optimized;
  if (!optimizer.Run(out.words.data(), out.words.size(), &optimized))
    return absl::InternalError(fmt::format(
        "spirv codegen: kernel @{}: SPIRV-Tools' optimizer failed: {}", kernel.name(), diag));
  if (std::string bad = validateSpirv(optimized); !bad.empty())
    return absl::InternalError(fmt::format(
        "spirv codegen: kernel @{}: the optimized SPIR-V is invalid: {}", kernel.name(), bad));
  out.words = std::move(optimized);
  return out;
}

} // namespace qd
