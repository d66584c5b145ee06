#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/by_index.h"
#include "models/tokenizer/vocabulary_map.h"

namespace strata::models::tokenizer {

// A tokenizer file's "model" of type BPE: a vocabulary and ranked merges, as the Hugging Face
// tokenizers apply them (merges given as "a b" strings or ["a", "b"] pairs; ignore_merges,
// byte_fallback with <0xNN> tokens, unk_token with fuse_unk, continuing_subword_prefix and
// end_of_word_suffix). Words already seen are answered from a per-thread cache. Safe to share
// between threads.
class BpeModel {
 public:
  // Throws UserError naming `where` for another model type, a merge of tokens that are not in
  // the vocabulary, or dropout (which makes encoding random).
  static BpeModel from_json(const nlohmann::json& model, const std::string& where);

  // Appends the ids of one pre-tokenized word to `ids`.
  void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // The token of each id, "" where the vocabulary has none.
  const base::ByIndex<std::string>& tokens_by_id() const { return tokens_by_id_; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t merged_id;
  };
  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }

  void read_vocabulary(const nlohmann::json& vocabulary, const std::string& where);
  void read_merges(const nlohmann::json& merges, const std::string& where);
  // `merged` is scratch, kept between calls.
  void add_merge(std::string_view left, std::string_view right, std::int32_t rank,
                 std::string& merged, const std::string& where);
  // The ids of `word`, uncached: the word whole under ignore_merges, else its merged symbols.
  void word_ids(std::string_view word, std::vector<std::int32_t>& symbols) const;
  // The ids of `word` before any merge: a token per character, or bytes, or unk.
  void initial_symbols(std::string_view word, std::vector<std::int32_t>& symbols) const;
  // Applies the merges to `symbols` in rank order, leftmost first among equal ranks.
  void merge_all(std::vector<std::int32_t>& symbols) const;

  VocabularyMap vocabulary_;
  base::ByIndex<std::string> tokens_by_id_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::optional<std::int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<std::int32_t, 256> byte_ids_{};  // <0xNN>'s id, -1 where the vocabulary lacks it
  std::uint64_t serial_ = 0;                  // tells this model's cache from another's
};

}  // namespace strata::models::tokenizer
