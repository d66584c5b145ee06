#include "gpu/host/kernels/gelu.h"

#include <cmath>
#include <numbers>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

constexpr double gelu_cubic = 0.044715;
const double gelu_scale = std::sqrt(2.0 / std::numbers::pi);

}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, std::int64_t n) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(out != nullptr && inp != nullptr);
  const Real scale = static_cast<Real>(gelu_scale);
  const Real cubic = static_cast<Real>(gelu_cubic);
  detail::parallel_chunks(n, 8192, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const Real x = inp[i];
      const Real u = scale * (x + cubic * x * x * x);
      out[i] = Real{0.5} * x * (Real{1} + std::tanh(u));
    }
  });
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, std::int64_t n) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(dinp != nullptr && inp != nullptr && dout != nullptr);
  const Real scale = static_cast<Real>(gelu_scale);
  const Real cubic = static_cast<Real>(gelu_cubic);
  detail::parallel_chunks(n, 8192, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const Real x = inp[i];
      const Real u = scale * (x + cubic * x * x * x);
      const Real tanh_u = std::tanh(u);
      const Real sech_squared = Real{1} - tanh_u * tanh_u;
      const Real local = Real{0.5} * (Real{1} + tanh_u) +
                         Real{0.5} * x * sech_squared * scale * (Real{1} + Real{3} * cubic * x * x);
      dinp[i] += local * dout[i];
    }
  });
}

template void gelu_forward<float>(float*, const float*, std::int64_t);
template void gelu_forward<double>(double*, const double*, std::int64_t);
template void gelu_backward<float>(float*, const float*, const float*, std::int64_t);
template void gelu_backward<double>(double*, const double*, const double*, std::int64_t);

}  // namespace strata::gpu::host::kernels
