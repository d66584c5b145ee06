#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::models::tokenizer {

class Normalizer;

// One of a tokenizer file's "added_tokens".
struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool special = false;
  bool lstrip = false;       // takes the white space before it
  bool rstrip = false;       // takes the white space after it
  bool single_word = false;  // only where it is not inside a word
  bool normalized = false;   // matched in normalized text (else in the raw text)
};

// The added tokens, found in text before the model sees it, as the tokenizers' AddedVocabulary
// finds them: the leftmost match first, the longest among those starting there. Tokens with
// normalized false are found in the raw text, the others in the normalized text between those.
class AddedTokens {
 public:
  // Throws UserError naming `where` for an entry without content or id.
  static AddedTokens from_json(const nlohmann::json& added_tokens, const Normalizer& normalizer,
                               const std::string& where);

  // A piece of text between added tokens (token_id -1), or an added token (its id). `start` is
  // the piece's offset in the text split.
  using OnPiece =
      std::function<void(std::string_view piece, std::int32_t token_id, std::size_t start)>;
  // Splits raw text at the tokens matched before normalization, then normalized text at the
  // others. `split_special`: special tokens are not matched, but tokenized as text.
  void split_raw(std::string_view text, bool split_special, const OnPiece& on_piece) const;
  void split_normalized(std::string_view text, bool split_special, const OnPiece& on_piece) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie of token texts.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, std::int32_t>> children;
      std::int32_t token = -1;  // index into tokens_ of the token ending here
    };
    std::vector<Node> nodes{Node{}};
    std::array<bool, 256> first_bytes{};
    void insert(std::string_view text, std::int32_t token);
    // The longest token starting at text[start]: its index and end, or -1.
    std::int32_t longest_at(std::string_view text, std::size_t start, std::size_t& end) const;
  };

  void split(const Trie& trie, std::string_view text, bool split_special,
             const OnPiece& on_piece) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace strata::models::tokenizer
