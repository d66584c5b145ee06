#pragma once

// Element-wise arithmetic the host backend and the CUDA kernels share, written once so that both
// give the same bits (gpu::Ops promises fill, residual and accumulate bit for bit). C++17 and
// header-only: gpu/cuda/*.cu includes it too.
//
// The hazard is contraction. nvcc fuses `a + b * s` into one FFMA (a single rounding) unless
// told otherwise (--fmad=true is its default), while the host rounds the product and then the sum:
// x86-64's baseline has no FMA instruction, and strata's host code is compiled with
// -ffp-contract=off, so the host never contracts. The two differ in the last bit whenever the
// product is not exact in fp32. A formula here therefore spells out its roundings: on the device
// with __fmul_rn / __fadd_rn, which the compiler never fuses, on the host as separate statements.
// Two roundings rather than fmaf on both sides because the host runs on any x86-64 (fmaf there
// would be a libm call per element where the CPU lacks FMA) and because that is the arithmetic the
// host backend has always done, so its results do not change.
//
// A lone add (residual_forward, residual_backward) needs nothing: there is nothing to fuse, and an
// IEEE add rounds the same on both.

#include "base/host_device.h"

namespace strata::gpu::detail {

// target + source * scale, the product rounded to fp32 before the sum (gpu::Ops::accumulate).
STRATA_HOST_DEVICE inline float scaled_sum(float target, float source, float scale) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(target, __fmul_rn(source, scale));
#else
  const float product = source * scale;
  return target + product;
#endif
}

}  // namespace strata::gpu::detail
