#pragma once

#include <filesystem>

#include "models/data/text_tokens.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// A text file's ids under a model's tokenizer, made once and kept beside it as
// FILE.strata-tokens.bin, an llm.c token file any reader of those takes, with its loss mask
// (models/data/loss_mask.h) in FILE.strata-tokens.bin.mask. Its header's free words (llm.c leaves
// them 0) and the mask's hold the key it was made under: the tokenizer's content hash with the
// chat template's, and the text file's size and modification time. A cache whose key differs, from
// another tokenizer or an older text, is never read: it is made again (to
// FILE.strata-tokens.bin.partial, renamed when whole, so that a run killed while tokenizing leaves
// the old cache or none).
//
// Returns the cache's path. Throws UserError naming the file when the text cannot be read or the
// cache cannot be written (with the fix of writing a token file elsewhere with
// `strata tokenize --output`).
// `chat`: the folder's chat template, nullptr for none.
std::filesystem::path cached_tokens(const std::filesystem::path& text,
                                    const tokenizer::Tokenizer& tokenizer, const ChatEncoder* chat,
                                    const TokenizeProgress& progress);

// The path cached_tokens keeps the ids of `text` at.
std::filesystem::path token_cache_path(const std::filesystem::path& text);

}  // namespace strata::models
