#pragma once

#include <cudnn_graph.h>

#include <cstdint>

#include "gpu/cuda/cudnn_graph.h"

// The operation graphs of cuDNN's fused attention (cudnn_attention.h), stated on a GraphBuilder:
// what each graph computes and how the packed qkv rows are seen as Q, K and V.
namespace strata::gpu::cuda {

// The uids of the graphs' memory and scalar tensors.
enum AttentionUid : std::int64_t {
  q_uid = 1,
  k_uid,  // K^T in every graph but the forward's
  v_uid,  // V in the forward, V^T in the backward
  out_uid,
  lse_uid,
  scale_uid,
  minus_infinity_uid,
  one_uid,
  dout_uid,
  dq_uid,
  dk_uid,
  dv_uid,
  softmax_sum_uid,  // rowsum(dout * out), fp32 in the workspace
  dq_accum_uid,     // dQ in fp32 before its rounding, in the workspace
};

// The shapes and element strides of one call's tensors: q, k and v (and dq, dk, dv) are column
// ranges of the packed rows of `width` elements; out and dout are (rows, heads x head_dim); the
// scores are B x H x T x T and the per-row statistics B x H x T x 1.
struct AttentionLayout {
  std::int64_t b, t, h, hk, d;
  std::int64_t width() const { return (h + 2 * hk) * d; }
  std::int64_t k_offset() const { return h * d; }
  std::int64_t v_offset() const { return (h + hk) * d; }
  Dims q_dims() const { return {b, h, t, d}; }
  Dims kv_dims() const { return {b, hk, t, d}; }
  Dims kv_transposed_dims() const { return {b, hk, d, t}; }
  Dims packed_strides() const { return {t * width(), d, width(), 1}; }
  Dims packed_transposed_strides() const { return {t * width(), d, 1, width()}; }
  Dims out_strides() const { return {t * h * d, d, h * d, 1}; }
  Dims heads_strides() const { return {h * t * d, t * d, d, 1}; }  // B x H x T x D, contiguous
  Dims scores_dims() const { return {b, h, t, t}; }
  Dims scores_strides() const { return {h * t * t, t * t, t, 1}; }
  Dims scores_transposed_strides() const { return {h * t * t, t * t, 1, t}; }
  Dims row_dims() const { return {b, h, t, 1}; }
  Dims row_strides() const { return {h * t, t, 1, 1}; }
};

// The forward: S = Q K^T * scale, masked causally (-inf where the key's index is past the
// query's), its softmax's statistics into lse (max + log sum exp) and out = softmax(S) V, the
// probabilities in the element type `io` (bfloat16 or float16).
void state_attention_forward(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io);

// The backward: P = exp(S - lse) masked, dV = P^T dout, dS = P (dout V^T - rowsum(dout * out)) *
// scale, dK = dS^T Q, dQ = dS K (through fp32); grouped query heads' dK and dV summed per group.
void state_attention_backward(GraphBuilder& graph, const AttentionLayout& l, cudnnDataType_t io);

}  // namespace strata::gpu::cuda
