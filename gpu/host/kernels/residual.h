#pragma once

#include <cstdint>

// Residual add, on host memory. See embedding.h for the conventions shared by every kernel here.
namespace strata::gpu::host::kernels {

// out = a + b, elementwise over n values. out may alias a or b.
template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, std::int64_t n);

// da += dout and db += dout. da and db may be the same buffer (then it receives 2 * dout).
template <typename Real>
void residual_backward(Real* da, Real* db, const Real* dout, std::int64_t n);

}  // namespace strata::gpu::host::kernels
