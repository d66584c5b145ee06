#pragma once

// The arithmetic of the GPU optimizer, one element at a time: a fused multiply-add wherever the
// update rules (update_rules.h) ask for one, as the AVX2 and AVX-512 kernels do, and a correctly
// rounded division and square root. nvcc instantiates the update rules with it in
// gpu/cuda/kernels/optimizer.cu, and the CPU runs the same instantiation as the GPU optimizer's
// twin (fused_lane_kernels(), cpu_adam/optimizer.h's gpu_twin_step), so a test on a machine
// without a GPU checks the arithmetic the GPU runs, and on a GPU the two agree bit for bit.
//
// Every operation says its rounding, so neither compiler can change it: on the device the _rn
// intrinsics (never fused into an FFMA, and IEEE whatever -prec-div or -prec-sqrt say), on the
// host std::fma, and separate +, *, / and std::sqrt, which strata's host code never contracts
// (-ffp-contract=off). Both are IEEE 754 binary32 with subnormals kept (strata's CUDA code is
// built without --use_fast_math, whose -ftz=true would flush them), so the same inputs give the
// same bits. C++17: nvcc compiles it.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace strata::cpu_adam::detail {

struct FusedLaneMath {
  using V = float;
  static constexpr int kWidth = 1;

  STRATA_HOST_DEVICE static V set1(float x) { return x; }
  STRATA_HOST_DEVICE static V add(V a, V b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
  }
  STRATA_HOST_DEVICE static V mul(V a, V b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
  }
  // a * b + c rounded once.
  STRATA_HOST_DEVICE static V fmadd(V a, V b, V c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
  }
  STRATA_HOST_DEVICE static V quotient(V a, V b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
  }
  STRATA_HOST_DEVICE static V sqrt(V a) {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(a);
#else
    return std::sqrt(a);
#endif
  }
  // s with its sign flipped when c's sign bit is set.
  STRATA_HOST_DEVICE static V sign_step(V c, V s) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float((__float_as_uint(c) & 0x80000000u) ^ __float_as_uint(s));
#else
    std::uint32_t c_bits = 0;
    std::uint32_t s_bits = 0;
    std::memcpy(&c_bits, &c, sizeof c_bits);
    std::memcpy(&s_bits, &s, sizeof s_bits);
    const std::uint32_t bits = (c_bits & 0x80000000u) ^ s_bits;
    float result = 0.0f;
    std::memcpy(&result, &bits, sizeof result);
    return result;
#endif
  }
};

}  // namespace strata::cpu_adam::detail
