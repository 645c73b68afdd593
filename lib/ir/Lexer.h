//===- Lexer.h - Tokens of the text format ----------------------*- C++ -*-===//
//
// Private to lib/ir: the lexer of the parser (Parser.cpp, ParseStmt.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qd::parse {

enum class Tok : uint8_t {
  Eof,
  Ident,  // keywords and mnemonics: for, add, adstack.push, f32...
  Local,  // %name
  Global, // @name
  Number, // -12, 1.5e3, inf, -nan
  LBrace,
  RBrace,
  LParen,
  RParen,
  LBracket,
  RBracket,
  Comma,
  Colon,
  Equal,
  Less,
  Greater,
  Error,
  /// A name or number longer than kMaxTokenBytes (its text is all of it).
  TooLong,
};

/// The longest name or number the text format accepts: every diagnostic
/// that names a value, field or kernel stays short.
inline constexpr size_t kMaxTokenBytes = 256;

/// `text` quoted for a diagnostic: whole when short, else its first bytes,
/// an ellipsis and its length ('abc...' (a token of 2147483648 bytes)).
std::string quoteToken(std::string_view prefix, std::string_view text);

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text; // for Local/Global without the sigil
  uint32_t line = 0;
  uint32_t col = 0;
};

std::string_view describe(Tok t);

class Lexer {
public:
  Lexer(std::string_view text, unsigned firstLine) : text_(text), line_(firstLine) {}

  Token next();

private:
  Token scan();
  void advance();
  void skipSpaceAndComments();

  std::string_view text_;
  size_t pos_ = 0;
  uint32_t line_;
  uint32_t col_ = 1;
};

} // namespace qd::parse
