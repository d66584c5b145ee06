// The GPT's backward against finite differences (tests/models/model_gradient.h).
#include "models/gpt/gpt.h"
#include "tests/models/model_gradient.h"

namespace strata::models {
namespace {

TEST(GptGradient, BackwardMatchesFiniteDifferencesForEveryTensor) {
  testing::GradientHarness harness(std::make_unique<Gpt>(GptShape{1, 2, 16, 8, 256, 2}), 256);
  testing::expect_gradients_match_finite_differences(harness);
}

}  // namespace
}  // namespace strata::models
