#pragma once

#include <cstdint>

// GELU, tanh approximation (GPT-2's), on host memory. See embedding.h for the conventions.
namespace strata::gpu::host::kernels {

// out = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), elementwise over n values.
template <typename Real>
void gelu_forward(Real* out, const Real* inp, std::int64_t n);

// dinp += dout * d/dx gelu(x) with, for u = sqrt(2 / pi) * (x + 0.044715 * x^3):
//   d/dx = 0.5 * (1 + tanh(u)) + 0.5 * x * (1 - tanh(u)^2) * sqrt(2 / pi) * (1 + 3 * 0.044715 x^2).
// The forward saves nothing: the backward reads the input again. tanh(u) and sech^2(u) come from
// one exp(-2|u|), finite for every finite x.
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, std::int64_t n);

}  // namespace strata::gpu::host::kernels
