//===- VulkanProgram.cpp - Compute pipelines of one SPIR-V module ---------===//
#include "VulkanDevice.h"

#include <fmt/format.h>

namespace qd::vk {

ComputeProgram::~ComputeProgram() {
  if (!device_)
    return;
  const Api &api = device_->api();
  VkDevice d = device_->handle();
  for (VkPipeline p : pipelines_)
    api.DestroyPipeline(d, p, nullptr);
  if (pool_)
    api.DestroyDescriptorPool(d, pool_, nullptr);
  if (pipelineLayout_)
    api.DestroyPipelineLayout(d, pipelineLayout_, nullptr);
  if (setLayout_)
    api.DestroyDescriptorSetLayout(d, setLayout_, nullptr);
  if (module_)
    api.DestroyShaderModule(d, module_, nullptr);
}

absl::Status ComputeProgram::create(const Device &device, const std::vector<uint32_t> &words,
                                    uint32_t buffers, uint32_t pushBytes, const std::string &what) {
  device_ = &device;
  what_ = what;
  const Api &api = device.api();
  VkDevice d = device.handle();
  auto smi = vk::make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  smi.codeSize = words.size() * 4;
  smi.pCode = words.data();
  if (absl::Status s = device.check(api.CreateShaderModule(d, &smi, nullptr, &module_),
                                    fmt::format("vkCreateShaderModule ({})", what));
      !s.ok())
    return s;
  std::vector<VkDescriptorSetLayoutBinding> b(buffers);
  for (uint32_t i = 0; i < buffers; ++i)
    b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  auto dsl = vk::make<VkDescriptorSetLayoutCreateInfo>(
      VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  dsl.bindingCount = buffers;
  dsl.pBindings = b.data();
  if (absl::Status s = device.check(api.CreateDescriptorSetLayout(d, &dsl, nullptr, &setLayout_),
                                    "vkCreateDescriptorSetLayout");
      !s.ok())
    return s;
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, pushBytes};
  auto pl = vk::make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &setLayout_;
  pl.pushConstantRangeCount = pushBytes ? 1 : 0;
  pl.pPushConstantRanges = pushBytes ? &range : nullptr;
  if (absl::Status s = device.check(api.CreatePipelineLayout(d, &pl, nullptr, &pipelineLayout_),
                                    "vkCreatePipelineLayout");
      !s.ok())
    return s;
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, buffers};
  auto dp = vk::make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  dp.maxSets = 1;
  dp.poolSizeCount = 1;
  dp.pPoolSizes = &size;
  if (absl::Status s =
          device.check(api.CreateDescriptorPool(d, &dp, nullptr, &pool_), "vkCreateDescriptorPool");
      !s.ok())
    return s;
  auto dsa = vk::make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  dsa.descriptorPool = pool_;
  dsa.descriptorSetCount = 1;
  dsa.pSetLayouts = &setLayout_;
  return device.check(api.AllocateDescriptorSets(d, &dsa, &set_), "vkAllocateDescriptorSets");
}

absl::StatusOr<VkPipeline> ComputeProgram::pipeline(const std::string &entry) {
  const Api &api = device_->api();
  auto cp = vk::make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  cp.stage = vk::make<VkPipelineShaderStageCreateInfo>(
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cp.stage.module = module_;
  cp.stage.pName = entry.c_str();
  cp.layout = pipelineLayout_;
  VkPipeline p = VK_NULL_HANDLE;
  if (absl::Status s = device_->check(
          api.CreateComputePipelines(device_->handle(), VK_NULL_HANDLE, 1, &cp, nullptr, &p),
          fmt::format("vkCreateComputePipelines ({}, {})", what_, entry));
      !s.ok())
    return s;
  pipelines_.push_back(p);
  return p;
}

void ComputeProgram::bind(const std::vector<VkBuffer> &buffers) const {
  std::vector<VkDescriptorBufferInfo> infos;
  for (VkBuffer b : buffers)
    infos.push_back({b, 0, VK_WHOLE_SIZE});
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    writes[i] = vk::make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstSet = set_;
    writes[i].dstBinding = uint32_t(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  device_->api().UpdateDescriptorSets(device_->handle(), uint32_t(writes.size()), writes.data(), 0,
                                      nullptr);
}

void ComputeProgram::use(VkCommandBuffer cb, VkPipeline p) const {
  const Api &api = device_->api();
  api.CmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  api.CmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelineLayout_, 0, 1, &set_, 0,
                            nullptr);
}

} // namespace qd::vk
