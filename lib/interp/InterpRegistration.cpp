//===- InterpRegistration.cpp - The interpreter in the backend registry ---===//
#include "qd/interp/Interpreter.h"
#include "qd/runtime/BackendRegistry.h"

namespace qd {

absl::Status registerInterpreterBackend() {
  BackendInfo info;
  info.name = "interp";
  info.summary = "the reference interpreter: every index checked, deterministic order";
  info.create = [](const BackendOptions &) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::make_unique<Interpreter>();
  };
  return registerBackend(std::move(info));
}

} // namespace qd
