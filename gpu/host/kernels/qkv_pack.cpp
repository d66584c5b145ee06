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
  const std::int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const std::int64_t row_width = q_width + 2 * kv_width;
  detail::parallel_chunks(rows, detail::grain_for(row_width),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              Real* out = qkv + row * row_width;
                              for (std::int64_t i = 0; i < q_width; ++i)
                                out[i] = q[row * q_width + i];
                              for (std::int64_t i = 0; i < kv_width; ++i) {
                                out[q_width + i] = k[row * kv_width + i];
                                out[q_width + kv_width + i] = v[row * kv_width + i];
                              }
                            }
                          });
}

template <typename Real>
void qkv_pack_backward(Real* dq, Real* dk, Real* dv, const Real* dqkv, std::int64_t rows,
                       std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  check_shape(rows, heads, kv_heads, head_dim);
  STRATA_ASSERT(dq != nullptr && dk != nullptr && dv != nullptr && dqkv != nullptr);
  const std::int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const std::int64_t row_width = q_width + 2 * kv_width;
  detail::parallel_chunks(rows, detail::grain_for(row_width),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t row = begin; row < end; ++row) {
                              const Real* in = dqkv + row * row_width;
                              for (std::int64_t i = 0; i < q_width; ++i)
                                dq[row * q_width + i] += in[i];
                              for (std::int64_t i = 0; i < kv_width; ++i) {
                                dk[row * kv_width + i] += in[q_width + i];
                                dv[row * kv_width + i] += in[q_width + kv_width + i];
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
