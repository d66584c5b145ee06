#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/loss_tokens.h"
#include "engine/model.h"
#include "engine/module.h"
#include "engine/optim/loss_scaler.h"
#include "gpu/device_buffer.h"

namespace strata::engine {

// The loss of a step or an evaluation over the targets in it (engine/loss_tokens.h): the count
// of its unmasked targets, the seed of the loss's gradient it gives each micro-batch's backward,
// and the loss reported once every micro-batch's forward has run.
class StepLoss {
 public:
  // Room for `micro_batches` micro-batches (gradient_accumulation_steps); `model.loss()` holds a
  // micro-batch's mean loss after its forward.
  StepLoss(const Runtime& runtime, Model& model, const optim::LossScaler& loss_scaler,
           std::int64_t micro_batches);
  // The bytes of its device buffer, and of the page-locked one the losses come down through,
  // for `micro_batches` micro-batches.
  static std::int64_t buffer_bytes(std::int64_t micro_batches) {
    return kLossTokenBytes + micro_batches * static_cast<std::int64_t>(sizeof(float));
  }

  // Counts the unmasked targets of `micro_batches` micro-batches, and sums them over the ranks
  // when there are several: before the first forward, since every rank's backward needs N.
  void count(std::span<const std::int32_t> targets, std::int64_t micro_batches);
  // The context of a micro-batch's forward and backward; `training`: a backward follows, and the
  // loss's gradient is seeded.
  StepContext context(std::int64_t micro_batch, bool training) const;
  // After a micro-batch's forward: keeps its loss in its slot.
  void keep(std::int64_t micro_batch);
  // Reduces the slots over ranks (their mean, or under a mask their sum) and brings them down.
  void reduce(std::int64_t micro_batches);
  // Once the slots are down: the loss of the step or evaluation.
  double reported(std::int64_t micro_batches) const;
  const LossTokens& tokens() const noexcept { return tokens_; }

 private:
  static constexpr std::int64_t kLossTokenBytes = 8;
  gpu::Stream& stream() const { return runtime_.device.compute_stream(); }
  // d(step objective) / d(a micro-batch's mean loss): loss_scale / gradient_accumulation_steps.
  float loss_gradient() const;
  // StepContext::row_loss_gradient of a training step: set only when some target is masked.
  std::optional<float> row_loss_gradient() const;
  float* device_losses() const { return losses_.as<float>() + kLossTokenBytes / sizeof(float); }
  const float* host_losses() const {
    return losses_host_.as<float>() + kLossTokenBytes / sizeof(float);
  }

  const Runtime& runtime_;
  Model& model_;
  const optim::LossScaler& loss_scaler_;
  std::int64_t accumulation_;
  // An int64 slot that carries this rank's count of loss tokens through their all-reduce, then
  // one float per micro-batch: its mean loss, or under a mask its loss sum, reduced over ranks.
  // The same layout on the host.
  gpu::DeviceBuffer losses_;
  gpu::PinnedBuffer losses_host_;
  // The targets in the loss: per micro-batch of this rank, and in all.
  std::vector<std::int64_t> micro_tokens_;
  LossTokens tokens_;
};

}  // namespace strata::engine
