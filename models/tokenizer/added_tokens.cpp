#include "models/tokenizer/added_tokens.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_fields.h"
#include "models/tokenizer/normalizer.h"
#include "models/tokenizer/unicode_chars.h"
#include "models/tokenizer/unicode_regex.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

// The last character of text[0, end), or 0 for none.
char32_t char_before(std::string_view text, std::size_t end) {
  if (end == 0) return 0;
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
    --start;
  return next_code_point(text, start);
}

// The character at text[offset], or 0 past the end.
char32_t char_at(std::string_view text, std::size_t offset) {
  if (offset >= text.size()) return 0;
  return next_code_point(text, offset);
}

// The offset of the first non-white-space character at or after `from` (text.size() if none).
std::size_t skip_whitespace_forward(std::string_view text, std::size_t from) {
  while (from < text.size()) {
    std::size_t next = from;
    if (!is_whitespace(next_code_point(text, next))) break;
    from = next;
  }
  return from;
}

// The offset just past the last non-white-space character before `end` (0 if none).
std::size_t skip_whitespace_backward(std::string_view text, std::size_t end) {
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    std::size_t next = start;
    if (!is_whitespace(next_code_point(text, next))) break;
    end = start;
  }
  return end;
}

}  // namespace

AddedTokens AddedTokens::from_json(const nlohmann::json& added_tokens, const Normalizer& normalizer,
                                   const std::string& where) {
  AddedTokens made;
  if (added_tokens.is_null()) return made;
  if (!added_tokens.is_array()) refuse_field(where, "added_tokens", "is not a list");
  for (const auto& entry : added_tokens) {
    AddedToken token;
    token.content = required_field<std::string>(entry, "content", where);
    token.id = required_field<std::int32_t>(entry, "id", where);
    token.special = field_or(entry, "special", false, where);
    token.lstrip = field_or(entry, "lstrip", false, where);
    token.rstrip = field_or(entry, "rstrip", false, where);
    token.single_word = field_or(entry, "single_word", false, where);
    token.normalized = field_or(entry, "normalized", !token.special, where);
    if (token.id < 0) {
      refuse_field(
          where, "added_tokens",
          fmt::format("gives \"{}\" the id {}: token ids start at 0", token.content, token.id));
    }
    if (token.content.empty() || invalid_utf8_offset(token.content) != std::string_view::npos) {
      refuse_field(where, "added_tokens",
                   fmt::format("holds token {} with empty content", token.id));
    }
    const auto index = static_cast<std::int32_t>(made.tokens_.size());
    if (token.normalized) {
      made.normalized_.insert(normalizer.normalize(token.content), index);
    } else {
      made.raw_.insert(token.content, index);
    }
    made.tokens_.push_back(std::move(token));
  }
  return made;
}

void AddedTokens::Trie::insert(std::string_view text, std::int32_t token) {
  if (text.empty()) return;
  std::int32_t node = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    std::int32_t child = -1;
    for (const auto& [label, index] : nodes[node].children) {
      if (label == byte) child = index;
    }
    if (child < 0) {
      child = static_cast<std::int32_t>(nodes.size());
      nodes[node].children.emplace_back(byte, child);
      nodes.emplace_back();
    }
    node = child;
  }
  // A later entry with the same text wins, as a later insert into the tokenizers' map does.
  nodes[node].token = token;
  first_bytes[static_cast<unsigned char>(text.front())] = true;
}

std::int32_t AddedTokens::Trie::longest_at(std::string_view text, std::size_t start,
                                           std::size_t& end) const {
  std::int32_t found = -1;
  std::int32_t node = 0;
  for (std::size_t i = start; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    std::int32_t child = -1;
    for (const auto& [label, index] : nodes[node].children) {
      if (label == byte) child = index;
    }
    if (child < 0) break;
    node = child;
    if (nodes[node].token >= 0) {
      found = nodes[node].token;
      end = i + 1;
    }
  }
  return found;
}

void AddedTokens::split_raw(std::string_view text, bool split_special,
                            const OnPiece& on_piece) const {
  split(raw_, text, split_special, on_piece);
}

void AddedTokens::split_normalized(std::string_view text, bool split_special,
                                   const OnPiece& on_piece) const {
  split(normalized_, text, split_special, on_piece);
}

void AddedTokens::split(const Trie& trie, std::string_view text, bool split_special,
                        const OnPiece& on_piece) const {
  std::size_t piece_start = 0;  // where the text not yet passed on begins
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = 0;
    const std::int32_t index = trie.first_bytes[static_cast<unsigned char>(text[at])]
                                   ? trie.longest_at(text, at, end)
                                   : -1;
    if (index < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[index];
    std::size_t start = at;
    at = end;  // the search goes on after this match, whether or not it is taken
    if (split_special && token.special) continue;
    // single_word: not where a word character (the regex crate's \w) touches either side.
    if (token.single_word &&
        (is_rust_word_char(char_before(text, start)) || is_rust_word_char(char_at(text, end)))) {
      continue;
    }
    if (token.lstrip) start = std::max(skip_whitespace_backward(text, start), piece_start);
    if (token.rstrip) end = skip_whitespace_forward(text, end);
    if (piece_start < start)
      on_piece(text.substr(piece_start, start - piece_start), -1, piece_start);
    on_piece(text.substr(start, end - start), token.id, start);
    piece_start = end;
    at = std::max(at, end);
  }
  if (piece_start < text.size()) on_piece(text.substr(piece_start), -1, piece_start);
}

}  // namespace strata::models::tokenizer
