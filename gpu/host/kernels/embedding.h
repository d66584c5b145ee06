#pragma once

#include <cstdint>

// Token and learned position embedding of a GPT-2 style model, on host memory.
//
// Every kernel in gpu/host/kernels is a synchronous free function over raw pointers and sizes so
// a CUDA backend can mirror its signature. Real is float (the model's compute type) or double
// (the finite-difference tests). Backward kernels ACCUMULATE (+=) into their gradient outputs, as
// llm.c's do, so gradients of a tied or reused tensor add up; callers zero gradients once per step.
namespace strata::gpu::host::kernels {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[p, :] with p = start[b] + t (p = t when start is null);
// without positions (wpe null, as Llama's rotary embeddings have none) out[b, t, :] =
// wte[tokens[b, t], :].
// out: (batch, seq_len, channels); tokens: (batch, seq_len), each in [0, vocab);
// wte: (vocab, channels) (vocab may be the padded vocabulary); wpe: a row for every position read.
// A token outside [0, vocab) is a programmer error (the data loader validates tokens) and stops the
// program.
template <typename Real>
void embedding_forward(Real* out, const std::int32_t* tokens, const Real* wte, const Real* wpe,
                       std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                       std::int64_t vocab, const std::int32_t* start = nullptr);

// dwte[tokens[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :] (dwpe may be null). Work
// is split by channel slices (dwte) and positions (dwpe), each summing over (b, t) in order: no
// atomics, the same bits for any thread count.
template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const std::int32_t* tokens,
                        std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                        std::int64_t vocab);

}  // namespace strata::gpu::host::kernels
