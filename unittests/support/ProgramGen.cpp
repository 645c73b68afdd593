//===- ProgramGen.cpp - Random well-formed qd programs for properties -----===//
//
// Choice slots. Every statement reads its choices at fixed positions, so
// shrinking one choice never changes what the others mean:
//
//   operand  (4): kind (local, @x, SSA value, %u, %s), which, index (2)
//   intref   (2): kind (variable in scope, %ic), which
//   expr    (10): op, operand a (4), operand b (4), constant
//   bound    (3): kind, which, constant
//   cond    (10): kind, comparison, operand a (4), operand b (4)
//
//   Assign    local, expr@1
//   Let       expr@0
//   Output    target, which field, operand@2 (or cond@6 for the i1 output)
//   IntUpdate local (%ic / %im), op, constant, operand@3
//   Stack     element type
//   Push      stack, operand@1 (f64) / intref@1 (i32)
//   Pop       stack, extra (none, load_top to an output, adjoint ops), operand@2
//   WriteData element
//   For       begin kind, begin bound@1, end bound@4
//   If        cond@0
//   While     trip limit, data break, cond@2
//   Jump      break or continue, push before, stack, cond@3, push operand@13
//   task      top bound kind, top constant, locals, then 6 slots per local
//             (init intref (2), init source, final output, 2 spare)
//
//===----------------------------------------------------------------------===//
#include "ProgramGen.h"

#include "qd/ir/Printer.h"
#include "qd/ir/Scalar.h"
#include "qd/ir/Verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>

namespace rc::detail {
TestListener &globalTestListener();
} // namespace rc::detail

namespace qd::testgen {

const char *toString(StmtKind k) {
  static const char *names[kNumStmtKinds] = {"assign", "let",  "output", "int-update",
                                             "stack",  "push", "pop",    "write-data",
                                             "for",    "if",   "while",  "jump"};
  return names[static_cast<int>(k)];
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

GenConfig GenConfig::autodiff() {
  GenConfig c;
  c.name = "autodiff";
  c.maxTasks = 2;
  c.serialTasks = true;
  c.threads = 2;
  c.f32 = false; // f32 rounding makes finite differences meaningless
  c.integerOutputs = false;
  return c;
}

GenConfig GenConfig::sizing() {
  GenConfig c;
  c.name = "sizing";
  c.maxTasks = 2;
  c.serialTasks = true;
  c.threads = 5;
  c.launchTimeTop = true;
  c.adstacks = true;
  c.writesBoundData = true;
  c.maxBoundValue = 6;
  c.maxNdarrayLen = 5;
  c.maxBlock = 4;
  //         asg let out int stk psh pop wrt for if whl jmp
  int w[] = {1, 0, 1, 1, 1, 4, 2, 1, 4, 2, 2, 2};
  std::copy(std::begin(w), std::end(w), c.weights);
  return c;
}

GenConfig GenConfig::cpu(bool adstacks) {
  GenConfig c;
  c.name = adstacks ? "cpu-adstacks" : "cpu";
  c.maxTasks = 2;
  c.serialTasks = true;
  c.threads = 6;
  c.launchTimeTop = true;
  c.maxNdarrayLen = 6;
  c.adstacks = adstacks;
  if (adstacks) {
    c.weights[static_cast<int>(StmtKind::Stack)] = 1;
    c.weights[static_cast<int>(StmtKind::Push)] = 2;
    c.weights[static_cast<int>(StmtKind::Pop)] = 1;
  }
  return c;
}

GenConfig GenConfig::everything() {
  GenConfig c;
  c.name = "everything";
  c.maxTasks = 3;
  c.serialTasks = true;
  c.threads = 4;
  c.launchTimeTop = true;
  c.adstacks = true;
  c.writesBoundData = true;
  c.adstackPercent = 40; // reverse-ad and forward-ad refuse kernels with adstacks
  c.dualCompanions = true;
  c.maxBoundValue = 4;
  //         asg let out int stk psh pop wrt for if whl jmp
  int w[] = {3, 1, 1, 1, 1, 1, 1, 1, 3, 2, 2, 1};
  std::copy(std::begin(w), std::end(w), c.weights);
  return c;
}

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

namespace {

uint8_t at(const std::vector<uint8_t> &v, size_t i) {
  return i < v.size() ? v[i] : 0;
}

/// 0, -1, 1, -2, 2, ... for 0, 1, 2, 3, 4, ...: choices near 0 are small.
int zigzag(int k) {
  return k % 2 == 0 ? k / 2 : -(k + 1) / 2;
}

} // namespace

double xValue(const GenProgram &p, int k) {
  return (zigzag(at(p.inputs.x, size_t(k)) % 200) + 0.5) / 97;
}
std::vector<double> xValues(const GenProgram &p) {
  std::vector<double> v;
  for (int k = 0; k < p.config.xLen; ++k)
    v.push_back(xValue(p, k));
  return v;
}
std::vector<int64_t> cntValues(const GenProgram &p) {
  std::vector<int64_t> v;
  for (size_t k = 0; k < 3; ++k)
    v.push_back(at(p.inputs.cnt, k) % (p.config.maxBoundValue + 1));
  return v;
}
std::vector<int64_t> bitValues(const GenProgram &p) {
  std::vector<int64_t> v;
  for (size_t k = 0; k < 3; ++k)
    v.push_back(at(p.inputs.cnt, k) / 7 % 2);
  return v;
}
int64_t nValue(const GenProgram &p) {
  return p.inputs.n % (p.config.maxBoundValue + 1);
}
double sValue(const GenProgram &p) {
  return zigzag(p.inputs.s % 199) / 101.0;
}
std::vector<int64_t> aShape(const GenProgram &p) {
  return {1 + p.inputs.aLen % std::max(1, p.config.maxNdarrayLen)};
}
std::vector<int64_t> aValues(const GenProgram &p) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < aShape(p)[0]; ++k)
    v.push_back(at(p.inputs.a, size_t(k)) % (p.config.maxBoundValue + 1));
  return v;
}
std::vector<int64_t> mShape(const GenProgram &p) {
  return {1 + p.inputs.rows % 3, 1 + p.inputs.cols % 3};
}
std::vector<int64_t> mValues(const GenProgram &p) {
  std::vector<int64_t> v, s = mShape(p);
  for (int64_t k = 0; k < s[0] * s[1]; ++k)
    v.push_back(at(p.inputs.m, size_t(k)) % (p.config.maxBoundValue + 1));
  return v;
}
std::vector<int64_t> uShape(const GenProgram &p) {
  return {1 + p.inputs.uLen % std::max(1, p.config.maxNdarrayLen)};
}
std::vector<double> uValues(const GenProgram &p) {
  std::vector<double> v;
  for (int64_t k = 0; k < uShape(p)[0]; ++k)
    v.push_back((zigzag(at(p.inputs.u, size_t(k)) % 200) + 0.5) / 89);
  return v;
}
std::vector<int64_t> wShape(const GenProgram &p) {
  return {p.config.threads};
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {

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

std::string f64(double v) {
  return Scalar::ofFloat(ScalarType::F64, v).str();
}

class Printer {
public:
  Printer(const GenProgram &p, Usage *usage) : p_(p), cfg_(p.config), usage_(usage) {}

  Printed run() {
    std::string tasks;
    for (size_t t = 0; t < p_.tasks.size(); ++t)
      tasks += task(p_.tasks[t], int(t));
    std::string out;
    std::string comp = cfg_.dualCompanions ? " grad dual" : " grad";
    auto field = [&](const char *name, const std::string &decl) {
      if (fields_.count(name))
        out += fmt::format("field @{} : {}\n", name, decl);
    };
    field("x", fmt::format("f64[{}]{}", cfg_.xLen, comp));
    field("y", "f64" + comp);
    for (int l = 0; l < 3; ++l)
      field(fmt::format("z{}", l).c_str(), fmt::format("f64[{}]{}", cfg_.threads, comp));
    field("cnt", "i32[3]");
    field("bit", "i1[3]");
    field("flag", fmt::format("i1[{}]", cfg_.threads));
    field("ci", fmt::format("i32[{}]", cfg_.threads));
    field("cx", "i32");
    field("cm", "i64");
    field("out", "f32");
    field("oi", "i32");
    if (!out.empty())
      out += "\n";
    std::vector<std::string> args;
    auto arg = [&](const char *name, const std::string &type) {
      if (args_.count(name))
        args.push_back(fmt::format("%{}: {}", name, type));
    };
    arg("n", "i32");
    arg("s", "f64");
    arg("a", "ndarray<i32, 1>");
    arg("m", "ndarray<i32, 2>");
    arg("u", "ndarray<f64, 1>" + comp);
    arg("w", "ndarray<f64, 1>" + comp);
    out += "kernel @k(";
    for (size_t i = 0; i < args.size(); ++i)
      out += (i ? ", " : "") + args[i];
    out += ") {\n";
    for (const std::string &l : prelude_)
      out += "  " + l + "\n";
    out += tasks + "}\n";
    info_.text = std::move(out);
    return info_;
  }

  std::set<std::string> fields_, args_;

private:
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

  // ---- statements -----------------------------------------------------------
  void push(const StackVar &s, Ch c) {
    std::string v;
    if (s.type == ScalarType::I32)
      v = intRef(c);
    else if (s.type == ScalarType::F64)
      v = operand(c);
    else {
      v = fresh();
      line(fmt::format("{} = cast {} : f64 to f32", v, operand(c)));
    }
    line(fmt::format("adstack.push {}, {}", s.name, v));
    frames_.back().pushed.push_back(s.name);
  }

  void popOne(const StackVar &s, Ch c) {
    const char *t = s.type == ScalarType::I32 ? "i32" : s.type == ScalarType::F64 ? "f64" : "f32";
    int extra = c.pick(1, 3);
    if (extra == 1) {
      std::string v = fresh();
      line(fmt::format("{} = adstack.load_top {} : {}", v, s.name, t));
      const char *target = s.type == ScalarType::I32   ? "oi"
                           : s.type == ScalarType::F64 ? "y"
                                                       : "out";
      fields_.insert(target);
      line(fmt::format("atomic_add @{}[], {} : {}", target, v, t));
    } else if (extra == 2 && s.type != ScalarType::I32) {
      std::string d = operand(c.at(2));
      if (s.type == ScalarType::F32) {
        std::string f = fresh();
        line(fmt::format("{} = cast {} : f64 to f32", f, d));
        d = f;
      }
      line(fmt::format("adstack.acc_adjoint {}, {}", s.name, d));
      std::string g = fresh();
      line(fmt::format("{} = adstack.load_top_adj {} : {}", g, s.name, t));
      const char *target = s.type == ScalarType::F64 ? "y" : "out";
      fields_.insert(target);
      line(fmt::format("atomic_add @{}[], {} : {}", target, g, t));
    }
    line(fmt::format("adstack.pop {}", s.name));
  }

  StackVar *findStack(const std::string &name) {
    for (Frame &f : frames_)
      for (StackVar &s : f.stacks)
        if (s.name == name)
          return &s;
    return nullptr;
  }

  std::string outputIndex() { return topIndex_.empty() ? zero() : topIndex_; }

  void output(Ch c) {
    int target = c.pick(0, 4);
    if (target == 3) { // an i1 output
      std::string p = cond(c.at(6));
      fields_.insert("flag");
      line(fmt::format("store @flag[{}], {}", outputIndex(), p));
      return;
    }
    if (target == 2 && !cfg_.ndarrays)
      target = 1;
    std::string v = operand(c.at(2));
    if (target == 0) {
      fields_.insert("y");
      line(fmt::format("atomic_add @y[], {} : f64", v));
    } else if (target == 1) {
      std::string f = fmt::format("z{}", c.pick(1, 3));
      fields_.insert(f);
      line(fmt::format("store @{}[{}], {}", f, outputIndex(), v));
    } else {
      useArg("w");
      line(fmt::format("store %w[{}], {}", outputIndex(), v));
    }
  }

  void intUpdate(Ch c) {
    if (c.pick(0, 2) == 0) { // %ic: stays small and non-negative
      std::string cur = fresh(), r;
      line(fmt::format("{} = load {} : i32", cur, useIc()));
      switch (c.pick(1, 8)) {
      case 0:
        r = bin("add", cur, constI32(1 + c.pick(2, 2)), "i32");
        break;
      case 1:
        r = bin("xor", cur, constI32(1 + c.pick(2, 3)), "i32");
        break;
      case 2:
        r = bin("shr", cur, constI32(1), "i32");
        break;
      case 3:
        r = remBy(bin("mul", cur, constI32(3), "i32"), constI32(1021));
        break;
      case 4: { // from a float: the gradient stops here
        std::string f =
            un(c.pick(2, 2) ? "floor" : "ceil", scale(un("abs", operand(c.at(3))), 2.9));
        r = fresh();
        line(fmt::format("{} = cast {} : f64 to i32", r, f));
        break;
      }
      case 5:
        r = bin("div", cur, constI32(1 + c.pick(2, 3)), "i32");
        break;
      case 6: { // add a comparison's i1 value
        std::string p = fresh("p"), z = fresh();
        line(fmt::format("{} = cmp gt {}, {} : f64", p, operand(c.at(3)), constIn(c, 7, -1, 1)));
        line(fmt::format("{} = cast {} : i1 to i32", z, p));
        r = bin("add", cur, z, "i32");
        break;
      }
      default: { // min(2 * ic + 1, 200), or a select between ic and ic - 1 (when positive)
        if (c.pick(2, 2)) {
          r = bin("min", bin("add", bin("mul", cur, constI32(2), "i32"), constI32(1), "i32"),
                  constI32(200), "i32");
        } else {
          std::string pos = fresh("p"), dec = bin("sub", cur, constI32(1), "i32");
          line(fmt::format("{} = cmp gt {}, {} : i32", pos, cur, constI32(0)));
          r = fresh();
          line(fmt::format("{} = select {}, {}, {} : i32", r, pos, dec, cur));
        }
      }
      }
      line(fmt::format("store {}, {}", ic_, r));
      return;
    }
    std::string cur = fresh(), r;
    line(fmt::format("{} = load {} : i64", cur, useIm()));
    switch (c.pick(1, 5)) {
    case 0: { // %im * big (+|^) i64(f * 1e6): wraps
      std::string big = fresh();
      line(fmt::format("{} = const 6364136223846793005 : i64", big));
      std::string p = bin("mul", cur, big, "i64");
      std::string f = scale(operand(c.at(3)), 1e6), fi = fresh();
      line(fmt::format("{} = cast {} : f64 to i64", fi, f));
      r = bin(c.pick(2, 2) ? "xor" : "add", p, fi, "i64");
      break;
    }
    case 1: { // shift left and mix in the i32 local
      std::string k = fresh();
      line(fmt::format("{} = const {} : i64", k, 1 + c.pick(2, 7)));
      std::string sh = bin("shl", cur, k, "i64"), ci = fresh(), icv = fresh();
      line(fmt::format("{} = load {} : i32", icv, useIc()));
      line(fmt::format("{} = cast {} : i32 to i64", ci, icv));
      r = bin("or", sh, ci, "i64");
      break;
    }
    case 2: { // arithmetic shift right, minus one
      std::string k = fresh(), one = fresh();
      line(fmt::format("{} = const {} : i64", k, 1 + c.pick(2, 7)));
      line(fmt::format("{} = const 1 : i64", one));
      r = bin("sub", bin("shr", cur, k, "i64"), one, "i64");
      break;
    }
    case 3: { // signed division or remainder by a constant (truncating)
      std::string k = fresh();
      line(fmt::format("{} = const {} : i64", k, c.pick(2, 2) ? 7 : -3));
      r = bin(c.pick(3, 2) ? "rem" : "div", cur, k, "i64");
      break;
    }
    default: // bitwise not, negation, absolute value
      r = un(c.pick(2, 3) == 0 ? "not" : c.pick(2, 3) == 1 ? "neg" : "abs", cur, "i64");
    }
    line(fmt::format("store {}, {}", im_, r));
  }

  void stmt(const GenStmt &s) {
    Ch c(&s.c, 0, usage_);
    switch (s.kind) {
    case StmtKind::Assign: {
      if (locals_.empty())
        return;
      const std::string &l = locals_[size_t(c.pick(0, int(locals_.size())))];
      std::string e = expr(c.at(1));
      line(fmt::format("store {}, {}", l, e));
      return;
    }
    case StmtKind::Let:
      frames_.back().floats.push_back(expr(c));
      return;
    case StmtKind::Output:
      output(c);
      return;
    case StmtKind::IntUpdate:
      if (cfg_.intLocals)
        intUpdate(c);
      return;
    case StmtKind::Stack: {
      if (!cfg_.adstacks || stacks().size() >= 4)
        return;
      static const ScalarType types[] = {ScalarType::F32, ScalarType::F64, ScalarType::I32};
      static const char *names[] = {"f32", "f64", "i32"};
      int t = c.pick(0, 3);
      std::string name = fresh("s");
      line(fmt::format("{} = adstack.alloca {}, capacity 0", name, names[t]));
      frames_.back().stacks.push_back({name, types[t]});
      info_.hasStacks = true;
      return;
    }
    case StmtKind::Push: {
      auto all = stacks();
      if (all.empty())
        return;
      push(all[size_t(c.pick(0, int(all.size())))], c.at(1));
      return;
    }
    case StmtKind::Pop: {
      auto &pushed = frames_.back().pushed;
      if (pushed.empty())
        return;
      size_t k = size_t(c.pick(0, int(pushed.size())));
      std::string name = pushed[k];
      pushed.erase(pushed.begin() + long(k));
      popOne(*findStack(name), c);
      return;
    }
    case StmtKind::WriteData:
      if (!cfg_.writesBoundData)
        return;
      fields_.insert("cnt");
      info_.writesBoundData = true;
      line(fmt::format("store @cnt[{}], {}", constI32(c.pick(0, 3)), useArg("n")));
      return;
    case StmtKind::For:
      forLoop(s, c);
      return;
    case StmtKind::If: {
      info_.hasIf = true;
      std::string p = cond(c);
      line(fmt::format("if {} {{", p));
      nested(s.body);
      // An else arm whose statements all print nothing is not printed (the
      // printer omits empty else blocks).
      std::string *outer = out_, orelse;
      out_ = &orelse;
      nested(s.orelse);
      out_ = outer;
      if (!orelse.empty())
        *out_ += std::string(size_t(2 * indent_), ' ') + "} else {\n" + orelse;
      *out_ += std::string(size_t(2 * indent_), ' ') + "}\n";
      return;
    }
    case StmtKind::While:
      whileLoop(s, c);
      return;
    case StmtKind::Jump: {
      // Outside a loop, only a `continue` of the parallel task's loop.
      bool taskLevel = loopDepth_ == 0;
      if (taskLevel && topIndex_.empty())
        return;
      info_.hasJump = true;
      std::string p = cond(c.at(3));
      line(fmt::format("if {} {{", p));
      ++indent_;
      frames_.emplace_back();
      for (const GenStmt &b : s.body)
        stmt(b);
      if (c.pick(1, 2)) {
        auto all = stacks();
        if (!all.empty())
          push(all[size_t(c.pick(2, int(all.size())))], c.at(13));
      }
      frames_.pop_back();
      line(c.pick(0, 2) || taskLevel ? "continue" : "break");
      close();
      return;
    }
    }
  }

  /// An if arm in its own scope.
  void nested(const std::vector<GenStmt> &body) {
    ++indent_;
    frames_.emplace_back();
    for (const GenStmt &b : body)
      stmt(b);
    frames_.pop_back();
    --indent_;
  }

  void forLoop(const GenStmt &s, Ch c) {
    info_.hasFor = true;
    std::string begin = "0";
    VarKind kind, ignored;
    bool guard = false;
    if (c.weighted(0, {3, 1}) == 1) {
      begin = bound(c.at(1), ignored, guard, /*allowGuard=*/false);
    }
    std::string end = bound(c.at(4), kind, guard, /*allowGuard=*/true);
    std::string j = fresh("j");
    line(fmt::format("for {} = {} to {} {{", j, begin, end));
    ++loopDepth_;
    ++indent_;
    frames_.emplace_back();
    frames_.back().ints.push_back({j, kind});
    for (const GenStmt &b : s.body)
      stmt(b);
    frames_.pop_back();
    --loopDepth_;
    close();
    if (guard)
      close();
  }

  void whileLoop(const GenStmt &s, Ch c) {
    info_.hasWhile = true;
    std::string w = fresh("wc"), cur = fresh(), done = fresh();
    line(fmt::format("{} = alloca i32", w));
    line(fmt::format("store {}, {}", w, zero()));
    line("while {");
    ++indent_;
    line(fmt::format("{} = load {} : i32", cur, w));
    line(fmt::format("{} = cmp ge {}, {} : i32", done, cur, constI32(c.pick(0, 5))));
    line(fmt::format("if {} {{", done));
    ++indent_;
    line("break");
    close();
    std::string next = bin("add", cur, constI32(1), "i32");
    line(fmt::format("store {}, {}", w, next));
    ++loopDepth_;
    frames_.emplace_back();
    frames_.back().ints.push_back({cur, VarKind::Other});
    for (const GenStmt &b : s.body)
      stmt(b);
    if (c.pick(1, 2)) {
      std::string p = cond(c.at(2));
      line(fmt::format("if {} {{", p));
      ++indent_;
      line("break");
      close();
    }
    if (cfg_.adstacks) // balanced: the body pops what it pushed (Bellman-Ford bounds it)
      while (!frames_.back().pushed.empty()) {
        std::string name = frames_.back().pushed.back();
        frames_.back().pushed.pop_back();
        line(fmt::format("adstack.pop {}", name));
      }
    frames_.pop_back();
    --loopDepth_;
    close();
  }

  std::string task(const GenTask &t, int index) {
    Ch c(&t.c, 0, usage_);
    std::string suffix = index == 0 ? "" : fmt::format("_{}", index);
    ic_ = "%ic" + suffix;
    im_ = "%im" + suffix;
    usesIc_ = usesIm_ = false;
    locals_.clear();
    frames_.clear();
    frames_.emplace_back();
    std::string head;
    int topValue = -1, bandRows = 0; // a literal top bound; rows of a 2-wide band
    if (t.parallel) {
      topIndex_ = "%i" + suffix;
      std::string top;
      VarKind kind = VarKind::Other;
      int k = cfg_.launchTimeTop ? c.weighted(0, {3, 1, 1}) : 0;
      if (k == 1 && cfg_.ndarrays && cfg_.maxNdarrayLen <= cfg_.threads) {
        top = shapeA();
        kind = VarKind::A;
      } else if (k == 2) {
        useArg("n");
        top = kernelValue("%kt", fmt::format("min %n, {} : i32", kernelConst(cfg_.threads)));
      } else {
        topValue = 1 + c.pick(1, cfg_.threads);
        top = std::to_string(topValue);
      }
      // A band with a second dimension of extent 1 runs the same points:
      // the task index is its innermost (lanes along it) or outer index.
      // A band of rows of 2 runs them too, the task index flattened from
      // its two indices at the top of the body.
      std::string other = "%it" + suffix;
      int form = cfg_.bands ? c.weighted(24, {4, 1, 1, 1}) : 0;
      if (form == 3 && (topValue < 2 || topValue % 2))
        form = 0;
      switch (form) {
      case 0:
        head = fmt::format("  parallel for {} = 0 to {} {{\n", topIndex_, top);
        break;
      case 3:
        bandRows = topValue / 2;
        head = fmt::format("  parallel for ({}, {}) = (0, 0) to ({}, 2) {{\n", "%ibr" + suffix,
                           "%ibc" + suffix, bandRows);
        frames_.back().ints.push_back({"%ibr" + suffix, VarKind::Other});
        frames_.back().ints.push_back({"%ibc" + suffix, VarKind::Other});
        break;
      case 1:
        head =
            fmt::format("  parallel for ({}, {}) = (0, 0) to (1, {}) {{\n", other, topIndex_, top);
        frames_.back().ints.push_back({other, VarKind::Other});
        break;
      default:
        head =
            fmt::format("  parallel for ({}, {}) = (0, 0) to ({}, 1) {{\n", topIndex_, other, top);
        frames_.back().ints.push_back({other, VarKind::Other});
        break;
      }
      frames_.back().ints.push_back({topIndex_, kind});
    } else {
      topIndex_.clear();
      head = "  serial {\n";
    }
    // The flattened index of a 2-wide band comes first: the declarations
    // (added in front of the body at the end) may use it.
    std::string prologue;
    out_ = &prologue;
    indent_ = 2;
    if (bandRows > 0) {
      std::string row = fresh();
      line(fmt::format("{} = mul {}, {} : i32", row, "%ibr" + suffix, constI32(2)));
      line(fmt::format("{} = add {}, {} : i32", topIndex_, row, "%ibc" + suffix));
    }
    std::string body;
    out_ = &body;
    // Float locals, initialised from @x or %u.
    int numLocals = cfg_.floatLocals ? c.weighted(2, {1, 3, 3, 3}) : 0;
    for (int l = 0; l < numLocals; ++l) {
      std::string v = fmt::format("%v{}{}", l, suffix);
      Ch lc = c.at(3 + 6 * l);
      line(fmt::format("{} = alloca f64", v));
      std::string init = lc.pick(2, 4) == 3 && cfg_.ndarrays ? loadU(lc) : loadX(lc);
      line(fmt::format("store {}, {}", v, init));
      locals_.push_back(v);
    }
    for (const GenStmt &s : t.body)
      stmt(s);
    // Outputs: some locals are left unread after the body (their adjoints
    // then only come through loads inside loops).
    for (int l = 0; l < numLocals; ++l) {
      int what = c.at(3 + 6 * l).pick(3, l == 0 ? 3 : 4);
      if (what == 3)
        continue;
      std::string r = fresh();
      line(fmt::format("{} = load {} : f64", r, locals_[size_t(l)]));
      if (what == 0) {
        fields_.insert("y");
        line(fmt::format("atomic_add @y[], {} : f64", r));
      } else if (what == 1 || !cfg_.ndarrays) {
        std::string f = fmt::format("z{}", l);
        fields_.insert(f);
        line(fmt::format("store @{}[{}], {}", f, outputIndex(), r));
      } else {
        useArg("w");
        line(fmt::format("store %w[{}], {}", outputIndex(), r));
      }
    }
    if (cfg_.integerOutputs && usesIc_) {
      std::string r = fresh();
      line(fmt::format("{} = load {} : i32", r, ic_));
      fields_.insert("ci");
      line(fmt::format("store @ci[{}], {}", outputIndex(), r));
      fields_.insert("cx"); // the largest over the threads
      line(fmt::format("atomic_max @cx[], {} : i32", r));
    }
    if (cfg_.integerOutputs && usesIm_) {
      std::string r = fresh();
      line(fmt::format("{} = load {} : i64", r, im_));
      fields_.insert("cm");
      line(fmt::format("atomic_add @cm[], {} : i64", r));
    }
    std::string decls;
    out_ = &decls;
    if (usesIc_) {
      line(fmt::format("{} = alloca i32", ic_));
      if (!topIndex_.empty())
        line(fmt::format("store {}, {}", ic_, topIndex_));
    }
    if (usesIm_)
      line(fmt::format("{} = alloca i64", im_));
    out_ = nullptr;
    return head + prologue + decls + body + "  }\n";
  }

  const GenProgram &p_;
  const GenConfig &cfg_;
  Usage *usage_;
  Printed info_;
  std::string *out_ = nullptr;
  int indent_ = 0;
  int counter_ = 0;
  int loopDepth_ = 0;
  std::vector<std::string> prelude_;
  std::set<std::string> preludeNames_, zeros_;
  std::vector<Frame> frames_;
  std::vector<std::string> locals_;
  std::string ic_, im_, topIndex_;
  bool usesIc_ = false, usesIm_ = false;
};

} // namespace

Printed print(const GenProgram &p) {
  return Printer(p, nullptr).run();
}

namespace {

std::string json(const std::vector<double> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + f64(v[i]);
  return s + "]";
}
std::string json(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

struct Used {
  std::set<std::string> fields, args;
};
Used usedBy(const GenProgram &p) {
  Printer pr(p, nullptr);
  pr.run();
  return {pr.fields_, pr.args_};
}

} // namespace

std::string qdRunInputs(const GenProgram &p) {
  Used u = usedBy(p);
  std::string s;
  if (u.args.count("n"))
    s += fmt::format(" --arg n={}", nValue(p));
  if (u.args.count("s"))
    s += fmt::format(" --arg s={}", f64(sValue(p)));
  if (u.args.count("a"))
    s += fmt::format(" --arg 'a={}'", json(aValues(p)));
  if (u.args.count("m")) {
    auto v = mValues(p);
    auto sh = mShape(p);
    std::string rows = "[";
    for (int64_t r = 0; r < sh[0]; ++r)
      rows += (r ? "," : "") +
              json(std::vector<int64_t>(v.begin() + r * sh[1], v.begin() + (r + 1) * sh[1]));
    s += fmt::format(" --arg 'm={}]'", rows);
  }
  if (u.args.count("u"))
    s += fmt::format(" --arg 'u={}'", json(uValues(p)));
  if (u.args.count("w"))
    s += fmt::format(" --arg 'w={}'", json(std::vector<double>(size_t(p.config.threads), 0.0)));
  if (u.fields.count("x"))
    s += fmt::format(" --set 'x={}'", json(xValues(p)));
  if (u.fields.count("cnt"))
    s += fmt::format(" --set 'cnt={}'", json(cntValues(p)));
  if (u.fields.count("bit"))
    s += fmt::format(" --set 'bit={}'", json(bitValues(p)));
  return s;
}

void showValue(const GenProgram &p, std::ostream &os) {
  Printed pr = print(p);
  os << "\n// generated (" << p.config.name << "), inputs:\n// qd-run %s --kernel=k"
     << qdRunInputs(p) << "\n"
     << pr.text;
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

namespace {

class Builder {
public:
  Builder(const GenConfig &cfg, const rc::Random &random, int size)
      : cfg_(cfg), rnd_(random), size_(std::clamp(size, 0, 400)) {}

  GenProgram build() {
    GenProgram p;
    p.config = cfg_;
    p.config.adstacks = cfg_.adstacks && below(100) < cfg_.adstackPercent;
    cfg_ = p.config;
    // RapidCheck's size (0 to max_size, 100 by default) scales the number of
    // tasks, the statements per task and the nesting depth; with
    // RC_PARAMS="max_size=200" task bodies get longer still.
    int maxTasks = std::min(cfg_.maxTasks, 1 + (cfg_.maxTasks - 1) * size_ / 100);
    int numTasks = 1 + below(maxTasks);
    depthLimit_ = std::min(cfg_.maxDepth, 1 + size_ / 25);
    for (int t = 0; t < numTasks; ++t) {
      GenTask task;
      task.parallel = t == 0 || !cfg_.serialTasks || below(2) == 0;
      task.c = choices(25);
      if (cfg_.adstacks)
        for (int k = 1 + below(3); k > 0; --k)
          task.body.push_back(leaf(StmtKind::Stack));
      parallelTask_ = task.parallel;
      auto body = block(0, 0, topLength());
      task.body.insert(task.body.end(), body.begin(), body.end());
      p.tasks.push_back(std::move(task));
    }
    GenInputs &in = p.inputs;
    in.x = choices(cfg_.xLen);
    in.cnt = choices(3);
    in.n = uint8_t(below(240));
    in.s = uint8_t(below(240));
    in.aLen = uint8_t(below(240));
    in.a = choices(cfg_.maxNdarrayLen);
    in.rows = uint8_t(below(240));
    in.cols = uint8_t(below(240));
    in.m = choices(9);
    in.uLen = uint8_t(below(240));
    in.u = choices(cfg_.maxNdarrayLen);
    return p;
  }

private:
  int below(int n) { return n <= 1 ? 0 : int(rnd_.next() % uint64_t(n)); }
  std::vector<uint8_t> choices(int n) {
    std::vector<uint8_t> c(static_cast<size_t>(n));
    for (uint8_t &x : c)
      x = uint8_t(below(240)); // 240: divisible by 2, 3, 4, 5, 6, 8, 10, 12, 15, 16
    return c;
  }
  int topLength() { return 1 + below(1 + (2 * cfg_.maxBlock - 1) * (size_ + 10) / 110); }
  int nestedLength() { return 1 + below(cfg_.maxBlock); }

  GenStmt leaf(StmtKind k) {
    GenStmt s;
    s.kind = k;
    s.c = choices(16);
    return s;
  }

  /// A task body has a loop (or an if) somewhere at its top level.
  std::vector<GenStmt> block(int depth, int loopDepth, int length) {
    std::vector<GenStmt> out;
    int control = depth == 0 ? below(length) : -1;
    for (int i = 0; i < length; ++i)
      out.push_back(stmt(depth, loopDepth, i == control));
    return out;
  }

  GenStmt stmt(int depth, int loopDepth, bool control = false) {
    int w[kNumStmtKinds];
    int total = 0;
    for (int k = 0; k < kNumStmtKinds; ++k) {
      auto kind = static_cast<StmtKind>(k);
      bool ok = true;
      switch (kind) {
      case StmtKind::Assign:
        ok = cfg_.floatLocals;
        break;
      case StmtKind::IntUpdate:
        ok = cfg_.intLocals;
        break;
      case StmtKind::Stack:
      case StmtKind::Push:
      case StmtKind::Pop:
        ok = cfg_.adstacks;
        break;
      case StmtKind::WriteData:
        ok = cfg_.writesBoundData;
        break;
      case StmtKind::For:
        ok = depth < depthLimit_;
        break;
      case StmtKind::If:
        ok = cfg_.ifs && depth < depthLimit_;
        break;
      case StmtKind::While:
        ok = cfg_.whileLoops && depth < depthLimit_;
        break;
      case StmtKind::Jump:
        ok = cfg_.jumps && (loopDepth > 0 || parallelTask_); // `continue` in a parallel for
        break;
      default:
        break;
      }
      if (control && kind != StmtKind::For && kind != StmtKind::While && kind != StmtKind::If)
        ok = false;
      w[k] = ok ? cfg_.weights[k] : 0;
      total += w[k];
    }
    if (total == 0)
      return leaf(StmtKind::Output);
    int r = below(total), k = 0;
    while (r >= w[k])
      r -= w[k++];
    GenStmt s = leaf(static_cast<StmtKind>(k));
    switch (s.kind) {
    case StmtKind::For:
      if (cfg_.adstacks && below(4) == 0)
        s.body.push_back(leaf(StmtKind::Stack));
      for (GenStmt &b : block(depth + 1, loopDepth + 1, nestedLength()))
        s.body.push_back(std::move(b));
      break;
    case StmtKind::While:
      if (cfg_.adstacks && below(4) == 0)
        s.body.push_back(leaf(StmtKind::Stack));
      for (GenStmt &b : block(depth + 1, loopDepth + 1, nestedLength()))
        s.body.push_back(std::move(b));
      break;
    case StmtKind::If:
      s.body = block(depth + 1, loopDepth, nestedLength());
      if (below(2))
        s.orelse = block(depth + 1, loopDepth, nestedLength());
      break;
    case StmtKind::Jump:
      if (below(2) && depth + 1 < cfg_.maxDepth + 1)
        s.body = block(depth + 1, 0, 1); // no nested jump: it would leave the if
      break;
    default:
      break;
    }
    return s;
  }

  GenConfig cfg_;
  rc::Random rnd_;
  int size_;
  int depthLimit_ = 1;
  bool parallelTask_ = false;
};

} // namespace

rc::Gen<GenProgram> genProgram(GenConfig config) {
  return rc::Gen<GenProgram>([config](const rc::Random &random, int size) {
    GenProgram p = Builder(config, random, size).build();
    return rc::shrinkable::shrinkRecur(
        std::move(p), [](const GenProgram &q) { return rc::seq::fromContainer(shrinks(q)); });
  });
}

std::vector<GenConfig> presetConfigs() {
  return {GenConfig::autodiff(), GenConfig::sizing(), GenConfig::cpu(), GenConfig::cpu(true),
          GenConfig::everything()};
}

rc::Gen<GenProgram> genAnyProgram() {
  return rc::gen::mapcat(rc::gen::inRange<size_t>(0, presetConfigs().size()),
                         [](size_t k) { return genProgram(presetConfigs()[k]); });
}

//===----------------------------------------------------------------------===//
// Shrinking
//===----------------------------------------------------------------------===//

namespace {

using Path = std::vector<std::pair<int, int>>; // (0 body | 1 orelse, index) from a task body

/// Every statement of `tasks[t]`, with its path, in preorder.
void collect(const std::vector<GenStmt> &block, int which, Path &path,
             std::vector<std::pair<Path, const GenStmt *>> &out) {
  for (size_t i = 0; i < block.size(); ++i) {
    path.push_back({which, int(i)});
    out.push_back({path, &block[i]});
    collect(block[i].body, 0, path, out);
    collect(block[i].orelse, 1, path, out);
    path.pop_back();
  }
}

std::vector<GenStmt> &blockAt(GenTask &t, const Path &path, size_t len) {
  std::vector<GenStmt> *b = &t.body;
  for (size_t k = 0; k < len; ++k) {
    GenStmt &s = (*b)[size_t(path[k].second)];
    b = path[k + 1].first == 0 ? &s.body : &s.orelse;
  }
  return *b;
}

/// The parent block of the statement at `path` and its index in it.
std::pair<std::vector<GenStmt> *, size_t> locate(GenTask &t, const Path &path) {
  return {&blockAt(t, path, path.size() - 1), size_t(path.back().second)};
}

void shrinkChoices(std::vector<uint8_t> &c, int used, const std::function<void()> &emit) {
  for (int i = 0; i < std::min<int>(used, int(c.size())); ++i) {
    uint8_t v = c[size_t(i)];
    if (v == 0)
      continue;
    std::set<uint8_t> tried;
    for (uint8_t to : {uint8_t(0), uint8_t(v / 2), uint8_t(v - 1)}) {
      if (!tried.insert(to).second || to == v)
        continue;
      c[size_t(i)] = to;
      emit();
    }
    c[size_t(i)] = v;
  }
}

} // namespace

std::vector<GenProgram> shrinks(const GenProgram &p) {
  std::vector<GenProgram> out;
  // Which choices the printer reads.
  Usage usage;
  Printer(p, &usage).run();

  // 1. Whole tasks.
  if (p.tasks.size() > 1)
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      GenProgram q = p;
      q.tasks.erase(q.tasks.begin() + long(t));
      out.push_back(std::move(q));
    }
  std::vector<std::vector<std::pair<Path, const GenStmt *>>> stmts(p.tasks.size());
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    Path path;
    collect(p.tasks[t].body, 0, path, stmts[t]);
  }
  // 2. Statements (with everything inside them).
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (auto &[path, s] : stmts[t]) {
      GenProgram q = p;
      auto [block, i] = locate(q.tasks[t], path);
      block->erase(block->begin() + long(i));
      out.push_back(std::move(q));
    }
  // 3. A loop or if replaced by its body (or else arm); an else arm dropped.
  for (size_t t = 0; t < p.tasks.size(); ++t)
    for (auto &[path, s] : stmts[t]) {
      for (int arm = 0; arm < 2; ++arm) {
        const auto &inner = arm == 0 ? s->body : s->orelse;
        if (inner.empty())
          continue;
        GenProgram q = p;
        auto [block, i] = locate(q.tasks[t], path);
        std::vector<GenStmt> hoisted = inner;
        block->erase(block->begin() + long(i));
        block->insert(block->begin() + long(i), hoisted.begin(), hoisted.end());
        out.push_back(std::move(q));
      }
      if (!s->orelse.empty()) {
        GenProgram q = p;
        auto [block, i] = locate(q.tasks[t], path);
        (*block)[i].orelse.clear();
        out.push_back(std::move(q));
      }
    }
  // 4. Serial tasks instead of parallel ones.
  for (size_t t = 0; t < p.tasks.size(); ++t)
    if (p.tasks[t].parallel && p.config.serialTasks) {
      GenProgram q = p;
      q.tasks[t].parallel = false;
      out.push_back(std::move(q));
    }
  // 5. Simpler choices.
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    GenProgram q = p;
    auto it = usage.find(&p.tasks[t].c);
    shrinkChoices(q.tasks[t].c, it == usage.end() ? 0 : it->second, [&] { out.push_back(q); });
    for (auto &[path, s] : stmts[t]) {
      auto u = usage.find(&s->c);
      if (u == usage.end())
        continue;
      GenProgram r = p;
      auto [block, i] = locate(r.tasks[t], path);
      GenStmt &target = (*block)[i];
      shrinkChoices(target.c, u->second, [&] { out.push_back(r); });
    }
  }
  // 6. Simpler inputs.
  GenProgram q = p;
  auto emit = [&] { out.push_back(q); };
  GenInputs &in = q.inputs;
  for (std::vector<uint8_t> *v : {&in.x, &in.cnt, &in.a, &in.m, &in.u})
    shrinkChoices(*v, int(v->size()), emit);
  for (uint8_t *v : {&in.n, &in.s, &in.aLen, &in.rows, &in.cols, &in.uLen}) {
    std::vector<uint8_t> one{*v};
    uint8_t orig = *v;
    shrinkChoices(one, 1, [&] {
      *v = one[0];
      emit();
    });
    *v = orig;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<Instance>> instantiate(const GenProgram &p, const Module &m,
                                                      const std::string &kernel) {
  auto in = std::make_unique<Instance>();
  auto prog = Program::create(m);
  if (!prog.ok())
    return prog.status();
  in->program = *std::move(prog);
  if (Buffer *b = in->program->field("x")) {
    auto v = xValues(p);
    for (size_t i = 0; i < v.size() && int64_t(i) < b->numElements(); ++i)
      b->set(int64_t(i), Scalar::ofFloat(b->elementType(), v[i]));
  }
  if (Buffer *b = in->program->field("bit")) {
    auto v = bitValues(p);
    for (size_t i = 0; i < v.size() && int64_t(i) < b->numElements(); ++i)
      b->set(int64_t(i), Scalar::ofInt(b->elementType(), v[i]));
  }
  if (Buffer *b = in->program->field("cnt")) {
    auto v = cntValues(p);
    for (size_t i = 0; i < v.size() && int64_t(i) < b->numElements(); ++i)
      b->set(int64_t(i), Scalar::ofInt(b->elementType(), v[i]));
  }
  const Kernel *k = m.findKernel(kernel);
  if (!k)
    return absl::NotFoundError("no kernel @" + kernel);
  for (unsigned i = 0; i < k->numArguments(); ++i) {
    const Argument *a = k->argument(i);
    const std::string &name = a->name();
    ScalarType t = a->type().element();
    if (!a->isNdarray()) {
      if (name == "n")
        in->args.push_back(LaunchArg::scalar(Scalar::ofInt(t, nValue(p))));
      else if (name == "s")
        in->args.push_back(LaunchArg::scalar(Scalar::ofFloat(t, sValue(p))));
      else
        return absl::InvalidArgumentError("unknown scalar argument %" + name);
      continue;
    }
    std::vector<int64_t> shape;
    std::vector<double> values;
    if (name == "a") {
      shape = aShape(p);
      for (int64_t v : aValues(p))
        values.push_back(double(v));
    } else if (name == "m") {
      shape = mShape(p);
      for (int64_t v : mValues(p))
        values.push_back(double(v));
    } else if (name == "u") {
      shape = uShape(p);
      values = uValues(p);
    } else if (name == "w") {
      shape = wShape(p);
    } else {
      return absl::InvalidArgumentError("unknown ndarray argument %" + name);
    }
    auto nd = std::make_unique<NdarrayArg>();
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      if (c != Component::Primal && !a->hasComponent(c))
        continue;
      auto b = Buffer::create(t, shape);
      if (!b.ok())
        return b.status();
      auto buf = std::make_unique<Buffer>(*std::move(b));
      if (c == Component::Primal)
        for (size_t j = 0; j < values.size(); ++j)
          buf->set(int64_t(j), isFloat(t) ? Scalar::ofFloat(t, values[j])
                                          : Scalar::ofInt(t, int64_t(values[j])));
      (c == Component::Primal ? nd->primal
       : c == Component::Grad ? nd->grad
                              : nd->dual) = buf.get();
      in->buffers.push_back(std::move(buf));
    }
    in->args.push_back(LaunchArg::ndarray(nd.get()));
    in->byName["%" + name] = nd.get();
    in->ndarrays.push_back(std::move(nd));
  }
  return in;
}

void seedOutputAdjoints(const Module &m, Instance &in) {
  if (Buffer *b = in.program->field("y", Component::Grad))
    b->set(0, Scalar::ofFloat(b->elementType(), 1.0));
  for (int l = 0; l < 3; ++l)
    if (Buffer *b = in.program->field(fmt::format("z{}", l), Component::Grad))
      for (int64_t i = 0; i < b->numElements(); ++i)
        b->set(i, Scalar::ofFloat(b->elementType(), 0.5 + l - 0.25 * double(i)));
  if (auto it = in.byName.find("%w"); it != in.byName.end() && it->second->grad)
    for (int64_t i = 0; i < it->second->grad->numElements(); ++i)
      it->second->grad->set(
          i, Scalar::ofFloat(it->second->grad->elementType(), 0.75 - 0.5 * double(i)));
}

void seedInputTangents(const Module &m, Instance &in) {
  if (Buffer *b = in.program->field("x", Component::Dual))
    for (int64_t i = 0; i < b->numElements(); ++i)
      b->set(i, Scalar::ofFloat(b->elementType(), 1.0 - 0.375 * double(i)));
  if (auto it = in.byName.find("%u"); it != in.byName.end() && it->second->dual)
    for (int64_t i = 0; i < it->second->dual->numElements(); ++i)
      it->second->dual->set(
          i, Scalar::ofFloat(it->second->dual->elementType(), 0.5 + 0.25 * double(i)));
}

bool sameScalar(const Scalar &a, const Scalar &b, double rtol) {
  if (a.type != b.type)
    return false;
  if (!a.isFloat())
    return a.i == b.i;
  if (std::isnan(a.f) || std::isnan(b.f))
    return std::isnan(a.f) && std::isnan(b.f);
  if (rtol == 0)
    return a.f == b.f && std::signbit(a.f) == std::signbit(b.f);
  if (std::isinf(a.f) || std::isinf(b.f))
    return a.f == b.f;
  return std::fabs(a.f - b.f) <= rtol * std::max({std::fabs(a.f), std::fabs(b.f), 1.0});
}

std::string compareBuffers(const std::string &what, const Buffer &a, const Buffer &b, double rtol,
                           std::string_view aName, std::string_view bName) {
  if (a.shape() != b.shape() || a.elementType() != b.elementType())
    return what + ": shapes or types differ";
  for (int64_t i = 0; i < a.numElements(); ++i)
    if (!sameScalar(a.get(i), b.get(i), rtol))
      return fmt::format("{}[{}]: {}{} vs {}{}", what, i, aName, a.get(i).str(), bName,
                         b.get(i).str());
  return {};
}

namespace {

/// f32 sums in another order differ by more than f64 ones.
double tolerance(const Buffer &b, double rtol) {
  return rtol > 0 && b.elementType() == ScalarType::F32 ? std::max(rtol, 1e-5) : rtol;
}

} // namespace

std::string compareInstances(const Module &ma, Instance &a, const Module &mb, Instance &b,
                             double rtol, bool primalOnly) {
  for (const auto &f : ma.fields()) {
    if (!mb.findField(f->name()))
      continue;
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      Buffer *x = a.program->field(f->name(), c), *y = b.program->field(f->name(), c);
      if (!x || !y || (primalOnly && c != Component::Primal))
        continue;
      std::string suffix = c == Component::Primal ? "" : "." + std::string(qd::toString(c));
      if (std::string d = compareBuffers("@" + f->name() + suffix, *x, *y, tolerance(*x, rtol));
          !d.empty())
        return d;
    }
  }
  for (auto &[name, nd] : a.byName) {
    auto it = b.byName.find(name);
    if (it == b.byName.end())
      continue;
    for (Component c : {Component::Primal, Component::Grad, Component::Dual}) {
      Buffer *x = nd->component(c), *y = it->second->component(c);
      if (!x || !y || (primalOnly && c != Component::Primal))
        continue;
      std::string suffix = c == Component::Primal ? "" : "." + std::string(qd::toString(c));
      if (std::string d = compareBuffers(name + suffix, *x, *y, tolerance(*x, rtol)); !d.empty())
        return d;
    }
  }
  return {};
}

LaunchOptions defaultLaunchOptions() {
  LaunchOptions o;
  o.boundsChecked = true;
  o.defaultAdStackCapacity = int64_t(1) << 16;
  return o;
}

std::string runAgainstInterpreter(const GenProgram &p, Module &m, bool withGrad, Backend &backend,
                                  double rtol, const LaunchOptions &options) {
  auto ref = instantiate(p, m), out = instantiate(p, m);
  if (!ref.ok() || !out.ok())
    return "instantiate: " + std::string((ref.ok() ? out.status() : ref.status()).message());
  Interpreter interp;
  std::vector<std::string> kernels{"k"};
  if (withGrad)
    kernels.push_back("k_grad");
  for (const std::string &k : kernels) {
    absl::Status a = (*ref)->program->launch(k, (*ref)->args, interp, options);
    absl::Status b = (*out)->program->launch(k, (*out)->args, backend, options);
    if (!a.ok() || !b.ok())
      return fmt::format("@{}: interp: {}; {}: {}", k, a.ToString(), backend.name(), b.ToString());
    if (k == "k") {
      seedOutputAdjoints(m, **ref);
      seedOutputAdjoints(m, **out);
    }
    if (std::string d = compareInstances(m, **ref, m, **out, rtol); !d.empty())
      return fmt::format("after @{} (interp vs {}): {}", k, backend.name(), d);
  }
  return {};
}

std::string checkOptimisticLaunch(const GenProgram &p, const Module &module,
                                  const std::string &kernel, Backend &counting, Backend &optimistic,
                                  double rtol, int64_t *reruns) {
  const KernelSizing &ks = **optimistic.adStackSizing(*module.findKernel(kernel));
  if (const OptimisticLaunch *o = ks.optimistic())
    for (const Kernel *v : {o->tryKernel.get(), o->rerunKernel.get()})
      if (absl::Status st = verify(*v); !st.ok())
        return fmt::format("@{} does not verify: {}\n{}", v->name(), std::string(st.message()),
                           printKernel(*v));
  auto counted = instantiate(p, module), tried = instantiate(p, module);
  if (!counted.ok() || !tried.ok())
    return "instantiate: " + std::string((counted.ok() ? tried : counted).status().message());
  LaunchOptions count = defaultLaunchOptions(), guess = count;
  count.optimisticAdStacks = false;
  guess.optimisticAdStacks = true;
  guess.optimisticInitialCapacity = 1;
  if (kernel != "k") {
    for (auto [in, backend] : {std::pair{counted->get(), &counting}, {tried->get(), &optimistic}}) {
      if (absl::Status st = in->program->launch("k", in->args, *backend, count); !st.ok())
        return "@k failed: " + st.ToString();
      seedOutputAdjoints(module, *in);
    }
  }
  for (int launch = 0; launch < 2; ++launch) {
    Program &a = *(*counted)->program, &b = *(*tried)->program;
    absl::Status sa = a.launch(kernel, (*counted)->args, counting, count);
    absl::Status sb = b.launch(kernel, (*tried)->args, optimistic, guess);
    if (sa.ok() != sb.ok() || (!sa.ok() && sa.code() != sb.code()))
      return fmt::format("@{} launch {}: counted: {}; optimistic: {}", kernel, launch,
                         sa.ToString(), sb.ToString());
    if (!sa.ok())
      return {};
    using Path = Program::MeasuredLaunch::Path;
    if (ks.numCounted() > 0 &&
        b.lastMeasuredLaunch().path != (ks.optimistic() ? Path::Optimistic : Path::Counted))
      return fmt::format("@{} launch {} took the wrong path", kernel, launch);
    *reruns += b.lastMeasuredLaunch().rerunIterations;
    // A refined stack is counted only with others (else its bound is its
    // capacity, which the need it measured optimistically cannot exceed).
    bool aCounted = a.lastMeasuredLaunch().path == Path::Counted;
    for (const AdStackSize &s : ks.stacks()) {
      if (!s.measuredAtLaunch())
        continue;
      int64_t ca = a.lastAdStackCapacities().at(s.stack),
              cb = b.lastAdStackCapacities().at(s.stack);
      if (s.refined && !aCounted ? cb > ca : ca != cb)
        return fmt::format("@{} launch {}: the optimistic launch measured {}, the counting "
                           "launch gave {}: {}",
                           kernel, launch, cb, ca, ks.describe(s));
    }
    if (std::string d = compareInstances(module, **counted, module, **tried, rtol); !d.empty())
      return fmt::format("@{} launch {} (counted on {}, optimistic on {}): {}", kernel, launch,
                         counting.name(), optimistic.name(), d);
  }
  return {};
}

//===----------------------------------------------------------------------===//
// Properties
//===----------------------------------------------------------------------===//

int caseCount(int fallback) {
  const char *params = std::getenv("RC_PARAMS");
  if (params && std::string(params).find("max_success") != std::string::npos)
    return rc::detail::configuration().testParams.maxSuccess;
  return fallback;
}

void checkProperty(void (*property)(), int defaultCases) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = caseCount(defaultCases);
  const auto result =
      rc::detail::checkTestable(property, metadata, params, rc::detail::globalTestListener(),
                                rc::detail::configuration().reproduce);
  std::ostringstream ss;
  rc::detail::printResultMessage(result, ss);
  if (result.template is<rc::detail::SuccessResult>()) {
    std::cout << ss.str() << std::endl;
  } else {
    FAIL() << ss.str() << std::endl;
  }
}

void reportCounterexample(const GenProgram &p, const std::string &what) {
  const char *dir = std::getenv("QD_COUNTEREXAMPLE_DIR");
  if (!dir || !*dir)
    return;
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "property";
  std::filesystem::create_directories(dir);
  std::ofstream out(std::filesystem::path(dir) / (name + ".qd"));
  std::istringstream lines(what);
  out << "// Counterexample of " << name << " (generator config " << p.config.name << "):\n";
  for (std::string l; std::getline(lines, l);)
    out << "//   " << l << "\n";
  out << "// RUN: qd-run %s --kernel=k" << qdRunInputs(p) << "\n\n" << print(p).text;
}

void fail(const GenProgram &p, const std::string &what) {
  reportCounterexample(p, what);
  std::ostringstream os;
  showValue(p, os);
  RC_FAIL(what + "\n" + os.str());
}

std::string nestedLoopsKernel(int depth) {
  std::string s = "field @x : f32[64] grad\nfield @y : f32[64] grad\nfield @m : i32\n"
                  "kernel @k() {\n  parallel for %i = 0 to 64 {\n    %v = load @x[%i] : f32\n"
                  "    %m = load @m[] : i32\n    %a = alloca f32\n    store %a, %v\n";
  for (int d = 0; d < depth; ++d)
    s += fmt::format("for %j{0} = 0 to %m {{\n%l{0} = load %a : f32\n%s{0} = sin %l{0} : f32\n"
                     "store %a, %s{0}\n",
                     d);
  s += std::string(depth, '}');
  return s + "\n    %r = load %a : f32\n    store @y[%i], %r\n  }\n}\n";
}

} // namespace qd::testgen
