#include "models/llama/llama.h"

#include "base/assert.h"
#include "models/llama/llama_block.h"

namespace strata::models {
namespace {

DecoderSpec llama_spec(const std::shared_ptr<const LlamaShape>& shape) {
  const LlamaShape& s = *shape;
  STRATA_ASSERT(s.n_head > 0 && s.d_model % s.n_head == 0);
  STRATA_ASSERT(s.n_kv_head > 0 && s.n_head % s.n_kv_head == 0);
  STRATA_ASSERT(s.head_dim() % 2 == 0);
  STRATA_ASSERT(static_cast<std::int64_t>(s.inv_freq.size()) == s.head_dim() / 2);
  DecoderSpec spec;
  spec.n_layer = s.n_layer;
  spec.d_model = s.d_model;
  spec.seq_len = s.seq_len;
  spec.vocab = s.vocab;
  spec.batch = s.batch;
  spec.heads = s.n_head;
  spec.kv_heads = s.n_kv_head;
  spec.head_dim = s.head_dim();
  spec.token_table = "model.embed_tokens.weight";
  spec.final_norm = {NormKind::rms_norm, "model.norm", s.rms_norm_eps};
  spec.lm_head = s.tied_head ? "" : "lm_head.weight";
  spec.constants = s.inv_freq;  // rope_forward and rope_backward read them on the device
  spec.flops_per_token = s.flops_per_token();
  spec.blocks = llama_blocks(shape);
  return spec;
}

}  // namespace

Llama::Llama(const LlamaShape& shape) : Llama(std::make_shared<const LlamaShape>(shape)) {}

Llama::Llama(std::shared_ptr<const LlamaShape> shape)
    : Decoder(llama_spec(shape)), shape_(std::move(shape)) {}

}  // namespace strata::models
