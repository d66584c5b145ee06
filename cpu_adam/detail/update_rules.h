#pragma once

// The optimizers' update rules, written once over an arithmetic description `I` (see
// kernel_impl.h for what I provides): the CPU kernels instantiate them with their SIMD levels
// (kernel_impl.h), the CUDA optimizer (gpu/cuda/kernels/optimizer.cu) and its CPU twin with
// FusedLaneMath (fused_lane.h), one element per lane. Plain C++17 with no intrinsics, so nvcc
// compiles it too; every function an I may run on the device is STRATA_HOST_DEVICE.

#include "base/host_device.h"
#include "cpu_adam/detail/kernels.h"

namespace strata::cpu_adam::detail {

template <class I>
struct AdamOp {
  static constexpr bool kUsesM = true;
  static constexpr bool kUsesV = true;
  using V = typename I::V;
  V grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, bias_correction2, step_size,
      weight_decay, decay;
  bool l2_decay, decoupled_decay;

  STRATA_HOST_DEVICE explicit AdamOp(const AdamArgs& a)
      : grad_scale(I::set1(a.grad_scale)),
        beta1(I::set1(a.beta1)),
        one_minus_beta1(I::set1(a.one_minus_beta1)),
        beta2(I::set1(a.beta2)),
        one_minus_beta2(I::set1(a.one_minus_beta2)),
        eps(I::set1(a.eps)),
        bias_correction2(I::set1(a.bias_correction2)),
        step_size(I::set1(a.step_size)),
        weight_decay(I::set1(a.weight_decay)),
        decay(I::set1(a.decay)),
        l2_decay(a.l2_decay),
        decoupled_decay(a.decoupled_decay) {}

  // The order of operations is DeepSpeed's Step_AVX, so results can be compared with it.
  STRATA_HOST_DEVICE void operator()(V& p, V g, V& m, V& v) const {
    g = I::mul(g, grad_scale);
    if (l2_decay) g = I::fmadd(p, weight_decay, g);
    m = I::fmadd(g, one_minus_beta1, I::mul(m, beta1));
    v = I::fmadd(I::mul(g, g), one_minus_beta2, I::mul(v, beta2));
    const V denominator = I::fmadd(I::sqrt(v), bias_correction2, eps);
    const V update = I::quotient(m, denominator);
    if (decoupled_decay) p = I::fmadd(p, decay, p);
    p = I::fmadd(update, step_size, p);
  }
};

template <class I>
struct AdagradOp {
  static constexpr bool kUsesM = false;
  static constexpr bool kUsesV = true;
  using V = typename I::V;
  V grad_scale, eps, step_size, weight_decay;
  bool l2_decay;

  STRATA_HOST_DEVICE explicit AdagradOp(const AdagradArgs& a)
      : grad_scale(I::set1(a.grad_scale)),
        eps(I::set1(a.eps)),
        step_size(I::set1(a.step_size)),
        weight_decay(I::set1(a.weight_decay)),
        l2_decay(a.l2_decay) {}

  STRATA_HOST_DEVICE void operator()(V& p, V g, V& /*m*/, V& v) const {
    g = I::mul(g, grad_scale);
    if (l2_decay) g = I::fmadd(p, weight_decay, g);
    v = I::fmadd(g, g, v);
    const V denominator = I::add(I::sqrt(v), eps);
    p = I::fmadd(I::quotient(g, denominator), step_size, p);
  }
};

template <class I>
struct LionOp {
  static constexpr bool kUsesM = true;
  static constexpr bool kUsesV = false;
  using V = typename I::V;
  V grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, after_decay;
  bool decay;

  STRATA_HOST_DEVICE explicit LionOp(const LionArgs& a)
      : grad_scale(I::set1(a.grad_scale)),
        beta1(I::set1(a.beta1)),
        one_minus_beta1(I::set1(a.one_minus_beta1)),
        beta2(I::set1(a.beta2)),
        one_minus_beta2(I::set1(a.one_minus_beta2)),
        step_size(I::set1(a.step_size)),
        after_decay(I::set1(a.after_decay)),
        decay(a.decay) {}

  STRATA_HOST_DEVICE void operator()(V& p, V g, V& m, V& /*v*/) const {
    g = I::mul(g, grad_scale);
    const V blend = I::fmadd(g, one_minus_beta1, I::mul(m, beta1));
    const V update = I::sign_step(blend, step_size);  // -lr * sign(blend)
    p = decay ? I::fmadd(p, after_decay, update) : I::add(p, update);
    m = I::fmadd(g, one_minus_beta2, I::mul(m, beta2));
  }
};

}  // namespace strata::cpu_adam::detail
