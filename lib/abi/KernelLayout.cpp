//===- KernelLayout.cpp - Adstack entry sizes -----------------------------===//
#include "qd/abi/KernelLayout.h"

namespace qd {

unsigned adStackEntryBytes(const AdStackAllocaStmt &stack) {
  unsigned primal = storageBytes(stack.elementType());
  for (const Use &u : stack.uses())
    if (u.user()->kind() == StmtKind::AdStackLoadTopAdj ||
        u.user()->kind() == StmtKind::AdStackAccAdjoint)
      return 2 * primal;
  return primal;
}

int64_t adStackBytes(unsigned entryBytes, int64_t capacity) {
  return (capacity * entryBytes + 7) / 8 * 8;
}

int64_t adStackBytes(const AdStackAllocaStmt &stack, int64_t capacity) {
  return adStackBytes(adStackEntryBytes(stack), capacity);
}

} // namespace qd
