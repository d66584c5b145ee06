#include "models/data/byte_tokenizer.h"

#include "base/assert.h"

namespace strata::models {

std::vector<std::uint16_t> encode_bytes(std::string_view text) {
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i)
    tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string decode_bytes(std::span<const std::uint16_t> tokens) {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    STRATA_ASSERT(tokens[i] < kByteVocab);
    text[i] = static_cast<char>(tokens[i]);
  }
  return text;
}

}  // namespace strata::models
