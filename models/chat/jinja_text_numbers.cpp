// Numbers as JavaScript writes and reads them, JSON.stringify's quoting and replaceAll: the rest of
// jinja_text.h.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::size_t count_digits(std::string_view text, std::size_t at) {
  std::size_t end = at;
  while (end < text.size() && is_digit(text[end]))
    ++end;
  return end - at;
}

// The length of the longest prefix of `text` that is a StrUnsignedDecimalLiteral without its
// "Infinity" form: digits [. digits] [e [+-] digits], or . digits [e ...]; 0 when none.
std::size_t decimal_prefix(std::string_view text) {
  const std::size_t whole = count_digits(text, 0);
  std::size_t at = whole;
  std::size_t fraction = 0;
  if (at < text.size() && text[at] == '.') {
    fraction = count_digits(text, at + 1);
    if (whole > 0 || fraction > 0) at += 1 + fraction;
  }
  if (whole == 0 && fraction == 0) return 0;
  if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
    std::size_t exponent = at + 1;
    if (exponent < text.size() && (text[exponent] == '+' || text[exponent] == '-')) ++exponent;
    const std::size_t digits = count_digits(text, exponent);
    if (digits > 0) at = exponent + digits;
  }
  return at;
}

double parse_decimal(std::string_view digits) {
  return std::strtod(std::string(digits).c_str(), nullptr);
}

// A sign, then "Infinity" or a decimal literal: the number and the bytes read (0: none).
std::pair<double, std::size_t> signed_decimal(std::string_view text) {
  std::size_t at = 0;
  double sign = 1;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    sign = text[0] == '-' ? -1 : 1;
    at = 1;
  }
  const std::string_view rest = text.substr(at);
  if (rest.substr(0, 8) == "Infinity") return {sign * HUGE_VAL, at + 8};
  const std::size_t length = decimal_prefix(rest);
  if (length == 0) return {0, 0};
  return {sign * parse_decimal(rest.substr(0, length)), at + length};
}

std::optional<double> radix_integer(std::string_view digits, int radix) {
  if (digits.empty()) return std::nullopt;
  double value = 0;
  for (const char c : digits) {
    int digit = 0;
    if (is_digit(c)) {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'z') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'Z') {
      digit = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    if (digit >= radix) return std::nullopt;
    value = value * radix + digit;
  }
  return value;
}

void append_hex4(std::string& out, unsigned unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4)
    out += kHex[(unit >> shift) & 0xF];
}

}  // namespace

std::string js_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0) return "0";
  // The shortest digits that read back as `value`, then ECMAScript's Number::toString layout.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, std::fabs(value),
                                    std::chars_format::scientific);
  const std::string_view scientific(buffer, static_cast<std::size_t>(result.ptr - buffer));
  const std::size_t e = scientific.find('e');
  std::string digits(scientific.substr(0, e));
  if (digits.size() > 1) digits.erase(1, 1);  // "d.ddd" -> "dddd"
  const int exponent = std::atoi(std::string(scientific.substr(e + 1)).c_str());
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;
  std::string out = value < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<std::size_t>(n)) + "." +
           digits.substr(static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) {
      out.push_back('.');  // appended apart: GCC 12 -O3 warns (-Wrestrict) on "." + std::string
      out.append(digits, 1);
    }
    out += (n - 1 >= 0 ? "e+" : "e-") + std::to_string(std::abs(n - 1));
  }
  return out;
}

std::string json_quote(std::string_view text, bool ensure_ascii) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t start = at;
    const char32_t c = decode_utf8(text, at);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      append_hex4(out, c);
    } else if (ensure_ascii && c >= 0x10000) {
      append_hex4(out, 0xD800 + ((c - 0x10000) >> 10));
      append_hex4(out, 0xDC00 + ((c - 0x10000) & 0x3FF));
    } else if (ensure_ascii && c >= 0x7F) {
      append_hex4(out, c);
    } else {
      out.append(text.substr(start, at - start));
    }
  }
  out += '"';
  return out;
}

double js_to_number(std::string_view text) {
  const std::string_view body = trim(text);
  if (body.empty()) return 0;
  if (body.size() > 2 && body[0] == '0') {
    const char kind = body[1];
    const int radix = (kind == 'x' || kind == 'X')   ? 16
                      : (kind == 'o' || kind == 'O') ? 8
                      : (kind == 'b' || kind == 'B') ? 2
                                                     : 0;
    if (radix != 0) return radix_integer(body.substr(2), radix).value_or(std::nan(""));
  }
  const auto [value, length] = signed_decimal(body);
  return length == body.size() ? value : std::nan("");
}

std::optional<double> js_parse_int(std::string_view text) {
  std::string_view body = trim_start(text);
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1 : 1;
    body.remove_prefix(1);
  }
  const std::size_t digits = count_digits(body, 0);
  if (digits == 0) return std::nullopt;
  return sign * parse_decimal(body.substr(0, digits));
}

std::optional<double> js_parse_float(std::string_view text) {
  const auto [value, length] = signed_decimal(trim_start(text));
  if (length == 0) return std::nullopt;
  return value;
}

std::string js_replace(std::string_view text, std::string_view old, std::string_view replacement,
                       double count) {
  if (count == 0) return std::string(text);
  double remaining = count < 0 ? HUGE_VAL : count;
  std::string out;
  if (old.empty()) {
    for (const std::string_view point : code_points(text)) {
      if (remaining-- > 0) out += replacement;
      out += point;
    }
    if (remaining > 0) out += replacement;
    return out;
  }
  std::size_t at = 0;
  while (remaining > 0) {
    const std::size_t found = text.find(old, at);
    if (found == std::string_view::npos) break;
    out.append(text.substr(at, found - at)).append(replacement);
    at = found + old.size();
    --remaining;
  }
  out.append(text.substr(at));
  return out;
}

}  // namespace strata::models::chat::jinja
