#pragma once

#include <cstdint>

#include "base/half_bits.h"

// fp32 <-> bf16 and fp32 <-> fp16 conversions, for bf16/fp16 storage with fp32 compute. bf16 and
// fp16 values travel as their raw 16-bit patterns (std::uint16_t) so the signatures need no
// half-precision type and a CUDA version can take __nv_bfloat16* / __half* of the same layout.
// One value at a time they are base/half_bits.h's conversions (round to nearest even, NaN kept
// quiet, overflow to infinity, fp16 subnormals kept; widening exact), the copy the CUDA kernels
// use too, so both backends round to the same bits.
namespace strata::gpu::host::kernels {

inline std::uint16_t float_to_bf16(float value) {
  return float_to_bf16_bits(value);
}
inline float bf16_to_float(std::uint16_t value) {
  return bf16_bits_to_float(value);
}
inline std::uint16_t float_to_fp16(float value) {
  return float_to_fp16_bits(value);
}
inline float fp16_to_float(std::uint16_t value) {
  return fp16_bits_to_float(value);
}

// Array versions over n values, split across threads (elementwise, so the bits never depend on
// the thread count). Source and target may not overlap.
void cast_fp32_to_bf16(std::uint16_t* target, const float* source, std::int64_t n);
void cast_bf16_to_fp32(float* target, const std::uint16_t* source, std::int64_t n);
void cast_fp32_to_fp16(std::uint16_t* target, const float* source, std::int64_t n);
void cast_fp16_to_fp32(float* target, const std::uint16_t* source, std::int64_t n);

}  // namespace strata::gpu::host::kernels
