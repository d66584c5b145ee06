#include "gpu/host/kernels/rope.h"

#include <cmath>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

// sign +1 rotates forward, -1 applies the transpose (the rotation by the opposite angle).
template <typename Real>
void rotate(Real* x, const float* inv_freq, std::int64_t batch, std::int64_t seq_len,
            std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride, Real sign,
            const std::int32_t* start) {
  STRATA_ASSERT(batch >= 0 && seq_len > 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0);
  STRATA_ASSERT(row_stride >= heads * head_dim);
  STRATA_ASSERT(x != nullptr && inv_freq != nullptr);
  const std::int64_t half = head_dim / 2;
  detail::parallel_chunks(
      batch * seq_len, detail::grain_for(heads * head_dim),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
          const auto position =
              static_cast<float>(row % seq_len + (start != nullptr ? start[row / seq_len] : 0));
          Real* heads_row = x + row * row_stride;
          for (std::int64_t j = 0; j < half; ++j) {
            const float angle = position * inv_freq[j];  // fp32, as transformers computes freqs
            const auto cos = static_cast<Real>(std::cos(angle));
            const Real sin = sign * static_cast<Real>(std::sin(angle));
            for (std::int64_t h = 0; h < heads; ++h) {
              Real* head = heads_row + h * head_dim;
              const Real x1 = head[j];
              const Real x2 = head[j + half];
              head[j] = x1 * cos - x2 * sin;
              head[j + half] = x2 * cos + x1 * sin;
            }
          }
        }
      });
}

}  // namespace

template <typename Real>
void rope_forward(Real* x, const float* inv_freq, std::int64_t batch, std::int64_t seq_len,
                  std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                  const std::int32_t* start) {
  rotate(x, inv_freq, batch, seq_len, heads, head_dim, row_stride, Real{1}, start);
}

template <typename Real>
void rope_backward(Real* dx, const float* inv_freq, std::int64_t batch, std::int64_t seq_len,
                   std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride) {
  rotate(dx, inv_freq, batch, seq_len, heads, head_dim, row_stride, Real{-1}, nullptr);
}

template void rope_forward<float>(float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                  std::int64_t, std::int64_t, const std::int32_t*);
template void rope_forward<double>(double*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, std::int64_t, const std::int32_t*);
template void rope_backward<float>(float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, std::int64_t);
template void rope_backward<double>(double*, const float*, std::int64_t, std::int64_t, std::int64_t,
                                    std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
