// A plain Adam loop for comparison with cpu_adam's kernels. Compiled like the rest of the binary
// (baseline x86-64) plus -fno-math-errno, without which GCC keeps sqrtf scalar for errno's sake
// and the loop would not be "compiler-vectorised" at all.

#include "tools/bench_plain_adam.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

namespace strata::tools::bench {
namespace {

template <class G>
float widen(G value) {
  if constexpr (std::is_same_v<G, float>) {
    return value;
  } else {
    return cpu_adam::to_float(value);
  }
}

template <class H>
void narrow_into(H* target, float value) {
  if constexpr (std::is_same_v<H, cpu_adam::bf16>) {
    *target = cpu_adam::to_bf16(value);
  } else if constexpr (std::is_same_v<H, cpu_adam::fp16>) {
    *target = cpu_adam::to_fp16(value);
  }
}

}  // namespace

template <class G, class H>
void plain_adam_step(const cpu_adam::AdamConfig& config, std::int64_t step, std::span<float> p,
                     std::span<const G> g, std::span<float> m, std::span<float> v,
                     std::span<H> p_out, float grad_scale) {
  const double t = static_cast<double>(step);
  const float correction1 =
      config.bias_correction ? static_cast<float>(1 - std::pow(double{config.beta1}, t)) : 1.0f;
  const float correction2 =
      config.bias_correction
          ? static_cast<float>(1 / std::sqrt(1 - std::pow(double{config.beta2}, t)))
          : 1.0f;
  const float step_size = config.lr / correction1;
  const float beta1 = config.beta1, beta2 = config.beta2, eps = config.eps;
  const float decay = config.lr * config.weight_decay;
  const float l2 = config.adam_w_mode ? 0.0f : config.weight_decay;
  const auto n = static_cast<std::int64_t>(p.size());
  const std::int64_t tiles = (n + cpu_adam::kTileElements - 1) / cpu_adam::kTileElements;
  float* __restrict params = p.data();
  const G* __restrict grads = g.data();
  float* __restrict exp_avg = m.data();
  float* __restrict exp_avg_sq = v.data();
  H* __restrict copy = p_out.data();
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, tiles),
                    [&](const tbb::blocked_range<std::int64_t>& range) {
                      const std::int64_t begin = range.begin() * cpu_adam::kTileElements;
                      const std::int64_t end = std::min(n, range.end() * cpu_adam::kTileElements);
                      for (std::int64_t i = begin; i < end; ++i) {
                        float grad = widen(grads[i]) * grad_scale + l2 * params[i];
                        exp_avg[i] = beta1 * exp_avg[i] + (1 - beta1) * grad;
                        exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (1 - beta2) * grad * grad;
                        const float denominator = std::sqrt(exp_avg_sq[i]) * correction2 + eps;
                        const float updated =
                            params[i] - decay * params[i] - step_size * exp_avg[i] / denominator;
                        params[i] = updated;
                        if constexpr (!std::is_same_v<H, cpu_adam::NoCopy>)
                          narrow_into(copy + i, updated);
                      }
                    });
}

using cpu_adam::AdamConfig;
using cpu_adam::bf16;
using cpu_adam::fp16;
using cpu_adam::NoCopy;
using Floats = std::span<float>;
template void plain_adam_step<float, NoCopy>(const AdamConfig&, std::int64_t, Floats,
                                             std::span<const float>, Floats, Floats,
                                             std::span<NoCopy>, float);
template void plain_adam_step<float, bf16>(const AdamConfig&, std::int64_t, Floats,
                                           std::span<const float>, Floats, Floats, std::span<bf16>,
                                           float);
template void plain_adam_step<float, fp16>(const AdamConfig&, std::int64_t, Floats,
                                           std::span<const float>, Floats, Floats, std::span<fp16>,
                                           float);
template void plain_adam_step<bf16, NoCopy>(const AdamConfig&, std::int64_t, Floats,
                                            std::span<const bf16>, Floats, Floats,
                                            std::span<NoCopy>, float);
template void plain_adam_step<bf16, bf16>(const AdamConfig&, std::int64_t, Floats,
                                          std::span<const bf16>, Floats, Floats, std::span<bf16>,
                                          float);
template void plain_adam_step<bf16, fp16>(const AdamConfig&, std::int64_t, Floats,
                                          std::span<const bf16>, Floats, Floats, std::span<fp16>,
                                          float);
template void plain_adam_step<fp16, NoCopy>(const AdamConfig&, std::int64_t, Floats,
                                            std::span<const fp16>, Floats, Floats,
                                            std::span<NoCopy>, float);
template void plain_adam_step<fp16, bf16>(const AdamConfig&, std::int64_t, Floats,
                                          std::span<const fp16>, Floats, Floats, std::span<bf16>,
                                          float);
template void plain_adam_step<fp16, fp16>(const AdamConfig&, std::int64_t, Floats,
                                          std::span<const fp16>, Floats, Floats, std::span<fp16>,
                                          float);

}  // namespace strata::tools::bench
