#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "models/data/loss_mask.h"
#include "models/data/text_tokens.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// Token ids stored as 16- or 32-bit unsigned integers, read without copying the whole array:
// the view every reader of training data takes. Cheap to copy; the storage must outlive it.
class TokenView {
 public:
  TokenView() = default;
  TokenView(std::span<const std::uint16_t> tokens)  // NOLINT(google-explicit-constructor)
      : data_(tokens.data()), size_(tokens.size()), wide_(false) {}
  TokenView(std::span<const std::uint32_t> tokens)  // NOLINT(google-explicit-constructor)
      : data_(tokens.data()), size_(tokens.size()), wide_(true) {}
  TokenView(const std::vector<std::uint16_t>& tokens)  // NOLINT(google-explicit-constructor)
      : TokenView(std::span<const std::uint16_t>(tokens)) {}
  TokenView(const std::vector<std::uint32_t>& tokens)  // NOLINT(google-explicit-constructor)
      : TokenView(std::span<const std::uint32_t>(tokens)) {}

  // The same ids with the loss mask `mask` beside them (models/data/loss_mask.h), one byte each.
  TokenView with_mask(std::span<const std::uint8_t> mask) const;
  bool has_mask() const noexcept { return mask_ != nullptr; }
  // The mask bytes; empty without a mask.
  std::span<const std::uint8_t> mask() const noexcept {
    return mask_ != nullptr ? std::span(mask_, size_) : std::span<const std::uint8_t>();
  }
  // Token i's mask bits; kInLoss alone where there is no mask.
  std::uint8_t mask_at(std::size_t i) const;

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::uint32_t operator[](std::size_t i) const {
    return wide_ ? static_cast<const std::uint32_t*>(data_)[i]
                 : static_cast<const std::uint16_t*>(data_)[i];
  }
  TokenView subview(std::size_t begin, std::size_t count) const;
  // Tokens [begin, begin + out.size()) into `out`.
  void copy(std::size_t begin, std::span<std::int32_t> out) const;
  // The same as targets: kIgnoredTarget in place of each token the mask leaves out of the loss.
  void copy_targets(std::size_t begin, std::span<std::int32_t> out) const;
  // The index of the first token >= `limit`, or size() when there is none.
  std::size_t find_at_or_past(std::uint32_t limit) const;

 private:
  const void* data_ = nullptr;
  const std::uint8_t* mask_ = nullptr;  // one byte per token, or none
  std::size_t size_ = 0;
  bool wide_ = false;
};

// The token formats strata reads (docs/data.md):
// - text: any other file, one token per byte (models/data/byte_tokenizer.h);
// - llm.c .bin: a 256 x int32 header (magic 20240520 version 1 with uint16 tokens, or magic
//   20240801 version 7 with uint32 tokens, as llm.c's Llama 3 scripts write; header[2] the token
//   count), then the tokens;
// - raw: a bare array of uint16 or uint32 tokens (nanoGPT's train.bin), chosen by giving the
//   dtype (`"strata": {"data": {"dtype": "uint16"}}`);
// - Megatron-LM indexed dataset: PREFIX.bin beside PREFIX.idx (header "MMIDIDX\0\0", version 1,
//   a dtype code, then sequence sizes and pointers); its documents back to back are the stream.
inline constexpr const char* kTextFormat = "text, one token per byte";

struct TokenFile {
  std::filesystem::path path;  // as given
  std::string format;          // "text", "llm.c .bin v1 (uint16)", ... for the start-up summary
  TokenView tokens;            // with its loss mask when the file has one (PATH.mask)

  // Owners of the bytes `tokens` views.
  base::MappedFile mapping;
  MaskFile mask;
  std::vector<std::uint16_t> owned;
};

// How text is made ids: by the model's tokenizer (through the token cache beside the file,
// models/data/token_cache.h), or, where `tokenizer` is empty or gives none, one token per byte.
// `tokenizer` is asked only when a file is text: a token file needs no tokenizer read.
// `chat`, asked only when the tokenizer is, gives the folder's chat template for conversation
// lines (may be empty, or give none).
struct TextTokenizing {
  std::function<const tokenizer::Tokenizer*()> tokenizer;
  std::function<const ChatEncoder*()> chat;
  TokenizeProgress progress;  // may be empty
};

// Opens `path` (the value of the config key `key`, named in errors) as the format it is: raw
// when `dtype` is "uint16" or "uint32", else Megatron when PATH.idx (or PATH without its .bin
// extension, plus .idx) exists, else llm.c for a .bin, else text: a .jsonl or .ndjson file's
// "text" fields, or the whole file (models/data/text_documents.h), made ids as `text` says.
// Throws UserError naming the file, what is wrong with it and the fix when it is missing, empty,
// truncated or malformed.
TokenFile open_token_file(const std::filesystem::path& path, const std::string& dtype,
                          const std::string& key, const TextTokenizing& text = {});

// Refuses, naming the file (or `source` for tokens in memory) and the position, a token id at or
// past `vocab`: the embedding has no row for it.
void check_token_ids(const TokenFile& file, int vocab, const std::string& source);

// Whether `file` is text, its ids the bytes of models/data/byte_tokenizer.h.
bool is_text(const TokenFile& file);

// Refuses a text file read as bytes for a model shaped by a Hugging Face config.json
// (`hf_config`, "" for the built-in GPT of strata.model's shape keys, the one model whose ids are
// bytes): such a model's `vocab` ids are its own tokenizer's, and its folder has no
// tokenizer.json to make them with. Names the file and the fix.
void check_tokenizer(const TokenFile& file, std::int64_t vocab,
                     const std::filesystem::path& hf_config);

}  // namespace strata::models
