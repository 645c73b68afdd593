//===- AbiTypes.cpp - LLVM types of the launch ABI ------------------------===//
#include "AbiTypes.h"

#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/LLVMContext.h>

#include <span>
#include <vector>

namespace qd {
namespace {

llvm::Type *fieldType(llvm::LLVMContext &c, const abi::FieldDesc &f) {
  switch (f.rep) {
  case abi::FieldRep::Ptr:
    return llvm::PointerType::getUnqual(c);
  case abi::FieldRep::I32:
    return llvm::Type::getInt32Ty(c);
  case abi::FieldRep::I64:
    return llvm::Type::getInt64Ty(c);
  case abi::FieldRep::I64Array:
    return llvm::ArrayType::get(llvm::Type::getInt64Ty(c), f.count);
  }
  return nullptr;
}

llvm::StructType *structType(llvm::LLVMContext &c, std::span<const abi::FieldDesc> fields,
                             llvm::StringRef name) {
  if (llvm::StructType *known = llvm::StructType::getTypeByName(c, name))
    return known;
  std::vector<llvm::Type *> elems;
  for (const abi::FieldDesc &f : fields)
    elems.push_back(fieldType(c, f));
  return llvm::StructType::create(c, elems, name);
}

} // namespace

llvm::StructType *launchContextType(llvm::LLVMContext &context) {
  return structType(context, abi::kLaunchContextFields, "QdLaunchContext");
}

llvm::StructType *errorRecordType(llvm::LLVMContext &context) {
  return structType(context, abi::kErrorRecordFields, "QdErrorRecord");
}

llvm::Type *launchContextFieldType(llvm::LLVMContext &context, abi::LaunchContextField f) {
  return fieldType(context, abi::kLaunchContextFields[static_cast<unsigned>(f)]);
}

} // namespace qd
