#include "models/tokenizer/json_fields.h"

#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {

char32_t one_char_field(const std::string& text, std::string_view field, const std::string& where) {
  std::size_t offset = 0;
  if (text.empty() || invalid_utf8_offset(text) != std::string_view::npos) {
    refuse_field(where, field, "must be one character");
  }
  const char32_t code_point = next_code_point(text, offset);
  if (offset != text.size()) refuse_field(where, field, "must be one character");
  return code_point;
}

}  // namespace strata::models::tokenizer
