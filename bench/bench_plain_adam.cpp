// A plain Adam loop for comparison with cpu_adam's kernels. Compiled like the rest of the binary
// (baseline x86-64) plus -fno-math-errno, without which GCC keeps sqrtf scalar for errno's sake
// and the loop would not be "compiler-vectorised" at all.

#include "bench/bench_plain_adam.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

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

// Written without branches, so that the compiler can vectorise the copy: round to nearest even,
// NaN kept NaN (the same rule as cpu_adam::to_bf16). fp16 uses to_fp16, whose branches keep
// that variant scalar: a plain loop is what it is.
template <class H>
void narrow_into(H* target, float value) {
  if constexpr (std::is_same_v<H, cpu_adam::bf16>) {
    const auto bits = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (bits >> 16) | 0x40u;
    target->bits = static_cast<std::uint16_t>(value != value ? quiet : rounded);
  } else if constexpr (std::is_same_v<H, cpu_adam::fp16>) {
    *target = cpu_adam::to_fp16(value);
  }
}

struct Constants {
  float grad_scale, beta1, beta2, eps, correction2, step_size, decay, l2;
};

// One tile, through restrict pointers passed by value so the compiler knows nothing aliases.
template <class G, class H>
void plain_tile(const Constants c, float* __restrict params, const G* __restrict grads,
                float* __restrict exp_avg, float* __restrict exp_avg_sq, H* __restrict copy,
                std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float grad = widen(grads[i]) * c.grad_scale + c.l2 * params[i];
    const float m = c.beta1 * exp_avg[i] + (1 - c.beta1) * grad;
    const float v = c.beta2 * exp_avg_sq[i] + (1 - c.beta2) * grad * grad;
    const float denominator = std::sqrt(v) * c.correction2 + c.eps;
    const float updated = params[i] - c.decay * params[i] - c.step_size * m / denominator;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    params[i] = updated;
    if constexpr (!std::is_same_v<H, cpu_adam::NoCopy>) narrow_into(copy + i, updated);
  }
}

}  // namespace

template <class G, class H>
void plain_adam_step(const cpu_adam::AdamConfig& config, std::int64_t step, std::span<float> p,
                     std::span<const G> g, std::span<float> m, std::span<float> v,
                     std::span<H> p_out, float grad_scale) {
  const double t = static_cast<double>(step);
  Constants c{};
  c.grad_scale = grad_scale;
  c.beta1 = config.beta1;
  c.beta2 = config.beta2;
  c.eps = config.eps;
  c.correction2 = config.bias_correction
                      ? static_cast<float>(1 / std::sqrt(1 - std::pow(double{config.beta2}, t)))
                      : 1.0f;
  const float correction1 =
      config.bias_correction ? static_cast<float>(1 - std::pow(double{config.beta1}, t)) : 1.0f;
  c.step_size = config.lr / correction1;
  c.decay = config.adam_w_mode ? config.lr * config.weight_decay : 0.0f;
  c.l2 = config.adam_w_mode ? 0.0f : config.weight_decay;
  const auto n = static_cast<std::int64_t>(p.size());
  const std::int64_t tiles = (n + cpu_adam::kTileElements - 1) / cpu_adam::kTileElements;
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, tiles),
                    [&](const tbb::blocked_range<std::int64_t>& range) {
                      plain_tile<G, H>(c, p.data(), g.data(), m.data(), v.data(), p_out.data(),
                                       range.begin() * cpu_adam::kTileElements,
                                       std::min(n, range.end() * cpu_adam::kTileElements));
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
