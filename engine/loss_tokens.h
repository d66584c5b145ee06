#pragma once

#include <cstdint>
#include <span>

// The loss over the targets that are in it. A negative target (the data path writes -1 where
// Hugging Face writes -100: a prompt's positions in supervised fine-tuning) is not in the loss
// (gpu::Ops::cross_entropy_forward). A step's objective is then, as transformers' with
// num_items_in_batch,
//
//   loss_scale x (sum of the losses of the step's unmasked targets) / N,
//
// N the step's unmasked targets over every micro-batch and every rank, so that 4 micro-batches
// of accumulation give the gradient one batch of the same 4 gives, on any number of ranks,
// whatever each micro-batch's share of masked targets. Without masks N is every target and the
// engine keeps its old arithmetic, a mean of each micro-batch's mean, which is the same objective.
namespace strata::engine {

// The targets of one step (or one evaluation) that are in its loss.
struct LossTokens {
  std::int64_t rank = 0;     // this rank's unmasked targets, over its micro-batches
  std::int64_t global = 0;   // N: every rank's
  std::int64_t targets = 0;  // every target of every rank, masked or not

  // Some target of some rank is masked: the loss is the mean over the `global` unmasked ones.
  bool masked() const { return global != targets; }
};

// Counts the targets >= 0 of each of per_micro.size() equal micro-batches laid back to back in
// `targets` into per_micro, and returns their sum.
std::int64_t count_loss_tokens(std::span<const std::int32_t> targets,
                               std::span<std::int64_t> per_micro);

// d(objective) / d(losses[row]) for a row in the loss of a masked step: loss_scale x world_size /
// global (each rank seeds this, and the gradient reducer averages over world_size ranks), in
// double and rounded once; 0 when no target is in the loss, whose step then has no gradient.
float masked_row_loss_gradient(double loss_scale, int world_size, std::int64_t global);

// A masked step's loss: the sum over micro-batches of `loss_sums` (each the sum over ranks of a
// micro-batch's losses, mean x its unmasked count), in double and in order, over `global`; 0
// when no target is in the loss.
double masked_mean_loss(std::span<const float> loss_sums, std::int64_t global);

}  // namespace strata::engine
