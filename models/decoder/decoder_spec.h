#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/vocab_padding.h"

namespace strata::models {

class DecoderBlock;
struct DecoderState;

// One buffer of a block's activation plan: `elements` in the model's compute type, or in fp32
// whatever it is (the norms' statistics, attention's log-sum-exp).
struct PlannedBuffer {
  std::int64_t elements = 0;
  bool fp32 = false;
};
inline PlannedBuffer in_compute(std::int64_t elements) {
  return {elements, false};
}
inline PlannedBuffer in_fp32(std::int64_t elements) {
  return {elements, true};
}
// A block's buffers by the slot numbers its family gives them, carved in that order.
using ActivationPlan = std::vector<PlannedBuffer>;

// What a family's blocks are: how to make layer `layer`'s and what each keeps between forward
// and backward.
struct BlockFamily {
  std::function<std::unique_ptr<DecoderBlock>(const DecoderState& state, std::int64_t layer)> make;
  ActivationPlan activations;  // one set per block, or one shared by all with checkpointing
  ActivationPlan gradients;    // one set shared by every block, zeroed before each backward
};

enum class NormKind { layer_norm, rms_norm };

// The final norm: a layer norm has a weight and a bias (its eps is the kernel's), an RMSNorm a
// weight and `eps`; the parameters are named name + ".weight" and name + ".bias".
struct NormSpec {
  NormKind kind = NormKind::layer_norm;
  std::string name;
  double eps = 0;
};

// A pre-norm decoder: a token embedding (and learned positions when position_rows > 0), the
// family's blocks on one residual stream, a final norm, an LM head (its own table, or the token
// embedding when tied) and the cross-entropy loss, for micro-batches of `batch` sequences.
struct DecoderSpec {
  std::int64_t n_layer = 0;
  std::int64_t d_model = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t batch = 0;
  // Attention's heads: `heads` query heads over `kv_heads` key/value heads of head_dim each (what
  // generation's KV cache holds, models/decoder/kv_cache.h).
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::string token_table;     // the embedding's (rows padded, models/vocab_padding.h)
  std::string position_table;  // the learned positions', when position_rows > 0
  std::int64_t position_rows = 0;
  NormSpec final_norm;
  std::string lm_head;  // "": tied, the head reads token_table
  // Constants the blocks read on the device, uploaded once (the rotary inverse frequencies).
  std::vector<float> constants;
  double flops_per_token = 0;
  BlockFamily blocks;

  std::int64_t rows() const { return batch * seq_len; }
  std::int64_t padded_vocab() const { return pad_vocab(vocab); }
};

}  // namespace strata::models
