#include "models/gpt/gpt.h"

#include "base/assert.h"
#include "models/gpt/gpt_block.h"

namespace strata::models {
namespace {

DecoderSpec gpt_spec(const std::shared_ptr<const GptShape>& shape) {
  const GptShape& s = *shape;
  STRATA_ASSERT(s.d_model % s.n_head == 0);
  DecoderSpec spec;
  spec.n_layer = s.n_layer;
  spec.d_model = s.d_model;
  spec.seq_len = s.seq_len;
  spec.vocab = s.vocab;
  spec.batch = s.batch;
  spec.heads = s.n_head;
  spec.kv_heads = s.n_head;
  spec.head_dim = s.d_model / s.n_head;
  spec.token_table = "wte";
  spec.position_table = "wpe";
  spec.position_rows = s.position_rows();
  spec.final_norm = {NormKind::layer_norm, "lnf"};
  spec.flops_per_token = s.flops_per_token();
  spec.blocks = gpt_blocks(shape);
  return spec;
}

}  // namespace

Gpt::Gpt(const GptShape& shape) : Gpt(std::make_shared<const GptShape>(shape)) {}

Gpt::Gpt(std::shared_ptr<const GptShape> shape)
    : Decoder(gpt_spec(shape)), shape_(std::move(shape)) {}

}  // namespace strata::models
