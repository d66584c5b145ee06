#pragma once

#include <cstdint>

// Layer normalisation over the last dimension, on host memory. See embedding.h for the
// conventions shared by every kernel here (Real = float or double; backward accumulates).
namespace strata::gpu::host::kernels {

// The epsilon of GPT-2's layer norm (PyTorch's default), added to the variance.
inline constexpr double layer_norm_epsilon = 1e-5;

// For each of `rows` rows of `channels` values:
//   mean = sum(x) / C, var = sum((x - mean)^2) / C (biased), rstd = 1 / sqrt(var + eps),
//   out = (x - mean) * rstd * weight + bias.
// Saves mean[rows] and rstd[rows] for the backward. Statistics are computed in double for both
// Real types; out and inp may not alias.
template <typename Real>
void layer_norm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                        const Real* bias, std::int64_t rows, std::int64_t channels);

// With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp   += rstd * (g - mean(g) - xhat * mean(g * xhat))   (per row)
//   dweight += sum over rows of dout * xhat
//   dbias   += sum over rows of dout
// Rows run in parallel for dinp; the parameter gradients run in parallel over channel slices, each
// summing rows in order, so the result has the same bits for any thread count.
template <typename Real>
void layer_norm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                         const Real* weight, const Real* mean, const Real* rstd, std::int64_t rows,
                         std::int64_t channels);

}  // namespace strata::gpu::host::kernels
