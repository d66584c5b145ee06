#include "engine/engine.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "cpu_adam/optimizer.h"
#include "engine/optim/grad_clip.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optimizer.h"
#include "engine/param_init.h"
#include "gpu/comm.h"
#include "gpu/event.h"
#include "gpu/ops.h"
#include "gpu/stream.h"

namespace strata::engine {
namespace {

std::vector<std::vector<ParamSpec>> declared_parameters(Model& model) {
  std::vector<std::vector<ParamSpec>> specs;
  for (Module* module : model.modules())
    specs.push_back(module->parameters());
  return specs;
}

ParamCopy storage_type(const Config& config) {
  if (config.bf16.enabled) return ParamCopy::bf16;
  if (config.fp16.enabled) return ParamCopy::fp16;
  return ParamCopy::none;
}

gpu::DataType to_data_type(ParamCopy copy) {
  return copy == ParamCopy::fp16 ? gpu::DataType::float16 : gpu::DataType::bfloat16;
}

constexpr std::int64_t kFloat = sizeof(float);

}  // namespace

// Stage 0 (DESIGN.md: "stage 0 replicates everything"): every rank holds the whole model on the
// device as fp32 compute copies, the fp32 master weights and optimizer states beside them, and
// averages gradients with an all-reduce.
struct Engine::State {
  State(Runtime& runtime_in, const Config& config_in, Model& model_in)
      : runtime(runtime_in),
        config(config_in),
        model(model_in),
        layout(declared_parameters(model_in), 1),
        optimizer(config_in.optimizer),
        schedule(config_in.scheduler, config_in.optimizer),
        loss_scaler(config_in.fp16),
        copy_type(storage_type(config_in)) {}

  Runtime& runtime;
  Config config;
  Model& model;
  zero::FlatLayout layout;
  Optimizer optimizer;
  optim::LrSchedule schedule;
  optim::LossScaler loss_scaler;
  ParamCopy copy_type;

  // Per module: the fp32 copy the kernels read and the gradients they accumulate into, and the
  // tensor pointers into both.
  struct ModuleBuffers {
    gpu::DeviceBuffer params;
    gpu::DeviceBuffer grads;
    std::vector<float*> param_tensors;
    std::vector<float*> grad_tensors;
    TensorViews param_views;
    TensorViews grad_views;
    std::vector<TensorViews> borrowed_params;  // of Module::borrowed_modules(), in order
    std::vector<TensorViews> borrowed_grads;
  };
  std::vector<ModuleBuffers> modules;
  // The optimizer's side, over the whole partition (module shards back to back).
  gpu::DeviceBuffer master;
  gpu::DeviceBuffer exp_avg;
  gpu::DeviceBuffer exp_avg_sq;
  gpu::DeviceBuffer copy;  // the new params rounded to the storage type
  gpu::PinnedBuffer losses_host;
  std::int64_t steps_taken = 0;
  cpu_adam::GradStats grad_stats;

  gpu::Stream& stream() { return runtime.device.compute_stream(); }
  float* master_at(int module) {
    return master.as<float>() + layout.module(module).partition_offset;
  }

  void allocate();
  void initialise();
  void refresh_compute_copy(int module, bool round_master);
  void run_forward(std::int64_t micro_batch);
  void run_backward(std::int64_t micro_batch);
  void reduce_gradients();
  StepHyperparameters plan_step(StepStats& stats);
  void apply_step(const StepHyperparameters& hyper);
};

void Engine::State::allocate() {
  gpu::Device& device = runtime.device;
  for (int m = 0; m < layout.module_count(); ++m) {
    const zero::ModuleSlice& slice = layout.module(m);
    ModuleBuffers buffers;
    std::string name(model.modules()[static_cast<std::size_t>(m)]->name());
    buffers.params = device.allocate(slice.padded_numel * kFloat, name + " parameters");
    buffers.grads = device.allocate(slice.padded_numel * kFloat, name + " gradients");
    for (const zero::TensorSlot& slot : layout.tensors(m)) {
      buffers.param_tensors.push_back(buffers.params.as<float>() + slot.offset);
      buffers.grad_tensors.push_back(buffers.grads.as<float>() + slot.offset);
    }
    modules.push_back(std::move(buffers));
  }
  // Views point into the vectors above, which no longer move.
  for (int m = 0; m < layout.module_count(); ++m) {
    ModuleBuffers& buffers = modules[static_cast<std::size_t>(m)];
    buffers.param_views = TensorViews(buffers.param_tensors);
    buffers.grad_views = TensorViews(buffers.grad_tensors);
    for (int lender : model.modules()[static_cast<std::size_t>(m)]->borrowed_modules()) {
      STRATA_ASSERT(lender >= 0 && lender < layout.module_count() && lender != m);
      ModuleBuffers& from = modules[static_cast<std::size_t>(lender)];
      buffers.borrowed_params.emplace_back(from.param_tensors);
      buffers.borrowed_grads.emplace_back(from.grad_tensors);
    }
  }
  std::int64_t partition = layout.partition_numel();
  master = device.allocate(partition * kFloat, "fp32 master parameters");
  if (optimizer.type() != OptimizerType::adagrad) {
    exp_avg = device.allocate(partition * kFloat, "optimizer exp_avg");
  }
  if (optimizer.type() != OptimizerType::lion) {
    exp_avg_sq = device.allocate(partition * kFloat, "optimizer exp_avg_sq");
  }
  if (copy_type != ParamCopy::none) {
    copy = device.allocate(partition * 2, "parameters in the storage type");
  }
  model.allocate_activations(device, config.activation_checkpointing.partition_activations ||
                                         config.activation_checkpointing.number_checkpoints > 0);
  losses_host = device.allocate_pinned(config.batch.gradient_accumulation_steps * kFloat);
}

void Engine::State::initialise() {
  gpu::Device& device = runtime.device;
  std::int64_t partition = layout.partition_numel();
  gpu::PinnedBuffer staging = device.allocate_pinned(partition * kFloat);
  auto* values = staging.as<float>();
  std::fill(values, values + partition, 0.0f);
  std::vector<std::vector<ParamSpec>> specs = declared_parameters(model);
  std::int64_t tensor_index = 0;
  for (int m = 0; m < layout.module_count(); ++m) {
    std::span<const zero::TensorSlot> slots = layout.tensors(m);
    for (std::size_t t = 0; t < slots.size(); ++t, ++tensor_index) {
      float* target = values + layout.module(m).partition_offset + slots[t].offset;
      init_tensor(specs[static_cast<std::size_t>(m)][t], config.strata.seed, tensor_index, 0,
                  {target, static_cast<std::size_t>(slots[t].numel)});
    }
  }
  gpu::Stream& s = stream();
  s.copy(master.data(), values, partition * kFloat, gpu::CopyKind::host_to_device);
  if (exp_avg) s.fill_zero(exp_avg.data(), exp_avg.bytes());
  if (exp_avg_sq) s.fill_zero(exp_avg_sq.data(), exp_avg_sq.bytes());
  for (int m = 0; m < layout.module_count(); ++m)
    refresh_compute_copy(m, true);
  s.synchronize();  // `staging` is freed on return
}

// The kernels compute in fp32 from the parameters as the storage type holds them: with bf16 or
// fp16 the master value rounded to it, else the master value itself. `round_master` rounds the
// master into `copy` first; after an optimizer step the step has already written `copy`.
void Engine::State::refresh_compute_copy(int m, bool round_master) {
  const zero::ModuleSlice& slice = layout.module(m);
  gpu::Stream& s = stream();
  float* target = modules[static_cast<std::size_t>(m)].params.as<float>();
  if (copy_type == ParamCopy::none) {
    s.copy(target, master_at(m), slice.padded_numel * kFloat, gpu::CopyKind::device_to_device);
    return;
  }
  std::uint16_t* rounded = copy.as<std::uint16_t>() + slice.partition_offset;
  if (round_master) {
    runtime.ops.cast_from_float(s, rounded, to_data_type(copy_type), master_at(m),
                                slice.padded_numel);
  }
  runtime.ops.cast_to_float(s, target, rounded, to_data_type(copy_type), slice.padded_numel);
}

}  // namespace strata::engine

namespace strata::engine {

void Engine::State::run_forward(std::int64_t micro_batch) {
  StepContext context{runtime.device, stream(), runtime.ops, micro_batch, 1.0f};
  std::span<Module* const> list = model.modules();
  for (std::size_t m = 0; m < list.size(); ++m) {
    ModuleBuffers& buffers = modules[m];
    list[m]->forward(context, buffers.param_views, buffers.borrowed_params);
  }
  stream().copy(losses_host.as<float>() + micro_batch, model.loss(), kFloat,
                gpu::CopyKind::device_to_host);
}

void Engine::State::run_backward(std::int64_t micro_batch) {
  // The objective is loss_scale * mean over micro-batches of each micro-batch's mean loss.
  auto loss_gradient = static_cast<float>(
      loss_scaler.scale() / static_cast<double>(config.batch.gradient_accumulation_steps));
  StepContext context{runtime.device, stream(), runtime.ops, micro_batch, loss_gradient};
  std::span<Module* const> list = model.modules();
  for (std::size_t m = list.size(); m-- > 0;) {
    ModuleBuffers& buffers = modules[m];
    list[m]->backward(context, buffers.param_views, buffers.borrowed_params, buffers.grad_views,
                      buffers.borrowed_grads);
  }
}

// Stage 0 data parallelism: every rank averages the whole gradient.
void Engine::State::reduce_gradients() {
  if (runtime.comm.world_size() == 1) return;
  for (int m = 0; m < layout.module_count(); ++m) {
    gpu::DeviceBuffer& grads = modules[static_cast<std::size_t>(m)].grads;
    runtime.comm.all_reduce(stream(), grads.data(), layout.module(m).padded_numel,
                            gpu::DataType::float32, gpu::ReduceOp::avg);
  }
}

// Reads the gradients' norm and overflow flag, updates the loss scale, and returns the step's
// hyperparameters; stats.skipped says whether to update at all.
StepHyperparameters Engine::State::plan_step(StepStats& stats) {
  // The host backend's device memory is host memory: the scan runs in stream order as a host
  // task, as a reduction kernel would on a GPU.
  STRATA_ASSERT(runtime.device.kind() == gpu::DeviceKind::host);
  stream().launch([this] {
    cpu_adam::GradStats total;
    for (int m = 0; m < layout.module_count(); ++m) {
      gpu::DeviceBuffer& grads = modules[static_cast<std::size_t>(m)].grads;
      cpu_adam::GradStats part = cpu_adam::scan_gradients<float>(
          {grads.as<const float>(), static_cast<std::size_t>(layout.module(m).padded_numel)});
      total.sum_squares += part.sum_squares;
      total.has_inf_or_nan = total.has_inf_or_nan || part.has_inf_or_nan;
    }
    grad_stats = total;
  });
  stream().synchronize();

  double scale = loss_scaler.scale();
  optim::GradStepPlan plan = optim::plan_grad_step(
      grad_stats.has_inf_or_nan ? std::numeric_limits<double>::infinity() : grad_stats.sum_squares,
      scale, config.gradient_clipping);
  bool checked_overflow = plan.overflow && optim::checks_overflow(config.fp16, config.bf16);
  stats.loss_scale = scale;
  stats.grad_norm = plan.grad_norm;
  stats.skipped = loss_scaler.update(checked_overflow);
  if (checked_overflow && !config.fp16.enabled) {
    base::logger("engine").warn("step={} gradients hold inf or NaN: step skipped", steps_taken + 1);
  }
  StepHyperparameters hyper;
  hyper.lr = schedule.lr(steps_taken);
  hyper.betas = schedule.betas(steps_taken);
  hyper.step = steps_taken + 1;
  hyper.grad_scale = plan.grad_scale;
  stats.lr = hyper.lr;
  return hyper;
}

void Engine::State::apply_step(const StepHyperparameters& hyper) {
  stream().launch([this, hyper] {
    for (int m = 0; m < layout.module_count(); ++m) {
      const zero::ModuleSlice& slice = layout.module(m);
      auto n = static_cast<std::size_t>(slice.padded_numel);
      auto at = static_cast<std::size_t>(slice.partition_offset);
      std::span<float> m1 =
          exp_avg ? std::span<float>(exp_avg.as<float>() + at, n) : std::span<float>();
      std::span<float> v1 =
          exp_avg_sq ? std::span<float>(exp_avg_sq.as<float>() + at, n) : std::span<float>();
      std::span<std::uint16_t> out =
          copy ? std::span<std::uint16_t>(copy.as<std::uint16_t>() + at, n)
               : std::span<std::uint16_t>();
      optimizer.step(hyper, {master_at(m), n},
                     {modules[static_cast<std::size_t>(m)].grads.as<const float>(), n}, m1, v1,
                     copy_type, out);
    }
  });
  for (int m = 0; m < layout.module_count(); ++m)
    refresh_compute_copy(m, false);
}

Engine::Engine(Runtime& runtime, const Config& config, Model& model)
    : state_(std::make_unique<State>(runtime, config, model)) {
  if (config.zero.stage != 0) {
    throw UserError(fmt::format("zero_optimization.stage {} is not implemented yet; this build "
                                "trains at stage 0",
                                config.zero.stage),
                    "set \"zero_optimization\": {\"stage\": 0}");
  }
  state_->allocate();
  state_->initialise();
}

Engine::~Engine() {
  // Work still queued reads buffers this state owns.
  try {
    state_->runtime.device.synchronize();
  } catch (const std::exception& error) {
    base::logger("engine").error("error while draining the device at shutdown: {}", error.what());
  }
}

StepStats Engine::train_batch(std::span<const std::int32_t> inputs,
                              std::span<const std::int32_t> targets) {
  State& s = *state_;
  auto started = std::chrono::steady_clock::now();
  gpu::Device& device = s.runtime.device;
  gpu::TransferCounters before = device.transfer_counters();
  device.reset_peak();
  std::int64_t micro_tokens = s.model.tokens_per_micro_batch();
  std::int64_t accumulation = s.config.batch.gradient_accumulation_steps;
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) == micro_tokens * accumulation);
  STRATA_ASSERT(targets.size() == inputs.size());

  for (auto& buffers : s.modules)
    s.stream().fill_zero(buffers.grads.data(), buffers.grads.bytes());
  for (std::int64_t micro = 0; micro < accumulation; ++micro) {
    auto at = static_cast<std::size_t>(micro * micro_tokens);
    auto count = static_cast<std::size_t>(micro_tokens);
    s.model.load_batch(s.stream(), inputs.subspan(at, count), targets.subspan(at, count));
    s.run_forward(micro);
    s.run_backward(micro);
  }
  s.reduce_gradients();

  StepStats stats;
  StepHyperparameters hyper = s.plan_step(stats);
  if (!stats.skipped) {
    s.apply_step(hyper);
    ++s.steps_taken;
  }
  s.stream().synchronize();

  double loss_sum = 0;
  for (std::int64_t micro = 0; micro < accumulation; ++micro) {
    loss_sum += s.losses_host.as<float>()[micro];
  }
  stats.loss = loss_sum / static_cast<double>(accumulation);
  stats.step = s.steps_taken;
  stats.tokens = micro_tokens * accumulation * s.runtime.comm.world_size();
  gpu::TransferCounters after = device.transfer_counters();
  stats.transfers = {after.bytes_h2d - before.bytes_h2d, after.bytes_d2h - before.bytes_d2h,
                     after.bytes_d2d - before.bytes_d2d, after.bytes_h2h - before.bytes_h2h};
  stats.gpu_peak_bytes = device.peak_bytes_in_use();
  stats.cpu_peak_bytes = device.pinned_bytes_in_use();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return stats;
}

double Engine::evaluate(std::span<const std::int32_t> inputs,
                        std::span<const std::int32_t> targets) {
  State& s = *state_;
  std::int64_t micro_tokens = s.model.tokens_per_micro_batch();
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) % micro_tokens == 0);
  std::int64_t batches = static_cast<std::int64_t>(inputs.size()) / micro_tokens;
  STRATA_ASSERT(batches <= s.config.batch.gradient_accumulation_steps);
  for (std::int64_t micro = 0; micro < batches; ++micro) {
    auto at = static_cast<std::size_t>(micro * micro_tokens);
    auto count = static_cast<std::size_t>(micro_tokens);
    s.model.load_batch(s.stream(), inputs.subspan(at, count), targets.subspan(at, count));
    s.run_forward(micro);
  }
  s.stream().synchronize();
  double sum = 0;
  for (std::int64_t micro = 0; micro < batches; ++micro)
    sum += s.losses_host.as<float>()[micro];
  return sum / static_cast<double>(batches);
}

const zero::FlatLayout& Engine::layout() const {
  return state_->layout;
}

std::int64_t Engine::steps_taken() const {
  return state_->steps_taken;
}

std::vector<float> Engine::master_parameters() {
  State& s = *state_;
  s.stream().synchronize();
  gpu::PinnedBuffer staging = s.runtime.device.allocate_pinned(s.master.bytes());
  s.stream().copy(staging.data(), s.master.data(), s.master.bytes(), gpu::CopyKind::device_to_host);
  s.stream().synchronize();
  std::vector<float> values;
  for (const zero::TensorSlot& slot : s.layout.all_tensors()) {
    const float* from =
        staging.as<float>() + s.layout.module(slot.module).partition_offset + slot.offset;
    values.insert(values.end(), from, from + slot.numel);
  }
  return values;
}

}  // namespace strata::engine
