#pragma once

#include <cstdint>

// Linear layers through the BLAS (OpenBLAS's sgemm/dgemm). OpenBLAS is pinned to one thread (on
// every call, process-wide) and each product is cut into fixed 64 x 256 tiles of the result
// that oneTBB runs in parallel: OpenBLAS's own threading changes the bits with the thread count.
// See embedding.h for the conventions shared by every kernel here.
namespace strata::gpu::host::kernels {

// The OpenBLAS kernel family the products run on ("SkylakeX", "Haswell", ...), chosen once per
// process. Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels from the CPU's family and
// model number and falls back to "Prescott" (SSE3) for a model it does not know, such as this
// machine's Xeon (family 6, model 207): sgemm then runs 4 to 8 times slower than the CPU allows.
// When it fell back and the user did not choose (OPENBLAS_CORETYPE unset), this switches to the
// family the CPU's features support: SkylakeX with AVX-512, Haswell with AVX2 and FMA. Every
// kernel here calls it before its first product; a benchmark that calls OpenBLAS directly calls
// it first too.
const char* blas_kernels();

// out[rows, out_channels] = inp[rows, in_channels] @ weight[out_channels, in_channels]^T + bias.
// weight is stored as PyTorch's nn.Linear stores it (out x in, row-major). bias may be nullptr
// (the tied LM head: logits = x @ wte^T). out may not alias inp or weight. Up to 8 rows (a decode
// step's) go through sgemv, which reads the weight without packing it: their sums are ordered
// unlike sgemm's, so the bits of a row depend on how many rows come with it. With `rows_alone`
// every row goes through sgemv, whatever their number: each row then has the bits it has alone.
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias,
                    std::int64_t rows, std::int64_t in_channels, std::int64_t out_channels,
                    bool rows_alone = false);

// dinp += dout @ weight, dweight += dout^T @ inp, dbias += sum over rows of dout. dbias may be
// nullptr when the forward had no bias. Tiles split the result, never the summed dimension, and
// dbias is summed per column slice in row order, so the bits do not depend on the thread count.
template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, std::int64_t rows, std::int64_t in_channels,
                     std::int64_t out_channels);

}  // namespace strata::gpu::host::kernels
