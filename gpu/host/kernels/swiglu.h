#pragma once

#include <cstdint>

// Llama's gated MLP activation, on host memory. See embedding.h for the conventions.
namespace strata::gpu::host::kernels {

// out = silu(gate) * up elementwise over n values, silu(g) = g * sigmoid(g) (transformers'
// LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))).
template <typename Real>
void swiglu_forward(Real* out, const Real* gate, const Real* up, std::int64_t n);

// dgate += dout * up * silu'(gate), silu'(g) = s + g s (1 - s) with s = sigmoid(g);
// dup += dout * silu(gate). The forward saves nothing: the backward reads gate and up again.
template <typename Real>
void swiglu_backward(Real* dgate, Real* dup, const Real* dout, const Real* gate, const Real* up,
                     std::int64_t n);

}  // namespace strata::gpu::host::kernels
