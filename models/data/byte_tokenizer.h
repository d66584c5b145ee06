#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::models {

// Byte-level tokenizer: token i is byte i. Nothing to train, nothing to ship, and every file is
// representable; a model's vocab must be at least kByteVocab (it may be padded past it).
inline constexpr int kByteVocab = 256;

std::vector<std::uint16_t> encode_bytes(std::string_view text);
std::string decode_bytes(std::span<const std::uint16_t> tokens);

}  // namespace strata::models
