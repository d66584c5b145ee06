// The Engine's step (docs/architecture.md, "One training step"): for each micro-batch, forward
// and backward; then the optimizer step; then the result. Construction is engine_build.cpp, the
// fates of a failed step engine_faults.cpp, what a step moved and holds engine_traffic.cpp.
#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "base/units.h"
#include "cpu_adam/optimizer.h"
#include "engine/checkpointer.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/module_pass.h"
#include "engine/optim/grad_clip.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optimizer_step.h"
#include "engine/run_record.h"
#include "engine/step_loss.h"
#include "engine/step_meter.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/param_coordinator.h"
#include "engine/zero/param_tier.h"
#include "gpu/comm.h"
#include "gpu/ops.h"

namespace strata::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

// Generation's passes compute each row alone (gpu::Ops::set_rows_alone), the full forward that
// checks them too: a decode step's logits are then that forward's to the bit on the host.
class RowsAlone {
 public:
  explicit RowsAlone(gpu::Ops& ops) : ops_(ops) { ops_.set_rows_alone(true); }
  ~RowsAlone() { ops_.set_rows_alone(false); }
  RowsAlone(const RowsAlone&) = delete;
  RowsAlone& operator=(const RowsAlone&) = delete;

 private:
  gpu::Ops& ops_;
};

}  // namespace

StepStats Engine::train_batch(std::span<const std::int32_t> inputs,
                              std::span<const std::int32_t> targets) {
  record_->check_usable();
  meter_->begin();
  const std::int64_t accumulation = config_.batch.gradient_accumulation_steps;
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) ==
                model_.tokens_per_micro_batch() * accumulation);
  STRATA_ASSERT(targets.size() == inputs.size());
  StepStats stats;
  Traffic moved;
  try {
    loss_->count(targets, accumulation);
    coordinator_->begin_pass(true);
    reducer_->begin_step();
    for (std::int64_t micro = 0; micro < accumulation; ++micro) {
      const bool last = micro + 1 == accumulation;
      load_micro_batch(inputs, targets, micro);
      run_forward(micro, /*training=*/true);
      // The last step's optimizer read the gradients that this backward overwrites.
      if (micro == 0) settle_late_sub_groups();
      if (last) optimizer_->begin_backward(guess_step());
      run_backward(micro, last);
    }
    coordinator_->end_step();
    loss_->reduce(accumulation);
    moved = step_optimizer(stats);
    if (!stats.skipped) ++record_->steps_taken;
    ++record_->batches_trained;
  } catch (...) {
    fail_step(std::current_exception());
  }
  stats.loss = loss_->reported(accumulation);
  stats.loss_tokens = loss_->tokens().global;
  stats.step = record_->steps_taken;
  stats.tokens = static_cast<std::int64_t>(inputs.size()) * runtime_.comm.world_size();
  meter_->finish(moved, host_bytes(), stats);
  return stats;
}

// Micro-batch `micro_batch` of this rank's inputs and targets, onto the device.
void Engine::load_micro_batch(std::span<const std::int32_t> inputs,
                              std::span<const std::int32_t> targets, std::int64_t micro_batch) {
  const std::int64_t micro_tokens = model_.tokens_per_micro_batch();
  const auto at = static_cast<std::size_t>(micro_batch * micro_tokens);
  const auto count = static_cast<std::size_t>(micro_tokens);
  model_.load_batch(stream(), inputs.subspan(at, count), targets.subspan(at, count));
}

void Engine::run_forward(std::int64_t micro_batch, bool training) {
  StepContext context = loss_->context(micro_batch, training);
  std::span<Module* const> modules = model_.modules();
  pass_->forward([&](const ModuleCall& call) {
    modules[call.module]->forward(context, call.params, call.borrowed);
  });
  loss_->keep(micro_batch);
}

void Engine::run_backward(std::int64_t micro_batch, bool last_micro) {
  StepContext context = loss_->context(micro_batch, /*training=*/true);
  std::span<Module* const> modules = model_.modules();
  pass_->backward(
      last_micro,
      [&](const ModuleCall& call) {
        modules[call.module]->backward(context, call.params, call.borrowed, call.grads,
                                       call.borrowed_grads);
      },
      [&](int module) {
        if (last_micro) optimizer_->module_final(module);
      });
}

// The step's hyperparameters from the schedule, with the gradients' multiplier `grad_scale`.
StepHyperparameters Engine::hyperparameters(float grad_scale) const {
  StepHyperparameters hyper;
  hyper.lr = schedule_->lr(record_->steps_taken);
  hyper.betas = schedule_->betas(record_->steps_taken);
  hyper.step = record_->steps_taken + 1;
  hyper.grad_scale = grad_scale;
  return hyper;
}

// An overlapped step's guess, before the gradients exist: not clipped, not skipped. A zero norm
// takes the same path through plan_grad_step as any norm under the clip, so the guess has the
// bits of the real step whenever the real step is not clipped.
StepHyperparameters Engine::guess_step() const {
  return hyperparameters(
      optim::plan_grad_step(0.0, loss_scaler_->scale(), config_.gradient_clipping).grad_scale);
}

// Reads the gradients' global norm and overflow flag, updates the loss scale, and returns the
// step's hyperparameters; stats.skipped says whether to update at all.
StepHyperparameters Engine::plan_step(StepStats& stats) {
  const cpu_adam::GradStats grad_stats = reducer_->global_stats();
  double scale = loss_scaler_->scale();
  optim::GradStepPlan plan = optim::plan_grad_step(
      grad_stats.has_inf_or_nan ? std::numeric_limits<double>::infinity() : grad_stats.sum_squares,
      scale, config_.gradient_clipping);
  bool checked_overflow = plan.overflow && optim::checks_overflow(config_.fp16, config_.bf16);
  stats.loss_scale = scale;
  stats.grad_norm = plan.grad_norm;
  stats.skipped = loss_scaler_->update(checked_overflow);
  if (checked_overflow && !config_.fp16.enabled && runtime_.comm.rank() == 0) {
    base::logger("engine").warn("step={} gradients hold inf or NaN: step skipped",
                                record_->steps_taken + 1);
  }
  StepHyperparameters hyper = hyperparameters(plan.grad_scale);
  stats.lr = hyper.lr;
  return hyper;
}

// The optimizer's part of a step, after backward: steps what it can, starts what is left beside
// the next forward, and returns the step's bytes, counted with every stream drained.
Traffic Engine::step_optimizer(StepStats& stats) {
  const base::Timeline::Scope span("host", "optimizer step");
  const StepHyperparameters hyper = plan_step(stats);
  const OptimizerStep::StatesVisitor save = checkpoints_->planned_writer();
  const bool goes_on = optimizer_->step(hyper, stats, save);
  if (!stats.skipped) {
    // The new parameters are in the tier (or on their way): every gathered copy is stale.
    coordinator_->invalidate();
    if (save) checkpoints_->planned_step_taken(record_->steps_taken + 1);
  }
  if (!goes_on) meter_->traffic().optimizer_finished();
  wait_for_streams();
  const Traffic moved = meter_->traffic().end_step(goes_on);
  if (goes_on) optimizer_->start_late();
  return moved;
}

// The end of a step's own work: its copies have run on every stream (the compute stream's
// results, the losses, are read next), so that what it moved is all counted.
void Engine::wait_for_streams() {
  const base::Timeline::Scope waiting("host", "wait", "end of step");
  gpu::Device& device = runtime_.device;
  for (gpu::Stream* each : {&device.compute_stream(), &device.h2d_stream(), &device.d2h_stream()})
    each->synchronize();
}

double Engine::evaluate(std::span<const std::int32_t> inputs,
                        std::span<const std::int32_t> targets) {
  return evaluate_batch(inputs, targets).loss;
}

EvalStats Engine::evaluate_batch(std::span<const std::int32_t> inputs,
                                 std::span<const std::int32_t> targets) {
  record_->check_usable();
  settle_step();
  const std::int64_t micro_tokens = model_.tokens_per_micro_batch();
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) % micro_tokens == 0);
  const std::int64_t batches = static_cast<std::int64_t>(inputs.size()) / micro_tokens;
  STRATA_ASSERT(batches <= config_.batch.gradient_accumulation_steps);
  STRATA_ASSERT(targets.size() == inputs.size());
  forward_only([&] {
    loss_->count(targets, batches);
    coordinator_->begin_pass(false);
    for (std::int64_t micro = 0; micro < batches; ++micro) {
      load_micro_batch(inputs, targets, micro);
      run_forward(micro, /*training=*/false);
    }
    loss_->reduce(batches);
  });
  stream().synchronize();
  EvalStats stats;
  stats.loss = loss_->reported(batches);
  stats.loss_tokens = loss_->tokens().global;
  stats.tokens = loss_->tokens().targets;
  return stats;
}

std::vector<float> Engine::logits_at(std::span<const std::int32_t> inputs,
                                     std::span<const std::int64_t> rows) {
  record_->check_usable();
  settle_step();
  STRATA_ASSERT(std::ssize(inputs) == model_.tokens_per_micro_batch());
  for (std::int64_t row : rows)
    STRATA_ASSERT(row >= 0 && row < model_.tokens_per_micro_batch());
  hold_logits(std::ssize(rows));
  // No target is in the loss: only the logits are wanted.
  const std::vector<std::int32_t> targets(inputs.size(), -1);
  const RowsAlone alone(runtime_.ops);
  forward_only([&] {
    loss_->count(targets, 1);
    coordinator_->begin_pass(false);
    load_micro_batch(inputs, targets, 0);
    run_forward(0, /*training=*/false);
  });
  return read_logits(rows);
}

void Engine::forward_only(const std::function<void()>& enqueue) {
  try {
    enqueue();
  } catch (...) {
    // What was enqueued may still read the caller's host memory (a copy of its tokens), which
    // the exception is about to free: it runs out first.
    drain_streams();
    throw;
  }
}

void Engine::hold_logits(std::int64_t rows) {
  const std::int64_t bytes = rows * model_.vocab() * kFloat;
  if (logits_.bytes() < bytes) {
    logits_ = {};
    logits_ = runtime_.device.allocate(bytes, "logits for generation");
  }
}

void Engine::reserve_cache(std::int64_t max_seq) {
  record_->check_usable();
  if (max_seq == cache_positions_) return;
  settle_step();
  gpu::Device& device = runtime_.device;
  const gpu::DataType compute = compute_type(config_);
  const std::int64_t sequences = config_.batch.train_micro_batch_size_per_gpu;
  const std::int64_t logits = sequences * model_.vocab() * kFloat;
  const std::int64_t bytes = cache_reservation_bytes(model_, sequences, max_seq, compute);
  // A cache already there is freed before the new one is made; a step without its own arena
  // (engine_build.cpp, reserve_step_memory) still needs its room.
  const std::int64_t held =
      (cache_positions_ > 0 ? model_.cache_bytes(cache_positions_, compute) : 0) +
      std::min(logits_.bytes(), logits);
  const std::int64_t left = device.budget_bytes() - device.bytes_in_use() + held - step_room_;
  if (bytes > left) {
    const auto as_bytes = [](std::int64_t n) { return base::format_bytes(static_cast<double>(n)); };
    throw UserError(
        fmt::format("the KV cache of {} positions for each of {} sequences takes {}, and the "
                    "device has {} of its {} budget left beside the model and its step",
                    max_seq, sequences, as_bytes(bytes), as_bytes(std::max<std::int64_t>(left, 0)),
                    as_bytes(device.budget_bytes())),
        "ask for fewer new tokens or fewer prompts at once, give the device more "
        "(strata.device_memory_budget), or offload the parameters "
        "(zero_optimization.offload_param)",
        2);
  }
  cache_positions_ = 0;
  model_.allocate_cache(device, stream(), max_seq, compute);
  hold_logits(sequences);
  stream().synchronize();
  cache_positions_ = max_seq;
}

std::int64_t Engine::cache_reservation_bytes(const Model& model, std::int64_t sequences,
                                             std::int64_t max_seq, gpu::DataType compute) {
  // The logits of a pass of one row per sequence, which reading them needs.
  return model.cache_bytes(max_seq, compute) + sequences * model.vocab() * kFloat;
}

std::vector<float> Engine::cached_logits(std::span<const std::int32_t> inputs, std::int64_t tokens,
                                         std::span<const std::int32_t> start,
                                         std::span<const std::int64_t> rows) {
  record_->check_usable();
  STRATA_ASSERT(cache_positions_ > 0);
  settle_step();
  for (std::int64_t row : rows)
    STRATA_ASSERT(row >= 0 && row < std::ssize(inputs));
  hold_logits(std::ssize(rows));
  const std::vector<std::int32_t> targets(static_cast<std::size_t>(model_.tokens_per_micro_batch()),
                                          -1);
  const RowsAlone alone(runtime_.ops);
  forward_only([&] {
    loss_->count(targets, 1);
    coordinator_->begin_pass(false);
    model_.load_cached(stream(), inputs, tokens, start);
    run_forward(0, /*training=*/false);
  });
  return read_logits(rows);
}

std::vector<float> Engine::read_logits(std::span<const std::int64_t> rows) {
  const std::int64_t vocab = model_.vocab();
  const std::int64_t bytes = std::ssize(rows) * vocab * kFloat;
  STRATA_ASSERT(logits_.bytes() >= bytes);  // hold_logits, before the forward
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const gpu::ConstTensor row = model_.logits_at(rows[i]);
    runtime_.ops.cast_to_float(stream(), logits_.as<float>() + static_cast<std::int64_t>(i) * vocab,
                               row.data, row.type, vocab);
  }
  std::vector<float> out(rows.size() * static_cast<std::size_t>(vocab));
  stream().copy(out.data(), logits_.data(), bytes, gpu::CopyKind::device_to_host);
  stream().synchronize();
  return out;
}

void Engine::plan_checkpoint(const std::filesystem::path& dir, const std::string& tag) {
  record_->check_usable();
  checkpoints_->plan(dir, tag);
}

CheckpointInfo Engine::save_checkpoint(const std::filesystem::path& dir, const std::string& tag) {
  record_->check_usable();
  settle_step();
  return checkpoints_->save(dir, tag);
}

CheckpointInfo Engine::load_checkpoint(const std::filesystem::path& dir, const std::string& tag) {
  record_->check_usable();
  settle_step();
  return checkpoints_->load(dir, tag);
}

const zero::FlatLayout& Engine::layout() const {
  return layout_;
}

std::int64_t Engine::steps_taken() const {
  return record_->steps_taken;
}

std::int64_t Engine::batches_trained() const {
  return record_->batches_trained;
}

int Engine::shard_rank() const {
  return layout_.world_size() > 1 ? runtime_.comm.rank() : 0;
}

gpu::Stream& Engine::stream() const {
  return runtime_.device.compute_stream();
}

// Collective when the layout is sharded: every rank calls it and gets the whole model.
std::vector<float> Engine::master_parameters() {
  settle_step();
  stream().synchronize();
  std::vector<float> partition(static_cast<std::size_t>(layout_.partition_numel()));
  optimizer_->read_masters(partition);
  const int world = layout_.world_size();
  std::vector<float> values;
  std::vector<float> whole;
  for (int m = 0; m < layout_.module_count(); ++m) {
    const zero::ModuleSlice& slice = layout_.module(m);
    whole.assign(static_cast<std::size_t>(slice.padded_numel), 0.0f);
    const float* own = partition.data() + slice.partition_offset;
    if (world == 1) {
      std::copy(own, own + slice.shard_numel, whole.begin());
    } else {
      gpu::DeviceBuffer gathered =
          memory_->allocate(stream(), slice.padded_numel * kFloat, "gathered master parameters");
      float* mine = gathered.as<float>() + shard_rank() * slice.shard_numel;
      stream().copy(mine, own, slice.shard_numel * kFloat, gpu::CopyKind::host_to_device);
      runtime_.comm.all_gather(stream(), mine, gathered.data(), slice.shard_numel,
                               gpu::DataType::float32);
      stream().copy(whole.data(), gathered.data(), gathered.bytes(), gpu::CopyKind::device_to_host);
      stream().synchronize();
    }
    for (const zero::TensorSlot& slot : layout_.tensors(m))
      values.insert(values.end(), whole.begin() + slot.offset,
                    whole.begin() + slot.offset + slot.numel);
  }
  return values;
}

}  // namespace strata::engine
