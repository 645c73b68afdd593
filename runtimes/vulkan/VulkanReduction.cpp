//===- VulkanReduction.cpp - Launch-time reductions on a Vulkan device ----===//
#include "VulkanReduction.h"

#include "qd/codegen/spirv/SpirvCodegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace qd::vk {

namespace {

/// The reduction shader. Push constants: the first element, the end, the
/// lanes, and whether elements are 64-bit. Binding 0 holds the elements as
/// 32-bit words (a 64-bit element is its low word, then its high word);
/// binding 1 gets, per lane, the (low, high) words of the largest element
/// it saw (INT64_MIN when none). Values compare as (high word signed, low
/// word unsigned), a 32-bit element's high word being its sign; no 64-bit
/// integer types, so any device runs it.
constexpr const char *kMaxShader = R"(
               OpCapability Shader
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "main" %gid
               OpExecutionMode %main LocalSize 64 1 1
               OpDecorate %gid BuiltIn GlobalInvocationId
               OpDecorate %words ArrayStride 4
               OpDecorate %Buf Block
               OpMemberDecorate %Buf 0 Offset 0
               OpDecorate %data DescriptorSet 0
               OpDecorate %data Binding 0
               OpDecorate %out DescriptorSet 0
               OpDecorate %out Binding 1
               OpDecorate %Push Block
               OpMemberDecorate %Push 0 Offset 0
               OpMemberDecorate %Push 1 Offset 4
               OpMemberDecorate %Push 2 Offset 8
               OpMemberDecorate %Push 3 Offset 12
       %void = OpTypeVoid
         %fn = OpTypeFunction %void
       %uint = OpTypeInt 32 0
        %int = OpTypeInt 32 1
       %bool = OpTypeBool
      %uvec3 = OpTypeVector %uint 3
    %ptr_gid = OpTypePointer Input %uvec3
        %gid = OpVariable %ptr_gid Input
      %words = OpTypeRuntimeArray %uint
        %Buf = OpTypeStruct %words
    %ptr_buf = OpTypePointer StorageBuffer %Buf
       %data = OpVariable %ptr_buf StorageBuffer
        %out = OpVariable %ptr_buf StorageBuffer
   %ptr_word = OpTypePointer StorageBuffer %uint
       %Push = OpTypeStruct %uint %uint %uint %uint
   %ptr_push = OpTypePointer PushConstant %Push
       %push = OpVariable %ptr_push PushConstant
     %ptr_pc = OpTypePointer PushConstant %uint
     %uint_0 = OpConstant %uint 0
     %uint_1 = OpConstant %uint 1
     %uint_2 = OpConstant %uint 2
     %uint_3 = OpConstant %uint 3
    %uint_31 = OpConstant %uint 31
    %int_min = OpConstant %int -2147483648
       %main = OpFunction %void None %fn
      %entry = OpLabel
         %g3 = OpLoad %uvec3 %gid
          %l = OpCompositeExtract %uint %g3 0
     %pbegin = OpAccessChain %ptr_pc %push %uint_0
      %begin = OpLoad %uint %pbegin
       %pend = OpAccessChain %ptr_pc %push %uint_1
        %end = OpLoad %uint %pend
     %planes = OpAccessChain %ptr_pc %push %uint_2
      %lanes = OpLoad %uint %planes
      %pwide = OpAccessChain %ptr_pc %push %uint_3
      %wideu = OpLoad %uint %pwide
       %wide = OpINotEqual %bool %wideu %uint_0
     %active = OpULessThan %bool %l %lanes
               OpSelectionMerge %done None
               OpBranchConditional %active %body %done
       %body = OpLabel
      %first = OpIAdd %uint %begin %l
               OpBranch %header
     %header = OpLabel
          %e = OpPhi %uint %first %body %enext %continue
         %bh = OpPhi %int %int_min %body %nbh %continue
         %bl = OpPhi %uint %uint_0 %body %nbl %continue
               OpLoopMerge %merge %continue None
               OpBranch %cond
       %cond = OpLabel
         %in = OpULessThan %bool %e %end
               OpBranchConditional %in %loop %merge
       %loop = OpLabel
         %e2 = OpShiftLeftLogical %uint %e %uint_1
        %e21 = OpIAdd %uint %e2 %uint_1
        %ilo = OpSelect %uint %wide %e2 %e
        %ihi = OpSelect %uint %wide %e21 %e
        %plo = OpAccessChain %ptr_word %data %uint_0 %ilo
         %lo = OpLoad %uint %plo
        %phi = OpAccessChain %ptr_word %data %uint_0 %ihi
        %hiw = OpLoad %uint %phi
       %hiwi = OpBitcast %int %hiw
        %loi = OpBitcast %int %lo
       %sign = OpShiftRightArithmetic %int %loi %uint_31
         %hi = OpSelect %int %wide %hiwi %sign
        %hgt = OpSGreaterThan %bool %hi %bh
        %heq = OpIEqual %bool %hi %bh
        %lgt = OpUGreaterThan %bool %lo %bl
       %eqgt = OpLogicalAnd %bool %heq %lgt
         %gt = OpLogicalOr %bool %hgt %eqgt
        %nbh = OpSelect %int %gt %hi %bh
        %nbl = OpSelect %uint %gt %lo %bl
               OpBranch %continue
   %continue = OpLabel
      %enext = OpIAdd %uint %e %lanes
               OpBranch %header
      %merge = OpLabel
         %o2 = OpShiftLeftLogical %uint %l %uint_1
        %o21 = OpIAdd %uint %o2 %uint_1
       %polo = OpAccessChain %ptr_word %out %uint_0 %o2
               OpStore %polo %bl
       %pohi = OpAccessChain %ptr_word %out %uint_0 %o21
        %bhu = OpBitcast %uint %bh
               OpStore %pohi %bhu
               OpBranch %done
       %done = OpLabel
               OpReturn
               OpFunctionEnd
)";

constexpr uint32_t kGroup = 64;

struct Push {
  uint32_t begin, end, lanes, wide;
};

} // namespace

absl::Status Reducer::create() {
  absl::StatusOr<std::vector<uint32_t>> words = assembleSpirv(kMaxShader);
  if (!words.ok())
    return absl::InternalError(
        fmt::format("vulkan: the reduction shader: {}", std::string(words.status().message())));
  if (absl::Status s = program_.create(device_, *words, 2, sizeof(Push), "the reduction shader");
      !s.ok())
    return s;
  absl::StatusOr<VkPipeline> p = program_.pipeline("main");
  if (!p.ok())
    return p.status();
  // Not owning: the device outlives its reducer.
  std::shared_ptr<const Device> self(std::shared_ptr<const Device>(), &device_);
  absl::StatusOr<DeviceBuffer> lanes = DeviceBuffer::allocate(
      std::move(self), size_t(kLanes) * 8, true, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (!lanes.ok())
    return lanes.status();
  lanes_ = *std::move(lanes);
  pipeline_ = *p;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Reducer::max(const DeviceBuffer &buffer, uint64_t begin, uint64_t end,
                                     bool wide) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (begin >= end || end > UINT32_MAX)
    return absl::InvalidArgumentError(fmt::format(
        "vulkan: cannot reduce elements [{}, {}): a non-empty range below 2^32", begin, end));
  if (!pipeline_)
    if (absl::Status s = create(); !s.ok())
      return s;
  const Api &api = device_.api();
  const uint32_t lanes = uint32_t(std::min<uint64_t>(kLanes, end - begin));
  program_.bind({buffer.get(), lanes_.get()});
  const Push push{uint32_t(begin), uint32_t(end), lanes, wide ? 1u : 0u};
  absl::Status ran = device_.run([&](VkCommandBuffer cb) {
    // The elements were written by earlier launches or copies.
    fullBarrier(api, cb);
    program_.use(cb, pipeline_);
    api.CmdPushConstants(cb, program_.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push),
                         &push);
    api.CmdDispatch(cb, (lanes + kGroup - 1) / kGroup, 1, 1);
    barrierAfterWrites(api, cb, VK_ACCESS_HOST_READ_BIT, VK_PIPELINE_STAGE_HOST_BIT);
  });
  if (!ran.ok())
    return ran;
  int64_t most = INT64_MIN;
  const auto *pairs = static_cast<const uint32_t *>(lanes_.mapped());
  for (uint32_t l = 0; l < lanes; ++l)
    most = std::max(most, int64_t(uint64_t(pairs[2 * l]) | uint64_t(pairs[2 * l + 1]) << 32));
  return most;
}

} // namespace qd::vk
