#include "models/tokenizer/byte_level.h"

#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  bytes_.fill(-1);
  char32_t next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    const char32_t code_point = printable ? static_cast<char32_t>(byte) : next_extra++;
    append_utf8(chars_[byte], code_point);
    bytes_[code_point] = static_cast<short>(byte);
  }
}

void ByteLevelAlphabet::append_mapped(std::string& out, std::string_view bytes) const {
  for (const char byte : bytes)
    out += chars_[static_cast<unsigned char>(byte)];
}

int ByteLevelAlphabet::byte_of(char32_t code_point) const {
  return code_point < bytes_.size() ? bytes_[code_point] : -1;
}

}  // namespace strata::models::tokenizer
