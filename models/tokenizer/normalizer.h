#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/tokenizer/pattern.h"
#include "models/tokenizer/unicode_chars.h"

namespace strata::models::tokenizer {

// A tokenizer file's "normalizer": NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, and
// Sequence of them (flattened into one list of steps). Applied to the text between added tokens.
class Normalizer {
 public:
  // null (no normalizer) gives one that returns its input. Throws UserError naming `where` for a
  // type it does not implement.
  static Normalizer from_json(const nlohmann::json& normalizer, const std::string& where);

  std::string normalize(std::string_view text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Unicode {
    NormalForm form;
  };
  struct Prepend {
    std::string prefix;
  };
  struct Replace {
    Pattern pattern;
    std::string content;
  };
  struct Strip {
    bool left;
    bool right;
  };
  struct Lowercase {};
  using Step = std::variant<Unicode, Prepend, Replace, Strip, Lowercase>;

  void add(const nlohmann::json& normalizer, const std::string& where);
  std::vector<Step> steps_;
};

}  // namespace strata::models::tokenizer
