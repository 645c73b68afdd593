//===- ProgramGenPrint.cpp - Printing generated programs ------------------===//
//
// Prints a generated program (ProgramGen.h) as qd text: the statements of
// its task bodies on the values of ProgramGenPrinter.h, then the kernel with
// the fields and arguments its tasks use, and the qd-run inputs that
// reproduce a counterexample.
//
//===----------------------------------------------------------------------===//
#include "ProgramGenPrinter.h"

#include <fmt/format.h>

#include <ostream>

namespace qd::testgen {
namespace {

using namespace detail;

/// The statements of a generated task body (the choice slots of
/// ProgramGen.cpp's header).
class StmtPrinter : public ValuePrinter {
public:
  using ValuePrinter::ValuePrinter;

protected:
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
    // Every other loop steps its counter as `sub %c, -1`, which
    // bound-capped-loops does not recognise: reverse-ad turns the others
    // into `for` loops, and these keep the `while` paths (tapes measured at
    // launch) covered.
    std::string next = whileLoops_++ % 2 ? bin("sub", cur, constI32(-1), "i32")
                                         : bin("add", cur, constI32(1), "i32");
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
};

/// A generated program's kernel: its tasks, then the fields and arguments
/// they use.
class Printer : public StmtPrinter {
public:
  using StmtPrinter::StmtPrinter;

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

private:
  // The head of task `t` (`parallel for` or `serial`), its indices put in
  // scope; `bandRows` gets the rows of a 2-wide band (0 otherwise).
  std::string taskHead(const GenTask &t, Ch c, const std::string &suffix, int &bandRows) {
    std::string head;
    int topValue = -1; // a literal top bound
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
    return head;
  }

  // The outputs of a task: some locals are left unread after the body
  // (their adjoints then only come through loads inside loops), the integer
  // locals go to integer fields.
  void taskOutputs(Ch c, int numLocals) {
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
    int bandRows = 0; // rows of a 2-wide band
    std::string head = taskHead(t, c, suffix, bandRows);
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
    taskOutputs(c, numLocals);
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
};

} // namespace

Printed print(const GenProgram &p) {
  return Printer(p, nullptr).run();
}

namespace detail {

Usage choicesRead(const GenProgram &p) {
  Usage usage;
  Printer(p, &usage).run();
  return usage;
}

} // namespace detail

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

} // namespace qd::testgen
