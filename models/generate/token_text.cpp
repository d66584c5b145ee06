#include "models/generate/token_text.h"

#include "models/tokenizer/utf8.h"

namespace strata::models::generate {

TokenText::TokenText(IdsToText how) : bytes_(how.bytes && how.tokenizer == nullptr) {
  if (how.tokenizer != nullptr) stream_.emplace(*how.tokenizer, /*skip_special_tokens=*/true);
}

std::string_view TokenText::add(std::int32_t id) {
  if (stream_) {
    text_ += stream_->step(id);
  } else if (bytes_ && id >= 0 && id < 256) {
    pending_.push_back(static_cast<char>(id));
    const std::size_t whole = tokenizer::utf8_complete_prefix(pending_);
    text_ += tokenizer::utf8_lossy(std::string_view(pending_).substr(0, whole));
    pending_.erase(0, whole);
  }
  return text_;
}

}  // namespace strata::models::generate
