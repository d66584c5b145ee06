// The GPU optimizer: cpu_adam's update rules (cpu_adam/detail/update_rules.h) instantiated with
// the GPU's arithmetic (cpu_adam/detail/fused_lane.h), one fused pass over a flat partition; and
// the gradient norm, a deterministic two-pass sum of squares in double. See optimizer.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "base/half_bits.h"
#include "cpu_adam/detail/fused_lane.h"
#include "cpu_adam/detail/update_rules.h"
#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/optimizer.h"

namespace strata::gpu::cuda::kernels {
namespace {

using cpu_adam::detail::FusedLaneMath;

template <ParamCopy kCopy>
__device__ void store_copy(std::uint16_t* copy, i64 i, float p) {
  if constexpr (kCopy == ParamCopy::bf16) copy[i] = float_to_bf16_bits(p);
  if constexpr (kCopy == ParamCopy::fp16) copy[i] = float_to_fp16_bits(p);
}

// Element i: loads, the update rule, stores.
template <class Op, ParamCopy kCopy>
__device__ void step_element(const Op& op, const OptimizerPointers& a, i64 i) {
  float p = a.params[i];
  float m = 0.0f;
  float v = 0.0f;
  if constexpr (Op::kUsesM) m = a.exp_avg[i];
  if constexpr (Op::kUsesV) v = a.exp_avg_sq[i];
  op(p, a.grads[i], m, v);
  a.params[i] = p;
  if constexpr (Op::kUsesM) a.exp_avg[i] = m;
  if constexpr (Op::kUsesV) a.exp_avg_sq[i] = v;
  store_copy<kCopy>(a.copy, i, p);
}

// Elements 4q .. 4q + 3 with 16-byte loads and stores (8-byte for the copy).
template <class Op, ParamCopy kCopy>
__device__ void step_quad(const Op& op, const OptimizerPointers& a, i64 q) {
  float4 p = reinterpret_cast<const float4*>(a.params)[q];
  const float4 g = reinterpret_cast<const float4*>(a.grads)[q];
  float4 m = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 v = m;
  if constexpr (Op::kUsesM) m = reinterpret_cast<const float4*>(a.exp_avg)[q];
  if constexpr (Op::kUsesV) v = reinterpret_cast<const float4*>(a.exp_avg_sq)[q];
  op(p.x, g.x, m.x, v.x);
  op(p.y, g.y, m.y, v.y);
  op(p.z, g.z, m.z, v.z);
  op(p.w, g.w, m.w, v.w);
  reinterpret_cast<float4*>(a.params)[q] = p;
  if constexpr (Op::kUsesM) reinterpret_cast<float4*>(a.exp_avg)[q] = m;
  if constexpr (Op::kUsesV) reinterpret_cast<float4*>(a.exp_avg_sq)[q] = v;
  if constexpr (kCopy != ParamCopy::none) {
    ushort4 bits;
    if constexpr (kCopy == ParamCopy::bf16) {
      bits = make_ushort4(float_to_bf16_bits(p.x), float_to_bf16_bits(p.y), float_to_bf16_bits(p.z),
                          float_to_bf16_bits(p.w));
    } else {
      bits = make_ushort4(float_to_fp16_bits(p.x), float_to_fp16_bits(p.y), float_to_fp16_bits(p.z),
                          float_to_fp16_bits(p.w));
    }
    reinterpret_cast<ushort4*>(a.copy)[q] = bits;
  }
}

template <class Op, class Args, ParamCopy kCopy, bool kQuads>
__global__ void optimizer_kernel(Args args, OptimizerPointers arrays, i64 n) {
  const Op op(args);
  i64 first_single = 0;
  if constexpr (kQuads) {
    const i64 quads = n / 4;
    for (i64 q = global_index(); q < quads; q += global_stride())
      step_quad<Op, kCopy>(op, arrays, q);
    first_single = quads * 4;
  }
  for (i64 i = first_single + global_index(); i < n; i += global_stride())
    step_element<Op, kCopy>(op, arrays, i);
}

bool aligned(const void* pointer, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(pointer) % bytes == 0;
}

// Whether every array the step touches allows the 16-byte path (null arrays are not touched).
bool quads_allowed(const OptimizerPointers& a) {
  return aligned(a.params, 16) && aligned(a.grads, 16) && aligned(a.exp_avg, 16) &&
         aligned(a.exp_avg_sq, 16) && aligned(a.copy, 8);
}

template <class Op, class Args, ParamCopy kCopy>
cudaError_t launch_with_copy(cudaStream_t stream, const Args& args, const OptimizerPointers& a,
                             i64 n) {
  if (quads_allowed(a)) {
    optimizer_kernel<Op, Args, kCopy, true>
        <<<blocks_for((n + 3) / 4), threads_per_block, 0, stream>>>(args, a, n);
  } else {
    optimizer_kernel<Op, Args, kCopy, false>
        <<<blocks_for(n), threads_per_block, 0, stream>>>(args, a, n);
  }
  return cudaGetLastError();
}

template <class Op, class Args>
cudaError_t launch_optimizer(cudaStream_t stream, const Args& args, const OptimizerPointers& a,
                             ParamCopy copy, i64 n) {
  if (n == 0) return cudaSuccess;
  switch (copy) {
    case ParamCopy::none:
      return launch_with_copy<Op, Args, ParamCopy::none>(stream, args, a, n);
    case ParamCopy::bf16:
      return launch_with_copy<Op, Args, ParamCopy::bf16>(stream, args, a, n);
    case ParamCopy::fp16:
      return launch_with_copy<Op, Args, ParamCopy::fp16>(stream, args, a, n);
  }
  return cudaErrorInvalidValue;
}

// The first pass: each block sums the squares of its grid-stride share in double and writes one
// partial. The grid is a function of n alone, so every run adds the same numbers in the same order.
__global__ void sum_squares_partial_kernel(double* partials, const float* values, i64 n) {
  __shared__ double scratch[threads_per_block / warp_size];
  double sum = 0.0;
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const double x = values[i];
    sum += x * x;
  }
  const double total = block_sum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// The second pass: one block adds the partials in a fixed order.
__global__ void sum_squares_final_kernel(double* sum_squares, const double* partials, int count) {
  __shared__ double scratch[threads_per_block / warp_size];
  double sum = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += threads_per_block)
    sum += partials[i];
  const double total = block_sum(sum, scratch);
  if (threadIdx.x == 0) *sum_squares = total;
}

}  // namespace

cudaError_t adam_step(cudaStream_t stream, const cpu_adam::detail::AdamArgs& args,
                      const OptimizerPointers& arrays, ParamCopy copy, i64 n) {
  return launch_optimizer<cpu_adam::detail::AdamOp<FusedLaneMath>>(stream, args, arrays, copy, n);
}

cudaError_t adagrad_step(cudaStream_t stream, const cpu_adam::detail::AdagradArgs& args,
                         const OptimizerPointers& arrays, ParamCopy copy, i64 n) {
  return launch_optimizer<cpu_adam::detail::AdagradOp<FusedLaneMath>>(stream, args, arrays, copy,
                                                                      n);
}

cudaError_t lion_step(cudaStream_t stream, const cpu_adam::detail::LionArgs& args,
                      const OptimizerPointers& arrays, ParamCopy copy, i64 n) {
  return launch_optimizer<cpu_adam::detail::LionOp<FusedLaneMath>>(stream, args, arrays, copy, n);
}

cudaError_t sum_squares(cudaStream_t stream, double* sum_squares, double* partials,
                        const float* values, i64 n) {
  const unsigned blocks_wanted = blocks_for(n);
  const int blocks = blocks_wanted < static_cast<unsigned>(sum_squares_partials)
                         ? static_cast<int>(blocks_wanted)
                         : sum_squares_partials;
  sum_squares_partial_kernel<<<static_cast<unsigned>(blocks), threads_per_block, 0, stream>>>(
      partials, values, n);
  sum_squares_final_kernel<<<1, threads_per_block, 0, stream>>>(sum_squares, partials, blocks);
  return cudaGetLastError();
}

}  // namespace strata::gpu::cuda::kernels
