#include "models/chat/jinja_lexer.h"

#include <array>
#include <optional>
#include <utility>

#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

// The source being preprocessed, each byte with the line of the original source it came from,
// so that errors name the line the author sees although trim_blocks removes newlines.
struct Source {
  std::string text;
  std::vector<int> lines;

  void append(const Source& from, std::size_t at, std::size_t count = 1) {
    text.append(from.text, at, count);
    lines.insert(lines.end(), from.lines.begin() + static_cast<std::ptrdiff_t>(at),
                 from.lines.begin() + static_cast<std::ptrdiff_t>(at + count));
  }
  void truncate(std::size_t size) {
    text.resize(size);
    lines.resize(size);
  }
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_word(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Whether a line terminator (\n, \r, U+2028, U+2029) ends just before `end`.
bool ends_line(std::string_view text, std::size_t end) {
  if (end == 0) return false;
  const char c = text[end - 1];
  if (c == '\n' || c == '\r') return true;
  return end >= 3 && text.substr(end - 3, 2) == "\xE2\x80" &&
         (text[end - 1] == '\xA8' || text[end - 1] == '\xA9');
}

// lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1": blanks before a block at a line's start go.
Source strip_block_indent(const Source& in) {
  Source out;
  for (std::size_t at = 0; at < in.text.size();) {
    if (at == 0 || ends_line(in.text, at)) {
      std::size_t end = at;
      while (end < in.text.size() && (in.text[end] == ' ' || in.text[end] == '\t'))
        ++end;
      const bool block =
          end + 1 < in.text.size() && in.text[end] == '{' &&
          (in.text[end + 1] == '#' || in.text[end + 1] == '%' || in.text[end + 1] == '-');
      if (block) at = end;
    }
    out.append(in, at++);
  }
  return out;
}

// trim_blocks: /([#%-]})\n/g -> "$1": the newline after a block goes.
Source trim_block_newline(const Source& in) {
  Source out;
  const std::string& t = in.text;
  for (std::size_t at = 0; at < t.size();) {
    const bool closes = at + 2 < t.size() && (t[at] == '#' || t[at] == '%' || t[at] == '-') &&
                        t[at + 1] == '}' && t[at + 2] == '\n';
    if (closes) {
      out.append(in, at, 2);
      at += 3;
    } else {
      out.append(in, at++);
    }
  }
  return out;
}

std::size_t skip_space(std::string_view text, std::size_t at) {
  return at + leading_space_bytes(text.substr(at));
}

// A `{% generation %}` or `{% endgeneration %}` tag at `at`: where it ends and its two hyphens.
struct GenerationTag {
  std::size_t end;
  bool strip_before;
  bool strip_after;
};
std::optional<GenerationTag> generation_tag(std::string_view t, std::size_t at) {
  if (t.substr(at, 2) != "{%") return std::nullopt;
  std::size_t i = at + 2;
  const bool strip_before = i < t.size() && t[i] == '-';
  i = skip_space(t, i + (strip_before ? 1 : 0));
  if (t.substr(i, 3) == "end" && t.substr(i + 3, 10) == "generation") i += 3;
  if (t.substr(i, 10) != "generation") return std::nullopt;
  i = skip_space(t, i + 10);
  const bool strip_after = i < t.size() && t[i] == '-';
  if (strip_after) ++i;
  if (t.substr(i, 2) != "%}") return std::nullopt;
  return GenerationTag{i + 2, strip_before, strip_after};
}

// transformers' generation tags mark the assistant's text; rendering keeps only their body:
// /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs, each hyphen dropping the white space on its
// side.
Source drop_generation_tags(const Source& in) {
  Source out;
  std::size_t last_end = 0;  // in `out`: white space before a tag starts after the last tag
  for (std::size_t at = 0; at < in.text.size();) {
    const auto tag = generation_tag(in.text, at);
    if (!tag) {
      out.append(in, at++);
      continue;
    }
    if (tag->strip_before) {
      const std::string_view since = std::string_view(out.text).substr(last_end);
      out.truncate(out.text.size() - trailing_space_bytes(since));
    }
    const std::size_t after = skip_space(in.text, tag->end);
    if (!tag->strip_after) out.append(in, tag->end, after - tag->end);
    at = after;
    last_end = out.text.size();
  }
  return out;
}

Source preprocess(std::string_view source) {
  Source in;
  in.text = std::string(source);
  int line = 1;
  for (const char c : source) {
    in.lines.push_back(line);
    if (c == '\n') ++line;
  }
  if (!in.text.empty() && in.text.back() == '\n') in.truncate(in.text.size() - 1);
  return drop_generation_tags(trim_block_newline(strip_block_indent(in)));
}

constexpr std::array<std::pair<std::string_view, TokenType>, 29> kSymbols{{
    {"{%", TokenType::open_statement},
    {"%}", TokenType::close_statement},
    {"{{", TokenType::open_expression},
    {"}}", TokenType::close_expression},
    {"(", TokenType::open_paren},
    {")", TokenType::close_paren},
    {"{", TokenType::open_curly_bracket},
    {"}", TokenType::close_curly_bracket},
    {"[", TokenType::open_square_bracket},
    {"]", TokenType::close_square_bracket},
    {",", TokenType::comma},
    {".", TokenType::dot},
    {":", TokenType::colon},
    {"|", TokenType::pipe},
    {"<=", TokenType::comparison_operator},
    {">=", TokenType::comparison_operator},
    {"==", TokenType::comparison_operator},
    {"!=", TokenType::comparison_operator},
    {"<", TokenType::comparison_operator},
    {">", TokenType::comparison_operator},
    {"+", TokenType::additive_operator},
    {"-", TokenType::additive_operator},
    {"~", TokenType::additive_operator},
    {"**", TokenType::exponentiation_operator},
    {"*", TokenType::multiplicative_operator},
    {"//", TokenType::multiplicative_operator},
    {"/", TokenType::multiplicative_operator},
    {"%", TokenType::multiplicative_operator},
    {"=", TokenType::equals},
}};

class Lexer {
 public:
  explicit Lexer(Source source) : src_(std::move(source)) {}

  std::vector<Token> run();

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw LexError{message, line_at(pos_)};
  }
  int line_at(std::size_t at) const {
    if (src_.lines.empty()) return 1;
    return src_.lines[std::min(at, src_.lines.size() - 1)];
  }
  char at(std::size_t i) const { return i < src_.text.size() ? src_.text[i] : '\0'; }
  bool starts(std::string_view what) const {
    return std::string_view(src_.text).substr(pos_, what.size()) == what;
  }
  void push(TokenType type, std::string value, std::size_t start) {
    tokens_.push_back(Token{type, std::move(value), line_at(start)});
  }
  std::optional<TokenType> last_type() const {
    if (tokens_.empty()) return std::nullopt;
    return tokens_.back().type;
  }

  bool lex_text();
  void lex_comment();
  void strip_trailing_space();
  void skip_blanks();
  bool lex_unary();
  bool lex_symbol();
  void lex_string();
  std::string digits();
  void append_escape(std::string& out, char32_t& pending_high);

  Source src_;
  std::size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

std::vector<Token> Lexer::run() {
  while (pos_ < src_.text.size()) {
    const auto last = last_type();
    const bool after_tag = !last || *last == TokenType::close_statement ||
                           *last == TokenType::close_expression || *last == TokenType::comment;
    if (after_tag && lex_text()) continue;
    if (starts("{#")) {
      lex_comment();
      continue;
    }
    if (starts("{%-") || starts("{{-")) {
      strip_trailing_space();
      const bool statement = starts("{%-");
      push(statement ? TokenType::open_statement : TokenType::open_expression,
           statement ? "{%" : "{{", pos_);
      if (!statement) curly_depth_ = 0;
      pos_ += 3;
      continue;
    }
    skip_blanks();
    if (starts("-%}") || starts("-}}")) {
      const bool statement = starts("-%}");
      push(statement ? TokenType::close_statement : TokenType::close_expression,
           statement ? "%}" : "}}", pos_);
      pos_ = skip_space(src_.text, pos_ + 3);
      continue;
    }
    if (lex_unary() || lex_symbol()) continue;
    const char c = at(pos_);
    if (c == '\'' || c == '"') {
      lex_string();
    } else if (is_digit(c)) {
      const std::size_t start = pos_;
      std::string number = digits();
      const bool fraction =
          last_type() != TokenType::dot && at(pos_) == '.' && is_digit(at(pos_ + 1));
      if (fraction) {
        ++pos_;
        number.push_back('.');  // see lex_unary
        number += digits();
      }
      push(TokenType::numeric_literal, std::move(number), start);
    } else if (is_word(c)) {
      const std::size_t start = pos_;
      while (is_word(at(pos_)))
        ++pos_;
      push(TokenType::identifier, src_.text.substr(start, pos_ - start), start);
    } else {
      std::size_t end = pos_;
      decode_utf8(src_.text, end);
      fail("Unexpected character: " + src_.text.substr(pos_, end - pos_));
    }
  }
  return std::move(tokens_);
}

bool Lexer::lex_text() {
  const std::size_t start = pos_;
  while (pos_ < src_.text.size()) {
    const char next = at(pos_ + 1);
    if (at(pos_) == '{' && (next == '%' || next == '{' || next == '#')) break;
    ++pos_;
  }
  if (pos_ == start) return false;
  push(TokenType::text, src_.text.substr(start, pos_ - start), start);
  return true;
}

void Lexer::lex_comment() {
  const std::size_t start = pos_;
  pos_ += 2;
  const bool strip_before = at(pos_) == '-';
  if (strip_before) ++pos_;
  std::string comment;
  while (at(pos_) != '#' || at(pos_ + 1) != '}') {
    if (pos_ + 2 >= src_.text.size()) fail("Missing end of comment tag");
    comment += src_.text[pos_++];
  }
  const bool strip_after = !comment.empty() && comment.back() == '-';
  if (strip_before) strip_trailing_space();
  push(TokenType::comment, std::move(comment), start);
  pos_ += 2;
  if (strip_after) pos_ = skip_space(src_.text, pos_);
}

void Lexer::strip_trailing_space() {
  if (tokens_.empty() || tokens_.back().type != TokenType::text) return;
  std::string& text = tokens_.back().value;
  text.resize(text.size() - trailing_space_bytes(text));
  if (text.empty()) tokens_.pop_back();
}

void Lexer::skip_blanks() {
  const std::size_t end = skip_space(src_.text, pos_);
  // The reference's consumeWhile refuses a run that reaches the end of the source.
  if (end > pos_ && end >= src_.text.size()) fail("Unexpected end of input");
  pos_ = end;
}

std::string Lexer::digits() {
  const std::size_t start = pos_;
  while (is_digit(at(pos_)))
    ++pos_;
  if (pos_ > start && pos_ >= src_.text.size()) fail("Unexpected end of input");
  return src_.text.substr(start, pos_ - start);
}

// A sign after an operator or an opening bracket is unary: "-1" is one numeric literal.
bool Lexer::lex_unary() {
  const char c = at(pos_);
  if (c != '-' && c != '+') return false;
  const auto last = last_type();
  if (!last || *last == TokenType::text) fail(std::string("Unexpected character: ") + c);
  switch (*last) {
    case TokenType::identifier:
    case TokenType::numeric_literal:
    case TokenType::string_literal:
    case TokenType::close_paren:
    case TokenType::close_square_bracket:
      return false;
    default:
      break;
  }
  const std::size_t start = pos_++;
  std::string number = digits();
  if (!number.empty() && at(pos_) == '.' && is_digit(at(pos_ + 1))) {
    ++pos_;
    number.push_back('.');  // not "." + digits(): GCC 12 -O3 warns (-Wrestrict) on that insert
    number += digits();
  }
  const TokenType type = number.empty() ? TokenType::unary_operator : TokenType::numeric_literal;
  push(type, std::string(1, c) + number, start);
  return true;
}

bool Lexer::lex_symbol() {
  for (const auto& [symbol, type] : kSymbols) {
    if ((symbol == "}}" && curly_depth_ > 0) || !starts(symbol)) continue;
    push(type, std::string(symbol), pos_);
    if (type == TokenType::open_expression) curly_depth_ = 0;
    if (type == TokenType::open_curly_bracket) ++curly_depth_;
    if (type == TokenType::close_curly_bracket) --curly_depth_;
    pos_ += symbol.size();
    return true;
  }
  return false;
}

void Lexer::lex_string() {
  const std::size_t start = pos_;
  const char quote = src_.text[pos_++];
  std::string value;
  char32_t pending_high = 0;  // a \uD8xx waiting for the \uDCxx that completes it
  while (pos_ < src_.text.size() && src_.text[pos_] != quote) {
    if (src_.text[pos_] == '\\') {
      append_escape(value, pending_high);
      continue;
    }
    if (pending_high != 0) append_utf8(value, 0xFFFD);
    pending_high = 0;
    value += src_.text[pos_++];
    if (pos_ >= src_.text.size()) fail("Unexpected end of input");
  }
  if (pending_high != 0) append_utf8(value, 0xFFFD);
  if (pos_ >= src_.text.size()) fail("Unexpected end of input");
  ++pos_;
  push(TokenType::string_literal, std::move(value), start);
}

void Lexer::append_escape(std::string& out, char32_t& pending_high) {
  if (++pos_ >= src_.text.size()) fail("Unexpected end of input");
  const char escaped = src_.text[pos_++];
  if (escaped == 'x' || escaped == 'u') {
    const std::size_t length = escaped == 'x' ? 2 : 4;
    const std::string hex = src_.text.substr(pos_, length);
    const bool valid = hex.size() == length &&
                       hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
    if (!valid) fail(std::string("Invalid hexadecimal escape sequence: \\") + escaped + hex);
    pos_ += length;
    const auto unit = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
    if (unit >= 0xDC00 && unit <= 0xDFFF && pending_high != 0) {
      append_utf8(out, 0x10000 + ((pending_high - 0xD800) << 10) + (unit - 0xDC00));
      pending_high = 0;
      return;
    }
    if (pending_high != 0) append_utf8(out, 0xFFFD);
    pending_high = 0;
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      pending_high = unit;
    } else {
      append_utf8(out, unit >= 0xDC00 && unit <= 0xDFFF ? 0xFFFD : unit);
    }
    return;
  }
  static constexpr std::array<std::pair<char, char>, 9> kEscapes{{{'n', '\n'},
                                                                  {'t', '\t'},
                                                                  {'r', '\r'},
                                                                  {'b', '\b'},
                                                                  {'f', '\f'},
                                                                  {'v', '\v'},
                                                                  {'\'', '\''},
                                                                  {'"', '"'},
                                                                  {'\\', '\\'}}};
  for (const auto& [name, character] : kEscapes) {
    if (name == escaped) {
      if (pending_high != 0) append_utf8(out, 0xFFFD);
      pending_high = 0;
      out += character;
      return;
    }
  }
  fail(std::string("Unexpected escaped character: ") + escaped);
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(preprocess(source)).run();
}

}  // namespace strata::models::chat::jinja
