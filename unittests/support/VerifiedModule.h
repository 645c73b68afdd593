//===- VerifiedModule.h - Parsing a test's module ---------------*- C++ -*-===//
//
// The module of a test's IR text (file name `t.qd`), verified, with every
// parse or verifier error reported as a test failure. Header-only: tests
// that link no test support library include it too.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace qd {

/// `text` as a module that verifies, or null (the failure reported).
inline std::unique_ptr<Module> parseVerified(const std::string &text) {
  auto m = parseModule(text, {"t.qd", 1});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok())
    return nullptr;
  absl::Status v = verify(**m);
  EXPECT_TRUE(v.ok()) << v.message();
  return v.ok() ? *std::move(m) : nullptr;
}

} // namespace qd
