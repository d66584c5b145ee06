#include "models/llama/rope_frequencies.h"

#include <cmath>
#include <numbers>

#include "base/assert.h"

namespace strata::models {

std::vector<float> rope_inverse_frequencies(const RopeConfig& rope, std::int64_t head_dim) {
  STRATA_ASSERT(head_dim > 0 && head_dim % 2 == 0);
  std::vector<float> inv_freq(static_cast<std::size_t>(head_dim / 2));
  for (std::size_t j = 0; j < inv_freq.size(); ++j) {
    // torch.arange(0, dim, 2).float() / dim, then base ** that, all in fp32.
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv_freq[j] = 1.0f / std::pow(static_cast<float>(rope.theta), exponent);
  }
  if (rope.type == "default") return inv_freq;
  STRATA_ASSERT(rope.type == "llama3");
  const double old_context = static_cast<double>(rope.original_max_positions);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;
  for (float& frequency : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / frequency;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies stay
    if (wavelen > low_freq_wavelen) {
      frequency = static_cast<float>(frequency / rope.factor);
      continue;
    }
    const double smooth = (old_context / wavelen - rope.low_freq_factor) /
                          (rope.high_freq_factor - rope.low_freq_factor);
    frequency = static_cast<float>((1.0 - smooth) * frequency / rope.factor + smooth * frequency);
  }
  return inv_freq;
}

}  // namespace strata::models
