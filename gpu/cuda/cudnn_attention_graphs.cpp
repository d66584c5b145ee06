#include "gpu/cuda/cudnn_attention_graphs.h"

namespace strata::gpu::cuda {
namespace {

using i64 = std::int64_t;

// The causal mask on `scores`: kept where the query's index (axis 2) is at least the key's
// (axis 3), -inf elsewhere.
i64 causal_mask(GraphBuilder& graph, const AttentionLayout& l, i64 scores) {
  const i64 row = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_INT32);
  const i64 column = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_INT32);
  const i64 keep = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_BOOLEAN);
  const i64 masked = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_FLOAT);
  graph.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, -1, -1, row, CUDNN_DATA_FLOAT, 2);
  graph.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, -1, -1, column, CUDNN_DATA_FLOAT, 3);
  graph.pointwise(CUDNN_POINTWISE_CMP_GE, row, column, -1, keep, CUDNN_DATA_BOOLEAN);
  graph.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, minus_infinity_uid, keep, masked);
  return masked;
}

// The scaled scores Q K^T * scale (fp32, virtual).
i64 scaled_scores(GraphBuilder& graph, const AttentionLayout& l) {
  const i64 scores = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_FLOAT);
  const i64 scaled = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_FLOAT);
  graph.matmul(q_uid, k_uid, scores);
  graph.pointwise(CUDNN_POINTWISE_MUL, scores, scale_uid, -1, scaled);
  return scaled;
}

// A binary pointwise op into a new fp32 virtual tensor shaped like the scores or the rows.
i64 binary(GraphBuilder& graph, cudnnPointwiseMode_t mode, i64 x, i64 b) {
  const TensorSpec& like = graph.spec(x);
  const i64 y = graph.virtual_tensor(like.dims, like.strides, CUDNN_DATA_FLOAT);
  graph.pointwise(mode, x, b, -1, y);
  return y;
}

i64 unary(GraphBuilder& graph, cudnnPointwiseMode_t mode, i64 x, const Dims& dims,
          const Dims& strides) {
  const i64 y = graph.virtual_tensor(dims, strides, CUDNN_DATA_FLOAT);
  graph.pointwise(mode, x, -1, -1, y);
  return y;
}

// The inputs and scalars both graphs share.
void add_common_tensors(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io) {
  graph.memory_tensor({q_uid, l.q_dims(), l.packed_strides(), io});
  graph.memory_tensor({lse_uid, l.row_dims(), l.row_strides(), CUDNN_DATA_FLOAT});
  graph.memory_tensor({out_uid, l.q_dims(), l.out_strides(), io});
  graph.scalar_tensor(scale_uid, CUDNN_DATA_FLOAT);
  graph.scalar_tensor(minus_infinity_uid, CUDNN_DATA_FLOAT);
}

// gradient = a @ b into `target` (B x Hkv x T x D): directly where every query head has its own
// kv head, else into a B x H x T x D virtual tensor summed over each group of query heads.
void product_into_kv_heads(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io, i64 a,
                           i64 b, i64 target) {
  if (l.h == l.hk) {
    graph.matmul(a, b, target);
    return;
  }
  const i64 per_query_head = graph.virtual_tensor(l.q_dims(), l.heads_strides(), io);
  graph.matmul(a, b, per_query_head);
  graph.reduction(CUDNN_REDUCE_TENSOR_ADD, per_query_head, target);
}

// The backward's tensors in memory: its inputs, dQ, dK and dV (written into scratch laid out as
// qkv), and its two fp32 workspace tensors.
void add_backward_tensors(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io) {
  add_common_tensors(graph, l, io);
  graph.memory_tensor({k_uid, l.kv_transposed_dims(), l.packed_transposed_strides(), io});
  graph.memory_tensor({v_uid, l.kv_transposed_dims(), l.packed_transposed_strides(), io});
  graph.memory_tensor({dout_uid, l.q_dims(), l.out_strides(), io});
  graph.memory_tensor({dq_uid, l.q_dims(), l.packed_strides(), io});
  graph.memory_tensor({dk_uid, l.kv_dims(), l.packed_strides(), io});
  graph.memory_tensor({dv_uid, l.kv_dims(), l.packed_strides(), io});
  graph.memory_tensor({softmax_sum_uid, l.row_dims(), l.row_strides(), CUDNN_DATA_FLOAT});
  graph.memory_tensor({dq_accum_uid, l.q_dims(), l.heads_strides(), CUDNN_DATA_FLOAT});
  graph.scalar_tensor(one_uid, CUDNN_DATA_FLOAT);
}

// The scores' last two dimensions swapped, in the element type, as a product's A.
i64 transposed(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io, i64 scores) {
  const i64 y = graph.virtual_tensor(l.scores_dims(), l.scores_transposed_strides(), io);
  graph.reshape(scores, y);
  return y;
}

}  // namespace

void state_attention_forward(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io) {
  add_common_tensors(graph, l, io);
  graph.memory_tensor({k_uid, l.kv_transposed_dims(), l.packed_transposed_strides(), io});
  graph.memory_tensor({v_uid, l.kv_dims(), l.packed_strides(), io});
  const i64 masked = causal_mask(graph, l, scaled_scores(graph, l));
  // The softmax and its statistics: lse = max + log(sum(exp(s - max))).
  const i64 max = graph.virtual_tensor(l.row_dims(), l.row_strides(), CUDNN_DATA_FLOAT);
  graph.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  const i64 exps =
      unary(graph, CUDNN_POINTWISE_EXP, binary(graph, CUDNN_POINTWISE_SUB, masked, max),
            l.scores_dims(), l.scores_strides());
  const i64 sum = graph.virtual_tensor(l.row_dims(), l.row_strides(), CUDNN_DATA_FLOAT);
  graph.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, sum);
  const i64 log_sum = unary(graph, CUDNN_POINTWISE_LOG, sum, l.row_dims(), l.row_strides());
  graph.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, -1, lse_uid);
  // The probabilities in the element type, as the second product takes them.
  const i64 probabilities = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), io);
  graph.pointwise(CUDNN_POINTWISE_DIV, exps, sum, -1, probabilities);
  graph.matmul(probabilities, v_uid, out_uid);
}

void state_attention_backward(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io) {
  add_backward_tensors(graph, l, io);
  // softmax_sum = rowsum(dout * out).
  const i64 products = graph.virtual_tensor(l.q_dims(), l.out_strides(), CUDNN_DATA_FLOAT);
  graph.pointwise(CUDNN_POINTWISE_MUL, dout_uid, out_uid, -1, products);
  const i64 row_sums = graph.virtual_tensor(l.row_dims(), l.row_strides(), CUDNN_DATA_FLOAT);
  graph.reduction(CUDNN_REDUCE_TENSOR_ADD, products, row_sums);
  graph.pointwise(CUDNN_POINTWISE_MUL, row_sums, one_uid, -1, softmax_sum_uid);
  // P = exp(S - lse), masked causally; dV = P^T dout.
  const i64 shifted = binary(graph, CUDNN_POINTWISE_SUB, scaled_scores(graph, l), lse_uid);
  const i64 probabilities = unary(graph, CUDNN_POINTWISE_EXP, causal_mask(graph, l, shifted),
                                  l.scores_dims(), l.scores_strides());
  product_into_kv_heads(graph, l, io, transposed(graph, l, io, probabilities), dout_uid, dv_uid);
  // dS = P (dout V^T - softmax_sum) * scale; dK = dS^T Q; dQ = dS K, through fp32.
  const i64 dp = graph.virtual_tensor(l.scores_dims(), l.scores_strides(), CUDNN_DATA_FLOAT);
  graph.matmul(dout_uid, v_uid, dp);
  const i64 ds =
      binary(graph, CUDNN_POINTWISE_MUL,
             binary(graph, CUDNN_POINTWISE_MUL,
                    binary(graph, CUDNN_POINTWISE_SUB, dp, softmax_sum_uid), probabilities),
             scale_uid);
  product_into_kv_heads(graph, l, io, transposed(graph, l, io, ds), q_uid, dk_uid);
  const i64 k_rows = graph.virtual_tensor(l.kv_dims(), l.packed_strides(), io);
  graph.reshape(k_uid, k_rows);
  graph.matmul(ds, k_rows, dq_accum_uid);
  graph.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum_uid, -1, -1, dq_uid);
}

}  // namespace strata::gpu::cuda
