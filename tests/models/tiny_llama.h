#pragma once

#include <cstdint>

#include "models/llama/llama_shape.h"
#include "models/llama/rope_frequencies.h"

namespace strata::models::testing {

// The Llama of the gradient tests: 2 layers, 4 query heads of 4 over `n_kv_head` key/value heads,
// d_ff 24, 6 tokens, vocab 50, 2 sequences.
inline LlamaShape tiny_llama(std::int64_t n_kv_head, bool tied, bool biased,
                             const RopeConfig& rope = {}) {
  LlamaShape shape;
  shape.n_layer = 2;
  shape.n_head = 4;
  shape.n_kv_head = n_kv_head;
  shape.d_model = 16;
  shape.d_ff = 24;
  shape.seq_len = 6;
  shape.vocab = 50;
  shape.batch = 2;
  shape.rms_norm_eps = 1e-5;
  shape.tied_head = tied;
  shape.qkv_bias = biased;
  shape.inv_freq = rope_inverse_frequencies(rope, shape.head_dim());
  return shape;
}

}  // namespace strata::models::testing
