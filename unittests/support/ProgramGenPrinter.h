//===- ProgramGenPrinter.h - Printing programs ------------------*- C++ -*-===//
//
// The part of the printer of generated programs (ProgramGen.h) that
// ProgramGenPrint.cpp builds its statements on: the choices of a statement,
// the scopes of a task body, and its values (operands, expressions, bounds,
// conditions), written as statements of the text being printed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ProgramGen.h"

#include "qd/ir/Scalar.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace qd::testgen::detail {

using Usage = std::unordered_map<const std::vector<uint8_t> *, int>;

/// Reads the choices of one statement from a base slot on; records how many
/// slots were read (for shrinking).
class Ch {
public:
  Ch(const std::vector<uint8_t> *v, int base, Usage *usage) : v_(v), base_(base), usage_(usage) {}
  int raw(int i) const {
    int k = base_ + i;
    if (usage_) {
      int &u = (*usage_)[v_];
      u = std::max(u, k + 1);
    }
    return size_t(k) < v_->size() ? (*v_)[size_t(k)] : 0;
  }
  /// An option in [0, n).
  int pick(int i, int n) const { return n <= 1 ? (raw(i), 0) : raw(i) % n; }
  /// An option by relative weights; 0 is the first (simplest) one.
  int weighted(int i, std::initializer_list<int> w) const {
    int total = 0;
    for (int x : w)
      total += x;
    int r = raw(i) % total, k = 0;
    for (int x : w) {
      if (r < x)
        return k;
      r -= x;
      ++k;
    }
    return 0;
  }
  Ch at(int off) const { return Ch(v_, base_ + off, usage_); }

private:
  const std::vector<uint8_t> *v_;
  int base_;
  Usage *usage_;
};

enum class VarKind { A, M0, M1, Other }; // what an index variable may index

struct Var {
  std::string name;
  VarKind kind;
};
struct StackVar {
  std::string name;
  ScalarType type;
};
struct Frame {
  std::vector<Var> ints;
  std::vector<std::string> floats;
  std::vector<StackVar> stacks;
  std::vector<std::string> pushed; // stacks pushed by this block, not popped yet (a multiset)
};

inline std::string f64(double v) {
  return Scalar::ofFloat(ScalarType::F64, v).str();
}

/// The values of a generated program's text: the output being written, the
/// scopes of the task body, launch-time values, operands, expressions,
/// bounds and conditions read from a statement's choices.
class ValuePrinter {
public:
  ValuePrinter(const GenProgram &p, Usage *usage) : p_(p), cfg_(p.config), usage_(usage) {}

  std::set<std::string> fields_, args_;

protected:
  // ---- output ---------------------------------------------------------------
  void line(const std::string &s) {
    *out_ += std::string(size_t(2 * indent_), ' ') + s + "\n";
    ++info_.statements;
  }
  void close() {
    --indent_;
    *out_ += std::string(size_t(2 * indent_), ' ') + "}\n";
  }
  std::string fresh(const char *prefix = "t") { return fmt::format("%{}{}", prefix, counter_++); }
  std::string constI32(int64_t v) {
    std::string c = fresh("c");
    line(fmt::format("{} = const {} : i32", c, v));
    return c;
  }
  std::string constF64(double v) {
    std::string c = fresh("c");
    line(fmt::format("{} = const {} : f64", c, f64(v)));
    return c;
  }
  /// A launch-time statement at the kernel's top level, emitted once.
  std::string kernelValue(const std::string &name, const std::string &def) {
    if (preludeNames_.insert(name).second)
      prelude_.push_back(fmt::format("{} = {}", name, def));
    return name;
  }
  std::string kernelConst(int64_t v) {
    return kernelValue(fmt::format("%k{}", v), fmt::format("const {} : i32", v));
  }
  std::string useArg(const char *a) {
    args_.insert(a);
    return std::string("%") + a;
  }
  std::string shapeA() {
    useArg("a");
    return kernelValue("%sa", "shape %a, 0 : i32");
  }
  std::string shapeM(int axis) {
    useArg("m");
    return kernelValue(fmt::format("%sm{}", axis), fmt::format("shape %m, {} : i32", axis));
  }
  std::string shapeU() {
    useArg("u");
    return kernelValue("%su", "shape %u, 0 : i32");
  }

  // ---- scopes ---------------------------------------------------------------
  std::vector<const Var *> ints(std::optional<VarKind> kind = std::nullopt) {
    std::vector<const Var *> all;
    for (const Frame &f : frames_)
      for (const Var &v : f.ints)
        if (!kind || v.kind == *kind)
          all.push_back(&v);
    return all;
  }
  std::vector<std::string> floats() {
    std::vector<std::string> all;
    for (const Frame &f : frames_)
      all.insert(all.end(), f.floats.begin(), f.floats.end());
    return all;
  }
  std::vector<StackVar> stacks() {
    std::vector<StackVar> all;
    for (const Frame &f : frames_)
      all.insert(all.end(), f.stacks.begin(), f.stacks.end());
    return all;
  }
  std::string zero() {
    std::string z = constI32(0);
    zeros_.insert(z);
    return z;
  }
  bool isZero(const std::string &v) const { return zeros_.count(v) != 0; }

  // ---- values ---------------------------------------------------------------
  /// A non-negative i32 value.
  std::string intRef(Ch c) {
    int kind = c.weighted(0, {3, 1});
    if (kind == 1 && cfg_.intLocals) {
      std::string v = fresh();
      line(fmt::format("{} = load {} : i32", v, useIc()));
      return v;
    }
    auto all = ints();
    if (all.empty()) {
      c.raw(1);
      return zero();
    }
    return all[size_t(c.pick(1, int(all.size())))]->name;
  }
  std::string remBy(const std::string &v, const std::string &m) {
    std::string r = fresh();
    line(fmt::format("{} = rem {}, {} : i32", r, v, m));
    return r;
  }
  std::string xIndex(Ch c) {
    std::string v = intRef(c);
    if (isZero(v))
      return v;
    return remBy(v, constI32(cfg_.xLen));
  }
  std::string loadX(Ch idx) {
    fields_.insert("x");
    std::string i = xIndex(idx), v = fresh();
    line(fmt::format("{} = load @x[{}] : f64", v, i));
    return v;
  }
  std::string loadU(Ch idx) {
    std::string su = shapeU();
    std::string i = intRef(idx);
    if (!isZero(i))
      i = remBy(i, su);
    std::string v = fresh();
    line(fmt::format("{} = load %u[{}] : f64", v, i));
    return v;
  }
  /// A float operand in [-1.25, 1.25].
  std::string operand(Ch c) {
    int kind = c.weighted(0, {3, 2, 2, 1, 1});
    if (kind == 2) {
      auto all = floats();
      if (!all.empty())
        return all[size_t(c.pick(1, int(all.size())))];
      kind = 0;
    }
    if (kind == 3 && !cfg_.ndarrays)
      kind = 1;
    if (kind == 4)
      return useArg("s");
    if (kind == 0) {
      if (locals_.empty())
        kind = 1;
      else {
        std::string v = fresh();
        line(fmt::format("{} = load {} : f64", v, locals_[size_t(c.pick(1, int(locals_.size())))]));
        return v;
      }
    }
    if (kind == 3)
      return loadU(c.at(2));
    return loadX(c.at(2));
  }
  /// A constant in [lo, hi] in 20 steps.
  std::string constIn(Ch c, int slot, double lo, double hi) {
    return constF64(lo + (hi - lo) * c.pick(slot, 21) / 20.0);
  }
  std::string bin(const char *op, const std::string &a, const std::string &b,
                  const char *type = "f64") {
    std::string r = fresh();
    line(fmt::format("{} = {} {}, {} : {}", r, op, a, b, type));
    return r;
  }
  std::string un(const char *op, const std::string &a, const char *type = "f64") {
    std::string r = fresh();
    line(fmt::format("{} = {} {} : {}", r, op, a, type));
    return r;
  }
  std::string scale(const std::string &a, double k) { return bin("mul", a, constF64(k)); }

  /// A bounded expression: maps [-1.25, 1.25] into [-1.25, 1.25].
  std::string expr(Ch c) {
    constexpr int kOps = 22;
    int op = c.pick(0, kOps);
    std::string a = operand(c.at(1));
    auto b = [&] { return operand(c.at(5)); };
    switch (op) {
    case 0: // a * c
      return bin("mul", a, constIn(c, 9, -1, 1));
    case 1:
      return un("sin", a);
    case 2:
      return un("cos", a);
    case 3:
      return un("tanh", a);
    case 4: // average
      return scale(bin("add", a, b()), 0.5);
    case 5:
      return bin("mul", a, un("sin", b()));
    case 6: { // select on data
      std::string bv = b(), p = fresh();
      line(fmt::format("{} = cmp lt {}, {} : f64", p, a, bv));
      std::string t = bin("mul", bv, constIn(c, 9, -1, 1)), r = fresh();
      line(fmt::format("{} = select {}, {}, {} : f64", r, p, a, t));
      return r;
    }
    case 7: // (a - c) * 0.7
      return scale(bin("sub", a, constIn(c, 9, -0.5, 0.5)), 0.7);
    case 8:
      return bin(c.pick(9, 2) ? "max" : "min", a, b());
    case 9:
      return un("neg", a);
    case 10:
      return un("abs", a);
    case 11:
      return un("tan", scale(a, 0.5));
    case 12:
      return scale(un("exp", a), 0.3);
    case 13:
      return un("log", bin("add", constF64(1.5), bin("mul", a, a)));
    case 14:
      return scale(un("sqrt", bin("add", constF64(0.2), bin("mul", a, a))), 0.8);
    case 15: {
      std::string bv = b();
      return bin("div", a, bin("add", constF64(1.5), bin("mul", bv, bv)));
    }
    case 16: { // pow with a positive base and a small exponent
      std::string base = bin("add", constF64(1.5), scale(bin("mul", a, a), 0.5));
      return scale(bin("pow", base, scale(b(), 0.3)), 0.8);
    }
    case 17: // a^2 or a^3 with a constant exponent
      return scale(bin("pow", a, constF64(c.pick(9, 2) ? 3.0 : 2.0)), 0.5);
    case 18:
      return bin("atan2", a, bin("add", b(), constF64(2.0)));
    case 19: { // an f32 round trip
      if (!cfg_.f32)
        return un("sin", a);
      std::string f = fresh(), r = fresh();
      line(fmt::format("{} = cast {} : f64 to f32", f, a));
      std::string s = un("sin", f, "f32");
      line(fmt::format("{} = cast {} : f32 to f64", r, s));
      return r;
    }
    case 20: { // a * sin(float(index))
      std::string i = intRef(c.at(5)), f = fresh();
      line(fmt::format("{} = cast {} : i32 to f64", f, i));
      return bin("mul", a, un("sin", f));
    }
    default: // (a - b) * 0.5
      return scale(bin("sub", a, b()), 0.5);
    }
  }

  /// A loop bound (i32, small, non-negative); `kind` is what a loop index
  /// below it may index; `guard` is set when a guarding if was opened.
  std::string bound(Ch c, VarKind &kind, bool &guard, bool allowGuard) {
    kind = VarKind::Other;
    int k = c.weighted(0, {3, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    if ((k == 3 || k == 4 || k == 7) && !cfg_.ndarrays)
      k = 2;
    if (k == 7 && !allowGuard)
      k = 4;
    if (k == 8 && !cfg_.intLocals)
      k = 6;
    if ((k == 5 || k == 6) && ints().empty())
      k = 0;
    switch (k) {
    case 0:
      return std::to_string(c.pick(2, cfg_.maxBoundValue + 2));
    case 1:
      info_.hasLaunchTimeBound = true;
      return useArg("n");
    case 2: {
      fields_.insert("cnt");
      std::string i = constI32(c.pick(2, 3)), r = fresh();
      line(fmt::format("{} = load @cnt[{}] : i32", r, i));
      frames_.back().ints.push_back({r, VarKind::Other});
      return r;
    }
    case 3: {
      info_.hasLaunchTimeBound = true;
      int w = c.pick(1, 3);
      kind = w == 0 ? VarKind::A : w == 1 ? VarKind::M0 : VarKind::M1;
      return w == 0 ? shapeA() : shapeM(w - 1);
    }
    case 4: {
      info_.hasNdarrayBound = true;
      auto indexOf = [&](VarKind vk, int slot) {
        auto vs = ints(vk);
        if (vs.empty() || c.pick(slot, 4) == 0)
          return zero();
        return vs[size_t(c.raw(slot) / 4 % int(vs.size()))]->name;
      };
      std::string r = fresh();
      if (c.pick(1, 2) == 0) {
        useArg("a");
        std::string i = indexOf(VarKind::A, 2);
        line(fmt::format("{} = load %a[{}] : i32", r, i));
      } else {
        useArg("m");
        std::string i = indexOf(VarKind::M0, 2), j = indexOf(VarKind::M1, 1);
        line(fmt::format("{} = load %m[{}, {}] : i32", r, i, j));
      }
      return r;
    }
    case 5: { // an enclosing index (or another int in scope)
      auto vs = ints();
      return vs[size_t(c.pick(1, int(vs.size())))]->name;
    }
    case 6: { // an enclosing index, capped
      auto vs = ints();
      const std::string &v = vs[size_t(c.pick(1, int(vs.size())))]->name;
      return remBy(v, constI32(cfg_.maxBoundValue + 1));
    }
    case 7: { // a read at an enclosing index, guarded by an if
      info_.hasNdarrayBound = true;
      auto vs = ints();
      std::string v = vs.empty() ? zero() : vs[size_t(c.pick(1, int(vs.size())))]->name;
      std::string ok = fresh("ok"), r = fresh();
      line(fmt::format("{} = cmp lt {}, {} : i32", ok, v, shapeA()));
      line(fmt::format("if {} {{", ok));
      ++indent_;
      line(fmt::format("{} = load %a[{}] : i32", r, v));
      guard = true;
      return r;
    }
    case 8: { // the loop-carried integer local
      std::string v = fresh();
      line(fmt::format("{} = load {} : i32", v, useIc()));
      return remBy(v, constI32(cfg_.maxBoundValue + 1));
    }
    default: { // launch-time: a field read or an argument expression
      info_.hasLaunchTimeBound = true;
      if (c.pick(1, 2) == 0) {
        fields_.insert("cnt");
        int e = c.pick(2, 3);
        return kernelValue(fmt::format("%kc{}", e),
                           fmt::format("load @cnt[{}] : i32", kernelConst(e)));
      }
      useArg("n");
      if (!cfg_.ndarrays)
        return kernelValue("%kn", fmt::format("max %n, {} : i32", kernelConst(1)));
      return kernelValue("%kna", fmt::format("min %n, {} : i32", shapeA()));
    }
    }
  }

  std::string cond(Ch c) {
    int k = c.weighted(0, {2, 2, 1, 1, 1, 1, 1, 1});
    if (k == 7) { // an i1 input
      fields_.insert("bit");
      std::string v = fresh("p");
      line(fmt::format("{} = load @bit[{}] : i1", v, constI32(c.pick(1, 3))));
      return v;
    }
    if (k == 6) { // i1 logic: (a > c) op (int parity), or not (a > c)
      std::string p = fresh("p"), a = operand(c.at(2)), t = constIn(c, 6, -0.8, 0.8);
      line(fmt::format("{} = cmp gt {}, {} : f64", p, a, t));
      int op = c.pick(1, 4);
      if (op == 3)
        return un("not", p, "i1");
      std::string v = intRef(c.at(7)), q = fresh("p");
      line(fmt::format("{} = cast {} : i32 to i1", q, bin("and", v, constI32(1), "i32")));
      return bin(op == 0 ? "and" : op == 1 ? "or" : "xor", p, q, "i1");
    }
    if (k == 4 && !cfg_.ndarrays)
      k = 5;
    if (k == 5 && !cfg_.intLocals)
      k = 2;
    std::string p = fresh("p");
    static const char *kIntCmp[] = {"lt", "le", "gt", "ge", "eq", "ne"};
    switch (k) {
    case 0: {
      std::string a = operand(c.at(2)), b = operand(c.at(6));
      line(fmt::format("{} = cmp {} {}, {} : f64", p, c.pick(1, 2) ? "lt" : "gt", a, b));
      break;
    }
    case 1: {
      std::string a = operand(c.at(2)), t = constIn(c, 6, -0.8, 0.8);
      line(fmt::format("{} = cmp {} {}, {} : f64", p, c.pick(1, 2) ? "lt" : "gt", a, t));
      break;
    }
    case 2: {
      std::string v = intRef(c.at(2)), k2 = constI32(c.pick(6, 5));
      line(fmt::format("{} = cmp {} {}, {} : i32", p, kIntCmp[c.pick(1, 6)], v, k2));
      break;
    }
    case 3: { // parity
      std::string v = intRef(c.at(2)), par = bin("and", v, constI32(1), "i32");
      line(fmt::format("{} = cast {} : i32 to i1", p, par));
      break;
    }
    case 4: { // data
      useArg("a");
      std::string r = fresh();
      line(fmt::format("{} = load %a[{}] : i32", r, zero()));
      line(fmt::format("{} = cmp {} {}, {} : i32", p, kIntCmp[c.pick(1, 6)], r,
                       constI32(c.pick(6, cfg_.maxBoundValue + 1))));
      break;
    }
    default: { // the integer local
      std::string v = fresh();
      line(fmt::format("{} = load {} : i32", v, useIc()));
      line(fmt::format("{} = cmp {} {}, {} : i32", p, kIntCmp[c.pick(1, 6)], v,
                       constI32(c.pick(6, 5))));
    }
    }
    return p;
  }

  std::string useIc() {
    usesIc_ = true;
    return ic_;
  }
  std::string useIm() {
    usesIm_ = true;
    return im_;
  }

  /// Where a task stores its outputs: its index, or 0 in a serial task.
  std::string outputIndex() { return topIndex_.empty() ? zero() : topIndex_; }

  const GenProgram &p_;
  const GenConfig &cfg_;
  Usage *usage_;
  Printed info_;
  std::string *out_ = nullptr;
  int indent_ = 0;
  int counter_ = 0;
  int loopDepth_ = 0;
  /// While loops printed so far (every other one steps its counter by `sub`).
  int whileLoops_ = 0;
  std::vector<std::string> prelude_;
  std::set<std::string> preludeNames_, zeros_;
  std::vector<Frame> frames_;
  std::vector<std::string> locals_;
  std::string ic_, im_, topIndex_;
  bool usesIc_ = false, usesIm_ = false;
};

/// Which choices of each statement printing `p` reads (for shrinking).
Usage choicesRead(const GenProgram &p);

} // namespace qd::testgen::detail
