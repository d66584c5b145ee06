#pragma once

#include <cstdint>
#include <memory>

#include "gpu/ops.h"
#include "gpu/stream.h"
#include "gpu/tensor.h"

namespace strata::gpu::cuda {

class CudaDevice;

// The linear layers of gpu::Ops (matmul_forward, matmul_gelu_forward, matmul_backward) on
// cuBLASLt, modelled on llm.c's llmc/matmul.cuh:
// - 16-bit Tensors multiply on the tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F) and
//   round the result once into their own type; fp32 Tensors are fp32 in and out, with
//   CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when OpsOptions::tf32 asks for it.
// - The forward adds the bias in the product's epilogue (CUBLASLT_EPILOGUE_BIAS), and
//   matmul_gelu_forward also applies GELU there (CUBLASLT_EPILOGUE_GELU_AUX_BIAS: the pre-GELU
//   sum into `pre`, its GELU into `out`, both from the fp32 sum). cuBLASLt's GELU is GPT-2's tanh
//   approximation, the host's (PyTorch's addmm with use_gelu falls back to gelu(approximate=
//   "tanh") where it cannot use that epilogue, aten/src/ATen/native/cuda/Blas.cpp).
// - The backward adds dout @ weight into dinp (beta = 1, in dinp's type) and dout^T @ inp into the
//   fp32 dweight (beta = 1: 16-bit A and B with fp32 C and D, a combination cuBLASLt supports
//   with CUBLAS_COMPUTE_32F, and TransformerEngine's cublas_gemm uses to accumulate bf16
//   weight gradients into fp32, transformer_engine/common/gemm/cublaslt_gemm.cu), and
//   the column sums of dout into the fp32 dbias with a kernel of its own (kernels/matmul.h): the
//   BGRADB epilogue overwrites its bias gradient, and the gradients accumulate.
//
// Each (shape, types, epilogue, transposes, pointer alignments) gets a plan made once: its
// descriptors and the heuristic's algorithm. Alignment is part of the key because cuBLASLt's
// kernels assume it: the minimum alignment preferences are set to each pointer's actual
// alignment (a weight slice inside a flat parameter buffer may sit on any element), and the
// heuristic reads the bias and GELU-input pointers themselves. Where no algorithm takes an
// epilogue (a pointer or leading dimension it cannot use), and where the bias or GELU-input
// pointer is not 16-byte aligned (PyTorch met epilogue kernels that read the bias 16 bytes at a
// time and faulted on a misaligned address, which ends the CUDA context; the heuristic's
// alignment preferences do not cover those two pointers), the product runs without one into an
// fp32 buffer and a kernel adds the bias and applies GELU, rounding once, so the result is the
// same op either way and a call never fails for its pointers. Each stream has its own 32 MiB
// workspace (llm.c's size for Hopper), counted against the device budget. Thread-safe.
class CudaMatmul {
 public:
  CudaMatmul(CudaDevice& device, OpsOptions options);
  ~CudaMatmul();
  CudaMatmul(const CudaMatmul&) = delete;
  CudaMatmul& operator=(const CudaMatmul&) = delete;

  // gpu::Ops::matmul_forward (pre null) and matmul_gelu_forward (pre non-null).
  void forward(Stream& stream, Tensor out, Tensor pre, ConstTensor inp, ConstTensor weight,
               ConstTensor bias, std::int64_t rows, std::int64_t in_channels,
               std::int64_t out_channels);
  // How many forwards wanted a bias or GELU and ran it in the epilogue, and how many without it
  // (OpsPathCounts).
  std::int64_t epilogue_runs() const;
  std::int64_t unfused_runs() const;

  // gpu::Ops::matmul_backward.
  void backward(Stream& stream, Tensor dinp, float* dweight, float* dbias, ConstTensor dout,
                ConstTensor inp, ConstTensor weight, std::int64_t rows, std::int64_t in_channels,
                std::int64_t out_channels);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::gpu::cuda
