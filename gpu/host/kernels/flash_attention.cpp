#include "gpu/host/kernels/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/assert.h"
#include "gpu/host/kernels/detail/blas.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

// Query and key blocks are this many rows. Both use the same size, so the only block a causal
// query block sees partly is the one on its diagonal, and every row sees at least one key of every
// block it visits (the running maximum is finite after the first).
constexpr std::int64_t block_rows = 64;

struct Shape {
  std::int64_t batch;
  std::int64_t seq_len;
  std::int64_t heads;
  std::int64_t kv_heads;
  std::int64_t head_dim;

  std::int64_t qkv_stride() const { return (heads + 2 * kv_heads) * head_dim; }
  std::int64_t out_stride() const { return heads * head_dim; }
  std::int64_t blocks() const { return (seq_len + block_rows - 1) / block_rows; }
  std::int64_t block_end(std::int64_t begin) const { return std::min(begin + block_rows, seq_len); }
};

void check_shape(const Shape& shape) {
  STRATA_ASSERT(shape.batch >= 0 && shape.seq_len >= 0 && shape.head_dim > 0);
  STRATA_ASSERT(shape.kv_heads > 0 && shape.heads >= shape.kv_heads);
  STRATA_ASSERT(shape.heads % shape.kv_heads == 0);
}

// Where one (batch, query head) pair reads or writes: row t of q, k and v is at q + t * stride,
// k + t * stride, v + t * stride, with k and v those of the kv head the query head shares.
template <typename Real>
struct HeadRows {
  Real* q;
  Real* k;
  Real* v;
  std::int64_t stride;
};

template <typename Real>
HeadRows<Real> head_rows(Real* qkv, const Shape& shape, std::int64_t b, std::int64_t h) {
  const std::int64_t kv_head = h / (shape.heads / shape.kv_heads);
  Real* first_row = qkv + b * shape.seq_len * shape.qkv_stride();
  return HeadRows<Real>{
      first_row + h * shape.head_dim, first_row + (shape.heads + kv_head) * shape.head_dim,
      first_row + (shape.heads + shape.kv_heads + kv_head) * shape.head_dim, shape.qkv_stride()};
}

// A block of scores against the rows [row, row + rows) of queries and [col, col + cols) of keys,
// held in scratch of block_rows x block_rows: element (i, j) is query row + i, key col + j.
struct ScoreBlock {
  std::int64_t row;
  std::int64_t rows;
  std::int64_t col;
  std::int64_t cols;

  // How many of row i's keys are visible: all but those after the query (causal).
  std::int64_t visible(std::int64_t i) const { return std::min(cols, row + i - col + 1); }
};

// The online softmax's state for one block of query rows.
template <typename Real>
struct RunningSoftmax {
  std::vector<Real> scores;  // block_rows x block_rows: scores in, unnormalised weights out
  std::vector<Real> acc;     // block_rows x head_dim: sum of weights times values so far
  std::vector<Real> max;     // per row: the largest score so far
  std::vector<double> sum;   // per row: sum of exp(score - max) so far, in double

  void reset(std::int64_t rows, std::int64_t head_dim) {
    scores.resize(static_cast<std::size_t>(block_rows * block_rows));
    acc.assign(static_cast<std::size_t>(rows * head_dim), Real{0});
    max.assign(static_cast<std::size_t>(rows), -std::numeric_limits<Real>::infinity());
    sum.assign(static_cast<std::size_t>(rows), 0.0);
  }
};

// Folds one score block into the running state: a row whose maximum grows rescales its sum and
// accumulated output by exp(old max - new max) (zero on the first block, where both are zero),
// and its scores become exp(score - new max), zero where the key is hidden.
template <typename Real>
void fold_scores(RunningSoftmax<Real>& state, const ScoreBlock& block, std::int64_t head_dim) {
  for (std::int64_t i = 0; i < block.rows; ++i) {
    Real* row = state.scores.data() + i * block_rows;
    const std::int64_t visible = block.visible(i);
    STRATA_ASSERT(visible >= 1);
    Real new_max = state.max[i];
    for (std::int64_t j = 0; j < visible; ++j)
      new_max = std::max(new_max, row[j]);
    const Real rescale = std::exp(state.max[i] - new_max);
    double row_sum = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - new_max);
      row_sum += row[j];
    }
    for (std::int64_t j = visible; j < block.cols; ++j)
      row[j] = Real{0};
    state.sum[i] = state.sum[i] * rescale + row_sum;
    state.max[i] = new_max;
    Real* acc_row = state.acc.data() + i * head_dim;
    for (std::int64_t d = 0; d < head_dim; ++d)
      acc_row[d] *= rescale;
  }
}

// The keys and values one query head attends over: row t of each at k + t * stride and
// v + t * stride, rows [0, end) read. Key blocks start at multiples of block_rows and stop at
// `end`. A block of query rows reads to its sequence's end (the keys past a row weigh 0); one row
// alone (a decode step, or a forward's row computed alone) reads to its own position, end = row +
// 1, so its products have the same shapes, and bits, whatever the sequence's or the cache's
// length, and a cache's positions past it are never read.
template <typename Real>
struct KeyRows {
  const Real* k;
  const Real* v;
  std::int64_t stride;
  std::int64_t end;
};

// Query rows [row, row + rows) (row i at q + i * q_stride) against the keys before each: the
// state's acc, max and sum afterwards hold each row's unnormalised output and statistics.
template <typename Real>
void attend_rows(RunningSoftmax<Real>& state, const Real* q, std::int64_t q_stride,
                 std::int64_t row, std::int64_t rows, const KeyRows<Real>& keys,
                 std::int64_t head_dim) {
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  state.reset(rows, head_dim);
  // The last key block visited is the one holding the last query row (causal).
  for (std::int64_t col = 0; col < row + rows; col += block_rows) {
    const ScoreBlock block{row, rows, col, std::min(col + block_rows, keys.end) - col};
    detail::gemm(false, true, rows, block.cols, head_dim, scale, q, q_stride,
                 keys.k + col * keys.stride, keys.stride, Real{0}, state.scores.data(), block_rows);
    fold_scores(state, block, head_dim);
    detail::gemm(false, false, rows, head_dim, block.cols, Real{1}, state.scores.data(), block_rows,
                 keys.v + col * keys.stride, keys.stride, Real{1}, state.acc.data(), head_dim);
  }
}

// Row i's output, acc / sum, rounded once from double.
template <typename Real>
void write_output_row(Real* out, const RunningSoftmax<Real>& state, std::int64_t i,
                      std::int64_t head_dim) {
  const double row_sum = state.sum[i];
  for (std::int64_t d = 0; d < head_dim; ++d)
    out[d] = static_cast<Real>(static_cast<double>(state.acc[i * head_dim + d]) / row_sum);
}

// One (batch, head, query block) task of the forward: the block's rows at once, or each alone.
template <typename Real>
void forward_query_block(RunningSoftmax<Real>& state, Real* out, Real* lse, const Real* qkv,
                         const Shape& shape, std::int64_t b, std::int64_t h, std::int64_t row,
                         bool rows_alone) {
  const HeadRows<const Real> view = head_rows(qkv, shape, b, h);
  const std::int64_t rows = shape.block_end(row) - row;
  const std::int64_t head_dim = shape.head_dim;
  const KeyRows<Real> keys{view.k, view.v, view.stride, shape.seq_len};
  Real* out_rows = out + (b * shape.seq_len + row) * shape.out_stride() + h * head_dim;
  Real* lse_rows = lse + (b * shape.heads + h) * shape.seq_len + row;
  const auto write_row = [&](std::int64_t i, std::int64_t state_row) {
    write_output_row(out_rows + i * shape.out_stride(), state, state_row, head_dim);
    lse_rows[i] = static_cast<Real>(static_cast<double>(state.max[state_row]) +
                                    std::log(state.sum[state_row]));
  };
  if (rows_alone) {
    for (std::int64_t i = 0; i < rows; ++i) {
      attend_rows(state, view.q + (row + i) * view.stride, view.stride, row + i, 1,
                  KeyRows<Real>{view.k, view.v, view.stride, row + i + 1}, head_dim);
      write_row(i, 0);
    }
    return;
  }
  attend_rows(state, view.q + row * view.stride, view.stride, row, rows, keys, head_dim);
  for (std::int64_t i = 0; i < rows; ++i)
    write_row(i, i);
}

// What the backward of one (batch, query head) pair reads and writes.
template <typename Real>
struct BackwardHead {
  HeadRows<const Real> view;  // q, k, v
  HeadRows<Real> grad;        // dq, dk, dv (dk, dv those of the shared kv head)
  const Real* dout;           // row t at dout + t * out_stride
  const Real* lse;            // lse[t]
  const Real* delta;          // delta[t] = dout[t] . out[t]
  std::int64_t out_stride;
  std::int64_t head_dim;
  Real scale;
};

// Scratch of one backward task: two block_rows x block_rows blocks.
template <typename Real>
struct BackwardScratch {
  std::vector<Real> probs;   // p, recomputed from the scores and lse
  std::vector<Real> dprobs;  // dp, then ds in place
};

// The contributions of one (query block, key block) pair to dq, dk and dv.
template <typename Real>
void backward_block(BackwardScratch<Real>& scratch, const BackwardHead<Real>& head,
                    const ScoreBlock& block) {
  const std::int64_t d = head.head_dim, stride = head.view.stride;
  const Real* q = head.view.q + block.row * stride;
  const Real* k = head.view.k + block.col * stride;
  const Real* v = head.view.v + block.col * stride;
  const Real* dout = head.dout + block.row * head.out_stride;
  Real* p = scratch.probs.data();
  Real* ds = scratch.dprobs.data();
  detail::gemm(false, true, block.rows, block.cols, d, head.scale, q, stride, k, stride, Real{0}, p,
               block_rows);
  for (std::int64_t i = 0; i < block.rows; ++i) {
    const Real row_lse = head.lse[block.row + i];
    const std::int64_t visible = block.visible(i);  // at least 1: row >= col
    for (std::int64_t j = 0; j < visible; ++j)
      p[i * block_rows + j] = std::exp(p[i * block_rows + j] - row_lse);
    for (std::int64_t j = visible; j < block.cols; ++j)
      p[i * block_rows + j] = Real{0};
  }
  // dv[key] += sum over the block's queries of p[query, key] * dout[query].
  detail::gemm(true, false, block.cols, d, block.rows, Real{1}, p, block_rows, dout,
               head.out_stride, Real{1}, head.grad.v + block.col * stride, stride);
  detail::gemm(false, true, block.rows, block.cols, d, Real{1}, dout, head.out_stride, v, stride,
               Real{0}, ds, block_rows);
  for (std::int64_t i = 0; i < block.rows; ++i) {
    const Real row_delta = head.delta[block.row + i];
    for (std::int64_t j = 0; j < block.cols; ++j)
      ds[i * block_rows + j] = p[i * block_rows + j] * (ds[i * block_rows + j] - row_delta);
  }
  detail::gemm(false, false, block.rows, d, block.cols, head.scale, ds, block_rows, k, stride,
               Real{1}, head.grad.q + block.row * stride, stride);
  detail::gemm(true, false, block.cols, d, block.rows, head.scale, ds, block_rows, q, stride,
               Real{1}, head.grad.k + block.col * stride, stride);
}

// delta[t] = dout[t] . out[t] for one (batch, head) pair, summed in double.
template <typename Real>
void row_deltas(std::vector<Real>& delta, const Real* dout, const Real* out, const Shape& shape) {
  delta.resize(static_cast<std::size_t>(shape.seq_len));
  for (std::int64_t t = 0; t < shape.seq_len; ++t) {
    double dot = 0.0;
    for (std::int64_t d = 0; d < shape.head_dim; ++d) {
      dot += static_cast<double>(dout[t * shape.out_stride() + d]) *
             static_cast<double>(out[t * shape.out_stride() + d]);
    }
    delta[static_cast<std::size_t>(t)] = static_cast<Real>(dot);
  }
}

// One (batch, kv head) task of the backward: its query heads in order, and for each the key
// blocks in order, each against the query blocks that see it ([col, seq_len)).
template <typename Real>
void backward_kv_head(BackwardScratch<Real>& scratch, std::vector<Real>& delta, Real* dqkv,
                      const Real* dout, const Real* qkv, const Real* out, const Real* lse,
                      const Shape& shape, std::int64_t b, std::int64_t kv_head) {
  const std::int64_t group = shape.heads / shape.kv_heads;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  for (std::int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    const std::int64_t head_offset = b * shape.seq_len * shape.out_stride() + h * shape.head_dim;
    row_deltas(delta, dout + head_offset, out + head_offset, shape);
    const BackwardHead<Real> head{head_rows(qkv, shape, b, h),
                                  head_rows(dqkv, shape, b, h),
                                  dout + head_offset,
                                  lse + (b * shape.heads + h) * shape.seq_len,
                                  delta.data(),
                                  shape.out_stride(),
                                  shape.head_dim,
                                  scale};
    for (std::int64_t col = 0; col < shape.seq_len; col += block_rows) {
      for (std::int64_t row = col; row < shape.seq_len; row += block_rows) {
        const ScoreBlock block{row, shape.block_end(row) - row, col, shape.block_end(col) - col};
        backward_block(scratch, head, block);
      }
    }
  }
}

}  // namespace

template <typename Real>
void flash_attention_forward(Real* out, Real* lse, const Real* qkv, std::int64_t batch,
                             std::int64_t seq_len, std::int64_t heads, std::int64_t kv_heads,
                             std::int64_t head_dim, bool rows_alone) {
  const Shape shape{batch, seq_len, heads, kv_heads, head_dim};
  check_shape(shape);
  STRATA_ASSERT(out != nullptr && lse != nullptr && qkv != nullptr);
  detail::pin_blas_to_one_thread();
  const std::int64_t blocks = shape.blocks();
  detail::parallel_chunks(batch * heads * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    RunningSoftmax<Real> state;
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t b = task / (heads * blocks);
      const std::int64_t h = (task / blocks) % heads;
      const std::int64_t row = (task % blocks) * block_rows;
      forward_query_block(state, out, lse, qkv, shape, b, h, row, rows_alone);
    }
  });
}

template <typename Real>
void flash_attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* out,
                              const Real* lse, std::int64_t batch, std::int64_t seq_len,
                              std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  const Shape shape{batch, seq_len, heads, kv_heads, head_dim};
  check_shape(shape);
  STRATA_ASSERT(dqkv != nullptr && dout != nullptr && qkv != nullptr);
  STRATA_ASSERT(out != nullptr && lse != nullptr);
  detail::pin_blas_to_one_thread();
  detail::parallel_chunks(batch * kv_heads, 1, [&](std::int64_t begin, std::int64_t end) {
    BackwardScratch<Real> scratch;
    scratch.probs.resize(static_cast<std::size_t>(block_rows * block_rows));
    scratch.dprobs.resize(static_cast<std::size_t>(block_rows * block_rows));
    std::vector<Real> delta;
    for (std::int64_t task = begin; task < end; ++task) {
      backward_kv_head(scratch, delta, dqkv, dout, qkv, out, lse, shape, task / kv_heads,
                       task % kv_heads);
    }
  });
}

template <typename Real>
void decode_attention(Real* out, const Real* qkv, const Real* k_cache, const Real* v_cache,
                      const std::int32_t* length, std::int64_t batch, std::int64_t heads,
                      std::int64_t kv_heads, std::int64_t head_dim, std::int64_t max_seq) {
  const Shape shape{batch, 1, heads, kv_heads, head_dim};
  check_shape(shape);
  STRATA_ASSERT(out != nullptr && qkv != nullptr && k_cache != nullptr && v_cache != nullptr);
  STRATA_ASSERT(length != nullptr);
  detail::pin_blas_to_one_thread();
  detail::parallel_chunks(batch * heads, 1, [&](std::int64_t begin, std::int64_t end) {
    RunningSoftmax<Real> state;
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t b = task / heads;
      const std::int64_t h = task % heads;
      const std::int64_t position = length[b] - 1;  // the new token's
      STRATA_ASSERT(position >= 0 && position < max_seq);
      const std::int64_t cache_head = (b * kv_heads + h / (heads / kv_heads)) * max_seq * head_dim;
      attend_rows(state, qkv + b * shape.qkv_stride() + h * head_dim, shape.qkv_stride(), position,
                  1,
                  KeyRows<Real>{k_cache + cache_head, v_cache + cache_head, head_dim, position + 1},
                  head_dim);
      write_output_row(out + b * shape.out_stride() + h * head_dim, state, 0, head_dim);
    }
  });
}

template void flash_attention_forward<float>(float*, float*, const float*, std::int64_t,
                                             std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                             bool);
template void flash_attention_forward<double>(double*, double*, const double*, std::int64_t,
                                              std::int64_t, std::int64_t, std::int64_t,
                                              std::int64_t, bool);
template void flash_attention_backward<float>(float*, const float*, const float*, const float*,
                                              const float*, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, std::int64_t);
template void flash_attention_backward<double>(double*, const double*, const double*, const double*,
                                               const double*, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::int64_t);

template void decode_attention<float>(float*, const float*, const float*, const float*,
                                      const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t);
template void decode_attention<double>(double*, const double*, const double*, const double*,
                                       const std::int32_t*, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels
