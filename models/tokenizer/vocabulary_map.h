#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace strata::models::tokenizer {

// Hashing that lets a map keyed by std::string be searched with a std::string_view, so that a
// lookup builds no string.
struct StringViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const {
    return std::hash<std::string_view>{}(text);
  }
};

// Token text to id.
using VocabularyMap =
    std::unordered_map<std::string, std::int32_t, StringViewHash, std::equal_to<>>;

}  // namespace strata::models::tokenizer
