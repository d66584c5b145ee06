#pragma once

// The element types the CUDA kernels are instantiated for, and what every launcher header shares.
// Weights and activations are float, __nv_bfloat16 or __half (gpu::Tensor's float32, bfloat16,
// float16); each templated launcher is instantiated for the three with
// STRATA_CUDA_FOR_EACH_ELEMENT, and gpu/cuda/cuda_ops.cpp picks one from a Tensor's DataType.
// Statistics, losses and parameter gradients are float whatever the element type.
//
// The launcher headers (gpu/cuda/kernels/*.h) are plain C++17, because nvcc compiles the kernels
// as C++17, and include no gpu/*.h. Each launcher enqueues on `stream` and returns the launch's
// status (cudaGetLastError); none blocks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::gpu::cuda::kernels {

using i64 = std::int64_t;

}  // namespace strata::gpu::cuda::kernels

// X(float) X(__nv_bfloat16) X(__half): one explicit instantiation per element type.
#define STRATA_CUDA_FOR_EACH_ELEMENT(X) X(float) X(__nv_bfloat16) X(__half)
