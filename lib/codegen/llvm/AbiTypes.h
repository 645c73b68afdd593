//===- AbiTypes.h - LLVM types of the launch ABI ----------------*- C++ -*-===//
//
// The LLVM struct types of the records in qd/abi/LaunchContext.h, built from
// their field lists, so generated code and the C structs the runtimes fill
// cannot disagree.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/abi/LaunchContext.h"

namespace llvm {
class LLVMContext;
class StructType;
class Type;
} // namespace llvm

namespace qd {

/// `%QdLaunchContext`, one element per QD_LAUNCH_CONTEXT_FIELDS entry.
llvm::StructType *launchContextType(llvm::LLVMContext &context);
/// `%QdErrorRecord`, one element per QD_ERROR_RECORD_FIELDS entry.
llvm::StructType *errorRecordType(llvm::LLVMContext &context);
/// The LLVM type of field `f` of the launch context.
llvm::Type *launchContextFieldType(llvm::LLVMContext &context, abi::LaunchContextField f);

} // namespace qd
