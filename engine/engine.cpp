#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "base/units.h"
#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "engine/engine_state.h"
#include "engine/memory_estimate.h"
#include "engine/optim/grad_clip.h"
#include "engine/param_init.h"
#include "engine/zero/offload_options.h"
#include "gpu/event.h"
#include "gpu/ops.h"
#include "gpu/pinned_limit.h"

namespace strata::engine {

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

void to_storage(ParamCopy copy, std::span<const float> values, std::byte* out) {
  if (copy == ParamCopy::none) {
    std::memcpy(out, values.data(), values.size_bytes());
    return;
  }
  auto* bits = reinterpret_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < values.size(); ++i)
    bits[i] = copy == ParamCopy::bf16 ? cpu_adam::to_bf16(values[i]).bits
                                      : cpu_adam::to_fp16(values[i]).bits;
}

gpu::DataType compute_type(const Config& config) {
  return to_data_type(storage_type(config));
}

gpu::DataType to_data_type(ParamCopy copy) {
  switch (copy) {
    case ParamCopy::bf16:
      return gpu::DataType::bfloat16;
    case ParamCopy::fp16:
      return gpu::DataType::float16;
    case ParamCopy::none:
      break;
  }
  return gpu::DataType::float32;
}

namespace {

std::vector<std::string> module_names(Model& model) {
  std::vector<std::string> names;
  for (Module* module : model.modules())
    names.emplace_back(module->name());
  return names;
}

constexpr std::int64_t kFloat = sizeof(float);

bool offloaded(OffloadDevice device) {
  return device != OffloadDevice::none;
}

bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b) {
  return std::filesystem::absolute(a).lexically_normal() ==
         std::filesystem::absolute(b).lexically_normal();
}

// What the engine refuses before it allocates anything.
void check_supported(const Config& config, Model& model) {
  if (config.strata.overlap_optimizer && !offloaded(config.zero.offload_optimizer.device)) {
    throw UserError(
        "strata.overlap_optimizer overlaps the offloaded optimizer's step with backward, but "
        "zero_optimization.offload_optimizer.device is none",
        "offload the optimizer (\"offload_optimizer\": {\"device\": \"cpu\"} at stage 1-3), or "
        "set strata.overlap_optimizer to false",
        2);
  }
  if (config.bf16.bf16_master_weights_and_grads &&
      !offloaded(config.zero.offload_optimizer.device)) {
    throw UserError(
        "bf16.bf16_master_weights_and_grads keeps the offloaded optimizer's master weights, "
        "gradients (and with bf16_optimizer_states its moments) in bf16, but "
        "zero_optimization.offload_optimizer.device is none",
        "offload the optimizer (\"offload_optimizer\": {\"device\": \"cpu\"} or \"nvme\" at "
        "stage 1-3), or set bf16.bf16_master_weights_and_grads and bf16_optimizer_states to false",
        2);
  }
  if (offloaded(config.zero.offload_param.device) &&
      !offloaded(config.zero.offload_optimizer.device)) {
    throw UserError(
        fmt::format("zero_optimization.offload_param.device is {} but offload_optimizer.device "
                    "is none: the fp32 master weights and optimizer states, 8x the size of the "
                    "16-bit parameters, would stay on the device",
                    to_string(config.zero.offload_param.device)),
        fmt::format("offload the optimizer too (\"offload_optimizer\": {{\"device\": \"{}\"}}), "
                    "or set offload_param.device to none",
                    to_string(config.zero.offload_param.device)),
        2);
  }
  std::span<Module* const> modules = model.modules();
  for (std::size_t m = 0; m < modules.size(); ++m) {
    for (int lender : modules[m]->borrowed_modules()) {
      // Gradient reduction of a module waits for every module writing its gradients; the
      // borrowers run their backward first only when they come later in the model.
      STRATA_ASSERT(lender >= 0 && static_cast<std::size_t>(lender) < m);
    }
  }
}

// pin_memory beyond what this process may lock trains unpinned with one warning, or is refused
// under strata.require_pinned_memory (zero::settle_pin_memory), before anything is allocated: the
// need is the estimate's pinned terms, the number `strata estimate` prints.
void settle_pinning(Config& config, Model& model, Runtime& runtime) {
  if (!zero::pins_memory(config)) return;
  EstimateInputs inputs = estimate_inputs_from_config(config, 0, 0, runtime.comm.world_size(), 1);
  set_model(inputs, declare(model));
  const EstimateRow row =
      estimate_row(inputs, static_cast<int>(config.zero.stage), config.zero.offload_param.device,
                   config.zero.offload_optimizer.device);
  const std::optional<std::string> warning = zero::settle_pin_memory(
      config, row.pinned_bytes_per_rank, runtime.device.pinned_bytes_in_use(), gpu::pinned_limit());
  if (warning) base::logger("engine").warn("{}", *warning);
}

}  // namespace

// The rollback window of an overlapped step: as many sub-groups as the swap buffers hold, at
// most all of them. A partition of one sub-group is final only when backward ends, so nothing
// can overlap: said once, with the key that fixes it.
std::int64_t Engine::State::overlap_window(const zero::OptimizerOffloadOptions& options) const {
  const std::int64_t partition = layout.partition_numel();
  const auto sub_groups = static_cast<std::int64_t>(options.sub_groups.size());
  if (sub_groups == 1 && runtime.comm.rank() == 0) {
    base::logger("engine").warn(
        "strata.overlap_optimizer has nothing to overlap: the rank's optimizer partition ({} "
        "elements) is one sub-group, final only when backward ends; set "
        "zero_optimization.sub_group_size below it (e.g. {}) to step sub-groups during backward",
        partition, std::max<std::int64_t>(1, partition / 8));
  }
  return std::min(options.buffer_count, sub_groups);
}

// The pool allocates every shelf at once; the store's rings register its page-locked arena (a
// second store's only the tier's read buffers, all it reads into); then each client takes the
// memory it keeps for the run.
void Engine::State::open_offload_memory() {
  if (!pool) return;
  pool->open();
  if (swap) swap->open(pool->pinned_arena());
  if (param_swap) {
    const memory::PinnedPool::Shelf shelf = tier->swap_shelf();
    param_swap->open(pool->pinned(shelf) ? pool->shelf_memory(shelf) : std::span<std::byte>());
  }
  tier->open();
  if (offload) offload->open();
  reducer->open();
}

void Engine::State::build() {
  settle_pinning(config, model, runtime);
  gpu::Device& device = runtime.device;
  const int rank = runtime.comm.rank();
  const std::int64_t partition = layout.partition_numel();
  const std::int64_t element = gpu::size_bytes(storage);

  // The optimizer steps the partition in these, offloaded or on the device.
  const std::vector<zero::Range> sub_groups =
      zero::make_sub_groups(layout, config.zero.sub_group_size);

  zero::ParamTierOptions tier_options = zero::param_tier_options(config, rank, element);
  tier_options.nvme.faults = runtime.faults.swap;
  // One pool per rank holds the host memory of everything offloaded, and one swap store per rank
  // serves the optimizer's states, the gradients and, on the same nvme_path, the parameters; each
  // client reserves its shelves and extents, then both open once, below.
  const bool optimizer_on_nvme = config.zero.offload_optimizer.device == OffloadDevice::nvme;
  const bool params_on_nvme = config.zero.offload_param.device == OffloadDevice::nvme;
  memory::NvmeStoreOptions swap_options =
      optimizer_on_nvme ? zero::optimizer_offload_options(config, rank).nvme : tier_options.nvme;
  swap_options.faults = runtime.faults.swap;
  if (offloaded(config.zero.offload_param.device) ||
      offloaded(config.zero.offload_optimizer.device))
    pool = std::make_unique<memory::PinnedPool>(device);
  if (optimizer_on_nvme || params_on_nvme) swap = std::make_unique<memory::NvmeStore>(swap_options);
  tier_options.pool = pool.get();
  tier_options.book = &book;
  tier_options.store = swap.get();
  if (config.zero.offload_param.device == OffloadDevice::none &&
      offloaded(config.zero.offload_optimizer.device)) {
    // The offloaded optimizer's new parameters go up to the device tier one sub-group at a time.
    for (const zero::Range& group : sub_groups)
      tier_options.upload_staging_elements =
          std::max(tier_options.upload_staging_elements, group.size());
    tier_options.upload_staging_pinned = config.zero.offload_optimizer.pin_memory;
  }
  // Parameters on another disk than the optimizer's get a store of their own there, whose rings
  // register the tier's read buffers in the one pool.
  if (params_on_nvme && !same_directory(tier_options.nvme.nvme_path, swap_options.nvme_path)) {
    memory::NvmeStoreOptions param_options = tier_options.nvme;
    param_options.store_name = "params";
    param_swap = std::make_unique<memory::NvmeStore>(std::move(param_options));
    tier_options.store = param_swap.get();
  }
  tier = std::make_unique<zero::ParamTier>(device, layout, tier_options);

  // The overlapped step's rollback window and guess (made once the reducer exists).
  std::int64_t window = 0;
  bool fixed = false;
  if (offloaded(config.zero.offload_optimizer.device)) {
    zero::OptimizerOffloadOptions options = zero::optimizer_offload_options(config, rank);
    options.nvme.faults = runtime.faults.swap;
    options.pool = pool.get();
    options.book = &book;
    if (optimizer_on_nvme) options.store = swap.get();
    options.sub_groups = sub_groups;
    // A step the gradients cannot change is known before backward: all of it overlaps, with
    // nothing kept to undo.
    fixed =
        !optim::gradients_can_change_the_step(config.gradient_clipping, config.fp16, config.bf16);
    window = config.strata.overlap_optimizer ? overlap_window(options) : 0;
    if (config.strata.overlap_optimizer && !fixed) {
      options.keep_capacity = window;
      options.keep_param_bytes_per_element = element;  // step_io() hands one copy, the storage's
    }
    offload = std::make_unique<zero::OptimizerOffload>(device, optimizer, partition, options);
    late = std::make_unique<zero::LateSubGroups>(*offload);
  } else {
    // The device optimizer steps one sub-group per launch, as the offloaded one steps them.
    device_sub_groups = sub_groups;
    master = device.allocate(partition * kFloat, "fp32 master parameters");
    if (optimizer.type() != OptimizerType::adagrad)
      exp_avg = device.allocate(partition * kFloat, "optimizer exp_avg");
    if (optimizer.type() != OptimizerType::lion)
      exp_avg_sq = device.allocate(partition * kFloat, "optimizer exp_avg_sq");
  }

  const ZeroConfig& settings = config.zero;
  zero::GradReducerOptions reduce;
  reduce.stage = settings.stage;
  reduce.to_host = offload != nullptr;
  // With the optimizer's states on NVMe the gradients go there too, so CPU memory holds buffers
  // only (docs/memory.md).
  reduce.to_nvme = optimizer_on_nvme;
  reduce.bf16 = state_types(config.bf16).bf16_master_and_grads;
  reduce.pool = pool.get();
  reduce.book = &book;
  if (reduce.to_nvme) {
    reduce.store = swap.get();
    for (const zero::Range& group : offload->sub_groups())
      reduce.largest_read = std::max(reduce.largest_read, group.size());
  }
  reduce.pin_memory = config.zero.offload_optimizer.pin_memory;
  reduce.bucket_elements = std::max<std::int64_t>(1, settings.reduce_bucket_size);
  reducer = std::make_unique<zero::GradReducer>(device, runtime.ops, runtime.comm, stream(), layout,
                                                memory, module_names(model), reduce);
  if (offload && config.strata.overlap_optimizer) {
    // The thread steps a sub-group once the reducer's queue has landed its gradients.
    overlap = std::make_unique<zero::OverlappedStep>(
        reducer->reductions(), layout, *offload, window,
        fixed ? zero::OverlappedStep::Guess::fixed : zero::OverlappedStep::Guess::may_change);
  }
  open_offload_memory();

  zero::CoordinatorOptions gather;
  gather.release_after_use = settings.stage == 3;
  gather.storage = storage;
  gather.persistence_threshold = settings.stage3_param_persistence_threshold;
  gather.max_reuse_distance = settings.stage3_max_reuse_distance;
  gather.prefetch_bucket_size = settings.stage3_prefetch_bucket_size;
  gather.max_live_parameters = settings.stage == 3 ? settings.stage3_max_live_parameters
                                                   : std::numeric_limits<std::int64_t>::max();
  coordinator = std::make_unique<zero::ParamCoordinator>(
      runtime.ops, runtime.comm, stream(), layout, *tier, memory, module_names(model), gather);

  model.allocate_activations(device,
                             config.activation_checkpointing.partition_activations ||
                                 config.activation_checkpointing.number_checkpoints > 0,
                             storage);
  const std::int64_t accumulation = config.batch.gradient_accumulation_steps;
  losses = device.allocate(kLossTokenBytes + accumulation * kFloat, "losses");
  losses_host = device.allocate_pinned(kLossTokenBytes + accumulation * kFloat);
  micro_loss_tokens.assign(static_cast<std::size_t>(accumulation), 0);
  initialise_states();
  reserve_step_memory();
}

// The step's buffers come from one reservation made now, sized by the estimate's walk of the
// step (the same walk `strata estimate` reports and the agreement tests hold to the byte) plus one
// largest buffer of room against fragmentation: a step then neither allocates device memory nor
// waits for the device to free some. A budget too tight for that still trains, with the host
// waiting for released buffers where the budget says so.
void Engine::State::reserve_step_memory() {
  EstimateInputs inputs = estimate_inputs_from_config(config, 0, 0, runtime.comm.world_size(), 1);
  set_model(inputs, declare(model));
  const StepDeviceMemory step =
      step_device_memory(inputs, static_cast<int>(config.zero.stage),
                         config.zero.offload_param.device, config.zero.offload_optimizer.device);
  if (step.peak_bytes == 0) return;
  memory.drain();
  gpu::Device& device = runtime.device;
  const std::int64_t wanted =
      memory::StreamOrderedMemory::arena_bytes(step.peak_bytes + step.largest_buffer_bytes);
  const std::int64_t room = device.budget_bytes() - device.bytes_in_use();
  const auto without_arena = [&](const std::string& why) {
    base::logger("engine").warn(
        "{}: the step will wait for the device to free memory; a strata.device_memory_budget of "
        "{} bytes or more lets it run without waiting",
        why, device.budget_bytes() - room + wanted);
  };
  if (wanted > room) {
    without_arena(fmt::format(
        "strata.device_memory_budget leaves {} for the step, less than the {} its buffers and "
        "their slack take",
        base::format_bytes(static_cast<double>(room)),
        base::format_bytes(static_cast<double>(wanted))));
    return;
  }
  try {
    memory.reserve(wanted);
  } catch (const UserError& error) {
    // The budget allowed it but the device itself did not (a card shared with another process).
    without_arena(error.what());
  }
}

}  // namespace strata::engine

namespace strata::engine {

// The views of one module call: its own parameters and those it borrows, acquired for the call
// and released after it.
struct ModuleCall {
  TensorViews params;
  std::vector<TensorViews> borrowed;
};

void Engine::State::run_forward(std::int64_t micro_batch, bool training) {
  StepContext context = step_context(micro_batch, training);
  std::span<Module* const> list = model.modules();
  for (std::size_t m = 0; m < list.size(); ++m) {
    const base::Timeline::Scope span("host", "forward", list[m]->name());
    std::vector<int> lenders = list[m]->borrowed_modules();
    ModuleCall call;
    for (int lender : lenders)
      call.borrowed.emplace_back(coordinator->acquire(lender));
    call.params = TensorViews(coordinator->acquire(static_cast<int>(m)));
    list[m]->forward(context, call.params, call.borrowed);
    coordinator->release(static_cast<int>(m));
    for (int lender : lenders)
      coordinator->release(lender);
  }
  keep_loss(micro_batch);
}

void Engine::State::run_backward(std::int64_t micro_batch, bool last_micro) {
  StepContext context = step_context(micro_batch, /*training=*/true);
  std::span<Module* const> list = model.modules();
  for (std::size_t m = list.size(); m-- > 0;) {
    const base::Timeline::Scope span("host", "backward", list[m]->name());
    std::vector<int> lenders = list[m]->borrowed_modules();
    ModuleCall call;
    std::vector<TensorViews> borrowed_grads;
    for (int lender : lenders) {
      call.borrowed.emplace_back(coordinator->acquire(lender));
      borrowed_grads.emplace_back(reducer->grads(lender));
    }
    call.params = TensorViews(coordinator->acquire(static_cast<int>(m)));
    TensorViews grads(reducer->grads(static_cast<int>(m)));
    list[m]->backward(context, call.params, call.borrowed, grads, borrowed_grads);
    coordinator->release(static_cast<int>(m));
    for (int lender : lenders)
      coordinator->release(lender);
    reducer->module_done(static_cast<int>(m), last_micro);
    if (last_micro && overlap)
      overlap->module_final(static_cast<int>(m), reducer->reductions().last());
  }
}

// The step's hyperparameters from the schedule, with the gradients' multiplier `grad_scale`.
StepHyperparameters Engine::State::hyperparameters(float grad_scale) const {
  StepHyperparameters hyper;
  hyper.lr = schedule.lr(steps_taken);
  hyper.betas = schedule.betas(steps_taken);
  hyper.step = steps_taken + 1;
  hyper.grad_scale = grad_scale;
  return hyper;
}

// An overlapped step's guess, before the gradients exist: not clipped, not skipped. A zero norm
// takes the same path through plan_grad_step as any norm under the clip, so the guess has the
// bits of the real step whenever the real step is not clipped.
StepHyperparameters Engine::State::guess_step() const {
  return hyperparameters(
      optim::plan_grad_step(0.0, loss_scaler.scale(), config.gradient_clipping).grad_scale);
}

// Reads the gradients' global norm and overflow flag, updates the loss scale, and returns the
// step's hyperparameters; stats.skipped says whether to update at all.
StepHyperparameters Engine::State::plan_step(StepStats& stats) {
  const cpu_adam::GradStats grad_stats = reducer->global_stats();
  double scale = loss_scaler.scale();
  optim::GradStepPlan plan = optim::plan_grad_step(
      grad_stats.has_inf_or_nan ? std::numeric_limits<double>::infinity() : grad_stats.sum_squares,
      scale, config.gradient_clipping);
  bool checked_overflow = plan.overflow && optim::checks_overflow(config.fp16, config.bf16);
  stats.loss_scale = scale;
  stats.grad_norm = plan.grad_norm;
  stats.skipped = loss_scaler.update(checked_overflow);
  if (checked_overflow && !config.fp16.enabled && runtime.comm.rank() == 0) {
    base::logger("engine").warn("step={} gradients hold inf or NaN: step skipped", steps_taken + 1);
  }
  StepHyperparameters hyper = hyperparameters(plan.grad_scale);
  stats.lr = hyper.lr;
  return hyper;
}

// What the offloaded optimizer reads (the reducer's gradients, in CPU memory or its swap file)
// and where its new parameters go (the parameter tier, sub-group by sub-group, in the storage
// type).
zero::StepIo Engine::State::step_io() {
  return zero::StepIo{reducer.get(), copy_type, tier.get()};
}

// The optimizer over the rank's partition; the new parameters land in the parameter tier and
// every gathered copy becomes stale. Returns the sub-groups to leave stepping beside the next
// forward (start_late_sub_groups), first to last: an offloaded step's, all of them, unless it
// saves a planned checkpoint or fills states from one as it goes (then it runs now: nullopt).
std::optional<std::vector<int>> Engine::State::apply_step(const StepHyperparameters& hyper) {
  std::optional<std::vector<int>> left;
  if (offload) {
    const zero::OptimizerOffload::StatesVisitor save = planned_save_writer();
    if (!save && !offload->fills_later()) {
      left.emplace(offload->sub_groups().size());
      std::iota(left->begin(), left->end(), 0);
    } else {
      offload->step(hyper, step_io(), save);
      if (save) planned_save->step = steps_taken + 1;
    }
  } else {
    // On the device: one fused optimizer op per sub-group (gpu::Ops; on the host backend that is
    // cpu_adam::step on the stream, on CUDA a kernel), writing the storage copy into the tier's
    // partition as it goes; an fp32 model's copy is the master itself.
    std::byte* shards = tier->device_partition();
    const std::int64_t copy_bytes = gpu::size_bytes(storage);
    for (const zero::Range& group : device_sub_groups) {
      gpu::OptimizerArrays arrays;
      arrays.params = master.as<float>() + group.begin;
      arrays.grads = reducer->device_partition() + group.begin;
      arrays.exp_avg = exp_avg ? exp_avg.as<float>() + group.begin : nullptr;
      arrays.exp_avg_sq = exp_avg_sq ? exp_avg_sq.as<float>() + group.begin : nullptr;
      if (copy_type != ParamCopy::none) {
        arrays.param_copy = shards + group.begin * copy_bytes;
        arrays.copy_type = to_data_type(copy_type);
      }
      optimizer.step_on_device(runtime.ops, stream(), hyper, arrays, group.size());
    }
    if (copy_type == ParamCopy::none) {
      stream().copy(shards, master.data(), master.bytes(), gpu::CopyKind::device_to_device);
    }
  }
  coordinator->invalidate();
  return left;
}

// The end of a step whose optimizer ran beside backward: the early sub-groups stand or are
// undone, and (unless skipped) the new parameters land in the tier. Returns the sub-groups the
// thread did not reach, to step beside the next forward (none for a skipped step: nullopt).
std::optional<std::vector<int>> Engine::State::finish_overlapped_step(
    const StepHyperparameters& hyper, StepStats& stats) {
  zero::OverlapOutcome outcome = overlap->finish(stats.skipped ? nullptr : &hyper);
  stats.early_sub_groups = outcome.early_sub_groups;
  stats.undone_sub_groups = outcome.undone ? outcome.early_sub_groups : 0;
  if (stats.skipped) return std::nullopt;  // the parameter tier was not changed
  coordinator->invalidate();
  return std::move(outcome.unreached);
}

// What a step leaves stepping beside the next forward starts once the step's own work is
// counted (StepTraffic::end_step).
void Engine::State::start_late_sub_groups(const StepHyperparameters& hyper,
                                          std::vector<int> order) {
  late->start(hyper, step_io(), std::move(order));
}

void Engine::State::settle_late_sub_groups() {
  if (!traffic.optimizer_running()) return;
  try {
    late->settle();
  } catch (...) {
    traffic.forget();
    throw;
  }
  traffic.optimizer_finished();
}

void Engine::State::settle_step() {
  if (!traffic.optimizer_running()) return;
  const auto started = std::chrono::steady_clock::now();
  try {
    settle_late_sub_groups();
  } catch (const UserError& error) {
    // The optimizer marked itself inconsistent: say where the run can be resumed from.
    throw UserError(error.what(), fmt::format("{}; then {}", error.fix(), resume_advice()),
                    error.exit_status());
  }
  carried_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

bool Engine::State::abandon_overlap(const std::string& failure) noexcept {
  // The last step's sub-groups still being stepped complete that step (or fail, which leaves
  // the optimizer inconsistent and is said by the caller).
  if (late) late->abandon();
  if (!overlap) return false;
  const bool was_consistent = !offload->inconsistent();
  overlap->abandon();
  if (!was_consistent || !offload->inconsistent()) return false;
  try {
    unusable = fmt::format(
        "a step failed ({}) after its optimizer had stepped part of the model beside backward: "
        "this rank's parameters and optimizer states are partly that step's",
        failure);
  } catch (...) {
    unusable = "a step failed after its optimizer had stepped part of the model beside backward";
  }
  return true;
}

// The end of a step's own work: its copies have run on every stream (the compute stream's
// results, the losses, are read next), so that what it moved is all counted.
void Engine::State::wait_for_streams() {
  const base::Timeline::Scope waiting("host", "wait", "end of step");
  gpu::Device& device = runtime.device;
  for (gpu::Stream* stream : {&device.compute_stream(), &device.h2d_stream(), &device.d2h_stream()})
    stream->synchronize();
}

// A step that failed part way may have left work queued that reads the caller's batch (the
// compute stream) and the engine's buffers (the copy streams): it runs out before the caller
// frees either. A copy that waited for failed compute work carries that failure on its stream;
// the step reports it once, and the next step's work must not be skipped for it.
void Engine::State::drain_streams() noexcept {
  gpu::Device& device = runtime.device;
  for (gpu::Stream* stream :
       {&device.compute_stream(), &device.h2d_stream(), &device.d2h_stream()}) {
    try {
      stream->synchronize();
    } catch (const std::exception& error) {
      base::logger("engine").debug("work of the failed step failed too: {}", error.what());
    }
  }
}

// Everything moved so far, and of it what the offloaded optimizer moved: its states, the
// gradients it read (GradReducer::optimizer_read_bytes), and the new parameters it committed to
// the tier (to NVMe, or uploaded to the device tier). Loads write the tier too, between steps,
// which count in no step.
TrafficReading Engine::State::read_traffic() const {
  TrafficReading now;
  now.all = Traffic{runtime.device.transfer_counters(), nvme_read_bytes(), nvme_write_bytes()};
  now.optimizer.nvme_read = reducer->optimizer_read_bytes();
  now.optimizer.nvme_write = tier->nvme_write_bytes();
  now.optimizer.transfers.bytes_h2d = tier->committed_upload_bytes();
  if (offload) {
    const memory::ResidencyCounters states = offload->counters();
    now.optimizer.nvme_read +=
        states.moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_read)];
    now.optimizer.nvme_write +=
        states.moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_write)];
  }
  return now;
}

std::int64_t Engine::State::nvme_read_bytes() const {
  std::int64_t bytes = tier->nvme_read_bytes() + reducer->nvme_read_bytes();
  if (offload) {
    bytes +=
        offload->counters().moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_read)];
  }
  return bytes;
}

std::int64_t Engine::State::nvme_write_bytes() const {
  std::int64_t bytes = tier->nvme_write_bytes() + reducer->nvme_write_bytes();
  if (offload) {
    bytes +=
        offload->counters().moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_write)];
  }
  return bytes;
}

// CPU memory the engine holds for the model's states: the parameter tier's, the gradient
// partition, the optimizer's states (all of them in CPU, or its swap buffers with NVMe), and the
// device's page-locked memory.
std::int64_t Engine::State::host_bytes() const {
  std::int64_t bytes = tier->unpinned_host_bytes();
  if (pool) bytes += pool->unpinned_bytes();
  if (offload) bytes += offload->rollback_bytes();
  // Page-locked buffers (pools, the gradient partition, small step buffers) once, as locked.
  return bytes + runtime.device.pinned_bytes_in_use();
}

Engine::Engine(Runtime& runtime, const Config& config, Model& model) {
  check_supported(config, model);
  state_ = std::make_unique<State>(runtime, config, model);
  state_->build();
}

Engine::~Engine() {
  // The last step's optimizer may still be committing new parameters, and work still queued
  // reads buffers this state owns.
  if (state_->late) state_->late->abandon();
  try {
    state_->runtime.device.synchronize();
  } catch (const std::exception& error) {
    base::logger("engine").error("error while draining the device at shutdown: {}", error.what());
  }
}

Traffic Engine::State::step_optimizer(StepStats& stats) {
  const base::Timeline::Scope span("host", "optimizer step");
  StepHyperparameters hyper = plan_step(stats);
  // The sub-groups left stepping beside the next forward, or none when the step ran whole.
  std::optional<std::vector<int>> late_order;
  if (overlap) {
    late_order = finish_overlapped_step(hyper, stats);
  } else if (!stats.skipped) {
    late_order = apply_step(hyper);
  }
  if (!late_order) traffic.optimizer_finished();
  wait_for_streams();
  const Traffic moved = traffic.end_step(late_order.has_value());
  if (late_order) {
    stats.late_sub_groups = static_cast<std::int64_t>(late_order->size());
    start_late_sub_groups(hyper, std::move(*late_order));
  }
  return moved;
}

StepStats Engine::train_batch(std::span<const std::int32_t> inputs,
                              std::span<const std::int32_t> targets) {
  State& s = *state_;
  s.check_usable();
  auto started = std::chrono::steady_clock::now();
  gpu::Device& device = s.runtime.device;
  // With what a call since the step before waited for that step's optimizer.
  const double carried_seconds = std::exchange(s.carried_seconds, 0.0);
  s.traffic.begin_step();
  const std::int64_t waits_before = s.memory.waits();
  const std::int64_t allocations_before = s.memory.fresh_allocations();
  device.reset_peak();
  s.memory.reset_peak();
  std::int64_t micro_tokens = s.model.tokens_per_micro_batch();
  std::int64_t accumulation = s.config.batch.gradient_accumulation_steps;
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) == micro_tokens * accumulation);
  STRATA_ASSERT(targets.size() == inputs.size());

  StepStats stats;
  Traffic moved;
  try {
    s.count_loss_tokens(targets, accumulation);
    s.coordinator->begin_pass(true);
    s.reducer->begin_step();
    for (std::int64_t micro = 0; micro < accumulation; ++micro) {
      auto at = static_cast<std::size_t>(micro * micro_tokens);
      auto count = static_cast<std::size_t>(micro_tokens);
      const bool last = micro + 1 == accumulation;
      s.model.load_batch(s.stream(), inputs.subspan(at, count), targets.subspan(at, count));
      s.run_forward(micro, /*training=*/true);
      // The last step's optimizer read the gradients that this backward overwrites.
      if (micro == 0) s.settle_late_sub_groups();
      if (last && s.overlap) s.overlap->begin(s.guess_step(), s.step_io());
      s.run_backward(micro, last);
    }
    s.coordinator->end_step();
    s.reduce_losses(accumulation);

    moved = s.step_optimizer(stats);
    if (!stats.skipped) ++s.steps_taken;
    ++s.batches_trained;
  } catch (const UserError& error) {
    // The optimizer must not keep a half-made overlapped step of a failed one.
    s.traffic.forget();
    s.abandon_overlap(error.what());
    s.drain_streams();
    if (!s.inconsistent()) throw;
    if (!s.unverified_load.empty()) {
      // The states the step read from the checkpoint it was loaded from failed (a read, its
      // CRC32C): that checkpoint is not one to resume from, and the error's fix says so.
      s.unusable = fmt::format("loading {} failed in the first step: {}",
                               s.unverified_load.string(), error.what());
      throw UserError(s.unusable, error.fix(), error.exit_status());
    }
    // The states are lost: say where the run can be resumed from, keeping the cause's own fix.
    throw UserError(error.what(), fmt::format("{}; then {}", error.fix(), s.resume_advice()),
                    error.exit_status());
  } catch (const std::exception& error) {
    s.traffic.forget();
    const bool half_stepped = s.abandon_overlap(error.what());
    s.drain_streams();
    if (!half_stepped) throw;
    throw UserError(s.unusable, s.resume_advice(), 1);
  } catch (...) {
    s.traffic.forget();
    s.abandon_overlap("an unknown error");
    s.drain_streams();
    throw;
  }

  stats.loss = s.reported_loss(accumulation);
  stats.loss_tokens = s.loss_tokens.global;
  stats.step = s.steps_taken;
  stats.tokens = micro_tokens * accumulation * s.runtime.comm.world_size();
  stats.transfers = moved.transfers;
  stats.bytes_nvme_read = moved.nvme_read;
  stats.bytes_nvme_write = moved.nvme_write;
  stats.allocation_waits = s.memory.waits() - waits_before;
  stats.device_allocations = s.memory.fresh_allocations() - allocations_before;
  // In stream order: the host may hold released buffers a little longer than the device needs
  // them, which a GPU's stream-ordered pool would not (engine/memory/stream_ordered_memory.h).
  stats.gpu_peak_bytes = std::max(s.memory.peak_bytes(), s.memory.live_bytes());
  s.device_peak = std::max(s.device_peak, stats.gpu_peak_bytes);
  stats.cpu_peak_bytes = s.host_bytes();
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() +
      carried_seconds;
  return stats;
}

double Engine::evaluate(std::span<const std::int32_t> inputs,
                        std::span<const std::int32_t> targets) {
  return evaluate_batch(inputs, targets).loss;
}

EvalStats Engine::evaluate_batch(std::span<const std::int32_t> inputs,
                                 std::span<const std::int32_t> targets) {
  State& s = *state_;
  s.check_usable();
  s.settle_step();
  std::int64_t micro_tokens = s.model.tokens_per_micro_batch();
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) % micro_tokens == 0);
  std::int64_t batches = static_cast<std::int64_t>(inputs.size()) / micro_tokens;
  STRATA_ASSERT(batches <= s.config.batch.gradient_accumulation_steps);
  STRATA_ASSERT(targets.size() == inputs.size());
  s.count_loss_tokens(targets, batches);
  s.coordinator->begin_pass(false);
  for (std::int64_t micro = 0; micro < batches; ++micro) {
    auto at = static_cast<std::size_t>(micro * micro_tokens);
    auto count = static_cast<std::size_t>(micro_tokens);
    s.model.load_batch(s.stream(), inputs.subspan(at, count), targets.subspan(at, count));
    s.run_forward(micro, /*training=*/false);
  }
  s.reduce_losses(batches);
  s.stream().synchronize();
  EvalStats stats;
  stats.loss = s.reported_loss(batches);
  stats.loss_tokens = s.loss_tokens.global;
  stats.tokens = s.loss_tokens.targets;
  return stats;
}

const zero::FlatLayout& Engine::layout() const {
  return state_->layout;
}

MemoryUse Engine::memory_use() const {
  const State& s = *state_;
  MemoryUse use;
  use.device_peak_bytes = s.device_peak;
  use.cpu_bytes = s.host_bytes();
  use.nvme_bytes = s.tier->nvme_bytes() + s.reducer->nvme_bytes();
  if (s.offload) use.nvme_bytes += s.offload->nvme_bytes();
  if (s.pool) use.swap_buffer_bytes = s.pool->swap_buffer_bytes();
  return use;
}

const memory::PinnedPool* Engine::host_pool() const {
  return state_->pool.get();
}

const memory::Residency& Engine::residency() const {
  return state_->book;
}

std::vector<const memory::NvmeStore*> Engine::swap_stores() const {
  std::vector<const memory::NvmeStore*> stores;
  for (const memory::NvmeStore* store : {state_->swap.get(), state_->param_swap.get()})
    if (store != nullptr) stores.push_back(store);
  return stores;
}

std::int64_t Engine::steps_taken() const {
  return state_->steps_taken;
}

std::int64_t Engine::batches_trained() const {
  return state_->batches_trained;
}

// Collective when the layout is sharded: every rank calls it and gets the whole model.
std::vector<float> Engine::master_parameters() {
  State& s = *state_;
  s.settle_step();
  s.stream().synchronize();
  const std::int64_t n = s.layout.partition_numel();
  std::vector<float> partition(static_cast<std::size_t>(n));
  if (s.offload) {
    s.offload->read_states(partition, {}, {});
  } else {
    s.stream().copy(partition.data(), s.master.data(), n * kFloat, gpu::CopyKind::device_to_host);
    s.stream().synchronize();
  }
  const int world = s.layout.world_size();
  std::vector<float> values;
  std::vector<float> whole;
  for (int m = 0; m < s.layout.module_count(); ++m) {
    const zero::ModuleSlice& slice = s.layout.module(m);
    whole.assign(static_cast<std::size_t>(slice.padded_numel), 0.0f);
    const float* own = partition.data() + slice.partition_offset;
    if (world == 1) {
      std::copy(own, own + slice.shard_numel, whole.begin());
    } else {
      gpu::DeviceBuffer gathered =
          s.memory.allocate(s.stream(), slice.padded_numel * kFloat, "gathered master parameters");
      float* mine = gathered.as<float>() + s.shard_rank() * slice.shard_numel;
      s.stream().copy(mine, own, slice.shard_numel * kFloat, gpu::CopyKind::host_to_device);
      s.runtime.comm.all_gather(s.stream(), mine, gathered.data(), slice.shard_numel,
                                gpu::DataType::float32);
      s.stream().copy(whole.data(), gathered.data(), gathered.bytes(),
                      gpu::CopyKind::device_to_host);
      s.stream().synchronize();
    }
    for (const zero::TensorSlot& slot : s.layout.tensors(m))
      values.insert(values.end(), whole.begin() + slot.offset,
                    whole.begin() + slot.offset + slot.numel);
  }
  return values;
}

}  // namespace strata::engine
