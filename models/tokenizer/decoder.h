#pragma once

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/tokenizer/pattern.h"

namespace strata::models::tokenizer {

// A tokenizer file's "decoder": ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
// BPEDecoder and Sequence of them (flattened). It turns the tokens of ids back into text, as the
// tokenizers' decode_chain does, step by step over the list of token strings.
class Decoder {
 public:
  // null gives the tokenizers' default: the tokens joined with spaces. Throws UserError naming
  // `where` for a type it does not implement.
  static Decoder from_json(const nlohmann::json& decoder, const std::string& where);

  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct ByteLevel {};
  struct Replace {
    Pattern pattern;
    std::string content;
  };
  struct ByteFallback {};
  struct Fuse {};
  struct Strip {
    char32_t content;
    std::size_t start;
    std::size_t stop;
  };
  struct Metaspace {
    char32_t replacement;
    bool strip_first;  // the first token's replacement characters are dropped, not made spaces
  };
  struct BpeSuffix {
    std::string suffix;
  };
  using Step = std::variant<ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BpeSuffix>;

  void add(const nlohmann::json& decoder, const std::string& where);
  std::vector<Step> steps_;
  bool join_with_spaces_ = false;
};

}  // namespace strata::models::tokenizer
