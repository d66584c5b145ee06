#pragma once

#include <cstdint>

#include "engine/module.h"
#include "gpu/tensor.h"

// The loss at the end of a language model's forward and its gradient with respect to the logits,
// the decoder head's (models/decoder/decoder_modules.h). In a training forward
// (StepContext::backward_follows) the gradient is written over the logits in the same op
// (gpu::Ops::cross_entropy_fused, llm.c's fused classifier), so the model keeps no second (rows,
// padded vocab) tensor. An evaluation's forward computes the loss alone; should a backward follow
// it anyway, logits_gradient computes the gradient in place then.
namespace strata::models {

// losses, lse and *loss (fp32) from `logits`, (rows, padded_vocab) of which the first `vocab`
// columns are tokens (models/vocab_padding.h); with a backward to follow, also the gradient of the
// objective over the logits, zero in the padded columns, and `logits_hold_gradient` says so.
// d(objective) / d(losses[row]), which `dlosses` holds: loss_gradient / rows when every target of
// the step is in the loss (the objective is the mean over rows); with some masked (a negative
// target), context.row_loss_gradient, loss_scale x world_size / (the step's unmasked targets over
// every micro-batch and rank), so that the objective is the mean over the step's unmasked targets.
// A masked row adds nothing to *loss (the mean over this micro-batch's unmasked rows) and gets no
// gradient.
void classify(engine::StepContext& context, gpu::Tensor logits, float* losses, float* lse,
              float* loss, float* dlosses, const std::int32_t* targets, std::int64_t rows,
              std::int64_t vocab, std::int64_t padded_vocab, bool& logits_hold_gradient);

// Makes `logits` hold their gradient, if the forward did not already, for the head's backward.
void logits_gradient(engine::StepContext& context, gpu::Tensor logits, const float* lse,
                     float* dlosses, const std::int32_t* targets, std::int64_t rows,
                     std::int64_t vocab, std::int64_t padded_vocab, bool& logits_hold_gradient);

}  // namespace strata::models
