#include "gpu/host/kernels/swiglu.h"

#include <cmath>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

// sigmoid without overflow: exp of a non-positive number only.
template <typename Real>
Real sigmoid(Real g) {
  const Real e = std::exp(-std::abs(g));
  return g >= 0 ? Real{1} / (Real{1} + e) : e / (Real{1} + e);
}

}  // namespace

template <typename Real>
void swiglu_forward(Real* out, const Real* gate, const Real* up, std::int64_t n) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(out != nullptr && gate != nullptr && up != nullptr);
  detail::parallel_chunks(n, 8192, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = gate[i] * sigmoid(gate[i]) * up[i];
  });
}

template <typename Real>
void swiglu_backward(Real* dgate, Real* dup, const Real* dout, const Real* gate, const Real* up,
                     std::int64_t n) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(dgate != nullptr && dup != nullptr && dout != nullptr && gate != nullptr &&
                up != nullptr);
  detail::parallel_chunks(n, 8192, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const Real g = gate[i];
      const Real s = sigmoid(g);
      dgate[i] += dout[i] * up[i] * (s + g * s * (Real{1} - s));
      dup[i] += dout[i] * g * s;
    }
  });
}

template void swiglu_forward<float>(float*, const float*, const float*, std::int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, std::int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     std::int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*,
                                      std::int64_t);

}  // namespace strata::gpu::host::kernels
