// The Llama family's backward against finite differences (tests/models/model_gradient.h): GQA
// with and without q/k/v biases (Qwen2), tied and untied heads, llama3-scaled rotary embeddings.
#include "models/llama/llama.h"
#include "models/llama/rope_frequencies.h"
#include "tests/models/model_gradient.h"
#include "tests/models/tiny_llama.h"

namespace strata::models {
namespace {

using testing::tiny_llama;

TEST(LlamaGradient, UntiedGroupedQueryBackwardMatchesFiniteDifferences) {
  testing::GradientHarness harness(std::make_unique<Llama>(tiny_llama(2, false, false)), 50);
  testing::expect_gradients_match_finite_differences(harness);
}

TEST(LlamaGradient, TiedBiasedLlama3RopeBackwardMatchesFiniteDifferences) {
  RopeConfig rope;
  rope.theta = 500000.0;
  rope.type = "llama3";
  rope.factor = 8.0;
  rope.original_max_positions = 8;
  testing::GradientHarness harness(std::make_unique<Llama>(tiny_llama(2, true, true, rope)), 50);
  testing::expect_gradients_match_finite_differences(harness);
}

}  // namespace
}  // namespace strata::models
