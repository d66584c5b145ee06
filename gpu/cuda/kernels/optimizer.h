#pragma once

#include "cpu_adam/detail/kernels.h"
#include "gpu/cuda/kernels/element_types.h"

// The GPU optimizer and the gradient norm behind gpu::Ops (gpu/cuda/cuda_ops.cpp). Each launcher
// enqueues on `stream` and returns the launch's status, never blocks. Plain C++17 (nvcc compiles
// optimizer.cu as C++17); the per-call constants are cpu_adam's (cpu_adam/detail/args.h).
namespace strata::gpu::cuda::kernels {

// What the step writes besides the fp32 master: nothing, or the new parameters as bf16 or fp16.
enum class ParamCopy { none, bf16, fp16 };

// One slice of a flat partition in device memory: fp32 master parameters, fp32 gradients, the fp32
// moments (exp_avg null for Adagrad, exp_avg_sq null for Lion) and the parameter copy (raw 16-bit
// patterns; null with ParamCopy::none).
struct OptimizerPointers {
  float* params;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint16_t* copy;
};

// One fused pass over n elements: reads master, moments and gradient, writes master, moments and
// the copy. cpu_adam's update rules in the GPU's arithmetic (cpu_adam/detail/fused_lane.h), so
// cpu_adam::gpu_twin_step gives the same bits on the CPU. Four elements a thread with 16-byte
// loads where every array allows it (sub-groups start on multiples of 2048 elements), one
// otherwise; either way each element is computed the same.
cudaError_t adam_step(cudaStream_t stream, const cpu_adam::detail::AdamArgs& args,
                      const OptimizerPointers& arrays, ParamCopy copy, i64 n);
cudaError_t adagrad_step(cudaStream_t stream, const cpu_adam::detail::AdagradArgs& args,
                         const OptimizerPointers& arrays, ParamCopy copy, i64 n);
cudaError_t lion_step(cudaStream_t stream, const cpu_adam::detail::LionArgs& args,
                      const OptimizerPointers& arrays, ParamCopy copy, i64 n);

// The doubles of scratch sum_squares needs: one partial sum per block of the first pass.
inline constexpr int sum_squares_partials = 1024;

// *sum_squares = sum of values[i]^2 over n fp32 values, in double: a first pass of at most
// sum_squares_partials blocks (their number a function of n alone) writes one partial each into
// `partials`, a second block adds them in order, so the result has the same bits every run.
// inf or NaN anywhere makes it inf or NaN.
cudaError_t sum_squares(cudaStream_t stream, double* sum_squares, double* partials,
                        const float* values, i64 n);

}  // namespace strata::gpu::cuda::kernels
