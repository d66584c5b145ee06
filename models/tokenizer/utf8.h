#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata::models::tokenizer {

// UTF-8 at the tokenizer's boundary. Text coming in is checked once (invalid_utf8_offset); past
// that check every function here may assume valid UTF-8. Bytes coming out of a decoder may be
// any bytes, and are made text the way the Hugging Face tokenizers do it (utf8_lossy).

// The offset of the first byte that does not begin or continue a valid UTF-8 sequence (overlong
// forms, surrogates and code points past U+10FFFF are invalid), or std::string_view::npos.
std::size_t invalid_utf8_offset(std::string_view text);

// The code point starting at text[offset] of valid UTF-8, and the offset just past it.
char32_t next_code_point(std::string_view text, std::size_t& offset);

// The byte length of the UTF-8 sequence whose first byte is `lead` (1 for a stray byte).
std::size_t utf8_sequence_length(unsigned char lead);

void append_utf8(std::string& out, char32_t code_point);

// Rust's String::from_utf8_lossy: each maximal invalid subpart of `bytes` becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// How many leading bytes of `bytes` to emit now when more bytes will follow: all but an
// incomplete UTF-8 sequence at the end, which may still complete. Invalid bytes are not held.
std::size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace strata::models::tokenizer
