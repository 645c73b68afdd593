//===- fuzz/ParserFuzzer.cpp - qd-fuzz-parser ------------------------------===//
//
// Parses the input; if it parses and verifies, prints it, parses the print
// again and checks that the reparsed module verifies, is structurally equal
// to the first one, and prints identically: print(parse(print(m))) ==
// print(m). Parse errors must be ordinary statuses (never a crash).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "qd/ir/Clone.h"
#include "qd/ir/Printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::unique_ptr<qd::Module> m = qd::fuzz::parseAndVerify(data, size);
  if (!m)
    return 0;
  std::string printed = qd::printModule(*m);
  auto reparsed = qd::parseModule(printed, {.filename = "<printed>"});
  if (!reparsed.ok())
    qd::fuzz::fail("the printed module does not parse: " + std::string(reparsed.status().message()),
                   printed);
  if (absl::Status st = qd::verify(**reparsed); !st.ok())
    qd::fuzz::fail("the printed module does not verify: " + std::string(st.message()), printed);
  std::string why;
  if (!qd::isEquivalent(*m, **reparsed, &why))
    qd::fuzz::fail("the reparsed module differs from the original: " + why, printed);
  std::string reprinted = qd::printModule(**reparsed);
  if (reprinted != printed)
    qd::fuzz::fail("print(parse(print(m))) != print(m)",
                   "--- print(m):\n" + printed + "--- print(parse(print(m))):\n" + reprinted);
  return 0;
}
