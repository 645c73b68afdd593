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

/// The deepest nesting of blocks a kernel may have (a `for` in an `if` in a
/// task is depth 3). The parser stops at the first block beyond it and the
/// verifier rejects kernels built deeper through the API, so analyses,
/// passes and code generators, which recurse over blocks, never see more.
/// 256 (like clang's default -fbracket-depth): every recursion in qd runs
/// twice that depth within an 8 MiB stack under AddressSanitizer (whose
/// frames are several KiB; the verifier's is 10 KiB), and real kernels
/// nest a few levels. IR of any depth is still destroyed without recursion.
inline constexpr unsigned kMaxBlockNesting = 256;

/// The first statement whose blocks would lie deeper than `limit` (checked
/// without recursion), or null.
const Stmt *firstStmtNestedBeyond(const Kernel &kernel, unsigned limit);

} // namespace qd
