//===- StoreSinkingTest.cpp - Sunk stores change no result ----------------===//
//
// The code generators emit a parallel iteration's top-level stores of a
// constant as late as nothing after them may touch their memory
// (sunkStores, qd/analysis/ElementOwnership.h). RapidCheck writes random
// iterations over slices of two ndarrays (`t - 2` to `t + 2`, the clamped
// `max(t - 1, 0)`, constant rows): loads, stores of constants and of
// computed values, private atomic adds, arithmetic and stores under an
// `if`; the CPU backend's unchecked code (where stores sink) must leave
// both arrays bit for bit as the interpreter does, with distinct buffers
// and with one buffer passed for both arguments (the code where every
// ndarray of the type may alias).
//
//===----------------------------------------------------------------------===//
#include "qd/interp/Interpreter.h"
#include "qd/ir/Parser.h"
#include "qd/ir/Verifier.h"
#include "qd/runtime/CpuBackend.h"
#include "qd/runtime/Program.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace qd {
namespace {

constexpr int kRows = 5, kColumns = 16, kT = 2;

/// The row indices an access may take, defined at the top of the body.
const char *const kRowIndices[] = {"%t", "%tm1", "%tm2", "%tp1", "%tp2", "%clamped", "%r0", "%r4"};

/// A random iteration body: `count` statements over %a and %b.
std::string randomBody(int count) {
  std::string body = R"(    %one = const 1 : i32
    %two = const 2 : i32
    %zi = const 0 : i32
    %tm1 = sub %t, %one : i32
    %tm2 = sub %t, %two : i32
    %tp1 = add %t, %one : i32
    %tp2 = add %t, %two : i32
    %clamped = max %tm1, %zi : i32
    %r0 = const 0 : i32
    %r4 = const 4 : i32
    %v0 = const 0.5 : f32
)";
  int values = 1, conds = 0;
  auto row = [] {
    return std::string(kRowIndices[*rc::gen::inRange<size_t>(0, std::size(kRowIndices))]);
  };
  auto array = [] { return *rc::gen::element<std::string>("%a", "%b"); };
  auto value = [&] { return fmt::format("%v{}", *rc::gen::inRange(0, values)); };
  auto constant = [] { return *rc::gen::element<std::string>("0.0", "1.5", "-2.0", "-0.0"); };
  for (int s = 0; s < count; ++s) {
    switch (*rc::gen::inRange(0, 7)) {
    case 0:
    case 1: // a load
      body += fmt::format("    %v{} = load {}[{}, %i] : f32\n", values++, array(), row());
      break;
    case 2: // a store of a constant: what sinks
      body += fmt::format("    %k{} = const {} : f32\n    store {}[{}, %i], %k{}\n", s, constant(),
                          array(), row(), s);
      break;
    case 3: // a store of a computed value
      body += fmt::format("    store {}[{}, %i], {}\n", array(), row(), value());
      break;
    case 4: // a private atomic add
      body += fmt::format("    atomic_add {}[{}, %i], {} : f32\n", array(), row(), value());
      break;
    case 5: { // arithmetic
      std::string x = value(), y = value();
      body += fmt::format("    %v{} = {} {}, {} : f32\n", values++,
                          *rc::gen::element<std::string>("add", "mul", "sub"), x, y);
      break;
    }
    default: { // a store under a test of data, and a load there
      std::string x = value(), y = value();
      body += fmt::format("    %c{0} = cmp lt {1}, {2} : f32\n    if %c{0} {{\n"
                          "      %k{3} = const 3.0 : f32\n      store {4}[{5}, %i], %k{3}\n"
                          "      %w{3} = load {6}[{7}, %i] : f32\n    }}\n",
                          conds++, x, y, s, array(), row(), array(), row());
      break;
    }
    }
  }
  return body;
}

/// Runs @k on `backend` from the same starting contents; a and b after it,
/// as bits. `shared`: one buffer for both arguments.
std::vector<uint32_t> run(Program &program, Backend &backend, bool shared) {
  auto make = [] { return *Buffer::create(ScalarType::F32, {kRows, kColumns}); };
  Buffer a = make(), b = make();
  for (int64_t e = 0; e < kRows * kColumns; ++e) {
    a.set(e, Scalar::ofFloat(ScalarType::F32, 0.25 * double(e % 7) - 0.5));
    b.set(e, Scalar::ofFloat(ScalarType::F32, 0.125 * double(e % 5) + 0.75));
  }
  NdarrayArg aa{&a, nullptr}, bb{shared ? &a : &b, nullptr};
  const LaunchArg args[] = {LaunchArg::i32(kT), LaunchArg::ndarray(&aa), LaunchArg::ndarray(&bb)};
  absl::Status s = program.launch("k", args, backend);
  RC_ASSERT(s.ok());
  std::vector<uint32_t> bits;
  for (const Buffer *buf : {&a, &b})
    for (int64_t e = 0; e < kRows * kColumns; ++e) {
      float f = float(buf->get(e).f);
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      bits.push_back(u);
    }
  return bits;
}

RC_GTEST_PROP(StoreSinkingTest, SunkStoresLeaveTheArraysAsProgramOrderDoes, ()) {
  std::string text = fmt::format("kernel @k(%t: i32, %a: ndarray<f32, 2>, %b: ndarray<f32, 2>) {{\n"
                                 "  parallel for %i = 0 to {} {{\n{}  }}\n}}\n",
                                 kColumns, randomBody(*rc::gen::inRange(1, 24)));
  auto m = parseModule(text, {"sinking.qd", 1});
  RC_ASSERT(m.ok());
  RC_ASSERT(verify(**m).ok());
  auto program = Program::create(**m);
  RC_ASSERT(program.ok());
  static Interpreter interp;
  static std::unique_ptr<CpuBackend> cpu = [] {
    CpuBackendOptions o;
    o.threads = 2;
    return *CpuBackend::create(o);
  }();
  for (bool shared : {false, true}) {
    RC_LOG() << (shared ? "one buffer for both arguments\n" : "distinct buffers\n") << text;
    RC_ASSERT(run(**program, *cpu, shared) == run(**program, interp, shared));
  }
}

} // namespace
} // namespace qd
