#include "gpu/host/kernels/residual.h"

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {

template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, std::int64_t n) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(out != nullptr && a != nullptr && b != nullptr);
  detail::parallel_chunks(n, 32768, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = a[i] + b[i];
  });
}

template <typename Real>
void residual_backward(Real* da, Real* db, const Real* dout, std::int64_t n) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(da != nullptr && db != nullptr && dout != nullptr);
  detail::parallel_chunks(n, 32768, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      da[i] += dout[i];
      db[i] += dout[i];
    }
  });
}

template void residual_forward<float>(float*, const float*, const float*, std::int64_t);
template void residual_forward<double>(double*, const double*, const double*, std::int64_t);
template void residual_backward<float>(float*, float*, const float*, std::int64_t);
template void residual_backward<double>(double*, double*, const double*, std::int64_t);

}  // namespace strata::gpu::host::kernels
