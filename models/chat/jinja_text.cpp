#include "models/chat/jinja_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>

namespace strata::models::chat::jinja {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

bool is_continuation(unsigned char byte) {
  return (byte & 0xC0) == 0x80;
}

// The length of the sequence `lead` starts and the smallest code point it may encode (shorter
// forms are overlong, hence invalid).
std::pair<int, char32_t> sequence_shape(unsigned char lead) {
  if (lead < 0x80) return {1, 0};
  if ((lead & 0xE0) == 0xC0) return {2, 0x80};
  if ((lead & 0xF0) == 0xE0) return {3, 0x800};
  if ((lead & 0xF8) == 0xF0) return {4, 0x10000};
  return {0, 0};
}

bool is_word_byte(unsigned char byte) {
  return (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') ||
         (byte >= '0' && byte <= '9') || byte == '_';
}

// toUpperCase's mappings that are not one code point to one (SpecialCasing.txt, unconditional).
struct Expansion {
  char32_t from;
  std::array<char32_t, 3> to;
};
constexpr std::array<Expansion, 22> kUpperExpansions{{
    {0x00DF, {0x53, 0x53, 0}},       {0x0149, {0x2BC, 0x4E, 0}},      {0x01F0, {0x4A, 0x30C, 0}},
    {0x0390, {0x399, 0x308, 0x301}}, {0x03B0, {0x3A5, 0x308, 0x301}}, {0x0587, {0x535, 0x552, 0}},
    {0x1E96, {0x48, 0x331, 0}},      {0x1E97, {0x54, 0x308, 0}},      {0x1E98, {0x57, 0x30A, 0}},
    {0x1E99, {0x59, 0x30A, 0}},      {0x1E9A, {0x41, 0x2BE, 0}},      {0xFB00, {0x46, 0x46, 0}},
    {0xFB01, {0x46, 0x49, 0}},       {0xFB02, {0x46, 0x4C, 0}},       {0xFB03, {0x46, 0x46, 0x49}},
    {0xFB04, {0x46, 0x46, 0x4C}},    {0xFB05, {0x53, 0x54, 0}},       {0xFB06, {0x53, 0x54, 0}},
    {0xFB13, {0x544, 0x546, 0}},     {0xFB14, {0x544, 0x535, 0}},     {0xFB15, {0x544, 0x53B, 0}},
    {0xFB16, {0x54E, 0x546, 0}},
}};

bool is_letter(char32_t code_point) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(code_point));
  return category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
}

// The first UTF-16 unit of a code point: what JavaScript compares first.
char32_t first_utf16_unit(char32_t code_point) {
  return code_point < 0x10000 ? code_point : 0xD800 + ((code_point - 0x10000) >> 10);
}

}  // namespace

char32_t decode_utf8(std::string_view text, std::size_t& at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const auto [length, minimum] = sequence_shape(lead);
  if (length == 1) {
    ++at;
    return lead;
  }
  if (length == 0 || at + static_cast<std::size_t>(length) > text.size()) {
    ++at;
    return kReplacement;
  }
  char32_t code_point = lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    const auto byte = static_cast<unsigned char>(text[at + static_cast<std::size_t>(i)]);
    if (!is_continuation(byte)) {
      ++at;
      return kReplacement;
    }
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    ++at;
    return kReplacement;
  }
  at += static_cast<std::size_t>(length);
  return code_point;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

std::vector<std::string_view> code_points(std::string_view text) {
  std::vector<std::string_view> points;
  points.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t start = at;
    decode_utf8(text, at);
    points.push_back(text.substr(start, at - start));
  }
  return points;
}

bool is_js_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

std::size_t leading_space_bytes(std::string_view text) {
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t next = at;
    if (!is_js_space(decode_utf8(text, next))) break;
    at = next;
  }
  return at;
}

std::size_t trailing_space_bytes(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && is_continuation(static_cast<unsigned char>(text[start])))
      --start;
    std::size_t at = start;
    if (!is_js_space(decode_utf8(text, at)) || at != end) break;
    end = start;
  }
  return text.size() - end;
}

std::string_view trim_start(std::string_view text) {
  return text.substr(leading_space_bytes(text));
}

std::string_view trim_end(std::string_view text) {
  return text.substr(0, text.size() - trailing_space_bytes(text));
}

std::string_view trim(std::string_view text) {
  return trim_end(trim_start(text));
}

std::size_t utf16_length(std::string_view text) {
  std::size_t units = 0;
  for (std::size_t at = 0; at < text.size();)
    units += decode_utf8(text, at) >= 0x10000 ? 2 : 1;
  return units;
}

std::optional<std::string> utf16_at(std::string_view text, double index) {
  const auto length = static_cast<double>(utf16_length(text));
  if (index < 0) index += length;
  if (index < 0 || index >= length) return std::nullopt;
  const auto wanted = static_cast<std::size_t>(index);
  std::size_t unit = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t start = at;
    const char32_t code_point = decode_utf8(text, at);
    const std::size_t width = code_point >= 0x10000 ? 2 : 1;
    if (wanted < unit + width) {
      if (width == 2) return std::string("\xEF\xBF\xBD");
      return std::string(text.substr(start, at - start));
    }
    unit += width;
  }
  return std::nullopt;
}

int compare_utf16(std::string_view a, std::string_view b) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const char32_t x = decode_utf8(a, i);
    const char32_t y = decode_utf8(b, j);
    if (x == y) continue;
    const char32_t ux = first_utf16_unit(x);
    const char32_t uy = first_utf16_unit(y);
    if (ux != uy) return ux < uy ? -1 : 1;
    return x < y ? -1 : 1;  // Both astral with the same lead surrogate: the trail decides.
  }
  if (i < a.size()) return 1;
  if (j < b.size()) return -1;
  return 0;
}

std::string js_upper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const char32_t c = decode_utf8(text, at);
    const auto* expansion = std::find_if(kUpperExpansions.begin(), kUpperExpansions.end(),
                                         [c](const Expansion& e) { return e.from == c; });
    if (expansion != kUpperExpansions.end()) {
      for (const char32_t to : expansion->to) {
        if (to != 0) append_utf8(out, to);
      }
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

std::string js_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char32_t previous = 0;
  for (std::size_t at = 0; at < text.size();) {
    const char32_t c = decode_utf8(text, at);
    if (c == 0x130) {
      append_utf8(out, 'i');
      append_utf8(out, 0x307);
    } else if (c == 0x3A3) {
      // Final sigma: after a letter and not before one.
      std::size_t next = at;
      const bool letter_follows = at < text.size() && is_letter(decode_utf8(text, next));
      append_utf8(out, is_letter(previous) && !letter_follows ? 0x3C2 : 0x3C3);
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
    previous = c;
  }
  return out;
}

std::string js_title(std::string_view text) {
  std::string out(text);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto byte = static_cast<unsigned char>(out[i]);
    const bool boundary = i == 0 || !is_word_byte(static_cast<unsigned char>(out[i - 1]));
    if (boundary && byte >= 'a' && byte <= 'z') out[i] = static_cast<char>(byte - 'a' + 'A');
  }
  return out;
}

std::string js_capitalize(std::string_view text) {
  if (text.empty()) return {};
  std::size_t at = 0;
  const char32_t first = decode_utf8(text, at);
  // charAt(0) of an astral character is half a surrogate pair, which has no upper case.
  if (first >= 0x10000) return std::string(text);
  return js_upper(text.substr(0, at)) + std::string(text.substr(at));
}

}  // namespace strata::models::chat::jinja
