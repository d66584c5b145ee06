#pragma once

// bf16 and fp16 storage types and their scalar conversions, for the engine and for the kernels'
// tests. Conversions to the narrow types round to nearest, ties to even, as IEEE 754 does and as
// the GPU's own conversions do; a NaN stays a NaN (made quiet), infinities stay infinities, and
// fp16 keeps its subnormals. These are the reference the SIMD kernels are tested against.

#include <cstdint>

#include "base/half_bits.h"

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

// The conversions are base/half_bits.h's, the one copy the host backend and the CUDA kernels
// share; these name them for the storage types.
inline float to_float(bf16 value) {
  return bf16_bits_to_float(value.bits);
}
inline bf16 to_bf16(float value) {
  return bf16{float_to_bf16_bits(value)};
}
inline float to_float(fp16 value) {
  return fp16_bits_to_float(value.bits);
}
inline fp16 to_fp16(float value) {
  return fp16{float_to_fp16_bits(value)};
}

}  // namespace strata::cpu_adam
