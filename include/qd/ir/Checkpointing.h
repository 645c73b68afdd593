//===- qd/ir/Checkpointing.h - Names of checkpointed gradients --*- C++ -*-===//
//
// A gradient kernel whose long loops are checkpointed (reverse-ad
// {checkpoint}, docs/autodiff.md) reads the interval k, the iterations
// between stored states, from a 0-d i32 field of its module that the
// runtime sets before every launch; its stacks are named so that the
// runtime can tell the stored states and the segment tapes from the rest
// when it chooses k. Both sides read the names from here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

namespace qd {

/// The field gradient kernel `kernel`'s checkpointed loops read k from.
inline std::string checkpointIntervalField(std::string_view kernel) {
  return std::string(kernel) + "__checkpoint_interval";
}

/// Name hints of the stacks of a checkpointed loop (the printer may add a
/// `.N` suffix): the stored states (one entry per segment) and the tapes
/// of one segment.
inline constexpr std::string_view kCheckpointStackName = "checkpoint";
inline constexpr std::string_view kSegmentStackName = "segment";

/// Whether `name` is `hint` or `hint` with a suffix the printer adds.
inline bool hasNameHint(std::string_view name, std::string_view hint) {
  if (!name.empty() && name.front() == '%')
    name.remove_prefix(1);
  return name.substr(0, hint.size()) == hint &&
         (name.size() == hint.size() || name[hint.size()] == '.');
}

} // namespace qd
