#pragma once

// The CPU optimizers of an offloaded training step: Adam/AdamW, Adagrad and Lion over fp32 master
// parameters and fp32 states, with fp32, bf16 or fp16 gradients, and optionally a bf16 or fp16
// copy of the new parameters for the upload to the GPU; plus the fused gradient scan (squared L2
// norm and inf/NaN) that clipping and fp16 overflow skipping need first.
//
// Work is cut into tiles of kTileElements; each tile is computed by one thread, start to end,
// and reductions are combined in a fixed tree over tiles, so that every result is bitwise the
// same for any number of threads. Calls spread over the TBB arena they are made from (see
// Workers). The SIMD level is active_isa() (isa.h). docs/cpu_adam.md gives the math.

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>

#include "cpu_adam/half.h"

namespace strata::cpu_adam {

// Elements per tile. A multiple of every vector width, and large enough (1.25 MiB of Adam
// traffic) that scheduling costs nothing beside the memory traffic.
inline constexpr std::int64_t kTileElements = std::int64_t{1} << 16;

// The copy type when no copy of the parameters is wanted: pass an empty std::span<NoCopy>.
struct NoCopy {};

template <class G>
concept GradElement = std::same_as<G, float> || std::same_as<G, bf16> || std::same_as<G, fp16>;
template <class H>
concept CopyElement = std::same_as<H, bf16> || std::same_as<H, fp16> || std::same_as<H, NoCopy>;
// The master parameters (P) and the moments (S) are fp32, or bf16 (DeepSpeed's
// bf16.bf16_master_weights_and_grads and bf16_optimizer_states): a bf16 state is widened to fp32,
// updated with the same fp32 math, and rounded to nearest even when stored, so its new value is
// exactly the fp32 step's rounded to bf16.
template <class S>
concept StateElement = std::same_as<S, float> || std::same_as<S, bf16>;

// The state spans are not deduced (std::type_identity_t), so the fp32 calls read as before and
// bf16 states are asked for by name: step<G, H, bf16, bf16>(...).
template <class T>
using StateSpan = std::type_identity_t<std::span<T>>;

// DeepSpeed's Adam (its cpu_adam and torch.optim.Adam/AdamW), per element, with t = step:
//   g  = grad * grad_scale;  if (!adam_w_mode) g += weight_decay * p        (L2)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p -= lr * weight_decay * p                              if adam_w_mode  (decoupled)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Without bias_correction both corrections are 1. beta^t is computed from t with pow on every
// call, never carried between calls, so a step's result depends only on its inputs.
struct AdamConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool bias_correction = true;
  bool adam_w_mode = true;
};

// DeepSpeed's cpu_adagrad (torch.optim.Adagrad without lr decay), per element:
//   g = grad * grad_scale + weight_decay * p;  v += g^2;  p -= lr * g / (sqrt(v) + eps)
struct AdagradConfig {
  float lr = 1e-2f;
  float eps = 1e-10f;
  float weight_decay = 0.0f;
};

// DeepSpeed's cpu_lion, per element:
//   c = beta1 * m + (1 - beta1) * g;  p = p * (1 - lr * weight_decay) - lr * sign(c)
//   m = beta2 * m + (1 - beta2) * g
// where sign(c) is +1 or -1 from c's sign bit (so +0 counts as +1), as DeepSpeed's kernel does.
struct LionConfig {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float weight_decay = 0.0f;
};

// Throw UserError (exit status 2) naming the DeepSpeed key (optimizer.params.lr, .betas, .eps,
// .weight_decay) when a hyperparameter is out of range: lr, eps, weight_decay negative or not
// finite, a beta outside [0, 1). step() checks the same.
void validate(const AdamConfig& config);
void validate(const AdagradConfig& config);
void validate(const LionConfig& config);

// One Adam/AdamW step (step counts from 1) over p, updating p, m (exp_avg) and v (exp_avg_sq) in
// place and writing the rounded new p into p_out (empty when H is NoCopy). All spans have the
// same length (p_out too, unless NoCopy); p_out must not overlap the others. grad_scale
// multiplies every gradient first: 1 / loss_scale times the clipping coefficient.
template <GradElement G, CopyElement H, StateElement P = float, StateElement S = float>
void step(const AdamConfig& config, std::int64_t step, StateSpan<P> p, std::span<const G> g,
          StateSpan<S> m, StateSpan<S> v, std::span<H> p_out, float grad_scale);

// One Adagrad step; v is the sum of squares (DeepSpeed's exp_avg_sq).
template <GradElement G, CopyElement H, StateElement P = float, StateElement S = float>
void step(const AdagradConfig& config, std::int64_t step, StateSpan<P> p, std::span<const G> g,
          StateSpan<S> v, std::span<H> p_out, float grad_scale);

// One Lion step; m is the momentum (DeepSpeed's exp_avg).
template <GradElement G, CopyElement H, StateElement P = float, StateElement S = float>
void step(const LionConfig& config, std::int64_t step, StateSpan<P> p, std::span<const G> g,
          StateSpan<S> m, std::span<H> p_out, float grad_scale);

// The GPU optimizer's twin: the same steps over fp32 arrays, computed as the CUDA kernel
// (gpu/cuda/kernels/optimizer.cu) computes them, one element at a time with a fused multiply-add
// wherever the SIMD kernels use one and a correctly rounded division and square root
// (detail/fused_lane.h). It gives the kernel's bits on any x86-64 CPU, so the GPU's arithmetic is
// tested against step() where there is no GPU (docs/cpu_adam.md states the bound), and the kernel
// against it where there is. Not fast: one element at a time.
template <CopyElement H>
void gpu_twin_step(const AdamConfig& config, std::int64_t step, std::span<float> p,
                   std::span<const float> g, std::span<float> m, std::span<float> v,
                   std::span<H> p_out, float grad_scale);
template <CopyElement H>
void gpu_twin_step(const AdagradConfig& config, std::int64_t step, std::span<float> p,
                   std::span<const float> g, std::span<float> v, std::span<H> p_out,
                   float grad_scale);
template <CopyElement H>
void gpu_twin_step(const LionConfig& config, std::int64_t step, std::span<float> p,
                   std::span<const float> g, std::span<float> m, std::span<H> p_out,
                   float grad_scale);

// What a gradient shard holds, for clipping and overflow skipping. sum_squares is accumulated in
// double (so fp32 gradients up to FLT_MAX cannot overflow it) in a fixed order per tile and a
// fixed tree over tiles: the same bits for any thread count.
struct GradStats {
  double sum_squares = 0.0;
  bool has_inf_or_nan = false;
};

template <GradElement G>
GradStats scan_gradients(std::span<const G> g);

// The tiles' partials of scan_gradients(g), one per kTileElements of g (the last may be short):
// a span scanned in pieces, each starting on a tile of the whole, has the partials of the whole.
inline std::int64_t gradient_tile_count(std::int64_t n) {
  return (n + kTileElements - 1) / kTileElements;
}
template <GradElement G>
void scan_gradient_tiles(std::span<const G> g, std::span<GradStats> partials);
// scan_gradients' result from its tiles' partials, to the bit.
GradStats combine_gradient_tiles(std::span<const GradStats> partials);

// The memory bound of a step: the same arrays, tiles, loads, stores, gradient conversion and
// parameter copy as step() with trivial arithmetic (p += g, m += g, v += g). An empty m or v
// leaves that array out, giving the Adagrad (no m) and Lion (no v) patterns.
template <GradElement G, CopyElement H, StateElement P = float, StateElement S = float>
void membw_step(StateSpan<P> p, std::span<const G> g, StateSpan<S> m, StateSpan<S> v,
                std::span<H> p_out);

}  // namespace strata::cpu_adam
