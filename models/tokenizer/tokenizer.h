#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::models::tokenizer {

// A Hugging Face tokenizer, read from a model folder's tokenizer.json (with the
// tokenizer_config.json and special_tokens_map.json beside it), encoding and decoding as the
// tokenizers library and transformers do. The components it implements are listed in
// docs/tokenizer.md; a file using any other is refused naming the component and the file.
// Encoding and decoding are safe from many threads at once.
class Tokenizer {
 public:
  // `path` is a folder holding tokenizer.json, or a tokenizer.json. Throws UserError naming the
  // file for a missing or malformed file, or a component outside docs/tokenizer.md's list.
  static Tokenizer load(const std::filesystem::path& path);
  // A tokenizer from the texts of a tokenizer.json and a tokenizer_config.json ("" for none);
  // `source` names them in errors.
  static Tokenizer from_json_text(std::string_view tokenizer_json, std::string_view config_json,
                                  const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text`, which must be valid UTF-8 (else UserError naming the byte offset).
  // `add_special_tokens`: the post-processor's tokens (a BOS, say) are added, as encode does by
  // default.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Appends to `ids` rather than returning them.
  void encode_into(std::string_view text, bool add_special_tokens,
                   std::vector<std::int32_t>& ids) const;

  // The text of `ids`, as transformers' decode with the given skip_special_tokens and the
  // config's clean_up_tokenization_spaces. Ids no token has are skipped, as there.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  // One more than the largest id of any token.
  std::int64_t vocab_size() const;
  // The token the config names as end of sequence (eos_token), else none.
  std::optional<std::int32_t> eos_id() const;
  std::optional<std::int32_t> bos_id() const;
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // Whether `id` is a special added token (an end of turn, say), which skip_special_tokens drops.
  bool is_special(std::int32_t id) const;
  // The text of the BOS and EOS tokens, as a chat template's bos_token and eos_token; "" for none.
  std::string bos_token() const;
  std::string eos_token() const;
  // Where the tokenizer came from: the tokenizer.json's path.
  const std::string& source() const;
  // A hash of the tokenizer.json and tokenizer_config.json bytes, which change what ids are made.
  std::uint64_t content_hash() const;

  // decode without transformers' clean-up: the tokenizers library's own decode, which streaming
  // decodes with.
  std::string decode_raw(std::span<const std::int32_t> ids, bool skip_special_tokens) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decoding ids one at a time, as generation produces them: each step returns the text those ids
// add, holding back text that may still change (an incomplete UTF-8 sequence, shown by the
// decoder as U+FFFD) until a later id completes it. The tokenizers' DecodeStream.
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  // The new text, possibly empty.
  std::string step(std::int32_t id);

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<std::int32_t> ids_;
  std::string prefix_;
  std::size_t prefix_index_ = 0;
};

}  // namespace strata::models::tokenizer
