// Global-norm clipping as DeepSpeed's unscale_and_clip_grads does it
// (deepspeed/runtime/zero/stage3.py): clip = ((total_norm / loss_scale) + 1e-6) / clip_grad;
// if clip > 1: combined_scale = clip * loss_scale; grads *= 1 / combined_scale. Literals are the
// Python expressions in the comments.
#include "engine/optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace strata::engine::optim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

TEST(GradClip, NormUndoesTheLossScale) {
  EXPECT_EQ(grad_norm(25.0, 1.0), 5.0);
  EXPECT_EQ(grad_norm(400.0, 4.0), 5.0);  // sqrt(400) / 4
  EXPECT_EQ(grad_norm(0.0, 65536.0), 0.0);
  EXPECT_TRUE(std::isinf(grad_norm(kInf, 2.0)));
  EXPECT_TRUE(std::isnan(grad_norm(kNan, 2.0)));
}

TEST(GradClip, Coefficient) {
  EXPECT_DOUBLE_EQ(clip_coefficient(5.0, 1.0), 0.199999960000008);     // 1 / ((5 + 1e-6) / 1)
  EXPECT_DOUBLE_EQ(clip_coefficient(10.0, 2.0), 0.19999998000000202);  // 1 / ((10 + 1e-6) / 2)
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);                          // under the limit
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);  // zero norm: (0 + 1e-6) / 1 < 1
  EXPECT_EQ(clip_coefficient(5.0, 0.0), 1.0);  // gradient_clipping 0: off
  EXPECT_EQ(clip_coefficient(5.0, -1.0), 1.0);
}

// The test is norm + 1e-6 > max_norm, so a norm exactly at the limit is clipped (a hair), and
// one 1e-6 below it is not: (1 - 1e-6) + 1e-6 == 1.0 in doubles, and 1.0 > 1 is false.
TEST(GradClip, BoundaryAtTheLimit) {
  EXPECT_DOUBLE_EQ(clip_coefficient(1.0, 1.0), 0.9999990000010001);  // 1 / ((1 + 1e-6) / 1)
  EXPECT_EQ(clip_coefficient(1.0 - 1e-6, 1.0), 1.0);
}

// DeepSpeed turns a non-finite norm into -1 (get_grad_norm_direct) so its clip test never
// fires; the step is skipped for the overflow instead.
TEST(GradClip, NonFiniteNormIsNotClipped) {
  EXPECT_EQ(clip_coefficient(kInf, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(kNan, 1.0), 1.0);
}

TEST(GradClip, PlanFoldsLossScaleAndClipIntoOneMultiplier) {
  // Gradients held at scale 65536 with an unscaled norm of 10; clip to 1.
  const double held_norm = 10.0 * 65536.0;
  GradStepPlan plan = plan_grad_step(held_norm * held_norm, 65536.0, 1.0);
  EXPECT_FALSE(plan.overflow);
  EXPECT_DOUBLE_EQ(plan.grad_norm, 10.0);
  EXPECT_DOUBLE_EQ(plan.clip_coefficient, 1.0 / (10.0 + 1e-6));
  // numpy.float32(1 / (((10 + 1e-6) / 1.0) * 65536))
  EXPECT_EQ(plan.grad_scale, 1.525878701613692e-06f);
  // Not clipped: only the loss scale is undone. numpy.float32(1 / 65536)
  plan = plan_grad_step(0.25 * 65536.0 * 65536.0, 65536.0, 1.0);
  EXPECT_DOUBLE_EQ(plan.grad_norm, 0.5);
  EXPECT_EQ(plan.clip_coefficient, 1.0);
  EXPECT_EQ(plan.grad_scale, 1.52587890625e-05f);
  // bf16/fp32: loss scale 1, clipping off.
  plan = plan_grad_step(1e6, 1.0, 0.0);
  EXPECT_EQ(plan.grad_scale, 1.0f);
  EXPECT_DOUBLE_EQ(plan.grad_norm, 1000.0);
}

TEST(GradClip, PlanWithZeroGradients) {
  GradStepPlan plan = plan_grad_step(0.0, 1024.0, 1.0);
  EXPECT_FALSE(plan.overflow);
  EXPECT_EQ(plan.grad_norm, 0.0);
  EXPECT_EQ(plan.clip_coefficient, 1.0);
  EXPECT_EQ(plan.grad_scale, 1.0f / 1024.0f);
}

TEST(GradClip, PlanMarksInfAndNanAsOverflow) {
  for (double sum : {kInf, kNan}) {
    GradStepPlan plan = plan_grad_step(sum, 65536.0, 1.0);
    EXPECT_TRUE(plan.overflow);
    EXPECT_FALSE(std::isfinite(plan.grad_norm));
    EXPECT_EQ(plan.clip_coefficient, 1.0);
    EXPECT_EQ(plan.grad_scale, 1.52587890625e-05f);  // what a run without the check would use
  }
}

// The ZeRO recipe: each rank sums its own shard's squares, the ranks' sums are added in rank
// order, and the norm equals the norm of the whole gradient. An inf in one shard poisons the
// global sum, so the one scalar carries the overflow verdict to every rank.
TEST(GradClip, ShardSumsGiveTheGlobalNorm) {
  std::vector<float> gradient(1000);
  for (std::size_t i = 0; i < gradient.size(); ++i)
    gradient[i] = static_cast<float>((static_cast<int>(i * 37 % 101) - 50)) * 0.01f;
  double whole = 0;
  for (float g : gradient)
    whole += static_cast<double>(g) * g;
  const int world = 3;
  const std::size_t shard = (gradient.size() + world - 1) / world;  // the last shard is padded
  std::vector<double> per_rank(world, 0.0);
  for (int r = 0; r < world; ++r)
    for (std::size_t i = r * shard; i < std::min(gradient.size(), (r + 1) * shard); ++i)
      per_rank[r] += static_cast<double>(gradient[i]) * gradient[i];
  const double global = sum_of_squares(per_rank);
  EXPECT_NEAR(global, whole, 1e-12 * whole);
  EXPECT_DOUBLE_EQ(grad_norm(global, 1.0), std::sqrt(whole));
  per_rank[1] = kInf;
  EXPECT_TRUE(plan_grad_step(sum_of_squares(per_rank), 1.0, 1.0).overflow);
  per_rank[1] = kNan;
  EXPECT_TRUE(plan_grad_step(sum_of_squares(per_rank), 1.0, 1.0).overflow);
}

TEST(GradClip, SumOfSquaresAddsInTheGivenOrder) {
  const std::vector<double> parts = {1e16, 1.0, 1.0};
  EXPECT_EQ(sum_of_squares(parts), 1e16);  // (1e16 + 1) + 1 rounds back each time
  const std::vector<double> reversed = {1.0, 1.0, 1e16};
  EXPECT_EQ(sum_of_squares(reversed), 1e16 + 2.0);
  EXPECT_EQ(sum_of_squares({}), 0.0);
}

TEST(GradClip, WhoChecksOverflow) {
  Fp16Config fp16;
  Bf16Config bf16;
  EXPECT_TRUE(checks_overflow(fp16, bf16));  // fp32: strata checks (DeepSpeed does not)
  fp16.enabled = true;
  EXPECT_TRUE(checks_overflow(fp16, bf16));
  fp16.enabled = false;
  bf16.enabled = true;
  EXPECT_TRUE(checks_overflow(fp16, bf16));  // check_grad_overflow defaults to true
  bf16.check_grad_overflow = false;
  EXPECT_FALSE(checks_overflow(fp16, bf16));
}

}  // namespace
}  // namespace strata::engine::optim
