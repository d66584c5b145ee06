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

// The ids of every document of the text files `paths` (models/data/text_documents.h), in
// order, packed back to back as Megatron's --append-eod and llm.c's scripts pack them: each
// document encoded as the tokenizer encodes it by default, then its EOS (unless encoding ended
// with it already). Documents are encoded on `threads` threads; the result does not depend on
// how many. Throws UserError naming the file for bad input, and naming the tokenizer when it has
// no EOS token.
std::vector<std::uint32_t> tokenize_files(std::span<const std::filesystem::path> paths,
                                          const tokenizer::Tokenizer& tokenizer,
                                          const TokenizeOptions& options);

// The tokenizer of the Hugging Face model whose config.json is `hf_config`: the tokenizer.json
// beside it, or none when there is none (or `hf_config` is "", the built-in GPT). Refuses, naming
// both, a tokenizer with more ids than the model's `model_vocab` rows.
std::optional<tokenizer::Tokenizer> model_tokenizer(const std::filesystem::path& hf_config,
                                                    std::int64_t model_vocab);

// Words 3 onwards of an llm.c header, which llm.c leaves 0 and strata's token cache uses.
inline constexpr std::size_t kLlmcFreeHeaderWords = 253;

// Writes `ids` as an llm.c token file: v1 (uint16) when `vocab` <= 65,536, else v7 (uint32);
// `header_extra` goes into header words 3 onwards. Written to OUT.partial.PID, then renamed, so
// that a failed write leaves no file a reader would take. Throws UserError naming the file when it
// cannot be written, and for more ids than a header counts (2^31 - 1).
void write_llmc_tokens(const std::filesystem::path& out, std::span<const std::uint32_t> ids,
                       std::int64_t vocab, std::span<const std::int32_t> header_extra = {});

}  // namespace strata::models
