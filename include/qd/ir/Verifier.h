//===- qd/ir/Verifier.h - IR well-formedness checks -------------*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/status/status.h>

namespace qd {

/// Checks every rule of docs/ir.md ("Verifier rules"): SSA dominance and
/// scoping, operand and result types, global access arity, adstack usage,
/// break/continue placement and task structure. Returns OK or
/// InvalidArgument whose message lists every violation, one per line, as
/// `file:line:col: error: <message>`.
absl::Status verify(const Module &module);
absl::Status verify(const Kernel &kernel);

} // namespace qd
