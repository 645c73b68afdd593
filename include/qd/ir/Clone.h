//===- qd/ir/Clone.h - Deep copies and structural equality -----*- C++ -*-===//
#pragma once

#include "qd/ir/Module.h"

#include <absl/container/flat_hash_map.h>

#include <functional>
#include <string>

namespace qd {

/// Maps original values to their copies while cloning (open addressing: a
/// clone of a large kernel maps every statement, and a node per entry
/// made every lookup a cache miss). References into it do not survive an
/// insertion.
using ValueMap = absl::flat_hash_map<const Value *, Value *>;

/// Deep-copies `stmt` (with its nested blocks). Operands found in `map` are
/// remapped; others are kept as they are (values defined outside the cloned
/// region). Every cloned value is added to `map`.
std::unique_ptr<Stmt> cloneStmt(const Stmt &stmt, ValueMap &map);

/// Clones every statement of `from` to the end of `to`.
void cloneBlockInto(const Block &from, Block &to, ValueMap &map);

/// Deep-copies a kernel (arguments, body, names and locations) into a new,
/// detached kernel named `newName`; field references are kept, so the clone
/// belongs in the same module (use `cloneModule` to copy fields too).
std::unique_ptr<Kernel> cloneKernel(const Kernel &kernel, std::string newName);
/// Same, copying only the top-level statements `keep` accepts (the caller
/// makes sure they use no value of the others), and recording in `map`
/// each copied value's copy (statements included).
std::unique_ptr<Kernel> cloneKernel(const Kernel &kernel, std::string newName,
                                    const std::function<bool(const Stmt &)> &keep, ValueMap &map);

/// Deep-copies a whole module.
std::unique_ptr<Module> cloneModule(const Module &module);

/// Deep-copies a whole module with every f32 widened to f64: field and
/// ndarray element types, scalar arguments, values, locals, adstacks,
/// constants (same value: an f32 constant is exact in f64), casts (an
/// f32 -> f64 cast becomes an identity cast), comparisons and atomics.
/// Integer and f64 types stay. The copy computes what the original computes
/// without f32 rounding: the reference the gradient checker takes finite
/// differences of (qd/check/GradCheck.h).
std::unique_ptr<Module> cloneModuleWidenedToF64(const Module &module);

/// Structural equality: same fields, kernels, statements, operand structure
/// (up to renaming of values), types and constants. Locations are ignored.
/// On mismatch, `why` (if given) describes the first difference.
bool isEquivalent(const Module &a, const Module &b, std::string *why = nullptr);
bool isEquivalent(const Kernel &a, const Kernel &b, std::string *why = nullptr);

} // namespace qd
