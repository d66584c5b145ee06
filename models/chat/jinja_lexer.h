#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// The tokens of a chat template, cut as @huggingface/jinja's tokenize cuts them with
// lstrip_blocks and trim_blocks on (what its Template and transformers set): the same
// preprocessing of the source (a final newline dropped, blocks' leading blanks and trailing
// newline removed, `{% generation %}` tags taken out), the same whitespace control and string
// escapes.
namespace strata::models::chat::jinja {

enum class TokenType : std::uint8_t {
  text,
  numeric_literal,
  string_literal,
  identifier,
  equals,
  open_paren,
  close_paren,
  open_statement,
  close_statement,
  open_expression,
  close_expression,
  open_square_bracket,
  close_square_bracket,
  open_curly_bracket,
  close_curly_bracket,
  comma,
  dot,
  colon,
  pipe,
  additive_operator,        // + - ~
  multiplicative_operator,  // * / // %
  exponentiation_operator,  // **
  comparison_operator,      // < > <= >= == !=
  unary_operator,           // - + before an operand
  comment,
};

struct Token {
  TokenType type;
  std::string value;
  int line;  // of the original source, from 1
};

// A syntax error: its message and the line it is on. The parser makes it a UserError.
struct LexError {
  std::string message;
  int line;
};

// The tokens of `source`; throws LexError.
std::vector<Token> tokenize(std::string_view source);

}  // namespace strata::models::chat::jinja
