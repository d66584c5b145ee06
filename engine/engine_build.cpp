// The Engine's construction: its components made in the order they depend on each other
// (docs/architecture.md, "One training step"). The pool and the swap stores first, as every
// offloaded client reserves its shelves and extents in them; then the parameter tier, the
// optimizer (its placement sizes the reducer's buffers), the reducer, the coordinator; the
// offload memory opens once every client has reserved; then the activations, the loss, the
// states' initial values and the step's device memory.
#include <fmt/format.h>

#include <algorithm>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/units.h"
#include "engine/checkpointer.h"
#include "engine/config/placement.h"
#include "engine/device_optimizer_step.h"
#include "engine/engine.h"
#include "engine/initial_states.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/memory_estimate.h"
#include "engine/module_pass.h"
#include "engine/offloaded_optimizer_step.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/param_storage.h"
#include "engine/run_record.h"
#include "engine/step_loss.h"
#include "engine/step_meter.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/offload_options.h"
#include "engine/zero/param_coordinator.h"
#include "engine/zero/param_tier.h"
#include "gpu/pinned_limit.h"

namespace strata::engine {
namespace {

bool offloaded(OffloadDevice device) {
  return device != OffloadDevice::none;
}

bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b) {
  return std::filesystem::absolute(a).lexically_normal() ==
         std::filesystem::absolute(b).lexically_normal();
}

std::vector<std::string> module_names(Model& model) {
  std::vector<std::string> names;
  for (Module* module : model.modules())
    names.emplace_back(module->name());
  return names;
}

// Per module, the modules it borrows (ModulePass).
std::vector<std::vector<int>> module_lenders(Model& model) {
  std::vector<std::vector<int>> lenders;
  for (Module* module : model.modules())
    lenders.push_back(module->borrowed_modules());
  return lenders;
}

EstimateInputs estimate_inputs(const Config& config, Model& model, const Runtime& runtime) {
  EstimateInputs inputs = estimate_inputs_from_config(config, 0, 0, runtime.comm.world_size(), 1);
  set_model(inputs, declare(model));
  return inputs;
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
  // The config check refuses most of these already; a Config made in code meets them here.
  const std::vector<PlacementRefusal> refusals =
      placement_refusals(static_cast<int>(config.zero.stage), config.zero.offload_param.device,
                         config.zero.offload_optimizer.device);
  if (!refusals.empty()) throw UserError(refusals.front().cause, refusals.front().fix, 2);
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
  const EstimateRow row =
      estimate_row(estimate_inputs(config, model, runtime), static_cast<int>(config.zero.stage),
                   config.zero.offload_param.device, config.zero.offload_optimizer.device);
  const std::optional<std::string> warning = zero::settle_pin_memory(
      config, row.pinned_bytes_per_rank, runtime.device.pinned_bytes_in_use(), gpu::pinned_limit());
  if (warning) base::logger("engine").warn("{}", *warning);
}

}  // namespace

Engine::Engine(Runtime& runtime, const Config& config, Model& model)
    : runtime_(runtime),
      config_(config),
      model_(model),
      layout_(declared_parameters(model), config.zero.stage == 0 ? 1 : runtime.comm.world_size()),
      optimizer_math_(std::make_unique<Optimizer>(config.optimizer)),
      schedule_(std::make_unique<optim::LrSchedule>(config.scheduler, config.optimizer)),
      loss_scaler_(std::make_unique<optim::LossScaler>(config.fp16)),
      copy_type_(storage_type(config)),
      memory_(std::make_unique<memory::StreamOrderedMemory>(runtime.device)),
      book_(std::make_unique<memory::Residency>()),
      record_(std::make_unique<RunRecord>()) {
  check_supported(config, model);
  build();
}

Engine::~Engine() {
  // The last step's optimizer may still be committing new parameters, and work still queued
  // reads buffers the components own.
  optimizer_->abandon_late();
  try {
    runtime_.device.synchronize();
  } catch (const std::exception& error) {
    base::logger("engine").error("error while draining the device at shutdown: {}", error.what());
  }
}

void Engine::build() {
  settle_pinning(config_, model_, runtime_);
  // The optimizer steps the partition in these, offloaded or on the device, and an offloaded
  // one commits its new parameters to the tier in them.
  std::vector<zero::Range> sub_groups = zero::make_sub_groups(layout_, config_.zero.sub_group_size);
  build_offload_memory(sub_groups);
  build_optimizer_step(std::move(sub_groups));
  build_reducer();
  open_offload_memory();
  build_coordinator();
  model_.allocate_activations(runtime_.device,
                              config_.activation_checkpointing.partition_activations ||
                                  config_.activation_checkpointing.number_checkpoints > 0,
                              to_data_type(copy_type_));
  loss_ = std::make_unique<StepLoss>(runtime_, model_, *loss_scaler_,
                                     config_.batch.gradient_accumulation_steps);
  initialise_states(*optimizer_, model_, layout_, config_.strata.seed, shard_rank());
  coordinator_->invalidate();
  meter_ =
      std::make_unique<StepMeter>(runtime_.device, *memory_, [this] { return read_traffic(); });
  checkpoints_ = std::make_unique<Checkpointer>(
      CheckpointParts{config_, runtime_, *memory_, layout_, *tier_, *coordinator_, *optimizer_,
                      *loss_scaler_, copy_type_, *record_});
  reserve_step_memory();
}

// One pool per rank holds the host memory of everything offloaded, and one swap store per rank
// serves the optimizer's states, the gradients and, on the same nvme_path, the parameters; each
// client reserves its shelves and extents, then both open once (open_offload_memory). Then the
// parameter tier, in them.
void Engine::build_offload_memory(const std::vector<zero::Range>& sub_groups) {
  const int rank = runtime_.comm.rank();
  const std::int64_t element = gpu::size_bytes(to_data_type(copy_type_));
  zero::ParamTierOptions tier_options = zero::param_tier_options(config_, rank, element);
  tier_options.nvme.faults = runtime_.faults.swap;
  const bool optimizer_on_nvme = config_.zero.offload_optimizer.device == OffloadDevice::nvme;
  const bool params_on_nvme = config_.zero.offload_param.device == OffloadDevice::nvme;
  memory::NvmeStoreOptions swap_options =
      optimizer_on_nvme ? zero::optimizer_offload_options(config_, rank).nvme : tier_options.nvme;
  swap_options.faults = runtime_.faults.swap;
  if (offloaded(config_.zero.offload_param.device) ||
      offloaded(config_.zero.offload_optimizer.device))
    pool_ = std::make_unique<memory::PinnedPool>(runtime_.device);
  if (optimizer_on_nvme || params_on_nvme)
    swap_ = std::make_unique<memory::NvmeStore>(swap_options);
  tier_options.pool = pool_.get();
  tier_options.book = book_.get();
  tier_options.store = swap_.get();
  if (offloaded(config_.zero.offload_optimizer.device)) {
    // The offloaded optimizer's new parameters come to the tier one sub-group at a time.
    tier_options.committed_ranges = sub_groups;
    tier_options.upload_staging_pinned = config_.zero.offload_optimizer.pin_memory;
  }
  // Parameters on another disk than the optimizer's get a store of their own there, whose rings
  // register the tier's read buffers in the one pool.
  if (params_on_nvme && !same_directory(tier_options.nvme.nvme_path, swap_options.nvme_path)) {
    memory::NvmeStoreOptions param_options = tier_options.nvme;
    param_options.store_name = "params";
    param_swap_ = std::make_unique<memory::NvmeStore>(std::move(param_options));
    tier_options.store = param_swap_.get();
  }
  tier_ = std::make_unique<zero::ParamTier>(runtime_.device, layout_, tier_options);
}

// The optimizer on the device or offloaded, stepping `sub_groups`.
void Engine::build_optimizer_step(std::vector<zero::Range> sub_groups) {
  if (!offloaded(config_.zero.offload_optimizer.device)) {
    optimizer_ = std::make_unique<DeviceOptimizerStep>(runtime_, *optimizer_math_, copy_type_,
                                                       std::move(sub_groups),
                                                       layout_.partition_numel(), *tier_);
    return;
  }
  const bool on_nvme = config_.zero.offload_optimizer.device == OffloadDevice::nvme;
  OffloadedOptimizerStep::Options options = OffloadedOptimizerStep::options_for(
      config_, runtime_, layout_, std::move(sub_groups), pool_.get(), book_.get(),
      on_nvme ? swap_.get() : nullptr);
  optimizer_ = std::make_unique<OffloadedOptimizerStep>(*optimizer_math_, layout_, copy_type_,
                                                        *tier_, std::move(options));
}

void Engine::build_reducer() {
  const ZeroConfig& settings = config_.zero;
  zero::GradReducerOptions reduce;
  reduce.stage = settings.stage;
  reduce.to_host = offloaded(settings.offload_optimizer.device);
  // With the optimizer's states on NVMe the gradients go there too, so CPU memory holds buffers
  // only (docs/memory.md).
  reduce.to_nvme = settings.offload_optimizer.device == OffloadDevice::nvme;
  reduce.bf16 = state_types(config_.bf16).bf16_master_and_grads;
  reduce.pool = pool_.get();
  reduce.book = book_.get();
  if (reduce.to_nvme) {
    reduce.store = swap_.get();
    for (const zero::Range& group : optimizer_->sub_groups())
      reduce.largest_read = std::max(reduce.largest_read, group.size());
  }
  reduce.pin_memory = settings.offload_optimizer.pin_memory;
  reduce.bucket_elements = std::max<std::int64_t>(1, settings.reduce_bucket_size);
  reducer_ =
      std::make_unique<zero::GradReducer>(runtime_.device, runtime_.ops, runtime_.comm, stream(),
                                          layout_, *memory_, module_names(model_), reduce);
  optimizer_->connect(*reducer_);
}

// The pool allocates every shelf at once; the store's rings register its page-locked arena (a
// second store's only the tier's read buffers, all it reads into); then each client takes the
// memory it keeps for the run.
void Engine::open_offload_memory() {
  if (!pool_) return;
  pool_->open();
  if (swap_) swap_->open(pool_->pinned_arena());
  if (param_swap_) {
    const memory::PinnedPool::Shelf shelf = tier_->swap_shelf();
    param_swap_->open(pool_->pinned(shelf) ? pool_->shelf_memory(shelf) : std::span<std::byte>());
  }
  tier_->open();
  optimizer_->open();
  reducer_->open();
}

void Engine::build_coordinator() {
  const ZeroConfig& settings = config_.zero;
  zero::CoordinatorOptions gather;
  static_cast<zero::GatherRules&>(gather) = zero::gather_rules(
      static_cast<int>(settings.stage), settings.stage3_param_persistence_threshold,
      settings.stage3_max_reuse_distance, settings.stage3_prefetch_bucket_size,
      settings.stage3_max_live_parameters);
  gather.storage = to_data_type(copy_type_);
  coordinator_ =
      std::make_unique<zero::ParamCoordinator>(runtime_.ops, runtime_.comm, stream(), layout_,
                                               *tier_, *memory_, module_names(model_), gather);
  pass_ = std::make_unique<ModulePass>(*coordinator_, *reducer_, module_names(model_),
                                       module_lenders(model_));
}

// The step's buffers come from one reservation made now, sized by the step's peak as the estimate
// counts it (the engine's own coordinator and reducer run on a counting device: the peak `strata
// estimate` reports and the agreement tests hold to the byte) plus one largest buffer of room
// against fragmentation: a step then neither allocates device memory nor waits for the device to
// free some. A budget too tight for that still trains, with the host waiting for released
// buffers where the budget says so.
void Engine::reserve_step_memory() {
  const StepDeviceMemory step = step_device_memory(
      estimate_inputs(config_, model_, runtime_), static_cast<int>(config_.zero.stage),
      config_.zero.offload_param.device, config_.zero.offload_optimizer.device);
  if (step.peak_bytes == 0) return;
  memory_->drain();
  gpu::Device& device = runtime_.device;
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
    step_room_ = std::max<std::int64_t>(room, 0);
    without_arena(fmt::format(
        "strata.device_memory_budget leaves {} for the step, less than the {} its buffers and "
        "their slack take",
        base::format_bytes(static_cast<double>(room)),
        base::format_bytes(static_cast<double>(wanted))));
    return;
  }
  try {
    memory_->reserve(wanted);
  } catch (const UserError& error) {
    // The budget allowed it but the device itself did not (a card shared with another process).
    step_room_ = room;
    without_arena(error.what());
  }
}

}  // namespace strata::engine
