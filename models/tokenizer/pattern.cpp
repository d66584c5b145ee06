#include "models/tokenizer/pattern.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_fields.h"

namespace strata::models::tokenizer {

Pattern Pattern::from_json(const nlohmann::json& pattern, const std::string& where) {
  Pattern made;
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    made.literal_ = pattern["String"].get<std::string>();
    return made;
  }
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    made.regex_.emplace(pattern["Regex"].get<std::string>(), where);
    return made;
  }
  refuse_field(where, "pattern",
               fmt::format("is {}, not {{\"String\": ...}} or {{\"Regex\": ...}}", pattern.dump()));
}

Pattern Pattern::pcre2_regex(std::string_view regex, const std::string& where) {
  Pattern made;
  made.regex_.emplace(regex, where, UnicodeRegex::Syntax::pcre2);
  return made;
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;
  for_each_match(text, [&](std::size_t start, std::size_t end) {
    out.append(text.substr(copied, start - copied));
    out.append(content);
    copied = end;
  });
  out.append(text.substr(copied));
  return out;
}

}  // namespace strata::models::tokenizer
