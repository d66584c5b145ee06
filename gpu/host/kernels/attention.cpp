#include "gpu/host/kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

template <typename Real>
Real dot(const Real* a, const Real* b, std::int64_t n) {
  Real sum = 0;
  for (std::int64_t i = 0; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

template <typename Real>
void axpy(Real* y, Real alpha, const Real* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

// The pointers of one (batch, head) pair: row t of q, k, v is base + t * stride.
template <typename Real>
struct HeadView {
  Real* q;
  Real* k;
  Real* v;
  std::int64_t stride;
};

template <typename Real>
HeadView<Real> head_view(Real* qkv, std::int64_t b, std::int64_t h, std::int64_t seq_len,
                         std::int64_t channels, std::int64_t head_size) {
  Real* base = qkv + b * seq_len * 3 * channels + h * head_size;
  return HeadView<Real>{base, base + channels, base + 2 * channels, 3 * channels};
}

// One causal softmax row: row[0..t] holds the scaled scores on entry and the probabilities on
// exit; row[t+1..seq_len) is zeroed. The sum runs in double, in order.
template <typename Real>
void softmax_causal_row(Real* row, std::int64_t t, std::int64_t seq_len) {
  Real max_score = -std::numeric_limits<Real>::infinity();
  for (std::int64_t t2 = 0; t2 <= t; ++t2)
    max_score = row[t2] > max_score ? row[t2] : max_score;
  double sum = 0.0;
  for (std::int64_t t2 = 0; t2 <= t; ++t2) {
    row[t2] = std::exp(row[t2] - max_score);
    sum += row[t2];
  }
  const Real inverse = static_cast<Real>(1.0 / sum);
  for (std::int64_t t2 = 0; t2 <= t; ++t2)
    row[t2] *= inverse;
  for (std::int64_t t2 = t + 1; t2 < seq_len; ++t2)
    row[t2] = 0;
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, std::int64_t batch,
                       std::int64_t seq_len, std::int64_t channels, std::int64_t heads) {
  STRATA_ASSERT(batch >= 0 && seq_len >= 0 && channels > 0 && heads > 0);
  STRATA_ASSERT(channels % heads == 0);
  STRATA_ASSERT(out != nullptr && att != nullptr && qkv != nullptr);
  const std::int64_t head_size = channels / heads;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(head_size)));
  detail::parallel_chunks(batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t b = task / heads;
      const std::int64_t h = task % heads;
      const HeadView<const Real> view = head_view(qkv, b, h, seq_len, channels, head_size);
      Real* att_head = att + task * seq_len * seq_len;
      for (std::int64_t t = 0; t < seq_len; ++t) {
        Real* row = att_head + t * seq_len;
        const Real* q = view.q + t * view.stride;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          row[t2] = scale * dot(q, view.k + t2 * view.stride, head_size);
        }
        softmax_causal_row(row, t, seq_len);
        Real* out_row = out + (b * seq_len + t) * channels + h * head_size;
        for (std::int64_t i = 0; i < head_size; ++i)
          out_row[i] = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          axpy(out_row, row[t2], view.v + t2 * view.stride, head_size);
        }
      }
    }
  });
}

template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att,
                        std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                        std::int64_t heads) {
  STRATA_ASSERT(batch >= 0 && seq_len >= 0 && channels > 0 && heads > 0);
  STRATA_ASSERT(channels % heads == 0);
  STRATA_ASSERT(dqkv != nullptr && dout != nullptr && qkv != nullptr && att != nullptr);
  const std::int64_t head_size = channels / heads;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(head_size)));
  detail::parallel_chunks(batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<Real> datt(static_cast<std::size_t>(seq_len));
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t b = task / heads;
      const std::int64_t h = task % heads;
      const HeadView<const Real> view = head_view(qkv, b, h, seq_len, channels, head_size);
      const HeadView<Real> grad = head_view(dqkv, b, h, seq_len, channels, head_size);
      const Real* att_head = att + task * seq_len * seq_len;
      for (std::int64_t t = 0; t < seq_len; ++t) {
        const Real* row = att_head + t * seq_len;
        const Real* dout_row = dout + (b * seq_len + t) * channels + h * head_size;
        double weighted = 0.0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          datt[t2] = dot(dout_row, view.v + t2 * view.stride, head_size);
          axpy(grad.v + t2 * grad.stride, row[t2], dout_row, head_size);
          weighted += static_cast<double>(row[t2]) * datt[t2];
        }
        const Real weighted_sum = static_cast<Real>(weighted);
        const Real* q = view.q + t * view.stride;
        Real* dq = grad.q + t * grad.stride;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const Real dpre = scale * row[t2] * (datt[t2] - weighted_sum);
          axpy(dq, dpre, view.k + t2 * view.stride, head_size);
          axpy(grad.k + t2 * grad.stride, dpre, q, head_size);
        }
      }
    }
  });
}

template void attention_forward<float>(float*, float*, const float*, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t);
template void attention_forward<double>(double*, double*, const double*, std::int64_t, std::int64_t,
                                        std::int64_t, std::int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         std::int64_t, std::int64_t, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
