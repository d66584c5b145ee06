#pragma once

// fp32 <-> bfloat16 and fp32 <-> IEEE 754 binary16 (fp16), one value at a time, on the raw 16-bit
// patterns. It is the one copy of this arithmetic: cpu_adam/half.h (the optimizer's parameter
// copies), gpu/host/kernels/cast.h (the host backend's casts and 16-bit ops) and the CUDA kernels
// (gpu/cuda/kernels/, through STRATA_HOST_DEVICE) all call it, so the host and the GPU round
// every value to the same bits.
//
// Every narrowing rounds to nearest, ties to even, as IEEE 754 does and as CUDA's
// __float2bfloat16_rn and __float2half_rn do; a NaN stays a NaN, made quiet, with its sign and
// top payload bits (plain rounding of its bits could carry a NaN into infinity); overflow gives
// infinity; fp16 keeps its subnormals. Widening is exact: every bf16 and every fp16 (subnormals
// included) is an fp32. C++17, header-only: nvcc compiles it.

#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace strata {
namespace half_bits_detail {

STRATA_HOST_DEVICE inline std::uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

STRATA_HOST_DEVICE inline float float_of(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value = 0.0f;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

}  // namespace half_bits_detail

// bf16 bits -> fp32, exact: a bf16 is the top 16 bits of an fp32.
STRATA_HOST_DEVICE inline float bf16_bits_to_float(std::uint16_t bits) {
  return half_bits_detail::float_of(static_cast<std::uint32_t>(bits) << 16);
}

// fp32 -> bf16 bits, rounded to nearest even. Adding 0x7fff plus the lowest kept bit to the fp32
// bits carries into the kept half exactly when the dropped half is above the midpoint, or at it
// with an odd kept half; a carry moves into the exponent (and from the largest finite value to
// infinity) as it should. NaN is tested first, because the carry could turn a NaN's payload into
// infinity.
STRATA_HOST_DEVICE inline std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = half_bits_detail::bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

// fp16 bits (1 sign, 5 exponent, 10 mantissa bits) -> fp32, exact.
STRATA_HOST_DEVICE inline float fp16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x03ffu;
  if (exponent == 0x1fu) return half_bits_detail::float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or a subnormal: mantissa * 2^-24, a product exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return half_bits_detail::float_of(half_bits_detail::bits_of(magnitude) | sign);
  }
  return half_bits_detail::float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// fp32 -> fp16 bits, rounded to nearest even, with overflow to infinity and gradual underflow to
// subnormals.
STRATA_HOST_DEVICE inline std::uint16_t float_to_fp16_bits(float value) {
  const std::uint32_t bits = half_bits_detail::bits_of(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu));
  }
  // 65520 = 0x477ff000 is halfway between 65504 (the largest fp16, odd mantissa) and 65536: it
  // and everything above round to infinity, whose "mantissa" is even.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is a subnormal, a count q of 2^-24 steps. At or below 2^-25
    // (0x33000000, half the smallest subnormal, a tie to the even zero) it is zero.
    if (magnitude <= 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;  // 102 ... 112
    const std::uint32_t significand = (magnitude & 0x007fffffu) | 0x00800000u;
    const std::uint32_t shift = 126u - exponent;  // 14 ... 24
    const std::uint32_t kept = significand >> shift;
    const std::uint32_t dropped = significand & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t rounded =
        kept + ((dropped > half || (dropped == half && (kept & 1u) != 0u)) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent from 127 to 15 (subtract 112 << 23), then round the 13 dropped
  // mantissa bits as float_to_bf16_bits rounds its 16; a carry out of the mantissa correctly
  // bumps the exponent.
  const std::uint32_t rebiased = magnitude - (112u << 23);
  const std::uint32_t rounded = rebiased + 0x0fffu + ((rebiased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

}  // namespace strata
