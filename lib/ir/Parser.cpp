//===- Parser.cpp - Reading the text format -------------------------------===//
//
// A hand-written lexer and recursive-descent parser. Every error is reported
// as `file:line:col: error: expected ...` at the offending token; the first
// error stops parsing. Uses before definitions are allowed (resolved at the
// end of the kernel) so that dominance errors reach the verifier, which words
// them better than a parser could.
//
// This file holds the module level (fields, kernels, arguments), types,
// literals and value names; ParseStmt.cpp holds blocks and statements,
// Lexer.cpp the tokens, ParserImpl.h the class they share.
//
//===----------------------------------------------------------------------===//
#include "ParserImpl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace qd {
namespace parse {

absl::StatusOr<std::unique_ptr<Module>> Parser::run() {
  auto module = std::make_unique<Module>();
  if (!parseModule(*module))
    return absl::InvalidArgumentError(error_);
  return module;
}

bool Parser::fail(const Token &at, std::string message) {
  if (error_.empty())
    error_ = fmt::format("{}:{}:{}: error: {}", *file_, at.line, at.col, message);
  return false;
}

std::string Parser::found() const {
  if (tok_.kind == Tok::Eof)
    return std::string(describe(tok_.kind));
  if (tok_.kind == Tok::TooLong)
    return fmt::format("{}, longer than the {} bytes a name or number may have",
                       quoteToken("", tok_.text), kMaxTokenBytes);
  std::string prefix = tok_.kind == Tok::Local ? "%" : tok_.kind == Tok::Global ? "@" : "";
  return quoteToken(prefix, tok_.text);
}

bool Parser::expect(Tok kind, std::string_view what) {
  if (tok_.kind != kind)
    return failHere(fmt::format("expected {}, found {}", what, found()));
  consume();
  return true;
}

bool Parser::expectKeyword(std::string_view kw) {
  if (!isKeyword(kw))
    return failHere(fmt::format("expected '{}', found {}", kw, found()));
  consume();
  return true;
}

bool Parser::parseInteger(int64_t &out, std::string_view what) {
  if (tok_.kind != Tok::Number)
    return failHere(fmt::format("expected {}, found {}", what, found()));
  std::string_view t = tok_.text;
  if (!t.empty() && t[0] == '+')
    t.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (ec == std::errc::result_out_of_range)
    return failHere(fmt::format("integer {} does not fit in 64 bits", quoteToken("", tok_.text)));
  if (ec != std::errc() || ptr != t.data() + t.size())
    return failHere(fmt::format("expected {}, found {}", what, found()));
  consume();
  return true;
}

bool Parser::parseScalarTypeTok(ScalarType &out) {
  std::optional<ScalarType> t;
  if (tok_.kind == Tok::Ident)
    t = parseScalarType(tok_.text);
  if (!t)
    return failHere(
        fmt::format("expected a scalar type (i1, i32, i64, f32, f64), found {}", found()));
  out = *t;
  consume();
  return true;
}

bool Parser::parseArgType(Type &out) {
  if (isKeyword("ndarray")) {
    consume();
    ScalarType elem;
    int64_t ndim;
    if (!expect(Tok::Less, "'<' after 'ndarray'") || !parseScalarTypeTok(elem) ||
        !expect(Tok::Comma, "',' between element type and rank"))
      return false;
    Token at = tok_;
    if (!parseInteger(ndim, "ndarray rank"))
      return false;
    if (ndim < 1 || ndim > 8)
      return fail(at, fmt::format("ndarray rank must be between 1 and 8, got {}", ndim));
    if (!expect(Tok::Greater, "'>' to close the ndarray type"))
      return false;
    out = Type::ndarray(elem, static_cast<unsigned>(ndim));
    return true;
  }
  ScalarType t;
  if (!parseScalarTypeTok(t))
    return false;
  out = Type::scalar(t);
  return true;
}

bool Parser::parseCompanions(bool &grad, bool &dual) {
  grad = dual = false;
  while (isKeyword("grad") || isKeyword("dual")) {
    bool &flag = tok_.text == "grad" ? grad : dual;
    if (flag)
      return failHere(fmt::format("duplicate '{}' companion", tok_.text));
    flag = true;
    consume();
  }
  return true;
}

bool Parser::parseModule(Module &m) {
  module_ = &m;
  while (tok_.kind != Tok::Eof) {
    if (isKeyword("field")) {
      if (!parseField(m))
        return false;
    } else if (isKeyword("kernel")) {
      if (!parseKernel(m))
        return false;
    } else {
      return failHere(fmt::format("expected 'field' or 'kernel', found {}", found()));
    }
  }
  return true;
}

bool Parser::parseField(Module &m) {
  Location fieldLoc = here();
  consume();
  Token nameTok = tok_;
  if (!expect(Tok::Global, "field name '@name'"))
    return false;
  if (nameTok.text.find('.') != std::string_view::npos)
    return fail(nameTok, fmt::format("field name '@{}' must not contain '.'", nameTok.text));
  if (Field *prev = m.findField(nameTok.text))
    return fail(nameTok, fmt::format("redefinition of field '@{}' (first defined at {})",
                                     nameTok.text, prev->loc().str()));
  ScalarType elem;
  if (!expect(Tok::Colon, "':' after the field name") || !parseScalarTypeTok(elem))
    return false;
  std::vector<int64_t> shape;
  if (tok_.kind == Tok::LBracket) {
    consume();
    do {
      Token at = tok_;
      int64_t d;
      if (!parseInteger(d, "field extent"))
        return false;
      if (d < 1)
        return fail(at, fmt::format("field extent must be positive, got {}", d));
      shape.push_back(d);
      if (tok_.kind != Tok::Comma)
        break;
      consume();
    } while (true);
    if (!expect(Tok::RBracket, "']' or ',' in the field shape"))
      return false;
  }
  bool grad, dual;
  if (!parseCompanions(grad, dual))
    return false;
  auto f = std::make_unique<Field>(std::string(nameTok.text), elem, std::move(shape), grad, dual);
  f->setLoc(fieldLoc);
  m.addField(std::move(f));
  return true;
}

bool Parser::parseKernel(Module &m) {
  Location kernelLoc = here();
  consume();
  Token nameTok = tok_;
  if (!expect(Tok::Global, "kernel name '@name'"))
    return false;
  if (Kernel *prev = m.findKernel(nameTok.text))
    return fail(nameTok, fmt::format("redefinition of kernel '@{}' (first defined at {})",
                                     nameTok.text, prev->loc().str()));
  auto owned = std::make_unique<Kernel>(std::string(nameTok.text));
  Kernel *k = owned.get();
  k->setLoc(kernelLoc);
  m.addKernel(std::move(owned));
  values_.clear();
  forwardRefs_.clear();

  if (!expect(Tok::LParen, "'(' to start the argument list"))
    return false;
  if (tok_.kind != Tok::RParen) {
    do {
      Token argTok = tok_;
      if (!expect(Tok::Local, "argument name '%name'"))
        return false;
      Type type;
      bool grad, dual;
      if (!expect(Tok::Colon, "':' after the argument name") || !parseArgType(type) ||
          !parseCompanions(grad, dual))
        return false;
      auto arg = std::make_unique<Argument>(std::string(argTok.text), type, grad, dual);
      arg->setLoc(loc(argTok));
      if (!define(argTok, k->addArgument(std::move(arg))))
        return false;
      if (tok_.kind != Tok::Comma)
        break;
      consume();
    } while (true);
  }
  if (!expect(Tok::RParen, "')' or ',' in the argument list"))
    return false;
  if (!parseBlock(k->body()))
    return false;
  // Report the earliest unresolved use so the message is deterministic.
  const ForwardRef *first = nullptr;
  std::string firstName;
  for (auto &[name, ref] : forwardRefs_)
    if (!first || std::pair(ref->loc.line(), ref->loc.col()) <
                      std::pair(first->loc.line(), first->loc.col())) {
      first = ref.get();
      firstName = name;
    }
  if (first)
    return fail(refToken(*first), fmt::format("use of undefined value '%{}'", firstName));
  return true;
}

Token Parser::refToken(const ForwardRef &ref) const {
  Token t;
  t.line = ref.loc.line();
  t.col = ref.loc.col();
  return t;
}

bool Parser::define(const Token &nameTok, Value *v) {
  std::string name(nameTok.text);
  auto it = values_.find(name);
  if (it != values_.end())
    return fail(nameTok, fmt::format("redefinition of '%{}' (first defined at {})", name,
                                     Location(file_, it->second.line, it->second.col).str()));
  v->setName(name);
  values_[name] = {v, nameTok.line, nameTok.col};
  auto ref = forwardRefs_.find(name);
  if (ref != forwardRefs_.end()) {
    ref->second->replaceAllUsesWith(v);
    forwardRefs_.erase(ref);
  }
  return true;
}

bool Parser::parseValue(Value *&out, std::string_view what) {
  if (tok_.kind != Tok::Local)
    return failHere(fmt::format("expected {}, found {}", what, found()));
  out = lookup(tok_);
  consume();
  return true;
}

Value *Parser::lookup(const Token &t) {
  std::string name(t.text);
  auto it = values_.find(name);
  if (it != values_.end())
    return it->second.value;
  auto &ref = forwardRefs_[name];
  if (!ref)
    ref = std::make_unique<ForwardRef>(loc(t));
  return ref.get();
}

bool Parser::parseOperands(std::vector<Value *> &out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (i && !expect(Tok::Comma, "',' between operands"))
      return false;
    Value *v;
    if (!parseValue(v, "an operand '%name'"))
      return false;
    out.push_back(v);
  }
  return true;
}

} // namespace parse

absl::StatusOr<std::string> readTextFile(const std::string &path) {
  std::error_code ec;
  std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return absl::NotFoundError(fmt::format("cannot read '{}': no such file", path));
  if (std::filesystem::is_directory(st))
    return absl::InvalidArgumentError(
        fmt::format("cannot read '{}': it is a directory; give a file", path));
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return absl::PermissionDeniedError(
        fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  // One buffer of the file's size, read into in place: no copy of the
  // text is ever made (a file of one 2 GiB line takes 2 GiB).
  std::string text;
  if (std::filesystem::is_regular_file(st)) {
    uint64_t size = std::filesystem::file_size(path, ec);
    if (!ec)
      text.reserve(size + 1); // +1: end-of-file is seen without growing
  }
  size_t got;
  do {
    if (text.size() == text.capacity())
      text.reserve(std::max<size_t>(text.capacity() * 2, 1 << 16));
    size_t used = text.size();
    text.resize(text.capacity());
    got = std::fread(text.data() + used, 1, text.size() - used, f);
    text.resize(used + got);
  } while (got > 0);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed)
    return absl::DataLossError(fmt::format("cannot read '{}': a read failed midway", path));
  return text;
}

std::vector<SourceChunk> splitSourceChunks(std::string_view text) {
  std::vector<SourceChunk> chunks(1);
  unsigned lineNo = 0;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    ++lineNo;
    if (line.starts_with("// -----")) {
      chunks.push_back({"", lineNo + 1});
      continue;
    }
    chunks.back().text.append(line).push_back('\n');
  }
  return chunks;
}

absl::StatusOr<std::unique_ptr<Module>> parseModule(std::string_view text,
                                                    const ParseOptions &options) {
  parse::Parser p(text, options);
  return p.run();
}

} // namespace qd
