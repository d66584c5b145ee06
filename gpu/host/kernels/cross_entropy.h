#pragma once

#include <cstdint>

// Fused softmax + cross-entropy over the LM head's logits, on host memory. See embedding.h for the
// conventions shared by every kernel here.
namespace strata::gpu::host::kernels {

// logits: (rows, vocab_padded); only the first `vocab` columns are real tokens (GPT-2 pads 50257
// to 50304 for aligned matrices), the rest are ignored. targets: rows values in [0, vocab).
// Per row, with m = max over the real columns:
//   lse[row] = m + log(sum over c < vocab of exp(logits[c] - m))   (sum in double; stable)
//   losses[row] = lse[row] - logits[targets[row]]
// and *loss_mean = sum(losses) / rows, summed in row order in double. Saves lse (rows values) for
// the backward, so the probabilities are never stored. A target outside [0, vocab) is a
// programmer error (the data loader checks tokens) and stops the program.
template <typename Real>
void cross_entropy_forward(Real* losses, Real* lse, Real* loss_mean, const Real* logits,
                           const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t vocab_padded);

// dlogits[row, c] = (exp(logits[row, c] - lse[row]) - [c == targets[row]]) * dlosses[row] for
// c < vocab, and 0 for the padded columns. Unlike the other backward kernels this one OVERWRITES
// dlogits: it starts the backward pass, and the (rows, vocab_padded) buffer is the largest of the
// step, so not having to zero it first saves a pass over it. For the mean loss, dlosses[row] =
// 1 / rows.
template <typename Real>
void cross_entropy_backward(Real* dlogits, const Real* logits, const Real* lse,
                            const std::int32_t* targets, const Real* dlosses, std::int64_t rows,
                            std::int64_t vocab, std::int64_t vocab_padded);

}  // namespace strata::gpu::host::kernels
