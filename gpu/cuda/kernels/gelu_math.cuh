#pragma once

// GELU's tanh approximation (GPT-2's) on one fp32 value, as gpu/host/kernels/gelu.cpp computes it:
// tanh(u) and sech^2(u) from one exp(-2|u|), finite for every finite x. The GELU kernels
// (gelu.cu) and the matmul's fallback epilogue (matmul.cu) share it.
#include <cuda_runtime.h>

namespace strata::gpu::cuda::kernels {
namespace {

constexpr float gelu_cubic = 0.044715f;
constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)

struct TanhSech {
  float tanh;
  float sech_squared;
};

// tanh(u) and sech^2(u) for u = sqrt(2 / pi) (x + 0.044715 x^3). With e = exp(-2|u|) in (0, 1]:
// tanh|u| = (1 - e) / (1 + e), sech^2 u = 4e / (1 + e)^2.
__device__ TanhSech gelu_tanh_sech(float x) {
  const float u = gelu_scale * (x + gelu_cubic * x * x * x);
  const float e = expf(-2.0f * fabsf(u));
  const float inverse = 1.0f / (1.0f + e);
  const float magnitude = (1.0f - e) * inverse;
  return TanhSech{u < 0.0f ? -magnitude : magnitude, 4.0f * e * inverse * inverse};
}

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
__device__ float gelu(float x) {
  return 0.5f * x * (1.0f + gelu_tanh_sech(x).tanh);
}

// d/dx gelu(x); where sech^2 underflows to 0 its term is 0, even if x^3 overflowed to infinity.
__device__ float gelu_slope(float x) {
  const TanhSech t = gelu_tanh_sech(x);
  const float curve = t.sech_squared == 0.0f ? 0.0f
                                             : 0.5f * x * t.sech_squared * gelu_scale *
                                                   (1.0f + 3.0f * gelu_cubic * x * x);
  return 0.5f * (1.0f + t.tanh) + curve;
}

}  // namespace
}  // namespace strata::gpu::cuda::kernels
