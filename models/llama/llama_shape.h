#pragma once

#include <cstdint>
#include <vector>

#include "models/vocab_padding.h"

namespace strata::models {

// The shape of a Llama-family decoder (Llama 2/3, Mistral, Qwen2, TinyLlama, SmolLM): RMSNorm,
// rotary position embeddings, grouped-query attention, a SwiGLU MLP, a tied or untied LM head,
// and for Qwen2 biases on q, k and v. Read from a Hugging Face config.json
// (models/hf/hf_config.h) and trained at seq_len with micro-batches of `batch` sequences.
struct LlamaShape {
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;  // num_key_value_heads: n_head / n_kv_head query heads share one
  std::int64_t d_model = 0;    // hidden_size
  std::int64_t d_ff = 0;       // intermediate_size
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t batch = 1;
  double rms_norm_eps = 1e-6;
  bool tied_head = false;  // tie_word_embeddings: the head reads embed_tokens
  bool qkv_bias = false;   // Qwen2's q, k and v projections have biases
  // The rotary inverse frequencies, head_dim / 2 of them, with any rope_scaling applied.
  std::vector<float> inv_freq;

  std::int64_t head_dim() const { return d_model / n_head; }
  std::int64_t rows() const { return batch * seq_len; }
  // Rows of embed_tokens and lm_head and columns of the logits: vocab padded to a multiple of 128
  // (models/vocab_padding.h).
  std::int64_t padded_vocab() const { return pad_vocab(vocab); }
  // The parameters as allocated: the tables' padded rows are counted, as GptShape counts them.
  std::int64_t parameter_count() const {
    const std::int64_t c = d_model, q = n_head * head_dim(), kv = n_kv_head * head_dim();
    const std::int64_t block =
        c + c * q + 2 * c * kv + q * c + c + 3 * c * d_ff + (qkv_bias ? q + 2 * kv : 0);
    const std::int64_t table = padded_vocab() * c;
    return table + n_layer * block + c + (tied_head ? 0 : table);
  }
  // Training FLOPs per token: 6 per parameter plus attention's scores and weighted sums,
  // 12 * L * C * T, as GptShape counts them (padded rows included).
  double flops_per_token() const {
    return 6.0 * static_cast<double>(parameter_count()) +
           12.0 * static_cast<double>(n_layer * d_model * seq_len);
  }
};

}  // namespace strata::models
