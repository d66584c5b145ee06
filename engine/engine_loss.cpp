// The Engine's loss over the targets in it (engine/loss_tokens.h): the count of a step's unmasked
// targets, the seed of the loss's gradient it gives, and the loss the step reports.
#include <cstring>

#include "engine/engine_state.h"
#include "gpu/ops.h"

namespace strata::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

}  // namespace

StepContext Engine::State::step_context(std::int64_t micro_batch, bool training) {
  return {runtime.device,
          stream(),
          runtime.ops,
          micro_batch,
          training ? loss_gradient() : 1.0f,
          training,
          training ? row_loss_gradient() : std::nullopt};
}

float Engine::State::loss_gradient() const {
  // The objective is loss_scale * mean over micro-batches of each micro-batch's mean loss.
  return static_cast<float>(loss_scaler.scale() /
                            static_cast<double>(config.batch.gradient_accumulation_steps));
}

// N is needed before the first backward seeds the loss's gradient, on every rank: with several
// ranks, one all-reduce of one int64 at the start of every step and evaluation, waited for by
// the host (the compute stream holds nothing else then: the step before ended waiting for its
// streams). It runs whether or not this run's data has masks, since no rank can know another's
// targets without it; on one rank nothing is communicated.
void Engine::State::count_loss_tokens(std::span<const std::int32_t> targets,
                                      std::int64_t micro_batches) {
  STRATA_ASSERT(micro_batches >= 0 &&
                micro_batches <= static_cast<std::int64_t>(micro_loss_tokens.size()));
  const int world = runtime.comm.world_size();
  loss_tokens.rank = engine::count_loss_tokens(
      targets, std::span(micro_loss_tokens).first(static_cast<std::size_t>(micro_batches)));
  loss_tokens.targets = static_cast<std::int64_t>(targets.size()) * world;
  loss_tokens.global = loss_tokens.rank;
  if (world == 1) return;
  std::memcpy(losses_host.data(), &loss_tokens.rank, kLossTokenBytes);
  stream().copy(losses.data(), losses_host.data(), kLossTokenBytes, gpu::CopyKind::host_to_device);
  runtime.comm.all_reduce(stream(), losses.data(), 1, gpu::DataType::int64, gpu::ReduceOp::sum);
  stream().copy(losses_host.data(), losses.data(), kLossTokenBytes, gpu::CopyKind::device_to_host);
  stream().synchronize();
  std::memcpy(&loss_tokens.global, losses_host.data(), kLossTokenBytes);
}

// Without a mask the classifier keeps seeding loss_gradient / rows: the same objective (N is
// rows x micro-batches x ranks) with the bits every run had before masks existed.
std::optional<float> Engine::State::row_loss_gradient() const {
  if (!loss_tokens.masked()) return std::nullopt;
  return masked_row_loss_gradient(loss_scaler.scale(), runtime.comm.world_size(),
                                  loss_tokens.global);
}

// Under a mask a micro-batch's slot holds its loss sum on this rank, its mean (over its own
// unmasked targets) x their count, so that summing over ranks and micro-batches and dividing by
// N gives the mean over the step's unmasked targets. A micro-batch with none has a mean of 0.
void Engine::State::keep_loss(std::int64_t micro_batch) {
  float* slot = device_losses() + micro_batch;
  if (!loss_tokens.masked()) {
    stream().copy(slot, model.loss(), kFloat, gpu::CopyKind::device_to_device);
    return;
  }
  const auto count = micro_loss_tokens.at(static_cast<std::size_t>(micro_batch));
  runtime.ops.fill(stream(), slot, 0.0f, 1);
  runtime.ops.accumulate(stream(), slot, model.loss(), static_cast<float>(count), 1);
}

void Engine::State::reduce_losses(std::int64_t count) {
  if (runtime.comm.world_size() > 1) {
    runtime.comm.all_reduce(stream(), device_losses(), count, gpu::DataType::float32,
                            loss_tokens.masked() ? gpu::ReduceOp::sum : gpu::ReduceOp::avg);
  }
  stream().copy(losses_host.as<float>() + kLossTokenBytes / kFloat, device_losses(), count * kFloat,
                gpu::CopyKind::device_to_host);
}

double Engine::State::reported_loss(std::int64_t count) const {
  const std::span<const float> values(host_losses(), static_cast<std::size_t>(count));
  if (loss_tokens.masked()) return masked_mean_loss(values, loss_tokens.global);
  double sum = 0;
  for (const float value : values)
    sum += value;
  return sum / static_cast<double>(count);
}

}  // namespace strata::engine
