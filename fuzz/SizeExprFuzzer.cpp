//===- fuzz/SizeExprFuzzer.cpp - qd-fuzz-sizeexpr --------------------------===//
//
// deserializeSizeExpr on arbitrary bytes must return an error or an
// expression, never crash. An accepted expression must evaluate (with fake
// launch data and a step limit of 100000) without crashing or hanging, and
// must serialise and deserialise to an equal expression.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto e = qd::deserializeSizeExpr(std::span<const uint8_t>(data, size));
  if (!e.ok())
    return 0;
  qd::fuzz::FakeInputs inputs;
  (void)qd::evaluateSizeExpr(**e, inputs, 100000);
  (void)(*e)->isNonNegative();
  std::vector<uint8_t> bytes = qd::serializeSizeExpr(**e);
  auto back = qd::deserializeSizeExpr(bytes);
  if (!back.ok())
    qd::fuzz::fail("a deserialised SizeExpr does not survive serialise -> deserialise: " +
                   std::string(back.status().message()));
  return 0;
}
