#pragma once

#include <cstdint>

#include "models/vocab_padding.h"

namespace strata::models {

// A GPT-2 style pre-LN decoder with learned positions and a tied LM head, shaped by
// "strata": {"model": {...}} and one micro-batch.
struct GptShape {
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t d_model = 128;
  std::int64_t seq_len = 64;
  std::int64_t vocab = 256;
  std::int64_t batch = 4;  // sequences per micro-batch
  // Rows of the position embedding: 0 = seq_len. A pretrained GPT-2 keeps all of its
  // n_positions (1024) rows, of which a run of a shorter seq_len trains the first seq_len.
  std::int64_t positions = 0;

  std::int64_t position_rows() const { return positions > 0 ? positions : seq_len; }
  // Rows of wte and columns of the logits: vocab padded to a multiple of 128
  // (models/vocab_padding.h).
  std::int64_t padded_vocab() const { return pad_vocab(vocab); }
  // Closed form, biases included: Vp*C + P*C (embeddings) + L*(12 C^2 + 13 C) (blocks: qkv,
  // attention projection, MLP up and down, two layer norms) + 2 C (final norm). wte's padded rows
  // are counted: they are allocated, stored and stepped like any other, so the count is the
  // engine's and the memory estimate's to the element (GPT-2's 124,439,808 are 124,475,904 here,
  // as llm.c counts them).
  std::int64_t parameter_count() const {
    std::int64_t c = d_model;
    return padded_vocab() * c + position_rows() * c + n_layer * (12 * c * c + 13 * c) + 2 * c;
  }
  // Training FLOPs per token: 6 per parameter (forward 2, backward 4) plus attention's scores
  // and weighted sums, 12 * L * C * T (PaLM's count, Appendix B). The padded rows count, as in
  // llm.c: the head's product runs over all Vp columns.
  double flops_per_token() const {
    return 6.0 * static_cast<double>(parameter_count()) +
           12.0 * static_cast<double>(n_layer * d_model * seq_len);
  }
  std::int64_t rows() const { return batch * seq_len; }
};

}  // namespace strata::models
