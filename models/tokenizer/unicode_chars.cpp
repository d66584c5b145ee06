#include "models/tokenizer/unicode_chars.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "base/assert.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

utf8proc_category_t category_of(char32_t code_point) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(code_point));
}

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

bool is_whitespace(char32_t code_point) {
  if ((code_point >= 0x09 && code_point <= 0x0D) || code_point == 0x85) return true;
  const utf8proc_category_t category = category_of(code_point);
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL ||
         category == UTF8PROC_CATEGORY_ZP;
}

bool is_numeric(char32_t code_point) {
  const utf8proc_category_t category = category_of(code_point);
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t code_point) {
  if (code_point < 0x80) {
    const auto c = static_cast<unsigned char>(code_point);
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  switch (category_of(code_point)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

std::string normalize_unicode(std::string_view text, NormalForm form) {
  // ASCII is unchanged by every form; most text is mostly ASCII.
  if (is_ascii(text)) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
      static_cast<utf8proc_ssize_t>(text.size()), &mapped, static_cast<utf8proc_option_t>(options));
  // The text was checked as UTF-8 on the way in, so utf8proc can fail only for memory.
  STRATA_ASSERT(length >= 0);
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  return std::string(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t offset = 0;
  while (offset < text.size()) {
    const char32_t code_point = next_code_point(text, offset);
    if (code_point == 0x130) {
      out += "i\xCC\x87";  // İ: the one unconditional lowercase mapping to two characters
      continue;
    }
    append_utf8(out,
                static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(code_point))));
  }
  return out;
}

}  // namespace strata::models::tokenizer
