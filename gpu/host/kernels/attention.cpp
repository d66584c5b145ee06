#include "gpu/host/kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include <tbb/enumerable_thread_specific.h>

#include "base/assert.h"
#include "gpu/host/kernels/detail/blas.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

// Queries are processed in blocks of this many rows: a block's scores need keys up to its last
// row only, which halves the work of a causal head, and the pieces stay fixed (determinism).
constexpr std::int64_t causal_block = 64;

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

// One row of the softmax backward, in place: on entry row[0..t] holds datt, on exit dpre =
// att * (datt - sum(att * datt)) there and zeros in row[t+1..seq_len).
template <typename Real>
void softmax_backward_causal_row(Real* row, const Real* att_row, std::int64_t t,
                                 std::int64_t seq_len) {
  double weighted = 0.0;
  for (std::int64_t t2 = 0; t2 <= t; ++t2)
    weighted += static_cast<double>(att_row[t2]) * row[t2];
  const Real weighted_sum = static_cast<Real>(weighted);
  for (std::int64_t t2 = 0; t2 <= t; ++t2)
    row[t2] = att_row[t2] * (row[t2] - weighted_sum);
  for (std::int64_t t2 = t + 1; t2 < seq_len; ++t2)
    row[t2] = 0;
}

// The backward of one (batch, head) pair; dpre is (seq_len x seq_len) scratch.
template <typename Real>
void backward_head(Real* dpre, const HeadView<Real>& grad, const HeadView<const Real>& view,
                   const Real* att, const Real* dout, std::int64_t seq_len, std::int64_t channels,
                   std::int64_t head_size, Real scale) {
  for (std::int64_t row = 0; row < seq_len; row += causal_block) {
    const std::int64_t row_end = row + causal_block < seq_len ? row + causal_block : seq_len;
    const std::int64_t block = row_end - row;
    // datt[t, t2] = dout[t] . v[t2] for the block's rows and the keys they see.
    detail::gemm(false, true, block, row_end, head_size, Real{1}, dout + row * channels, channels,
                 view.v, view.stride, Real{0}, dpre + row * seq_len, seq_len);
    for (std::int64_t t = row; t < row_end; ++t) {
      softmax_backward_causal_row(dpre + t * seq_len, att + t * seq_len, t, seq_len);
    }
    // dq[t] += scale * sum over t2 < row_end of dpre[t, t2] * k[t2].
    detail::gemm(false, false, block, head_size, row_end, scale, dpre + row * seq_len, seq_len,
                 view.k, view.stride, Real{1}, grad.q + row * grad.stride, grad.stride);
  }
  // Column block [col, col_end) of keys is seen by queries [col, seq_len) only:
  //   dv[t2] += sum over t of att[t, t2] * dout[t];  dk[t2] += scale * sum of dpre[t, t2] * q[t].
  for (std::int64_t col = 0; col < seq_len; col += causal_block) {
    const std::int64_t col_end = col + causal_block < seq_len ? col + causal_block : seq_len;
    const std::int64_t block = col_end - col;
    const std::int64_t queries = seq_len - col;
    detail::gemm(true, false, block, head_size, queries, Real{1}, att + col * seq_len + col,
                 seq_len, dout + col * channels, channels, Real{1}, grad.v + col * grad.stride,
                 grad.stride);
    detail::gemm(true, false, block, head_size, queries, scale, dpre + col * seq_len + col, seq_len,
                 view.q + col * view.stride, view.stride, Real{1}, grad.k + col * grad.stride,
                 grad.stride);
  }
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, std::int64_t batch,
                       std::int64_t seq_len, std::int64_t channels, std::int64_t heads) {
  STRATA_ASSERT(batch >= 0 && seq_len >= 0 && channels > 0 && heads > 0);
  STRATA_ASSERT(channels % heads == 0);
  STRATA_ASSERT(out != nullptr && att != nullptr && qkv != nullptr);
  detail::pin_blas_to_one_thread();
  const std::int64_t head_size = channels / heads;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(head_size)));
  detail::parallel_chunks(batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t b = task / heads;
      const std::int64_t h = task % heads;
      const HeadView<const Real> view = head_view(qkv, b, h, seq_len, channels, head_size);
      Real* att_head = att + task * seq_len * seq_len;
      Real* out_head = out + b * seq_len * channels + h * head_size;
      // Row block [row, row_end) of queries sees keys [0, row_end) only (causal).
      for (std::int64_t row = 0; row < seq_len; row += causal_block) {
        const std::int64_t row_end = row + causal_block < seq_len ? row + causal_block : seq_len;
        const std::int64_t block = row_end - row;
        detail::gemm(false, true, block, row_end, head_size, scale, view.q + row * view.stride,
                     view.stride, view.k, view.stride, Real{0}, att_head + row * seq_len, seq_len);
        for (std::int64_t t = row; t < row_end; ++t) {
          softmax_causal_row(att_head + t * seq_len, t, seq_len);
        }
        detail::gemm(false, false, block, head_size, row_end, Real{1}, att_head + row * seq_len,
                     seq_len, view.v, view.stride, Real{0}, out_head + row * channels, channels);
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
  detail::pin_blas_to_one_thread();
  const std::int64_t head_size = channels / heads;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(head_size)));
  // One (seq_len x seq_len) dpre buffer per worker thread, reused by its tasks; every element a
  // task reads it has written first, so what a previous task left there never matters.
  tbb::enumerable_thread_specific<std::vector<Real>> scratch;
  detail::parallel_chunks(batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<Real>& dpre = scratch.local();
    dpre.resize(static_cast<std::size_t>(seq_len * seq_len));
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t b = task / heads;
      const std::int64_t h = task % heads;
      const HeadView<const Real> view = head_view(qkv, b, h, seq_len, channels, head_size);
      const HeadView<Real> grad = head_view(dqkv, b, h, seq_len, channels, head_size);
      const Real* att_head = att + task * seq_len * seq_len;
      const Real* dout_head = dout + b * seq_len * channels + h * head_size;
      backward_head(dpre.data(), grad, view, att_head, dout_head, seq_len, channels, head_size,
                    scale);
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
