#pragma once

// bf16 and fp16 storage types and their scalar conversions, for the engine and for the kernels'
// tests. Conversions to the narrow types round to nearest, ties to even, as IEEE 754 does and as
// the GPU's own conversions do; a NaN stays a NaN (made quiet), infinities stay infinities, and
// fp16 keeps its subnormals. These are the reference the SIMD kernels are tested against.

#include <bit>
#include <cstdint>

namespace strata::cpu_adam {

// A bfloat16 value: the top 16 bits of an fp32. Only the bits are stored; convert to compute.
struct bf16 {
  std::uint16_t bits = 0;
  friend bool operator==(bf16, bf16) = default;
};

// An IEEE 754 binary16 value (1 sign, 5 exponent, 10 mantissa bits), stored as its bits.
struct fp16 {
  std::uint16_t bits = 0;
  friend bool operator==(fp16, fp16) = default;
};

// Exact: every bf16 is an fp32.
inline float to_float(bf16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}

// Round to nearest even. Adding 0x7fff plus the lowest kept bit to the fp32 bits carries into
// the kept half exactly when the dropped half is above the midpoint, or at it with an odd kept
// half. NaN is tested first, because the carry could turn a NaN's payload into infinity.
inline bf16 to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fff'ffffu) > 0x7f80'0000u) {
    return bf16{static_cast<std::uint16_t>((bits >> 16) | 0x0040u)};
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(bits >> 16)};
}

// Exact: every fp16 (subnormals included) is an fp32.
inline float to_float(fp16 value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (value.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f80'0000u | (mantissa << 13));
  if (exponent == 0) {
    // A subnormal is mantissa * 2^-24; the product is exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even, with overflow to infinity and gradual underflow to subnormals.
inline fp16 to_fp16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fff'ffffu;
  if (magnitude > 0x7f80'0000u) {
    return fp16{static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  }
  // 65520 = 65504 + half an ulp: the midpoint to infinity, whose "mantissa" is even.
  if (magnitude >= 0x477f'f000u) return fp16{static_cast<std::uint16_t>(sign | 0x7c00u)};
  if (magnitude < 0x3880'0000u) {
    // Below 2^-14 the result is q * 2^-24. At or below 2^-25 (half of the smallest subnormal,
    // a tie to the even zero) it is zero.
    if (magnitude <= 0x3300'0000u) return fp16{sign};
    const std::uint32_t exponent = magnitude >> 23;  // 102 ... 112
    const std::uint32_t significand = (magnitude & 0x7f'ffffu) | 0x80'0000u;
    const std::uint32_t shift = 126 - exponent;  // 14 ... 24
    std::uint32_t quotient = significand >> shift;
    const std::uint32_t remainder = significand & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (quotient & 1u) != 0)) ++quotient;
    return fp16{static_cast<std::uint16_t>(sign | quotient)};
  }
  // Normal: rebias the exponent from 127 to 15, then round the 13 dropped mantissa bits the
  // same way as to_bf16 does; a carry out of the mantissa correctly bumps the exponent.
  std::uint32_t rebiased = magnitude - (112u << 23);
  rebiased += 0xfffu + ((rebiased >> 13) & 1u);
  return fp16{static_cast<std::uint16_t>(sign | (rebiased >> 13))};
}

}  // namespace strata::cpu_adam
