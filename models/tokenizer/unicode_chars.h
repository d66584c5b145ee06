#pragma once

#include <string>
#include <string_view>

namespace strata::models::tokenizer {

// The character classes the Hugging Face tokenizers test with Rust's char methods, from
// utf8proc's Unicode tables.

// char::is_whitespace: the White_Space property.
bool is_whitespace(char32_t code_point);
// char::is_numeric: general categories Nd, Nl and No.
bool is_numeric(char32_t code_point);
// The Punctuation pre-tokenizer's test: ASCII punctuation (which includes symbols such as $ + <
// = > ^ ` | ~) or a general category P*.
bool is_punctuation(char32_t code_point);

// Unicode normalization forms, as utf8proc composes and decomposes (stable, Unicode's current
// tables).
enum class NormalForm { nfc, nfd, nfkc, nfkd };
std::string normalize_unicode(std::string_view text, NormalForm form);

// Rust's char-by-char to_lowercase: the full lowercase mapping without context (U+0130 becomes
// "i" U+0307; a final sigma stays σ).
std::string lowercase(std::string_view text);

}  // namespace strata::models::tokenizer
