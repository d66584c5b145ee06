#pragma once

// How a kernel reads and writes an element of type T (float, __nv_bfloat16, __half): it widens
// what it loads to fp32, exactly, computes in fp32 as the fp32 kernel does, and rounds what it
// stores once, to nearest even, with base/half_bits.h, the conversions the host backend rounds
// with, so the two backends round a value to the same bits. An output a backward kernel
// accumulates into is read, widened, added to in fp32 and rounded once (add_into). For T = float
// every function here is the identity, and the kernels are the fp32 kernels they always were.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "base/half_bits.h"

namespace strata::gpu::cuda::kernels {
namespace {

__device__ float widen(float value) {
  return value;
}
__device__ float widen(__nv_bfloat16 value) {
  return bf16_bits_to_float(__bfloat16_as_ushort(value));
}
__device__ float widen(__half value) {
  return fp16_bits_to_float(__half_as_ushort(value));
}

template <typename T>
__device__ T narrow(float value);
template <>
__device__ float narrow<float>(float value) {
  return value;
}
template <>
__device__ __nv_bfloat16 narrow<__nv_bfloat16>(float value) {
  return __ushort_as_bfloat16(float_to_bf16_bits(value));
}
template <>
__device__ __half narrow<__half>(float value) {
  return __ushort_as_half(float_to_fp16_bits(value));
}

// target += value, in fp32, rounded once.
template <typename T>
__device__ void add_into(T& target, float value) {
  target = narrow<T>(widen(target) + value);
}

// One warp's row of residual_forward: sum[c] = a[c] + b[c], rounded once, for the columns c of
// `lane` (lane, lane + 32, ...), the columns the norm kernels then read in that lane. The warp
// synchronises after, so every lane's stores are done before the row is read.
template <typename T>
__device__ void add_row(T* sum, const T* a, const T* b, std::int64_t channels, int lane) {
  for (std::int64_t c = lane; c < channels; c += 32)
    sum[c] = narrow<T>(widen(a[c]) + widen(b[c]));
  __syncwarp();
}

}  // namespace
}  // namespace strata::gpu::cuda::kernels
