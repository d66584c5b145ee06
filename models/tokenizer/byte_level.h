#pragma once

#include <array>
#include <string>
#include <string_view>

namespace strata::models::tokenizer {

// GPT-2's byte-level alphabet: each of the 256 bytes is written as one printable character, so
// that a vocabulary of strings covers every byte sequence. Printable Latin-1 bytes stand for
// themselves; the others take U+0100 onwards in byte order.
class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // The UTF-8 of the character standing for `byte`.
  const std::string& char_of(unsigned char byte) const { return chars_[byte]; }
  // Appends the characters standing for each byte of `bytes`.
  void append_mapped(std::string& out, std::string_view bytes) const;
  // The byte `code_point` stands for, or -1 when it stands for none.
  int byte_of(char32_t code_point) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> chars_;
  std::array<short, 324> bytes_;  // indexed by code point; the alphabet ends at U+0143
};

// The GPT-2 regex a ByteLevel pre-tokenizer splits with when its use_regex is true.
inline constexpr std::string_view gpt2_split_regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace strata::models::tokenizer
