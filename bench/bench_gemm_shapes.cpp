#include "bench/bench_gemm_shapes.h"

namespace strata::tools {

std::vector<GemmLayer> model_gemm_layers(const models::ModelPlan& plan) {
  if (plan.gpt) {
    const models::GptShape& s = *plan.gpt;
    const std::int64_t rows = s.rows(), c = s.d_model;
    return {{"qkv", rows, c, 3 * c, s.n_layer, true, false},
            {"attn_proj", rows, c, c, s.n_layer, true, false},
            {"mlp_fc", rows, c, 4 * c, s.n_layer, true, true},
            {"mlp_proj", rows, 4 * c, c, s.n_layer, true, false},
            {"lm_head", rows, c, s.padded_vocab(), 1, false, false}};
  }
  const models::LlamaShape& s = *plan.llama;
  const std::int64_t rows = s.rows(), c = s.d_model;
  const std::int64_t q = s.n_head * s.head_dim(), kv = s.n_kv_head * s.head_dim();
  return {{"q_proj", rows, c, q, s.n_layer, s.qkv_bias, false},
          {"k_proj", rows, c, kv, s.n_layer, s.qkv_bias, false},
          {"v_proj", rows, c, kv, s.n_layer, s.qkv_bias, false},
          {"o_proj", rows, q, c, s.n_layer, false, false},
          {"gate_proj", rows, c, s.d_ff, s.n_layer, false, false},
          {"up_proj", rows, c, s.d_ff, s.n_layer, false, false},
          {"down_proj", rows, s.d_ff, c, s.n_layer, false, false},
          {"lm_head", rows, c, s.padded_vocab(), 1, false, false}};
}

}  // namespace strata::tools
