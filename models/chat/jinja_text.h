#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Text as JavaScript sees it. @huggingface/jinja, the reference the chat templates are rendered
// against, runs on JavaScript strings: its trim strips JavaScript's white space, its length
// counts UTF-16 units, its numbers print as Number.prototype.toString. These helpers give the
// same answers on UTF-8.
namespace strata::models::chat::jinja {

// The code point at `at`, advancing `at` past it. A byte that starts no valid sequence decodes
// as U+FFFD and advances one byte, as TextDecoder reads it.
char32_t decode_utf8(std::string_view text, std::size_t& at);
void append_utf8(std::string& out, char32_t code_point);

// Each code point's bytes, in order: Array.from(string).
std::vector<std::string_view> code_points(std::string_view text);

// JavaScript's \s and String.prototype.trim's white space (WhiteSpace and LineTerminator).
bool is_js_space(char32_t code_point);
// The bytes of white space that end `text`, and that start it.
std::size_t trailing_space_bytes(std::string_view text);
std::size_t leading_space_bytes(std::string_view text);
std::string_view trim_start(std::string_view text);
std::string_view trim_end(std::string_view text);
std::string_view trim(std::string_view text);

// String.prototype.length: UTF-16 code units.
std::size_t utf16_length(std::string_view text);
// String.prototype.at(index) (negative from the end), nullopt out of range. Half of a surrogate
// pair is U+FFFD, as Node writes a lone surrogate.
std::optional<std::string> utf16_at(std::string_view text, double index);
// <0, 0, >0 as JavaScript's < orders the strings (by UTF-16 code units).
int compare_utf16(std::string_view a, std::string_view b);

// toUpperCase / toLowerCase: Unicode simple case mapping plus the special cases that change
// length (ß -> SS, the Latin ligatures, İ -> i̇) and Greek final sigma.
std::string js_upper(std::string_view text);
std::string js_lower(std::string_view text);
// value.replace(/\b\w/g, toUpperCase): ASCII word characters after a non-word character.
std::string js_title(std::string_view text);
// charAt(0).toUpperCase() + slice(1).
std::string js_capitalize(std::string_view text);

// Number.prototype.toString (and String(number)).
std::string js_number(double value);
// JSON.stringify(string); ensure_ascii escapes U+007F and above as \uXXXX per UTF-16 unit.
std::string json_quote(std::string_view text, bool ensure_ascii);
// Number(string), as == converts a string compared with a number.
double js_to_number(std::string_view text);
// parseInt(text, 10) and parseFloat(text); nullopt where they give NaN.
std::optional<double> js_parse_int(std::string_view text);
std::optional<double> js_parse_float(std::string_view text);
// str.replaceAll(old, replacement) with at most `count` replacements (negative: all); an empty
// `old` matches between every two code points and at both ends.
std::string js_replace(std::string_view text, std::string_view old, std::string_view replacement,
                       double count);

}  // namespace strata::models::chat::jinja
