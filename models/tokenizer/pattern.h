#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "models/tokenizer/unicode_regex.h"

namespace strata::models::tokenizer {

// What a Replace normalizer, a Split pre-tokenizer and a Replace decoder look for: a literal
// string ({"String": "..."}) or a regex ({"Regex": "..."}).
class Pattern {
 public:
  // Throws UserError naming `where` for any other shape, or a regex that does not compile.
  static Pattern from_json(const nlohmann::json& pattern, const std::string& where);
  // A regex strata writes itself, in PCRE2's own syntax.
  static Pattern pcre2_regex(std::string_view regex, const std::string& where);

  // on_match(start, end) for each non-overlapping match, left to right.
  template <class OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const {
    if (regex_.has_value()) {
      regex_->for_each_match(text, on_match);
      return;
    }
    if (literal_.empty()) return;
    for (std::size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size())) {
      on_match(at, at + literal_.size());
    }
  }

  // `text` with each match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::optional<UnicodeRegex> regex_;
};

}  // namespace strata::models::tokenizer
