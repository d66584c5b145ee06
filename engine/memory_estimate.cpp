#include "engine/memory_estimate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/by_index.h"
#include "base/round_up.h"
#include "base/units.h"
#include "engine/config/placement.h"
#include "engine/device_optimizer_step.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/model.h"
#include "engine/module.h"
#include "engine/module_pass.h"
#include "engine/optim/grad_clip.h"
#include "engine/optimizer.h"
#include "engine/param_spec.h"
#include "engine/step_loss.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/gather_policy.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/optimizer_states.h"
#include "engine/zero/param_coordinator.h"
#include "engine/zero/param_tier.h"
#include "engine/zero/step_buffers.h"
#include "gpu/comm.h"
#include "gpu/counting/counting_comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"

namespace strata::engine {
namespace {

constexpr std::int64_t kFloat = 4;  // fp32: master weights, optimizer states, gradients
// Host buffers, pinned pools and NVMe extents are whole 4 KiB blocks (aio::AlignedBuffer,
// PinnedPool, NvmeStore), and the host buffers are at least one block.
constexpr std::int64_t kBlock = 4096;

std::int64_t ceil_div(std::int64_t value, std::int64_t divisor) {
  STRATA_ASSERT(divisor > 0);
  return (value + divisor - 1) / divisor;
}

using base::round_up;

// An aio::AlignedBuffer of `bytes`: at least one block (the engine's std::max(bytes, 4096)).
std::int64_t host_buffer(std::int64_t bytes) {
  return std::max(bytes, kBlock);
}

// 1234567 -> "1,234,567", for the formulas.
std::string grouped(std::int64_t value) {
  // Built forward rather than by insert(), which GCC 12's -Wrestrict misreads once inlined.
  const std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// Collects one rank's terms and sums them into a row.
class RowBuilder {
 public:
  explicit RowBuilder(EstimateRow& row) : row_(row) {}

  void add(std::string name, Tier tier, std::int64_t bytes, std::string formula,
           bool pinned = false) {
    STRATA_ASSERT(bytes >= 0);
    if (bytes == 0) return;
    row_.terms.push_back({std::move(name), tier, bytes, pinned, std::move(formula)});
  }

  void finish(std::int64_t gpus_per_node) {
    for (const MemoryTerm& term : row_.terms) {
      switch (term.tier) {
        case Tier::gpu:
          row_.per_gpu_bytes += term.bytes;
          break;
        case Tier::cpu:
          row_.per_node_cpu_bytes += term.bytes * gpus_per_node;
          break;
        case Tier::nvme:
          row_.nvme_bytes += term.bytes * gpus_per_node;
          break;
      }
      if (term.pinned) row_.pinned_bytes_per_rank += term.bytes;
    }
  }

 private:
  EstimateRow& row_;
};

// The modules the engine would see: the GPT's (its head borrows the embedding's wte, so the
// embedding is gathered with the head and its gradients live from the head's backward to its
// own), or, with only P and L known, P cut into modules of L elements that borrow nothing.
struct ModelModules {
  std::vector<std::vector<ParamSpec>> specs;
  base::ByIndex<std::vector<int>> lenders;  // per module, the modules it borrows
};

ModelModules model_modules(const EstimateInputs& inputs) {
  ModelModules modules;
  if (inputs.model) {
    modules.specs = inputs.model->modules;
    modules.lenders = base::ByIndex<std::vector<int>>(inputs.model->lenders);
    return modules;
  }
  const std::int64_t module_count = ceil_div(inputs.params, inputs.largest_layer_params);
  STRATA_ASSERT(module_count <= kMaxEstimatedModules);
  for (std::int64_t m = 0; m < module_count; ++m) {
    const std::int64_t begin = m * inputs.largest_layer_params;
    const std::int64_t numel = std::min(inputs.largest_layer_params, inputs.params - begin);
    modules.specs.push_back({{fmt::format("module.{}", m), {numel}}});
  }
  modules.lenders.resize(static_cast<int>(modules.specs.size()));
  return modules;
}

// One rank's choice, as the engine reads it from the config.
struct Choice {
  int stage = 3;
  OffloadDevice offload_param = OffloadDevice::none;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  bool optimizer_offloaded() const { return offload_optimizer != OffloadDevice::none; }
};

// Device memory that comes and goes during a step, at its highest point.
struct StepPeak {
  std::int64_t bytes = 0;
  std::int64_t gathered_elements = 0;  // gathered parameters live, in the storage type
  std::vector<int> gathered_modules;
  std::int64_t gradient_elements = 0;  // fp32 module gradient buffers (stages 2-3)
  std::vector<int> gradient_modules;
  std::int64_t shard_elements = 0;   // the reduce-scatter's output shard (W > 1, stages 2-3)
  std::int64_t bucket_elements = 0;  // the packed bucket of a module over reduce_bucket_size
};

// The parameter tier as the engine gives it its options (engine_build.cpp, offload_options.cpp).
zero::ParamTierOptions param_tier_options(const EstimateInputs& inputs, const Choice& choice,
                                          const zero::FlatLayout& layout) {
  zero::ParamTierOptions options;
  options.device = choice.offload_param;
  options.element_bytes = inputs.storage_bytes;
  options.max_in_cpu = inputs.max_in_cpu;
  options.buffer_count = inputs.param_buffer_count;
  options.pin_memory = inputs.param_pin_memory;
  if (choice.optimizer_offloaded())
    options.committed_ranges = zero::make_sub_groups(layout, inputs.sub_group_size);
  options.upload_staging_pinned = inputs.optimizer_pin_memory;
  return options;
}

zero::ParamTierPlan param_tier_plan(const EstimateInputs& inputs, const Choice& choice,
                                    const zero::FlatLayout& layout) {
  return zero::ParamTier::plan(param_tier_options(inputs, choice, layout), layout);
}

// The gradient reducer as the engine gives it its options (engine_build.cpp); `largest_read`: the
// largest sub-group of an optimizer on NVMe.
zero::GradReducerOptions grad_reducer_options(const EstimateInputs& inputs, const Choice& choice,
                                              std::int64_t largest_read = 0) {
  zero::GradReducerOptions options;
  options.stage = choice.stage;
  options.to_host = choice.optimizer_offloaded();
  options.to_nvme = choice.offload_optimizer == OffloadDevice::nvme;
  options.bf16 = inputs.master_bytes == 2;
  options.largest_read = largest_read;
  options.bucket_elements = inputs.reduce_bucket_size;
  return options;
}

zero::GradReducerPlan grad_reducer_plan(const EstimateInputs& inputs, const Choice& choice,
                                        const zero::FlatLayout& layout,
                                        std::int64_t largest_read = 0) {
  return zero::GradReducer::plan(grad_reducer_options(inputs, choice, largest_read), layout);
}

// The coordinator as the engine gives it its options (engine_build.cpp).
zero::CoordinatorOptions coordinator_options(const EstimateInputs& inputs, const Choice& choice) {
  zero::CoordinatorOptions options;
  static_cast<zero::GatherRules&>(options) = zero::gather_rules(
      choice.stage, inputs.stage3_param_persistence_threshold, inputs.stage3_max_reuse_distance,
      inputs.stage3_prefetch_bucket_size, inputs.stage3_max_live_parameters);
  options.storage = inputs.storage_bytes == 2 ? gpu::DataType::bfloat16 : gpu::DataType::float32;
  return options;
}

// Room for every buffer a step can hold at once: each module gathered and its gradients, and
// the largest shard and bucket. Address space only, on the counting device.
std::int64_t step_arena_bound(const zero::FlatLayout& layout, std::int64_t storage_bytes) {
  constexpr std::int64_t kAlign = 256;
  std::int64_t bytes = 0;
  std::int64_t largest = 0;
  for (int m = 0; m < layout.module_count(); ++m) {
    const std::int64_t padded = layout.module(m).padded_numel;
    bytes += round_up(storage_bytes * padded, kAlign) + round_up(kFloat * padded, kAlign);
    largest = std::max(largest, round_up(kFloat * padded, kAlign));
  }
  return bytes + 2 * largest;
}

// The buffers live at the peak, by what they hold (their names, zero/step_buffers.h).
StepPeak peak_parts(std::span<const memory::StreamOrderedMemory::LiveBuffer> live,
                    const std::map<std::string, int, std::less<>>& module_index,
                    std::int64_t storage_bytes) {
  StepPeak peak;
  for (const memory::StreamOrderedMemory::LiveBuffer& buffer : live) {
    const std::optional<zero::NamedStepBuffer> named = zero::parse_step_buffer(buffer.what);
    STRATA_ASSERT(named.has_value());
    const int module = module_index.find(named->module)->second;
    peak.bytes += buffer.bytes;
    switch (named->kind) {
      case zero::StepBuffer::gathered_params:
        peak.gathered_elements += buffer.bytes / storage_bytes;
        peak.gathered_modules.push_back(module);
        break;
      case zero::StepBuffer::gradients:
        peak.gradient_elements += buffer.bytes / kFloat;
        peak.gradient_modules.push_back(module);
        break;
      case zero::StepBuffer::gradient_shard:
        peak.shard_elements += buffer.bytes / kFloat;
        break;
      case zero::StepBuffer::gradient_bucket:
        peak.bucket_elements += buffer.bytes / kFloat;
        break;
    }
  }
  std::ranges::sort(peak.gathered_modules);
  std::ranges::sort(peak.gradient_modules);
  return peak;
}

// The engine's step on a device that runs nothing and counts (gpu/counting): its own parameter
// coordinator over a tier of the plan alone, its own gradient reducer and the step's module
// passes, in the step's device memory. Two steps: the first records the module order, the second
// follows it (and keeps the modules reused soon); later steps repeat the second. The reducer lands
// its shards on the device: where they go after takes none of the step's memory. The step's peak
// is that memory's, less what it held before the step (stages 0-1's whole gradient buffers, a
// term of their own); its parts are the buffers live then.
StepPeak counted_step_peak(const EstimateInputs& inputs, const Choice& choice,
                           const zero::FlatLayout& layout,
                           const base::ByIndex<std::vector<int>>& lenders) {
  const std::unique_ptr<gpu::Device> device = gpu::create_counting_device();
  const std::unique_ptr<gpu::Ops> ops = gpu::create_ops(*device, {});
  const std::unique_ptr<gpu::Comm> comm =
      gpu::counting::create_counting_comm(static_cast<int>(inputs.world_size()), 0);
  gpu::Stream& stream = device->compute_stream();
  std::vector<std::string> names;
  std::map<std::string, int, std::less<>> module_index;
  for (int m = 0; m < layout.module_count(); ++m) {
    names.push_back(fmt::format("module.{}", m));
    module_index.emplace(names.back(), m);
  }
  memory::StreamOrderedMemory memory(*device);
  memory.reserve(step_arena_bound(layout, inputs.storage_bytes));
  zero::ParamTier tier(layout, param_tier_options(inputs, choice, layout),
                       zero::ParamTier::PlanOnly{});
  zero::ParamCoordinator coordinator(*ops, *comm, stream, layout, tier, memory, names,
                                     coordinator_options(inputs, choice));
  zero::GradReducerOptions reduce = grad_reducer_options(inputs, choice);
  reduce.to_host = reduce.to_nvme = false;
  zero::GradReducer reducer(*device, *ops, *comm, stream, layout, memory, names, reduce);
  ModulePass pass(coordinator, reducer, names,
                  std::vector<std::vector<int>>(lenders.begin(), lenders.end()));
  const std::int64_t before_the_step = memory.live_bytes();
  memory.keep_peak_set();
  memory.reset_peak();
  const auto no_model = [](const ModuleCall&) {};
  for (int step = 0; step < 2; ++step) {
    coordinator.begin_pass(true);
    reducer.begin_step();
    for (std::int64_t micro = 0; micro < inputs.gradient_accumulation_steps; ++micro) {
      pass.forward(no_model);
      pass.backward(micro + 1 == inputs.gradient_accumulation_steps, no_model);
    }
    coordinator.end_step();
    coordinator.invalidate();
  }
  StepPeak peak = peak_parts(memory.peak_set(), module_index, inputs.storage_bytes);
  STRATA_ASSERT(peak.bytes == memory.peak_bytes() - before_the_step);
  return peak;
}

// "modules 0-3" / "modules 1, 3" / "module 2": which modules a term holds, for its formula.
std::string module_list(const std::vector<int>& modules) {
  if (modules.size() == 1) return fmt::format("module {}", modules.front());
  bool contiguous = modules.back() - modules.front() + 1 == static_cast<int>(modules.size());
  if (contiguous) return fmt::format("modules {}-{}", modules.front(), modules.back());
  return fmt::format("modules {}", fmt::join(modules, ", "));
}

// What the device holds for the whole run: build()'s allocations and the model's activations.
void add_device_resident(RowBuilder& builder, const EstimateInputs& inputs, const Choice& choice,
                         const zero::FlatLayout& layout, const zero::GradReducerPlan& reducer) {
  const std::int64_t part = layout.partition_numel();
  const std::int64_t storage = inputs.storage_bytes;
  if (inputs.activation_bytes) {
    builder.add("activations", Tier::gpu, *inputs.activation_bytes,
                fmt::format("the model's activations for a micro-batch of {}{}", inputs.micro_batch,
                            inputs.activation_checkpointing ? ", checkpointed" : ""));
  }
  if (inputs.kv_cache) {
    builder.add("kv_cache", Tier::gpu, inputs.kv_cache->bytes,
                fmt::format("generation's keys and values, {} sequences x {} positions, and a "
                            "row of fp32 logits each",
                            inputs.kv_cache->sequences, inputs.kv_cache->positions));
  }
  builder.add("param_shards", Tier::gpu, param_tier_plan(inputs, choice, layout).device_bytes,
              fmt::format("{} x part", storage));
  if (!choice.optimizer_offloaded()) {
    builder.add("gradient_partition_fp32", Tier::gpu, reducer.device_partition_bytes, "4 x part");
    const DeviceOptimizerStep::Plan states =
        DeviceOptimizerStep::plan(part, static_cast<int>(inputs.optimizer_moments));
    builder.add("optimizer_states_fp32", Tier::gpu, states.device_bytes(),
                fmt::format("{} x 4 x part (master{})", states.states,
                            inputs.optimizer_moments == 2 ? ", exp_avg, exp_avg_sq" : ", 1 state"));
  }
  builder.add("gradient_buffers_fp32", Tier::gpu, reducer.full_buffer_bytes,
              "4 x sum of padded(m) (stages 0-1 keep every module's gradients all step)");
  builder.add("losses_and_grad_norm", Tier::gpu,
              StepLoss::buffer_bytes(inputs.gradient_accumulation_steps) + reducer.norm_bytes,
              "4 x gradient_accumulation_steps + 16");
  builder.add("module_grad_norms", Tier::gpu, reducer.module_norm_bytes,
              "8 x modules (each final shard's sum of squares, taken before it goes down)");
}

// The step's highest point, as its parts.
void add_device_step_peak(RowBuilder& builder, const EstimateInputs& inputs, const Choice& choice,
                          const zero::FlatLayout& layout,
                          const base::ByIndex<std::vector<int>>& lenders) {
  const StepPeak peak = counted_step_peak(inputs, choice, layout, lenders);
  const char* rule =
      choice.stage == 3 ? "gathered at the step's peak" : "stages 0-2 keep every module gathered";
  if (!peak.gathered_modules.empty()) {
    builder.add(
        "gathered_params", Tier::gpu, inputs.storage_bytes * peak.gathered_elements,
        fmt::format("{} x padded of {} ({}; {} elements)", inputs.storage_bytes,
                    module_list(peak.gathered_modules), rule, grouped(peak.gathered_elements)));
  }
  if (!peak.gradient_modules.empty()) {
    builder.add("module_gradients_fp32", Tier::gpu, kFloat * peak.gradient_elements,
                fmt::format("4 x padded of {} (gradient buffers live between a module's backward "
                            "and its reduction)",
                            module_list(peak.gradient_modules)));
  }
  builder.add("gradient_shard_fp32", Tier::gpu, kFloat * peak.shard_elements,
              "4 x shard(m) (the reduce-scatter's output)");
  builder.add("gradient_bucket_fp32", Tier::gpu, kFloat * peak.bucket_elements,
              "4 x W x the shard cut into equal pieces of at most reduce_bucket_size / W (a module "
              "larger than the bucket, packed)");
}

// The offloaded optimizer hands the tier its new parameters one sub-group at a time; those that
// touch a module not in CPU memory pass through staging.
void add_param_staging(RowBuilder& builder, const zero::ParamTierPlan& plan, std::int64_t storage) {
  if (!plan.staging.reserved()) return;
  // The device tier alternates two, so that one upload runs while the next is made; they are the
  // pool's, page-locked as offload_optimizer.pin_memory says, so that each upload is a DMA beside
  // the optimizer.
  const bool two = plan.staging.count == 2;
  builder.add(
      "param_staging", Tier::cpu, plan.staging.count * round_up(plan.staging.buffer_bytes, kBlock),
      fmt::format("{}round_up({} x largest sub-group that touches a module not in CPU "
                  "memory, 4 KiB) (its new parameters on their way to the tier{})",
                  two ? "2 x " : "", storage, two ? ", one uploading while the next is made" : ""),
      plan.staging.options.pin_memory);
}

// The parameter tier's CPU memory, its NVMe pool and its swap file: the tier's own plan
// (zero::ParamTier::plan).
void add_param_tier(RowBuilder& builder, const EstimateInputs& inputs, const Choice& choice,
                    const zero::FlatLayout& layout) {
  const zero::ParamTierPlan plan = param_tier_plan(inputs, choice, layout);
  const std::int64_t storage = inputs.storage_bytes;
  if (choice.offload_param == OffloadDevice::cpu) {
    builder.add("param_host_partition", Tier::cpu, host_buffer(plan.host.buffer_bytes),
                fmt::format("{} x part (the tier)", storage), plan.host.options.pin_memory);
    return;
  }
  add_param_staging(builder, plan, storage);
  // With nvme, modules stay in CPU memory, in module order, while their shards total at most
  // max_in_cpu elements; each other module's shard is an extent on NVMe.
  const std::int64_t in_cpu = plan.host.buffer_bytes / storage;
  if (plan.host.reserved()) {
    builder.add("param_cpu_modules", Tier::cpu, round_up(plan.host.buffer_bytes, kBlock),
                fmt::format("round_up({} x {} elements, 4 KiB) (the modules offload_param."
                            "max_in_cpu keeps in CPU memory)",
                            storage, grouped(in_cpu)),
                plan.host.options.pin_memory);
  }
  if (plan.extents.empty()) return;
  std::int64_t on_nvme = 0;
  for (const std::int64_t extent : plan.extents)
    on_nvme += round_up(extent, kBlock);
  builder.add(
      "param_swap_buffers", Tier::cpu,
      plan.swap_buffers.count * round_up(plan.swap_buffers.buffer_bytes, kBlock),
      fmt::format("offload_param.buffer_count x round_up({} x largest NVMe shard, 4 KiB)", storage),
      plan.swap_buffers.options.pin_memory);
  builder.add("param_shards", Tier::nvme, on_nvme,
              fmt::format("sum over NVMe-resident modules of round_up({} x shard(m), 4 KiB) "
                          "(max_in_cpu keeps {} elements in CPU)",
                          storage, grouped(in_cpu)));
}

// The gradients in host memory beside the offloaded optimizer: the reducer's own plan
// (zero::GradReducer::plan); `largest_group`: the largest sub-group's elements.
void add_offloaded_gradients(RowBuilder& builder, const EstimateInputs& inputs,
                             const Choice& choice, const zero::FlatLayout& layout,
                             std::int64_t largest_group) {
  const zero::GradReducerPlan plan = grad_reducer_plan(inputs, choice, layout, largest_group);
  const std::int64_t grad = inputs.master_bytes;  // the gradients have the master's type
  const char* grad_type = grad == 2 ? "bf16" : "fp32";
  // One host buffer holds the partition (or on NVMe the two shard sums) and the staging,
  // page-locked when offload_optimizer.pin_memory asks.
  const bool pinned = inputs.optimizer_pin_memory;
  if (choice.offload_optimizer == OffloadDevice::cpu) {
    builder.add(fmt::format("gradient_partition_{}", grad_type), Tier::cpu, plan.accumulation_bytes,
                fmt::format("{} x part", grad), pinned);
  } else {
    builder.add(fmt::format("gradient_accumulation_{}", grad_type), Tier::cpu,
                plan.accumulation_bytes,
                fmt::format("2 x {} x piece (the sums of two pieces: one is formed, the other "
                            "written to the gradient swap file behind it)",
                            grad),
                pinned);
    builder.add(fmt::format("gradient_read_{}", grad_type), Tier::cpu,
                round_up(plan.read_bytes, kBlock),
                fmt::format("round_up({} x largest sub-group, 4 KiB) (a sub-group's gradients read "
                            "for its step)",
                            grad));
    builder.add(fmt::format("gradients_{}", grad_type), Tier::nvme, plan.swap_bytes,
                fmt::format("max({} x part, 4 KiB) (the gradient swap file)", grad));
  }
  builder.add("gradient_staging_fp32", Tier::cpu, plan.staging_bytes,
              fmt::format("{} x 4 x piece, piece = min(largest shard(m), {}) (the ring a reduced "
                          "shard comes down through, piece by piece, to be added)",
                          zero::kGradStagingSlots, zero::kGradPieceElements),
              pinned);
}

// The optimizer states' own plan (zero::plan_optimizer_states, what OptimizerStates reserves):
// their shelf in the pool, their extents, and the rollback window of an overlapped step.
void add_optimizer_states(RowBuilder& builder, const EstimateInputs& inputs, const Choice& choice,
                          const zero::OptimizerStatesPlan& plan) {
  const std::int64_t master = inputs.master_bytes;
  const std::int64_t moment = inputs.moment_bytes;
  const std::string extent_formula =
      master == 4 && moment == 4
          ? fmt::format("sum over sub-groups of {} x round_up(4 x sub-group, 4 KiB)",
                        1 + inputs.optimizer_moments)
          : fmt::format(
                "sum over sub-groups of round_up({} x sub-group, 4 KiB) + {} x "
                "round_up({} x sub-group, 4 KiB) (bf16 {})",
                master, inputs.optimizer_moments, moment,
                moment == 2 ? "master and moments" : "master");
  if (inputs.overlap_rollback) {
    const std::int64_t window =
        std::min(inputs.optimizer_buffer_count, static_cast<std::int64_t>(plan.sub_groups.size()));
    builder.add("optimizer_rollback_window", Tier::cpu,
                window * plan.rollback_slot_bytes(inputs.storage_bytes),
                fmt::format("min(offload_optimizer.buffer_count, sub-groups) x (the largest "
                            "sub-group's extent + round_up({} x largest sub-group, 4 KiB)) "
                            "(strata.overlap_optimizer: the prior values of the sub-groups "
                            "stepped during backward)",
                            inputs.storage_bytes));
  }
  if (choice.offload_optimizer == OffloadDevice::cpu) {
    builder.add("optimizer_states_fp32", Tier::cpu, plan.total_extent_bytes, extent_formula,
                inputs.optimizer_pin_memory);
    return;
  }
  builder.add("optimizer_swap_buffers", Tier::cpu, plan.shelf_buffers * plan.shelf_buffer_bytes,
              "offload_optimizer.buffer_count x the largest sub-group's extent",
              inputs.optimizer_pin_memory);
  builder.add("optimizer_states_fp32", Tier::nvme, plan.total_extent_bytes, extent_formula);
}

// The gradient partition in host memory and the offloaded optimizer
// (engine/zero/grad_reducer.cpp, optimizer_states.cpp).
void add_optimizer_offload(RowBuilder& builder, const EstimateInputs& inputs, const Choice& choice,
                           const zero::FlatLayout& layout) {
  if (!choice.optimizer_offloaded()) return;
  zero::OptimizerOffloadOptions options;
  options.device = choice.offload_optimizer;
  options.sub_groups = zero::make_sub_groups(layout, inputs.sub_group_size);
  options.buffer_count = inputs.optimizer_buffer_count;
  options.types.bf16_master_and_grads = inputs.master_bytes == 2;
  options.types.bf16_moments = inputs.moment_bytes == 2;
  const zero::OptimizerStatesPlan plan = zero::plan_optimizer_states(
      options, layout.partition_numel(), static_cast<int>(inputs.optimizer_moments));
  add_offloaded_gradients(builder, inputs, choice, layout, plan.largest_sub_group);
  add_optimizer_states(builder, inputs, choice, plan);
}

}  // namespace

std::int64_t DeclaredModel::parameter_count() const {
  std::int64_t count = 0;
  for (const std::vector<ParamSpec>& module : modules)
    for (const ParamSpec& spec : module)
      count += spec.numel();
  return count;
}

std::int64_t DeclaredModel::largest_module() const {
  std::int64_t largest = 0;
  for (const std::vector<ParamSpec>& module : modules) {
    std::int64_t numel = 0;
    for (const ParamSpec& spec : module)
      numel += spec.numel();
    largest = std::max(largest, numel);
  }
  return largest;
}

DeclaredModel declare(Model& model) {
  DeclaredModel declared;
  for (Module* module : model.modules()) {
    declared.modules.push_back(module->parameters());
    declared.lenders.push_back(module->borrowed_modules());
  }
  return declared;
}

void set_model(EstimateInputs& inputs, DeclaredModel model) {
  STRATA_ASSERT(model.lenders.size() == model.modules.size());
  inputs.params = model.parameter_count();
  inputs.largest_layer_params = model.largest_module();
  inputs.model = std::move(model);
}

EstimateInputs estimate_inputs_from_config(const Config& config, std::int64_t params,
                                           std::int64_t largest_layer_params,
                                           std::int64_t gpus_per_node, std::int64_t nodes) {
  EstimateInputs inputs;
  inputs.params = params;
  inputs.largest_layer_params = largest_layer_params;
  inputs.gpus_per_node = gpus_per_node;
  inputs.nodes = nodes;
  inputs.storage_bytes = config.bf16.enabled || config.fp16.enabled ? 2 : 4;
  inputs.optimizer_moments = config.optimizer.type == OptimizerType::adagrad ||
                                     config.optimizer.type == OptimizerType::lion
                                 ? 1
                                 : 2;
  const StateTypes types = state_types(config.bf16);
  inputs.master_bytes = types.master_bytes();
  inputs.moment_bytes = types.moment_bytes();
  inputs.gradient_accumulation_steps = config.batch.gradient_accumulation_steps;
  const ZeroConfig& zero = config.zero;
  inputs.reduce_bucket_size = std::max<std::int64_t>(1, zero.reduce_bucket_size);
  inputs.stage3_max_live_parameters = zero.stage3_max_live_parameters;
  inputs.stage3_param_persistence_threshold = zero.stage3_param_persistence_threshold;
  inputs.stage3_max_reuse_distance = zero.stage3_max_reuse_distance;
  inputs.stage3_prefetch_bucket_size = zero.stage3_prefetch_bucket_size;
  inputs.sub_group_size = zero.sub_group_size;
  inputs.param_buffer_count = zero.offload_param.buffer_count;
  inputs.max_in_cpu = zero.offload_param.max_in_cpu;
  inputs.param_pin_memory = zero.offload_param.pin_memory;
  inputs.optimizer_buffer_count = zero.offload_optimizer.buffer_count;
  inputs.optimizer_pin_memory = zero.offload_optimizer.pin_memory;
  // An overlapped step keeps prior values to undo only when the gradients can change the step.
  inputs.overlap_rollback =
      config.strata.overlap_optimizer &&
      optim::gradients_can_change_the_step(config.gradient_clipping, config.fp16, config.bf16);
  inputs.micro_batch = config.batch.train_micro_batch_size_per_gpu;
  const ActivationCheckpointingConfig& checkpointing = config.activation_checkpointing;
  inputs.activation_checkpointing =
      checkpointing.partition_activations || checkpointing.number_checkpoints.value_or(0) > 0;
  return inputs;
}

const char* to_string(Tier tier) {
  switch (tier) {
    case Tier::gpu:
      return "gpu";
    case Tier::cpu:
      return "cpu";
    case Tier::nvme:
      return "nvme";
  }
  return "?";
}

std::string invalid_choice_reason(int stage, OffloadDevice offload_param,
                                  OffloadDevice offload_optimizer) {
  if (stage < 0 || stage > 3) return fmt::format("stage {} is not a ZeRO stage (0 to 3)", stage);
  const std::vector<PlacementRefusal> refusals =
      placement_refusals(stage, offload_param, offload_optimizer);
  return refusals.empty() ? std::string() : refusals.front().reason;
}

EstimateRow estimate_row(const EstimateInputs& inputs, int stage, OffloadDevice offload_param,
                         OffloadDevice offload_optimizer) {
  STRATA_ASSERT(invalid_choice_reason(stage, offload_param, offload_optimizer).empty());
  STRATA_ASSERT(inputs.params > 0);
  STRATA_ASSERT(inputs.largest_layer_params > 0);
  STRATA_ASSERT(inputs.world_size() > 0 && inputs.world_size() <= INT32_MAX);
  STRATA_ASSERT(inputs.storage_bytes == 2 || inputs.storage_bytes == kFloat);
  STRATA_ASSERT(inputs.gradient_accumulation_steps > 0);
  STRATA_ASSERT(inputs.reduce_bucket_size > 0);
  EstimateRow row;
  row.stage = stage;
  row.offload_param = offload_param;
  row.offload_optimizer = offload_optimizer;
  const Choice choice{stage, offload_param, offload_optimizer};
  // Stage 0 replicates: its layout is unsharded whatever the world size.
  const ModelModules modules = model_modules(inputs);
  const zero::FlatLayout layout(modules.specs,
                                stage == 0 ? 1 : static_cast<int>(inputs.world_size()));
  row.partition_numel = layout.partition_numel();
  RowBuilder builder(row);
  // The reducer's device and page-locked terms; its host terms come with the offloaded optimizer,
  // whose largest sub-group sizes its read buffer.
  const zero::GradReducerPlan reducer = grad_reducer_plan(inputs, choice, layout);
  add_device_resident(builder, inputs, choice, layout, reducer);
  add_device_step_peak(builder, inputs, choice, layout, modules.lenders);
  add_param_tier(builder, inputs, choice, layout);
  add_optimizer_offload(builder, inputs, choice, layout);
  // The step's losses (after the int64 of its count of loss tokens) and the gradient norm come
  // down through pinned buffers, a page each, and with the optimizer offloaded the modules' sums
  // of squares through one more.
  builder.add("pinned_step_buffers", Tier::cpu,
              round_up(StepLoss::buffer_bytes(inputs.gradient_accumulation_steps), kBlock) +
                  round_up(reducer.pinned_norm_bytes, kBlock) +
                  round_up(reducer.pinned_module_norm_bytes, kBlock),
              choice.optimizer_offloaded()
                  ? "round_up(8 + 4 x gradient_accumulation_steps, 4 KiB) + 4 KiB + round_up(8 x "
                    "modules, 4 KiB)"
                  : "round_up(8 + 4 x gradient_accumulation_steps, 4 KiB) + 4 KiB",
              true);
  builder.finish(inputs.gpus_per_node);
  return row;
}

StepDeviceMemory step_device_memory(const EstimateInputs& inputs, int stage,
                                    OffloadDevice offload_param, OffloadDevice offload_optimizer) {
  STRATA_ASSERT(invalid_choice_reason(stage, offload_param, offload_optimizer).empty());
  const ModelModules modules = model_modules(inputs);
  const zero::FlatLayout layout(modules.specs,
                                stage == 0 ? 1 : static_cast<int>(inputs.world_size()));
  const Choice choice{stage, offload_param, offload_optimizer};
  StepDeviceMemory step;
  step.peak_bytes = counted_step_peak(inputs, choice, layout, modules.lenders).bytes;
  // A module's fp32 gathered parameters and its gradient buffer are the step's largest buffers.
  for (int m = 0; m < layout.module_count(); ++m)
    step.largest_buffer_bytes =
        std::max(step.largest_buffer_bytes, kFloat * layout.module(m).padded_numel);
  return step;
}

std::vector<EstimateRow> estimate_all_rows(const EstimateInputs& inputs) {
  using enum OffloadDevice;
  std::vector<EstimateRow> rows;
  for (int stage : {0, 1, 2, 3}) {
    for (OffloadDevice param : {none, cpu, nvme}) {
      for (OffloadDevice optimizer : {none, cpu, nvme}) {
        if (!invalid_choice_reason(stage, param, optimizer).empty()) continue;
        rows.push_back(estimate_row(inputs, stage, param, optimizer));
      }
    }
  }
  return rows;
}

std::optional<DeepSpeedEstimate> deepspeed_estimate(const EstimateInputs& inputs, int stage,
                                                    OffloadDevice offload_param,
                                                    OffloadDevice offload_optimizer) {
  using enum OffloadDevice;
  if (stage < 2 || offload_param == nvme || offload_optimizer == nvme) return std::nullopt;
  // Python's arithmetic: int * int stays exact, "/" and "* 1.5" go to float, int() truncates.
  const double buffer_factor = 1.5;
  const std::int64_t p = inputs.params;
  const std::int64_t l = inputs.largest_layer_params;
  const std::int64_t gpn = inputs.gpus_per_node;
  const std::int64_t total_gpus = inputs.world_size();
  auto truncate = [](double value) { return static_cast<std::int64_t>(value); };
  DeepSpeedEstimate estimate;
  if (stage == 2) {
    if (offload_optimizer == cpu) {
      estimate.per_gpu_bytes = 2 * p;
      estimate.per_node_cpu_bytes = truncate(
          static_cast<double>(p * std::max<std::int64_t>(4 * total_gpus, 16)) * buffer_factor);
    } else {
      estimate.per_gpu_bytes = 4 * p + truncate(static_cast<double>(16 * p) / total_gpus);
      estimate.per_node_cpu_bytes = truncate(static_cast<double>(p * 4 * gpn) * buffer_factor);
    }
    return estimate;
  }
  const double gpus_factor = 1.0 / static_cast<double>(inputs.nodes);
  const std::int64_t largest_layer_memory = 4 * l;
  if (offload_optimizer == cpu && offload_param == cpu) {
    estimate.per_gpu_bytes = largest_layer_memory;
    estimate.per_node_cpu_bytes =
        truncate(static_cast<double>(p * 18) * gpus_factor * buffer_factor);
  } else if (offload_optimizer == cpu) {
    estimate.per_gpu_bytes =
        largest_layer_memory + truncate(static_cast<double>(2 * p) / total_gpus);
    estimate.per_node_cpu_bytes =
        truncate(static_cast<double>(p * 16) * gpus_factor * buffer_factor);
  } else {
    estimate.per_gpu_bytes =
        largest_layer_memory + truncate(static_cast<double>(18 * p) / total_gpus);
    estimate.per_node_cpu_bytes = truncate(static_cast<double>(l * 4 * gpn) * buffer_factor);
  }
  return estimate;
}

FitVerdict check_fit(const EstimateRow& row, const MachineCapacity& capacity) {
  std::vector<std::string> shortfalls;
  auto short_by = [](std::int64_t needed, std::int64_t have) {
    return base::format_bytes(static_cast<double>(needed - have));
  };
  if (capacity.gpu_bytes && row.per_gpu_bytes > *capacity.gpu_bytes) {
    shortfalls.push_back(
        fmt::format("needs {} more GPU memory", short_by(row.per_gpu_bytes, *capacity.gpu_bytes)));
  }
  if (row.per_node_cpu_bytes > capacity.cpu_bytes) {
    // With the optimizer on NVMe most of the CPU side is swap buffers sized by the sub-group.
    const char* hint =
        row.offload_optimizer == OffloadDevice::nvme ? " (lower sub_group_size)" : "";
    shortfalls.push_back(fmt::format("needs {} more CPU RAM{}",
                                     short_by(row.per_node_cpu_bytes, capacity.cpu_bytes), hint));
  }
  if (row.nvme_bytes > 0 && capacity.nvme_free_bytes &&
      row.nvme_bytes > *capacity.nvme_free_bytes) {
    shortfalls.push_back(fmt::format("needs {} more free space at {}",
                                     short_by(row.nvme_bytes, *capacity.nvme_free_bytes),
                                     capacity.nvme_path));
  }
  // Pinning beyond the locked-memory limit does not stop a run: it trains unpinned (or, with
  // strata.require_pinned_memory, refuses), so this is said beside the verdict, not as a shortfall.
  std::string unpinned;
  if (capacity.memlock_bytes && row.pinned_bytes_per_rank > *capacity.memlock_bytes) {
    unpinned = fmt::format(
        "; pin_memory would lock {} per process, more than the locked-memory limit of {} (ulimit "
        "-l): trains unpinned",
        base::format_bytes(static_cast<double>(row.pinned_bytes_per_rank)),
        base::format_bytes(static_cast<double>(*capacity.memlock_bytes)));
  }
  FitVerdict verdict;
  if (!shortfalls.empty()) {
    verdict.fits = false;
    verdict.text = fmt::format("{}{}", fmt::join(shortfalls, "; "), unpinned);
    return verdict;
  }
  if (!capacity.gpu_bytes) {
    // The reason (capacity.gpu_unknown_reason) is said once, above the table.
    verdict.text = fmt::format("GPU memory unknown{}", unpinned);
    return verdict;
  }
  if (row.nvme_bytes > 0 && !capacity.nvme_free_bytes) {
    verdict.text =
        fmt::format("NVMe space unknown ({} cannot be examined){}", capacity.nvme_path, unpinned);
    return verdict;
  }
  verdict.fits = true;
  verdict.text = fmt::format("fits{}", unpinned);
  return verdict;
}

}  // namespace strata::engine
