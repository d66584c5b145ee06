#pragma once

#include <cstdint>

// RMS normalisation over the last dimension (Llama's RMSNorm), on host memory. See embedding.h
// for the conventions shared by every kernel here (Real = float or double; backward accumulates).
namespace strata::gpu::host::kernels {

// For each of `rows` rows of `channels` values, as transformers' LlamaRMSNorm computes it:
//   rstd = 1 / sqrt(sum(x^2) / C + eps),  out = x * rstd * weight.
// Saves rstd[rows] for the backward; the sum runs in double for both Real types. out and inp may
// not alias.
template <typename Real>
void rms_norm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, double eps,
                      std::int64_t rows, std::int64_t channels);

// With xhat = x * rstd and g = dout * weight:
//   dinp    += rstd * (g - xhat * mean(g * xhat))   (per row)
//   dweight += sum over rows of dout * xhat
// Rows run in parallel for dinp; dweight over channel slices, each summing rows in order, so the
// result has the same bits for any thread count.
template <typename Real>
void rms_norm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                       const Real* weight, const Real* rstd, std::int64_t rows,
                       std::int64_t channels);

}  // namespace strata::gpu::host::kernels
