// The optimizer calls: check the arguments, compute the per-call constants in double, pick the
// active ISA's kernel and walk the tiles with TBB.

#include "cpu_adam/optimizer.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "base/assert.h"
#include "base/error.h"
#include "cpu_adam/detail/args.h"
#include "cpu_adam/detail/kernels.h"
#include "cpu_adam/isa.h"

namespace strata::cpu_adam {
namespace {

using detail::Arrays;

const detail::KernelTable& kernels() {
  switch (active_isa()) {
    case Isa::avx512:
      return detail::avx512_kernels();
    case Isa::avx2:
      return detail::avx2_kernels();
    case Isa::scalar:
      break;
  }
  return detail::scalar_kernels();
}

template <class G>
constexpr int grad_index() {
  if constexpr (std::same_as<G, float>) return detail::grad_f32;
  if constexpr (std::same_as<G, bf16>) return detail::grad_bf16;
  return detail::grad_fp16;
}

template <class S>
constexpr int state_index() {
  return std::same_as<S, float> ? detail::state_f32 : detail::state_bf16;
}

template <class H>
constexpr int copy_index() {
  if constexpr (std::same_as<H, NoCopy>) return detail::copy_none;
  if constexpr (std::same_as<H, bf16>) return detail::copy_bf16;
  return detail::copy_fp16;
}

std::int64_t tile_count(std::int64_t n) {
  return gradient_tile_count(n);
}

// Runs tile(begin, end) once for every tile of [0, n), spread over the current arena. Each tile
// runs start to end on one thread, so an element's result never depends on the thread count.
template <class Tile>
void for_each_tile(std::int64_t n, const Tile& tile) {
  const std::int64_t tiles = tile_count(n);
  if (tiles <= 1) {
    if (n > 0) tile(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, tiles),
                    [&](const tbb::blocked_range<std::int64_t>& range) {
                      for (std::int64_t t = range.begin(); t != range.end(); ++t) {
                        tile(t * kTileElements, std::min(n, (t + 1) * kTileElements));
                      }
                    });
}

void check_finite_at_least_zero(float value, const char* key, const char* example) {
  if (!std::isfinite(value) || value < 0.0f) {
    throw UserError(
        fmt::format("optimizer.params.{} is {}; it must be a finite number >= 0", key, value),
        fmt::format("set optimizer.params.{} to a value such as {}", key, example), 2);
  }
}

void check_beta(float value, int index, const char* example) {
  if (!(value >= 0.0f && value < 1.0f)) {
    throw UserError(
        fmt::format("optimizer.params.betas[{}] is {}; it must be in [0, 1)", index, value),
        fmt::format("set optimizer.params.betas to two numbers in [0, 1), such as {}", example), 2);
  }
}

template <class P, class G, class S, class H>
Arrays make_arrays(std::span<P> p, std::span<const G> g, std::span<S> m, std::span<S> v,
                   std::span<H> p_out) {
  const auto n = p.size();
  STRATA_ASSERT(g.size() == n);
  STRATA_ASSERT(m.empty() || m.size() == n);
  STRATA_ASSERT(v.empty() || v.size() == n);
  if constexpr (std::same_as<H, NoCopy>) {
    STRATA_ASSERT(p_out.empty());
    return Arrays{p.data(), g.data(), m.data(), v.data(), nullptr};
  } else {
    STRATA_ASSERT(p_out.size() == n);
    return Arrays{p.data(), g.data(), m.data(), v.data(), p_out.data()};
  }
}

float one_minus(float beta) {
  return static_cast<float>(1.0 - static_cast<double>(beta));
}

}  // namespace

void validate(const AdamConfig& config) {
  check_finite_at_least_zero(config.lr, "lr", "1e-3");
  check_beta(config.beta1, 0, "[0.9, 0.999]");
  check_beta(config.beta2, 1, "[0.9, 0.999]");
  check_finite_at_least_zero(config.eps, "eps", "1e-8");
  check_finite_at_least_zero(config.weight_decay, "weight_decay", "0.01");
}

void validate(const AdagradConfig& config) {
  check_finite_at_least_zero(config.lr, "lr", "1e-2");
  check_finite_at_least_zero(config.eps, "eps", "1e-10");
  check_finite_at_least_zero(config.weight_decay, "weight_decay", "0");
}

void validate(const LionConfig& config) {
  check_finite_at_least_zero(config.lr, "lr", "1e-4");
  check_beta(config.beta1, 0, "[0.9, 0.99]");
  check_beta(config.beta2, 1, "[0.9, 0.99]");
  check_finite_at_least_zero(config.weight_decay, "weight_decay", "0.01");
}

namespace detail {

AdamArgs adam_args(const AdamConfig& c, std::int64_t t, float grad_scale) {
  const double lr = c.lr;
  double correction1 = 1.0;
  double correction2 = 1.0;
  if (c.bias_correction) {
    const auto power = static_cast<double>(t);
    correction1 = 1.0 - std::pow(static_cast<double>(c.beta1), power);
    correction2 = 1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(c.beta2), power));
  }
  const bool decays = c.weight_decay > 0.0f;
  return AdamArgs{
      .grad_scale = grad_scale,
      .beta1 = c.beta1,
      .one_minus_beta1 = one_minus(c.beta1),
      .beta2 = c.beta2,
      .one_minus_beta2 = one_minus(c.beta2),
      .eps = c.eps,
      .bias_correction2 = static_cast<float>(correction2),
      .step_size = static_cast<float>(-lr / correction1),
      .weight_decay = c.weight_decay,
      .decay = static_cast<float>(-lr * static_cast<double>(c.weight_decay)),
      .l2_decay = decays && !c.adam_w_mode,
      .decoupled_decay = decays && c.adam_w_mode,
  };
}

AdagradArgs adagrad_args(const AdagradConfig& config, float grad_scale) {
  return AdagradArgs{
      .grad_scale = grad_scale,
      .eps = config.eps,
      .step_size = -config.lr,
      .weight_decay = config.weight_decay,
      .l2_decay = config.weight_decay > 0.0f,
  };
}

LionArgs lion_args(const LionConfig& config, float grad_scale) {
  const double decay = static_cast<double>(config.lr) * static_cast<double>(config.weight_decay);
  return LionArgs{
      .grad_scale = grad_scale,
      .beta1 = config.beta1,
      .one_minus_beta1 = one_minus(config.beta1),
      .beta2 = config.beta2,
      .one_minus_beta2 = one_minus(config.beta2),
      .step_size = -config.lr,
      .after_decay = static_cast<float>(1.0 - decay),
      .decay = config.weight_decay > 0.0f,
  };
}

}  // namespace detail

namespace {

// The steps over `table`: the active ISA's kernels (step) or the GPU optimizer's twin.
template <GradElement G, CopyElement H, StateElement P, StateElement S>
void adam_with(const detail::KernelTable& table, const AdamConfig& config, std::int64_t step,
               StateSpan<P> p, std::span<const G> g, StateSpan<S> m, StateSpan<S> v,
               std::span<H> p_out, float grad_scale) {
  validate(config);
  STRATA_ASSERT(step >= 1);
  STRATA_ASSERT(m.size() == p.size());
  STRATA_ASSERT(v.size() == p.size());
  const Arrays arrays = make_arrays(p, g, m, v, p_out);
  const detail::AdamArgs args = detail::adam_args(config, step, grad_scale);
  const detail::AdamKernel kernel =
      table.adam[state_index<P>()][state_index<S>()][grad_index<G>()][copy_index<H>()];
  for_each_tile(static_cast<std::int64_t>(p.size()),
                [&](std::int64_t begin, std::int64_t end) { kernel(args, arrays, begin, end); });
}

template <GradElement G, CopyElement H, StateElement P, StateElement S>
void adagrad_with(const detail::KernelTable& table, const AdagradConfig& config, std::int64_t step,
                  StateSpan<P> p, std::span<const G> g, StateSpan<S> v, std::span<H> p_out,
                  float grad_scale) {
  validate(config);
  STRATA_ASSERT(step >= 1);
  STRATA_ASSERT(v.size() == p.size());
  const Arrays arrays = make_arrays(p, g, std::span<S>{}, v, p_out);
  const detail::AdagradArgs args = detail::adagrad_args(config, grad_scale);
  const detail::AdagradKernel kernel =
      table.adagrad[state_index<P>()][state_index<S>()][grad_index<G>()][copy_index<H>()];
  for_each_tile(static_cast<std::int64_t>(p.size()),
                [&](std::int64_t begin, std::int64_t end) { kernel(args, arrays, begin, end); });
}

template <GradElement G, CopyElement H, StateElement P, StateElement S>
void lion_with(const detail::KernelTable& table, const LionConfig& config, std::int64_t step,
               StateSpan<P> p, std::span<const G> g, StateSpan<S> m, std::span<H> p_out,
               float grad_scale) {
  validate(config);
  STRATA_ASSERT(step >= 1);
  STRATA_ASSERT(m.size() == p.size());
  const Arrays arrays = make_arrays(p, g, m, std::span<S>{}, p_out);
  const detail::LionArgs args = detail::lion_args(config, grad_scale);
  const detail::LionKernel kernel =
      table.lion[state_index<P>()][state_index<S>()][grad_index<G>()][copy_index<H>()];
  for_each_tile(static_cast<std::int64_t>(p.size()),
                [&](std::int64_t begin, std::int64_t end) { kernel(args, arrays, begin, end); });
}

}  // namespace

template <GradElement G, CopyElement H, StateElement P, StateElement S>
void step(const AdamConfig& config, std::int64_t step, StateSpan<P> p, std::span<const G> g,
          StateSpan<S> m, StateSpan<S> v, std::span<H> p_out, float grad_scale) {
  adam_with<G, H, P, S>(kernels(), config, step, p, g, m, v, p_out, grad_scale);
}

template <GradElement G, CopyElement H, StateElement P, StateElement S>
void step(const AdagradConfig& config, std::int64_t step, StateSpan<P> p, std::span<const G> g,
          StateSpan<S> v, std::span<H> p_out, float grad_scale) {
  adagrad_with<G, H, P, S>(kernels(), config, step, p, g, v, p_out, grad_scale);
}

template <GradElement G, CopyElement H, StateElement P, StateElement S>
void step(const LionConfig& config, std::int64_t step, StateSpan<P> p, std::span<const G> g,
          StateSpan<S> m, std::span<H> p_out, float grad_scale) {
  lion_with<G, H, P, S>(kernels(), config, step, p, g, m, p_out, grad_scale);
}

template <CopyElement H>
void gpu_twin_step(const AdamConfig& config, std::int64_t step, std::span<float> p,
                   std::span<const float> g, std::span<float> m, std::span<float> v,
                   std::span<H> p_out, float grad_scale) {
  adam_with<float, H, float, float>(detail::fused_lane_kernels(), config, step, p, g, m, v, p_out,
                                    grad_scale);
}

template <CopyElement H>
void gpu_twin_step(const AdagradConfig& config, std::int64_t step, std::span<float> p,
                   std::span<const float> g, std::span<float> v, std::span<H> p_out,
                   float grad_scale) {
  adagrad_with<float, H, float, float>(detail::fused_lane_kernels(), config, step, p, g, v, p_out,
                                       grad_scale);
}

template <CopyElement H>
void gpu_twin_step(const LionConfig& config, std::int64_t step, std::span<float> p,
                   std::span<const float> g, std::span<float> m, std::span<H> p_out,
                   float grad_scale) {
  lion_with<float, H, float, float>(detail::fused_lane_kernels(), config, step, p, g, m, p_out,
                                    grad_scale);
}

// The sum over `tiles` partials, partial_of(t) for each: one fixed tree whatever the thread count.
// The deterministic reduce splits the tile range the same way every time and joins the halves in
// the same tree, so the double sum has the same bits every time, and the same whether the
// partials are scanned here or were scanned earlier, piece by piece (combine_gradient_tiles).
template <class PartialOf>
GradStats reduce_tiles(std::int64_t tiles, const PartialOf& partial_of) {
  if (tiles == 0) return GradStats{};
  if (tiles == 1) {
    const detail::ScanPartial partial = partial_of(std::int64_t{0});
    return GradStats{partial.sum_squares, partial.has_inf_or_nan};
  }
  const detail::ScanPartial total = tbb::parallel_deterministic_reduce(
      tbb::blocked_range<std::int64_t>(0, tiles, 1), detail::ScanPartial{0.0, false},
      [&](const tbb::blocked_range<std::int64_t>& range, detail::ScanPartial sum) {
        for (std::int64_t t = range.begin(); t != range.end(); ++t) {
          const detail::ScanPartial partial = partial_of(t);
          sum.sum_squares += partial.sum_squares;
          sum.has_inf_or_nan = sum.has_inf_or_nan || partial.has_inf_or_nan;
        }
        return sum;
      },
      [](detail::ScanPartial a, detail::ScanPartial b) {
        return detail::ScanPartial{a.sum_squares + b.sum_squares,
                                   a.has_inf_or_nan || b.has_inf_or_nan};
      });
  return GradStats{total.sum_squares, total.has_inf_or_nan};
}

template <GradElement G>
GradStats scan_gradients(std::span<const G> g) {
  const detail::ScanKernel kernel = kernels().scan[grad_index<G>()];
  const auto n = static_cast<std::int64_t>(g.size());
  return reduce_tiles(tile_count(n), [&](std::int64_t tile) {
    return kernel(g.data(), tile * kTileElements, std::min(n, (tile + 1) * kTileElements));
  });
}

template <GradElement G>
void scan_gradient_tiles(std::span<const G> g, std::span<GradStats> partials) {
  const detail::ScanKernel kernel = kernels().scan[grad_index<G>()];
  const auto n = static_cast<std::int64_t>(g.size());
  STRATA_ASSERT(static_cast<std::int64_t>(partials.size()) == tile_count(n));
  for_each_tile(n, [&](std::int64_t begin, std::int64_t end) {
    const detail::ScanPartial partial = kernel(g.data(), begin, end);
    partials[static_cast<std::size_t>(begin / kTileElements)] =
        GradStats{partial.sum_squares, partial.has_inf_or_nan};
  });
}

GradStats combine_gradient_tiles(std::span<const GradStats> partials) {
  return reduce_tiles(static_cast<std::int64_t>(partials.size()), [&](std::int64_t tile) {
    const GradStats& partial = partials[static_cast<std::size_t>(tile)];
    return detail::ScanPartial{partial.sum_squares, partial.has_inf_or_nan};
  });
}

template <GradElement G, CopyElement H, StateElement P, StateElement S>
void membw_step(StateSpan<P> p, std::span<const G> g, StateSpan<S> m, StateSpan<S> v,
                std::span<H> p_out) {
  const Arrays arrays = make_arrays(p, g, m, v, p_out);
  const detail::MembwKernel kernel =
      kernels().membw[m.empty() ? 0 : 1][v.empty() ? 0 : 1][state_index<P>()][state_index<S>()]
                     [grad_index<G>()][copy_index<H>()];
  for_each_tile(static_cast<std::int64_t>(p.size()),
                [&](std::int64_t begin, std::int64_t end) { kernel(arrays, begin, end); });
}

#define STRATA_CPU_ADAM_INSTANTIATE_STATES(G, H, P, S)                                         \
  template void step<G, H, P, S>(const AdamConfig&, std::int64_t, StateSpan<P>,                \
                                 std::span<const G>, StateSpan<S>, StateSpan<S>, std::span<H>, \
                                 float);                                                       \
  template void step<G, H, P, S>(const AdagradConfig&, std::int64_t, StateSpan<P>,             \
                                 std::span<const G>, StateSpan<S>, std::span<H>, float);       \
  template void step<G, H, P, S>(const LionConfig&, std::int64_t, StateSpan<P>,                \
                                 std::span<const G>, StateSpan<S>, std::span<H>, float);       \
  template void membw_step<G, H, P, S>(StateSpan<P>, std::span<const G>, StateSpan<S>,         \
                                       StateSpan<S>, std::span<H>);

#define STRATA_CPU_ADAM_INSTANTIATE(G, H)                \
  STRATA_CPU_ADAM_INSTANTIATE_STATES(G, H, float, float) \
  STRATA_CPU_ADAM_INSTANTIATE_STATES(G, H, float, bf16)  \
  STRATA_CPU_ADAM_INSTANTIATE_STATES(G, H, bf16, float)  \
  STRATA_CPU_ADAM_INSTANTIATE_STATES(G, H, bf16, bf16)

STRATA_CPU_ADAM_INSTANTIATE(float, NoCopy)
STRATA_CPU_ADAM_INSTANTIATE(float, bf16)
STRATA_CPU_ADAM_INSTANTIATE(float, fp16)
STRATA_CPU_ADAM_INSTANTIATE(bf16, NoCopy)
STRATA_CPU_ADAM_INSTANTIATE(bf16, bf16)
STRATA_CPU_ADAM_INSTANTIATE(bf16, fp16)
STRATA_CPU_ADAM_INSTANTIATE(fp16, NoCopy)
STRATA_CPU_ADAM_INSTANTIATE(fp16, bf16)
STRATA_CPU_ADAM_INSTANTIATE(fp16, fp16)
#undef STRATA_CPU_ADAM_INSTANTIATE
#undef STRATA_CPU_ADAM_INSTANTIATE_STATES

#define STRATA_CPU_ADAM_INSTANTIATE_TWIN(H)                                                      \
  template void gpu_twin_step<H>(const AdamConfig&, std::int64_t, std::span<float>,              \
                                 std::span<const float>, std::span<float>, std::span<float>,     \
                                 std::span<H>, float);                                           \
  template void gpu_twin_step<H>(const AdagradConfig&, std::int64_t, std::span<float>,           \
                                 std::span<const float>, std::span<float>, std::span<H>, float); \
  template void gpu_twin_step<H>(const LionConfig&, std::int64_t, std::span<float>,              \
                                 std::span<const float>, std::span<float>, std::span<H>, float);

STRATA_CPU_ADAM_INSTANTIATE_TWIN(NoCopy)
STRATA_CPU_ADAM_INSTANTIATE_TWIN(bf16)
STRATA_CPU_ADAM_INSTANTIATE_TWIN(fp16)
#undef STRATA_CPU_ADAM_INSTANTIATE_TWIN

template GradStats scan_gradients<float>(std::span<const float>);
template GradStats scan_gradients<bf16>(std::span<const bf16>);
template void scan_gradient_tiles<float>(std::span<const float>, std::span<GradStats>);
template void scan_gradient_tiles<bf16>(std::span<const bf16>, std::span<GradStats>);
template GradStats scan_gradients<fp16>(std::span<const fp16>);

}  // namespace strata::cpu_adam
