#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "models/data/chat_encoder.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// Called as documents are tokenized: the bytes of the inputs done so far, and in all.
using TokenizeProgress = std::function<void(std::size_t bytes_done, std::size_t bytes_total)>;

struct TokenizeOptions {
  bool add_special_tokens = true;  // the post-processor's tokens, as encode adds them by default
  int threads = 0;                 // 0: every core
  TokenizeProgress progress;       // may be empty
  // The folder's chat template, for conversation lines; nullptr: they are refused.
  const ChatEncoder* chat = nullptr;
};

// Receives ids as they are made, with their loss mask bytes (models/data/loss_mask.h), a batch
// of documents at a time, in order.
using OnTokens =
    std::function<void(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask)>;

// The ids of every document of the text files `paths` (models/data/text_documents.h), in
// order, packed back to back as Megatron's --append-eod and llm.c's scripts pack them: each
// example made as models/data/example_encoder.h says (text, then its EOS; a prompt and its
// completion; a conversation), with the mask saying which ids the loss counts. Documents are
// encoded on `options.threads` threads, a batch at a time, and handed to `on_tokens`; the ids do
// not depend on the thread count. Returns how many were made. Throws UserError naming the file
// for bad input, and naming the tokenizer when it has no EOS.
std::size_t tokenize_files(std::span<const std::filesystem::path> paths,
                           const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options,
                           const OnTokens& on_tokens);
// The same, all ids at once (small inputs: tests).
struct TokenizedText {
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> mask;
  bool operator==(const TokenizedText&) const = default;
};
TokenizedText tokenize_files(std::span<const std::filesystem::path> paths,
                             const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options);

// Whether the mask goes beside the token file: only when some id is out of the loss (`strata
// tokenize --output`), or always (the token cache, whose mask also marks where examples start).
enum class MaskFileWhen { some_left_out, always };

// tokenize_files into the llm.c token file `out` (models/data/llmc_writer.h), its mask in
// OUT.mask as `mask_when` says, its ids never all in memory; `header_extra` goes into the
// header's free words (and the mask's key). Returns the ids written.
struct TokenFileWritten {
  std::size_t ids = 0;
  bool mask = false;  // OUT.mask was written
};
TokenFileWritten tokenize_to_file(std::span<const std::filesystem::path> paths,
                                  const tokenizer::Tokenizer& tokenizer,
                                  const TokenizeOptions& options, const std::filesystem::path& out,
                                  MaskFileWhen mask_when,
                                  std::span<const std::int32_t> header_extra = {});

// The tokenizer of the Hugging Face model whose config.json is `hf_config`: the tokenizer.json
// beside it, or none when there is none (or `hf_config` is "", the built-in GPT). Refuses, naming
// both, a tokenizer with more ids than the model's `model_vocab` rows.
std::optional<tokenizer::Tokenizer> model_tokenizer(const std::filesystem::path& hf_config,
                                                    std::int64_t model_vocab);

}  // namespace strata::models
