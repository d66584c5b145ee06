#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// fp32 <-> bf16 and fp32 <-> fp16 conversions, for bf16/fp16 storage with fp32 compute. bf16 and
// fp16 values travel as their raw 16-bit patterns (std::uint16_t) so the signatures need no
// half-precision type and a CUDA version can take __nv_bfloat16* / __half* of the same layout.
//
// Every narrowing rounds to nearest, ties to even (as CUDA's __float2bfloat16_rn and
// __float2half_rn do); a NaN stays a NaN (quiet, sign and top payload bits kept) instead of
// turning into infinity the way plain rounding of its bits would; overflow gives infinity; fp16
// keeps subnormals. Widening is exact.
namespace strata::gpu::host::kernels {

// One value, fp32 -> bf16 bits.
inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7fff plus the lowest kept bit rounds the 16 dropped bits to nearest, ties to even;
  // a carry moves into the exponent (and from the largest finite value to infinity) as it should.
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

// One value, bf16 bits -> fp32 (exact).
inline float bf16_to_float(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

// One value, fp32 -> fp16 bits.
inline std::uint16_t float_to_fp16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu));
  }
  // 65520 = 0x477ff000 is halfway between 65504 (the largest fp16, odd mantissa) and 65536: it
  // and everything above round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    // Below 2^-14: an fp16 subnormal, a count of 2^-24 steps. 2^-25 (0x33000000) ties to 0.
    if (magnitude <= 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x007fffffu) | 0x00800000u;
    const std::uint32_t shift = 126u - exponent;  // 14..24 for exponents 112..102
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t dropped = mantissa & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t rounded =
        kept + ((dropped > half || (dropped == half && (kept & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent (127 -> 15, i.e. subtract 112 << 23) and round the 13 dropped
  // mantissa bits to nearest even, letting a carry move into the exponent.
  const std::uint32_t rebiased = magnitude - (112u << 23);
  const std::uint32_t rounded = rebiased + 0x0fffu + ((rebiased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

// One value, fp16 bits -> fp32 (exact).
inline float fp16_to_float(std::uint16_t value) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(value) & 0x8000u) << 16;
  const std::uint32_t exponent = (value >> 10) & 0x1fu;
  const std::uint32_t mantissa = value & 0x03ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Array versions over n values, split across threads (elementwise, so the bits never depend on
// the thread count). Source and target may not overlap.
void cast_fp32_to_bf16(std::uint16_t* target, const float* source, std::int64_t n);
void cast_bf16_to_fp32(float* target, const std::uint16_t* source, std::int64_t n);
void cast_fp32_to_fp16(std::uint16_t* target, const float* source, std::int64_t n);
void cast_fp16_to_fp32(float* target, const std::uint16_t* source, std::int64_t n);

}  // namespace strata::gpu::host::kernels
