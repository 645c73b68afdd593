//===- qd/runtime/AllBackends.h - Register every backend built --*- C++ -*-===//
//
// The backends of this build in the registry (qd/runtime/BackendRegistry.h):
// the interpreter and the CPU backend always, CUDA, AMDGPU (HIP) and Vulkan
// where CMake's QD_ENABLE_CUDA, QD_ENABLE_HIP and QD_ENABLE_VULKAN are on
// (target qd::backends).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace qd {

/// Registers every backend this build has, once per process (later calls
/// do nothing); what a tool calls before it picks a backend by name.
/// Registration order: interp, cpu, cuda, amdgpu, vulkan.
void registerAllBackends();

/// The backends this build has, in registration order, whether or not a
/// device for them is present.
std::vector<std::string> builtBackends();

} // namespace qd
