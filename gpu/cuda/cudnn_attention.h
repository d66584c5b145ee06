#pragma once

#include <memory>

#include "gpu/cuda/kernels/attention.h"
#include "gpu/stream.h"
#include "gpu/tensor.h"

namespace strata::gpu::cuda {

class CudaDevice;

// Causal attention through cuDNN's fused flash attention, for CudaOps: gpu::Ops's
// attention_forward and attention_backward on the packed qkv rows, stated as cuDNN's operation
// graphs (cudnn_graph.h) the way cuDNN's frontend states its SDPA node:
// - forward: S = Q K^T * scale, masked causally (row index >= column index, else -inf), then the
//   softmax's maximum M and sum Z, lse = M + log Z (the statistics cuDNN calls Stats, which are
//   strata's lse), and out = softmax(S) V, the probabilities in the element type;
// - backward: from lse, P = exp(S - lse) recomputed, dV = P^T dout, dP = dout V^T,
//   dS = P (dP - rowsum(dout * out)) * scale, dK = dS^T Q, dQ = dS K (accumulated in fp32);
//   grouped query heads' dK and dV summed over each group.
// Q, K and V are read in place from qkv through strides. cuDNN writes gradients rather than
// adding them, so the backward writes dQ, dK and dV into scratch laid out as qkv and adds that
// into dqkv (one rounding more than strata's own kernels).
//
// cuDNN is loaded at the first call (cudnn_library.h). A plan is built once per shape, type and
// direction; where cuDNN is absent, where it builds no plan for a shape (another GPU, head_dim,
// or cuDNN version), or where a pointer is not 16-byte aligned, the call returns false with
// nothing enqueued, and CudaOps runs strata's own kernels. Each reason is logged once.
// Thread-safe.
class CudnnAttention {
 public:
  explicit CudnnAttention(CudaDevice& device);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // gpu::Ops::attention_forward, if cuDNN takes it.
  bool forward(Stream& stream, Tensor out, float* lse, ConstTensor qkv,
               const kernels::AttentionShape& shape);
  // gpu::Ops::attention_backward (dqkv += the gradient), if cuDNN takes it.
  bool backward(Stream& stream, Tensor dqkv, ConstTensor dout, ConstTensor qkv, ConstTensor out,
                const float* lse, const kernels::AttentionShape& shape);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::gpu::cuda
