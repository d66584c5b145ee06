#include "engine/loss_tokens.h"

#include <algorithm>

#include "base/assert.h"

namespace strata::engine {

std::int64_t count_loss_tokens(std::span<const std::int32_t> targets,
                               std::span<std::int64_t> per_micro) {
  if (per_micro.empty()) {
    STRATA_ASSERT(targets.empty());
    return 0;
  }
  STRATA_ASSERT(targets.size() % per_micro.size() == 0);
  const std::size_t length = targets.size() / per_micro.size();
  std::int64_t total = 0;
  for (std::size_t micro = 0; micro < per_micro.size(); ++micro) {
    const std::span<const std::int32_t> batch = targets.subspan(micro * length, length);
    per_micro[micro] =
        std::count_if(batch.begin(), batch.end(), [](std::int32_t target) { return target >= 0; });
    total += per_micro[micro];
  }
  return total;
}

float masked_row_loss_gradient(double loss_scale, int world_size, std::int64_t global) {
  STRATA_ASSERT(world_size > 0 && global >= 0);
  if (global == 0) return 0.0f;
  return static_cast<float>(loss_scale * static_cast<double>(world_size) /
                            static_cast<double>(global));
}

double masked_mean_loss(std::span<const float> loss_sums, std::int64_t global) {
  STRATA_ASSERT(global >= 0);
  if (global == 0) return 0.0;
  double sum = 0.0;
  for (const float value : loss_sums)
    sum += value;
  return sum / static_cast<double>(global);
}

}  // namespace strata::engine
