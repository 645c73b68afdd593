//===- Lexer.cpp - Tokens of the text format ------------------------------===//
#include "Lexer.h"

#include <fmt/format.h>

namespace qd::parse {
namespace {

bool isIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.';
}
bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

} // namespace

std::string quoteToken(std::string_view prefix, std::string_view text) {
  constexpr size_t kShown = 40;
  if (prefix.size() + text.size() <= kShown + 8)
    return fmt::format("'{}{}'", prefix, text);
  return fmt::format("'{}{}...' (a token of {} bytes)", prefix, text.substr(0, kShown),
                     prefix.size() + text.size());
}

std::string_view describe(Tok t) {
  switch (t) {
  case Tok::Eof:
    return "end of input";
  case Tok::Ident:
    return "identifier";
  case Tok::Local:
    return "'%' value";
  case Tok::Global:
    return "'@' name";
  case Tok::Number:
    return "number";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::LBracket:
    return "'['";
  case Tok::RBracket:
    return "']'";
  case Tok::Comma:
    return "','";
  case Tok::Colon:
    return "':'";
  case Tok::Equal:
    return "'='";
  case Tok::Less:
    return "'<'";
  case Tok::Greater:
    return "'>'";
  case Tok::Error:
    return "invalid character";
  case Tok::TooLong:
    return "token";
  }
  return "token";
}

Token Lexer::next() {
  Token t = scan();
  if (t.text.size() <= kMaxTokenBytes)
    return t;
  if (t.kind == Tok::Local || t.kind == Tok::Global) // with its sigil
    t.text = std::string_view(t.text.data() - 1, t.text.size() + 1);
  else if (t.kind != Tok::Ident && t.kind != Tok::Number)
    return t;
  t.kind = Tok::TooLong;
  return t;
}

Token Lexer::scan() {
  skipSpaceAndComments();
  Token t;
  t.line = line_;
  t.col = col_;
  if (pos_ >= text_.size()) {
    t.kind = Tok::Eof;
    return t;
  }
  char c = text_[pos_];
  size_t start = pos_;
  auto single = [&](Tok k) {
    advance();
    t.kind = k;
    t.text = text_.substr(start, 1);
    return t;
  };
  switch (c) {
  case '{':
    return single(Tok::LBrace);
  case '}':
    return single(Tok::RBrace);
  case '(':
    return single(Tok::LParen);
  case ')':
    return single(Tok::RParen);
  case '[':
    return single(Tok::LBracket);
  case ']':
    return single(Tok::RBracket);
  case ',':
    return single(Tok::Comma);
  case ':':
    return single(Tok::Colon);
  case '=':
    return single(Tok::Equal);
  case '<':
    return single(Tok::Less);
  case '>':
    return single(Tok::Greater);
  case '%':
  case '@': {
    advance();
    size_t nameStart = pos_;
    while (pos_ < text_.size() && isIdentChar(text_[pos_]))
      advance();
    t.kind = c == '%' ? Tok::Local : Tok::Global;
    t.text = text_.substr(nameStart, pos_ - nameStart);
    if (t.text.empty())
      t.kind = Tok::Error, t.text = text_.substr(start, 1);
    return t;
  }
  default:
    break;
  }
  if (isDigit(c) || c == '-' || c == '+') {
    advance();
    // Exponent signs are part of the number: 1e-5.
    while (pos_ < text_.size() &&
           (isIdentChar(text_[pos_]) || ((text_[pos_] == '-' || text_[pos_] == '+') &&
                                         (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E'))))
      advance();
    t.kind = Tok::Number;
    t.text = text_.substr(start, pos_ - start);
    return t;
  }
  if (isIdentChar(c)) {
    while (pos_ < text_.size() && isIdentChar(text_[pos_]))
      advance();
    t.text = text_.substr(start, pos_ - start);
    t.kind = (t.text == "inf" || t.text == "nan") ? Tok::Number : Tok::Ident;
    return t;
  }
  advance();
  t.kind = Tok::Error;
  t.text = text_.substr(start, 1);
  return t;
}

void Lexer::advance() {
  if (text_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else if (col_ != UINT32_MAX) { // a line past 4 GiB: the column saturates
    ++col_;
  }
  ++pos_;
}
void Lexer::skipSpaceAndComments() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance();
    } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
      while (pos_ < text_.size() && text_[pos_] != '\n')
        advance();
    } else {
      break;
    }
  }
}

} // namespace qd::parse
