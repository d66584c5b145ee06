#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "models/tokenizer/tokenizer.h"

namespace strata::models::generate {

// How a model's ids become text: the model folder's tokenizer, bytes (the built-in models, whose
// ids 0-255 are bytes), or none (a folder without tokenizer.json: ids only).
struct IdsToText {
  const tokenizer::Tokenizer* tokenizer = nullptr;  // outlives every TokenText made from this
  bool bytes = false;

  bool has_text() const { return tokenizer != nullptr || bytes; }
};

// The text of generated ids as they come, in whole characters: bytes of an unfinished UTF-8
// character wait for the rest. Through a tokenizer it is its DecodeStream with special tokens
// skipped (an end of turn adds no text), as transformers' streamers show it; as bytes, an id past
// 255 adds nothing and an invalid byte shows as U+FFFD; without text, nothing.
class TokenText {
 public:
  explicit TokenText(IdsToText how);

  // Adds `id`'s text; returns all the text so far.
  std::string_view add(std::int32_t id);
  const std::string& text() const { return text_; }

 private:
  bool bytes_;
  std::optional<tokenizer::DecodeStream> stream_;
  std::string pending_;  // bytes of an unfinished character
  std::string text_;
};

}  // namespace strata::models::generate
