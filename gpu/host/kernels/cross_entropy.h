#pragma once

#include <cstdint>

// Fused softmax + cross-entropy over the LM head's logits, on host memory. See embedding.h for the
// conventions shared by every kernel here.
namespace strata::gpu::host::kernels {

// logits: (rows, vocab_padded); only the first `vocab` columns are real tokens (GPT-2 pads 50257
// to 50304 for aligned matrices), the rest are ignored. targets: rows values, each in [0, vocab)
// or negative. A negative target masks its row out of the loss (supervised fine-tuning puts the
// loss on the answers only; the data path writes -1 where Hugging Face writes -100).
// Per row in the loss, with m = max over the real columns:
//   lse[row] = m + log(sum over c < vocab of exp(logits[c] - m))   (sum in double; stable)
//   losses[row] = lse[row] - logits[targets[row]]
// and a masked row gets losses[row] = lse[row] = 0 without its logits being read.
// *loss_mean = sum(losses) / n, n the rows in the loss, summed in row order in double (0 when no
// row is). With no row masked that is sum / rows, bit for bit what it was before masks existed.
// Saves lse (rows values) for the backward, so the probabilities are never stored. A target of
// vocab or more is a programmer error (the data loader checks tokens) and stops the program.
template <typename Real>
void cross_entropy_forward(Real* losses, Real* lse, Real* loss_mean, const Real* logits,
                           const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t vocab_padded);

// dlogits[row, c] = (exp(logits[row, c] - lse[row]) - [c == targets[row]]) * dlosses[row] for
// c < vocab, and 0 for the padded columns; a masked row (negative target) is 0 in every column,
// whatever its dlosses. Unlike the other backward kernels this one OVERWRITES dlogits: it starts
// the backward pass, and the (rows, vocab_padded) buffer is the largest of the step, so not having
// to zero it first saves a pass over it. For the mean loss, dlosses[row] = 1 / rows; the engine's
// step seeds loss_scale / (its unmasked targets) instead when some are masked
// (models/classifier.h).
template <typename Real>
void cross_entropy_backward(Real* dlogits, const Real* logits, const Real* lse,
                            const std::int32_t* targets, const Real* dlosses, std::int64_t rows,
                            std::int64_t vocab, std::int64_t vocab_padded);

}  // namespace strata::gpu::host::kernels
