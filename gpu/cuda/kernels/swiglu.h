#pragma once

#include "gpu/cuda/kernels/element_types.h"

// SwiGLU (Llama's gated MLP activation) on the GPU, the twin of gpu/host/kernels/swiglu.h, for
// T = float, __nv_bfloat16, __half (element_types.h).
namespace strata::gpu::cuda::kernels {

template <typename T>
cudaError_t swiglu_forward(cudaStream_t stream, T* out, const T* gate, const T* up, i64 n);
// dgate and dup accumulate, each rounded once.
template <typename T>
cudaError_t swiglu_backward(cudaStream_t stream, T* dgate, T* dup, const T* dout, const T* gate,
                            const T* up, i64 n);

}  // namespace strata::gpu::cuda::kernels
