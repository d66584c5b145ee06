#include "gpu/host/kernels/qkv_pack.h"

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

void check_shape(std::int64_t rows, std::int64_t heads, std::int64_t kv_heads,
                 std::int64_t head_dim) {
  STRATA_ASSERT(rows >= 0 && head_dim > 0);
  STRATA_ASSERT(kv_heads > 0 && heads >= kv_heads && heads % kv_heads == 0);
}

}  // namespace

template <typename Real>
void qkv_pack_forward(Real* qkv, const Real* q, const Real* k, const Real* v, std::int64_t rows,
                      std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  check_shape(rows, heads, kv_heads, head_dim);
  STRATA_ASSERT(qkv != nullptr && q != nullptr && k != nullptr && v != nullptr);
  const std::int64_t width = heads * head_dim, kv_width = kv_heads * head_dim;
  const std::int64_t repeat = heads / kv_heads;
  detail::parallel_chunks(rows, detail::grain_for(3 * width),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              Real* out = qkv + row * 3 * width;
                              for (std::int64_t i = 0; i < width; ++i)
                                out[i] = q[row * width + i];
                              for (std::int64_t h = 0; h < heads; ++h) {
                                const std::int64_t from = row * kv_width + (h / repeat) * head_dim;
                                for (std::int64_t d = 0; d < head_dim; ++d) {
                                  out[width + h * head_dim + d] = k[from + d];
                                  out[2 * width + h * head_dim + d] = v[from + d];
                                }
                              }
                            }
                          });
}

template <typename Real>
void qkv_pack_backward(Real* dq, Real* dk, Real* dv, const Real* dqkv, std::int64_t rows,
                       std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  check_shape(rows, heads, kv_heads, head_dim);
  STRATA_ASSERT(dq != nullptr && dk != nullptr && dv != nullptr && dqkv != nullptr);
  const std::int64_t width = heads * head_dim, kv_width = kv_heads * head_dim;
  const std::int64_t repeat = heads / kv_heads;
  detail::parallel_chunks(rows, detail::grain_for(3 * width),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              const Real* in = dqkv + row * 3 * width;
                              for (std::int64_t i = 0; i < width; ++i)
                                dq[row * width + i] += in[i];
                              for (std::int64_t h = 0; h < heads; ++h) {
                                const std::int64_t to = row * kv_width + (h / repeat) * head_dim;
                                for (std::int64_t d = 0; d < head_dim; ++d) {
                                  dk[to + d] += in[width + h * head_dim + d];
                                  dv[to + d] += in[2 * width + h * head_dim + d];
                                }
                              }
                            }
                          });
}

template void qkv_pack_forward<float>(float*, const float*, const float*, const float*,
                                      std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void qkv_pack_forward<double>(double*, const double*, const double*, const double*,
                                       std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void qkv_pack_backward<float>(float*, float*, float*, const float*, std::int64_t,
                                       std::int64_t, std::int64_t, std::int64_t);
template void qkv_pack_backward<double>(double*, double*, double*, const double*, std::int64_t,
                                        std::int64_t, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
