// The loss over the targets in it (engine/loss_tokens.h): the count of a step's unmasked
// targets, the seed of the loss's gradient it gives, and the loss the step reports.
#include "engine/step_loss.h"

#include <cstring>

#include "gpu/ops.h"

namespace strata::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

}  // namespace

StepLoss::StepLoss(const Runtime& runtime, Model& model, const optim::LossScaler& loss_scaler,
                   std::int64_t micro_batches)
    : runtime_(runtime),
      model_(model),
      loss_scaler_(loss_scaler),
      accumulation_(micro_batches),
      losses_(runtime.device.allocate(buffer_bytes(micro_batches), "losses")),
      losses_host_(runtime.device.allocate_pinned(buffer_bytes(micro_batches))),
      micro_tokens_(static_cast<std::size_t>(micro_batches), 0) {}

StepContext StepLoss::context(std::int64_t micro_batch, bool training) const {
  return {runtime_.device,
          stream(),
          runtime_.ops,
          micro_batch,
          training ? loss_gradient() : 1.0f,
          training,
          training ? row_loss_gradient() : std::nullopt};
}

float StepLoss::loss_gradient() const {
  // The objective is loss_scale * mean over micro-batches of each micro-batch's mean loss.
  return static_cast<float>(loss_scaler_.scale() / static_cast<double>(accumulation_));
}

// N is needed before the first backward seeds the loss's gradient, on every rank: with several
// ranks, one all-reduce of one int64 at the start of every step and evaluation, waited for by
// the host (the compute stream holds nothing else then: the step before ended waiting for its
// streams). It runs whether or not this run's data has masks, since no rank can know another's
// targets without it; on one rank nothing is communicated.
void StepLoss::count(std::span<const std::int32_t> targets, std::int64_t micro_batches) {
  STRATA_ASSERT(micro_batches >= 0 &&
                micro_batches <= static_cast<std::int64_t>(micro_tokens_.size()));
  const int world = runtime_.comm.world_size();
  tokens_.rank = count_loss_tokens(
      targets, std::span(micro_tokens_).first(static_cast<std::size_t>(micro_batches)));
  tokens_.targets = static_cast<std::int64_t>(targets.size()) * world;
  tokens_.global = tokens_.rank;
  if (world == 1) return;
  std::memcpy(losses_host_.data(), &tokens_.rank, kLossTokenBytes);
  stream().copy(losses_.data(), losses_host_.data(), kLossTokenBytes,
                gpu::CopyKind::host_to_device);
  runtime_.comm.all_reduce(stream(), losses_.data(), 1, gpu::DataType::int64, gpu::ReduceOp::sum);
  stream().copy(losses_host_.data(), losses_.data(), kLossTokenBytes,
                gpu::CopyKind::device_to_host);
  stream().synchronize();
  std::memcpy(&tokens_.global, losses_host_.data(), kLossTokenBytes);
}

// Without a mask the classifier keeps seeding loss_gradient / rows: the same objective (N is
// rows x micro-batches x ranks) with the bits every run had before masks existed.
std::optional<float> StepLoss::row_loss_gradient() const {
  if (!tokens_.masked()) return std::nullopt;
  return masked_row_loss_gradient(loss_scaler_.scale(), runtime_.comm.world_size(), tokens_.global);
}

// Under a mask a micro-batch's slot holds its loss sum on this rank, its mean (over its own
// unmasked targets) x their count, so that summing over ranks and micro-batches and dividing by
// N gives the mean over the step's unmasked targets. A micro-batch with none has a mean of 0.
void StepLoss::keep(std::int64_t micro_batch) {
  float* slot = device_losses() + micro_batch;
  if (!tokens_.masked()) {
    stream().copy(slot, model_.loss(), kFloat, gpu::CopyKind::device_to_device);
    return;
  }
  const auto count = micro_tokens_.at(static_cast<std::size_t>(micro_batch));
  runtime_.ops.fill(stream(), slot, 0.0f, 1);
  runtime_.ops.accumulate(stream(), slot, model_.loss(), static_cast<float>(count), 1);
}

void StepLoss::reduce(std::int64_t micro_batches) {
  if (runtime_.comm.world_size() > 1) {
    runtime_.comm.all_reduce(stream(), device_losses(), micro_batches, gpu::DataType::float32,
                             tokens_.masked() ? gpu::ReduceOp::sum : gpu::ReduceOp::avg);
  }
  stream().copy(losses_host_.as<float>() + kLossTokenBytes / kFloat, device_losses(),
                micro_batches * kFloat, gpu::CopyKind::device_to_host);
}

double StepLoss::reported(std::int64_t micro_batches) const {
  const std::span<const float> values(host_losses(), static_cast<std::size_t>(micro_batches));
  if (tokens_.masked()) return masked_mean_loss(values, tokens_.global);
  double sum = 0;
  for (const float value : values)
    sum += value;
  return sum / static_cast<double>(micro_batches);
}

}  // namespace strata::engine
