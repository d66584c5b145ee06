#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata::models::tokenizer {

// A tokenizer file's regex, run by PCRE2 with its JIT in Unicode mode. The files are written for
// Oniguruma (what the Hugging Face tokenizers run them on); the few escapes whose Unicode meaning
// differs between the two are rewritten (oniguruma_to_pcre2), so a pattern matches what it
// matches there. Subjects must be valid UTF-8 (not checked again here). Safe to share between
// threads: each thread matches with its own match data and JIT stack.
class UnicodeRegex {
 public:
  // How the pattern is written: as the tokenizer files write theirs (Oniguruma), or already for
  // PCRE2 (the patterns strata writes itself).
  enum class Syntax { oniguruma, pcre2 };
  // Throws UserError naming `where` (the component and file) and PCRE2's message when the
  // pattern does not compile.
  UnicodeRegex(std::string_view pattern, const std::string& where,
               Syntax syntax = Syntax::oniguruma);
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&& other) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&& other) noexcept;
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Calls on_match(start, end) for each match in `subject`, left to right, each search starting
  // where the previous match ended. As the tokenizers' Oniguruma find_iter: an empty match right
  // where the previous match ended is skipped, and the search moves on one code point.
  template <class OnMatch>
  void for_each_match(std::string_view subject, OnMatch&& on_match) const {
    std::size_t from = 0;
    std::size_t start = 0;
    std::size_t end = 0;
    bool matched_before = false;
    std::size_t last_match_end = 0;
    while (from <= subject.size() && find(subject, from, start, end)) {
      if (start == end && matched_before && end == last_match_end) {
        from = next_code_point_offset(subject, from);
        continue;
      }
      on_match(start, end);
      matched_before = true;
      last_match_end = end;
      from = end;
    }
  }

  // The first match at or after `from`: its [start, end) and true, or false when there is none.
  bool find(std::string_view subject, std::size_t from, std::size_t& start, std::size_t& end) const;

 private:
  static std::size_t next_code_point_offset(std::string_view subject, std::size_t offset);
  void* code_ = nullptr;  // pcre2_code_8*
  std::string where_;
};

// `pattern` with Oniguruma's Unicode escapes spelled for PCRE2: \s and \S include U+0085 (NEL),
// which Oniguruma counts as white space and PCRE2 does not, and \w (and \W outside a class)
// take Oniguruma's word characters (letters, marks, numbers, connector punctuation; inside a
// class, decimal and letter numbers only). \W inside a class stays PCRE2's: no union of
// properties spells its complement there. Exposed for its tests.
std::string oniguruma_to_pcre2(std::string_view pattern);

// Rust's regex-crate \w, which the tokenizers' single_word and Whitespace use: Alphabetic,
// marks, decimal digits, connector punctuation and the joiners, as a PCRE2 class body.
inline constexpr std::string_view rust_word_class =
    R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";

// Whether `code_point` is a regex-crate word character (rust_word_class).
bool is_rust_word_char(char32_t code_point);

}  // namespace strata::models::tokenizer
