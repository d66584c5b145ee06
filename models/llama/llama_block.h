#pragma once

#include <memory>

#include "models/decoder/decoder_spec.h"
#include "models/llama/llama_shape.h"

namespace strata::models {

// The Llama family's block, as transformers' LlamaDecoderLayer computes it:
//   h = x + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rms(x)
//   out = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)),                   n2 = rms(h)
// with n_head / n_kv_head query heads sharing each k and v head, read in place by the attention
// kernel rather than repeated (transformers' repeat_kv). The rotary inverse frequencies are the
// decoder's constants. Parameter names are Hugging Face's (LlamaForCausalLM's state dict).
BlockFamily llama_blocks(std::shared_ptr<const LlamaShape> shape);

}  // namespace strata::models
