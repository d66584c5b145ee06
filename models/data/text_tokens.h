#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// Called as documents are tokenized: the bytes of the inputs done so far, and in all.
using TokenizeProgress = std::function<void(std::size_t bytes_done, std::size_t bytes_total)>;

struct TokenizeOptions {
  bool add_special_tokens = true;  // the post-processor's tokens, as encode adds them by default
  int threads = 0;                 // 0: every core
  TokenizeProgress progress;       // may be empty
};

// Receives ids as they are made, a batch of documents at a time, in order.
using OnTokens = std::function<void(std::span<const std::uint32_t> ids)>;

// The ids of every document of the text files `paths` (models/data/text_documents.h), in
// order, packed back to back as Megatron's --append-eod and llm.c's scripts pack them: each
// document encoded as the tokenizer encodes it by default, then its EOS (unless encoding ended
// with it already). Documents are encoded on `options.threads` threads, a batch at a time, and
// handed to `on_tokens`; the ids do not depend on the thread count. Returns how many were made.
// Throws UserError naming the file for bad input, and naming the tokenizer when it has no EOS.
std::size_t tokenize_files(std::span<const std::filesystem::path> paths,
                           const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options,
                           const OnTokens& on_tokens);
// The same, all ids at once (small inputs: tests).
std::vector<std::uint32_t> tokenize_files(std::span<const std::filesystem::path> paths,
                                          const tokenizer::Tokenizer& tokenizer,
                                          const TokenizeOptions& options);

// tokenize_files into the llm.c token file `out` (models/data/llmc_writer.h), its ids never all
// in memory; `header_extra` goes into the header's free words. Returns the ids written.
std::size_t tokenize_to_file(std::span<const std::filesystem::path> paths,
                             const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options,
                             const std::filesystem::path& out,
                             std::span<const std::int32_t> header_extra = {});

// The tokenizer of the Hugging Face model whose config.json is `hf_config`: the tokenizer.json
// beside it, or none when there is none (or `hf_config` is "", the built-in GPT). Refuses, naming
// both, a tokenizer with more ids than the model's `model_vocab` rows.
std::optional<tokenizer::Tokenizer> model_tokenizer(const std::filesystem::path& hf_config,
                                                    std::int64_t model_vocab);

}  // namespace strata::models
