#pragma once

#include <cstdint>

namespace strata::models {

// The token embedding, an untied LM head and the logits have a row (a column of the logits) per
// token, padded to a multiple of kVocabMultiple, as llm.c pads its vocabulary
// (train_gpt2.cu, padded_vocab_size): GPT-2's 50,257 tokens become 50,304, so the head's product
// has an aligned width that tensor cores and vector loads take whole. The padded rows start at
// zero and stay there: no token reads them, and the classifier gives their logits a zero gradient
// (models/classifier.h), so the optimizer's update of each is zero.
inline constexpr std::int64_t kVocabMultiple = 128;

constexpr std::int64_t pad_vocab(std::int64_t vocab) {
  return (vocab + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
}

}  // namespace strata::models
