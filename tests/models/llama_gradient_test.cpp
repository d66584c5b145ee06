// The Llama family's backward against finite differences (tests/models/model_gradient.h): GQA
// with and without q/k/v biases (Qwen2), tied and untied heads, llama3-scaled rotary embeddings.
#include "models/llama/llama.h"
#include "models/llama/rope_frequencies.h"
#include "tests/models/model_gradient.h"

namespace strata::models {
namespace {

LlamaShape tiny_llama(bool tied, bool biased, const RopeConfig& rope) {
  LlamaShape shape;
  shape.n_layer = 2;
  shape.n_head = 4;
  shape.n_kv_head = 2;
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

TEST(LlamaGradient, UntiedGroupedQueryBackwardMatchesFiniteDifferences) {
  testing::GradientHarness harness(std::make_unique<Llama>(tiny_llama(false, false, RopeConfig{})),
                                   50);
  testing::expect_gradients_match_finite_differences(harness);
}

TEST(LlamaGradient, TiedBiasedLlama3RopeBackwardMatchesFiniteDifferences) {
  RopeConfig rope;
  rope.theta = 500000.0;
  rope.type = "llama3";
  rope.factor = 8.0;
  rope.original_max_positions = 8;
  testing::GradientHarness harness(std::make_unique<Llama>(tiny_llama(true, true, rope)), 50);
  testing::expect_gradients_match_finite_differences(harness);
}

}  // namespace
}  // namespace strata::models
