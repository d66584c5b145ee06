#include "models/classifier.h"

#include "gpu/ops.h"

namespace strata::models {
namespace {

// Every row gets the same seed: a masked row's gradient is zeroed by the op itself, whatever its
// dlosses, so the mask needs no second buffer here.
void fill_dlosses(engine::StepContext& context, float* dlosses, std::int64_t rows) {
  const float seed = context.row_loss_gradient ? *context.row_loss_gradient
                                               : context.loss_gradient / static_cast<float>(rows);
  context.ops.fill(context.stream, dlosses, seed, rows);
}

}  // namespace

void classify(engine::StepContext& context, gpu::Tensor logits, float* losses, float* lse,
              float* loss, float* dlosses, const std::int32_t* targets, std::int64_t rows,
              std::int64_t vocab, std::int64_t padded_vocab, bool& logits_hold_gradient) {
  logits_hold_gradient = context.backward_follows;
  if (!context.backward_follows) {
    context.ops.cross_entropy_forward(context.stream, losses, lse, loss, logits, targets, rows,
                                      vocab, padded_vocab);
    return;
  }
  fill_dlosses(context, dlosses, rows);
  context.ops.cross_entropy_fused(context.stream, logits, losses, lse, loss, targets, dlosses, rows,
                                  vocab, padded_vocab);
}

void logits_gradient(engine::StepContext& context, gpu::Tensor logits, const float* lse,
                     float* dlosses, const std::int32_t* targets, std::int64_t rows,
                     std::int64_t vocab, std::int64_t padded_vocab, bool& logits_hold_gradient) {
  if (!logits_hold_gradient) {
    fill_dlosses(context, dlosses, rows);
    // The backward reads each logit before it writes the same element: in place is safe.
    context.ops.cross_entropy_backward(context.stream, logits, logits, lse, targets, dlosses, rows,
                                       vocab, padded_vocab);
  }
  logits_hold_gradient = true;
}

}  // namespace strata::models
