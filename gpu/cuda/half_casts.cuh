#pragma once

// fp32 <-> bf16 / fp16 on the device, bit for bit the host's conversions (gpu/host/kernels/cast.h,
// cpu_adam/half.h): round to nearest even, NaN kept quiet with its sign and top payload bits,
// overflow to infinity, fp16 subnormals kept. The casts (kernels.cu) and the optimizer's
// parameter copy (optimizer_kernels.cu) use them; each .cu file gets its own copy (unnamed
// namespace), as with kernel_common.cuh.
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::gpu::cuda::kernels {
namespace {

__device__ std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

__device__ float bf16_to_float(std::uint16_t value) {
  return __uint_as_float(static_cast<std::uint32_t>(value) << 16);
}

__device__ std::uint16_t float_to_fp16(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    if (magnitude <= 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x007fffffu) | 0x00800000u;
    const std::uint32_t shift = 126u - exponent;
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t dropped = mantissa & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t rounded =
        kept + ((dropped > half || (dropped == half && (kept & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  const std::uint32_t rebiased = magnitude - (112u << 23);
  const std::uint32_t rounded = rebiased + 0x0fffu + ((rebiased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

__device__ float fp16_to_float(std::uint16_t value) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(value) & 0x8000u) << 16;
  const std::uint32_t exponent = (value >> 10) & 0x1fu;
  const std::uint32_t mantissa = value & 0x03ffu;
  if (exponent == 0) {
    // mantissa * 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return __uint_as_float(__float_as_uint(magnitude) | sign);
  }
  if (exponent == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace
}  // namespace strata::gpu::cuda::kernels
