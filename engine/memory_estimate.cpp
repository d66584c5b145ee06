#include "engine/memory_estimate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/assert.h"
#include "base/units.h"
#include "engine/param_spec.h"
#include "engine/zero/flat_layout.h"

namespace strata::engine {
namespace {

constexpr std::int64_t bytes_16bit = 2;  // bf16/fp16 working params and gradients
constexpr std::int64_t bytes_fp32 = 4;   // master weights, Adam moments, gradient accumulation
// fp32 master weights + exp_avg + exp_avg_sq.
constexpr std::int64_t optimizer_state_bytes = 3 * bytes_fp32;
constexpr int optimizer_states_on_nvme = 3;

std::int64_t ceil_div(std::int64_t value, std::int64_t divisor) {
  STRATA_ASSERT(divisor > 0);
  return (value + divisor - 1) / divisor;
}

std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return ceil_div(value, multiple) * multiple;
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

// How the engine lays the parameters out (engine/zero/flat_layout.h): a flat buffer per module,
// cut into equal shards of a multiple of 2048 elements, one per rank.
struct Layout {
  std::int64_t partition = 0;         // elements of one rank's partition, padding included
  std::int64_t largest_gathered = 0;  // elements of the largest gathered module, padded
  std::int64_t persistent = 0;        // elements of modules that stay whole on every GPU
  std::vector<zero::Range> sub_groups;
};

std::vector<std::vector<ParamSpec>> gpt_modules(const GptShape& shape) {
  std::int64_t d = shape.d_model;
  std::vector<std::vector<ParamSpec>> modules;
  modules.push_back({{"wte", {shape.vocab, d}}, {"wpe", {shape.seq_len, d}}});
  for (std::int64_t layer = 0; layer < shape.n_layer; ++layer) {
    std::string prefix = fmt::format("h.{}.", layer);
    modules.push_back({{prefix + "ln_1.weight", {d}},
                       {prefix + "ln_1.bias", {d}},
                       {prefix + "attn.qkv.weight", {3 * d, d}},
                       {prefix + "attn.qkv.bias", {3 * d}},
                       {prefix + "attn.proj.weight", {d, d}},
                       {prefix + "attn.proj.bias", {d}},
                       {prefix + "ln_2.weight", {d}},
                       {prefix + "ln_2.bias", {d}},
                       {prefix + "mlp.fc.weight", {4 * d, d}},
                       {prefix + "mlp.fc.bias", {4 * d}},
                       {prefix + "mlp.proj.weight", {d, 4 * d}},
                       {prefix + "mlp.proj.bias", {d}}});
  }
  modules.push_back({{"ln_f.weight", {d}}, {"ln_f.bias", {d}}});
  return modules;
}

// With the model's shape, the engine's own FlatLayout; without it, one flat buffer of P.
// Stage 3 keeps a module whole on every GPU when it has at most
// stage3_param_persistence_threshold elements (up to stage3_model_persistence_threshold in all):
// the engine gathers whole modules, so persistence is decided per module.
Layout plan_layout(const EstimateInputs& inputs) {
  Layout layout;
  std::int64_t world = inputs.world_size();
  STRATA_ASSERT(world <= INT32_MAX);
  if (inputs.model) {
    zero::FlatLayout flat(gpt_modules(*inputs.model), static_cast<int>(world));
    layout.partition = flat.partition_numel();
    for (int module = 0; module < flat.module_count(); ++module) {
      const zero::ModuleSlice& slice = flat.module(module);
      if (slice.numel <= inputs.stage3_param_persistence_threshold) {
        layout.persistent += slice.numel;
      } else {
        layout.largest_gathered = std::max(layout.largest_gathered, slice.padded_numel);
      }
    }
    layout.persistent = std::min(layout.persistent, inputs.stage3_model_persistence_threshold);
  } else {
    layout.partition =
        round_up(ceil_div(inputs.params, world), zero::FlatLayout::kDefaultShardAlignment);
    layout.largest_gathered = inputs.largest_layer_params;
  }
  layout.sub_groups = zero::make_sub_groups(layout.partition, inputs.sub_group_size);
  return layout;
}

// Stage 3 gathers the module being run and prefetches the next one: L + min(L, prefetch bucket,
// what max_live_parameters leaves).
std::int64_t gathered_elements(const EstimateInputs& inputs, const Layout& layout) {
  std::int64_t largest = layout.largest_gathered;
  std::int64_t live_room = std::max<std::int64_t>(0, inputs.stage3_max_live_parameters - largest);
  std::int64_t prefetch = std::min({largest, inputs.stage3_prefetch_bucket_size, live_room});
  return largest + prefetch;
}

void add_gpu_params(RowBuilder& builder, const EstimateInputs& inputs, int stage,
                    OffloadDevice offload_param, const Layout& layout) {
  if (stage == 2) {
    builder.add("params_16bit", Tier::gpu, bytes_16bit * layout.partition * inputs.world_size(),
                "2 * part * W");
    return;
  }
  if (offload_param == OffloadDevice::none) {
    builder.add("param_partition_16bit", Tier::gpu, bytes_16bit * layout.partition, "2 * part");
  }
  builder.add("persistent_params_16bit", Tier::gpu, bytes_16bit * layout.persistent,
              "2 * (modules of <= stage3_param_persistence_threshold params; with --model)");
  builder.add("gathered_params_16bit", Tier::gpu, bytes_16bit * gathered_elements(inputs, layout),
              "2 * (L + min(L, stage3_prefetch_bucket_size, stage3_max_live_parameters - L))");
}

void add_gpu_gradients(RowBuilder& builder, const EstimateInputs& inputs, int stage,
                       const Layout& layout) {
  builder.add("module_gradients_16bit", Tier::gpu, bytes_16bit * layout.largest_gathered, "2 * L");
  bool overlap = inputs.overlap_comm.value_or(stage == 3);
  std::int64_t buckets = overlap ? 2 : 1;
  std::int64_t bucket = std::min(inputs.reduce_bucket_size, inputs.params);
  builder.add("reduce_buckets_16bit", Tier::gpu, bytes_16bit * buckets * bucket,
              fmt::format("2 * min(reduce_bucket_size, P) * {} (overlap_comm {})", buckets,
                          overlap ? "on" : "off"));
}

// Where the optimizer lives, so do its fp32 states and the fp32 gradient accumulation buffer.
void add_optimizer(RowBuilder& builder, const EstimateInputs& inputs, int stage,
                   OffloadDevice offload_optimizer, const Layout& layout) {
  std::int64_t part = layout.partition;
  if (offload_optimizer == OffloadDevice::none) {
    builder.add("optimizer_states_fp32", Tier::gpu, optimizer_state_bytes * part, "12 * part");
    builder.add("gradient_accumulation_fp32", Tier::gpu, bytes_fp32 * part, "4 * part");
    return;
  }
  bool pinned = inputs.optimizer_pin_memory;
  builder.add("gradient_accumulation_fp32", Tier::cpu, bytes_fp32 * part, "4 * part", pinned);
  // Reduce-scattered bf16 gradient shards come down through pinned staging, one per bucket.
  std::int64_t buckets = inputs.overlap_comm.value_or(stage == 3) ? 2 : 1;
  std::int64_t staged =
      ceil_div(std::min(inputs.reduce_bucket_size, inputs.params), inputs.world_size());
  builder.add("gradient_staging_16bit", Tier::cpu, bytes_16bit * buckets * staged,
              fmt::format("2 * ceil(min(reduce_bucket_size, P) / W) * {}", buckets), true);
  if (offload_optimizer == OffloadDevice::cpu) {
    builder.add("optimizer_states_fp32", Tier::cpu, optimizer_state_bytes * part, "12 * part",
                pinned);
    return;
  }
  // NVMe: each sub-group's master, exp_avg and exp_avg_sq are an extent each, padded to the aio
  // block; the pinned pool holds buffer_count sub-group buffers per pipeline stage.
  std::int64_t largest_sub_group = 0;
  std::int64_t per_state = 0;
  for (const zero::Range& group : layout.sub_groups) {
    largest_sub_group = std::max(largest_sub_group, group.size());
    per_state += round_up(bytes_fp32 * group.size(), inputs.aio_block_size_bytes);
  }
  builder.add("optimizer_states_fp32", Tier::nvme, optimizer_states_on_nvme * per_state,
              "3 * sum over sub-groups of round_up(4 * sub_group, aio.block_size)");
  std::int64_t stages = 1 + (inputs.pipeline_read ? 1 : 0) + (inputs.pipeline_write ? 1 : 0);
  builder.add("optimizer_swap_buffers", Tier::cpu,
              inputs.optimizer_buffer_count * bytes_fp32 * largest_sub_group * stages,
              fmt::format("offload_optimizer.buffer_count * 4 * largest sub-group * {} "
                          "(1 + pipeline_read + pipeline_write)",
                          stages),
              true);
}

void add_param_offload(RowBuilder& builder, const EstimateInputs& inputs,
                       OffloadDevice offload_param, std::int64_t part) {
  if (offload_param == OffloadDevice::cpu) {
    builder.add("param_partition_16bit", Tier::cpu, bytes_16bit * part, "2 * part",
                inputs.param_pin_memory);
    return;
  }
  if (offload_param != OffloadDevice::nvme) return;
  builder.add("param_partition_16bit", Tier::nvme,
              round_up(bytes_16bit * part, inputs.aio_block_size_bytes),
              "round_up(2 * part, aio.block_size)");
  builder.add("param_swap_buffers", Tier::cpu,
              inputs.param_buffer_count * inputs.param_buffer_size * bytes_16bit,
              "offload_param.buffer_count * buffer_size * 2", true);
  builder.add("param_cpu_cache_16bit", Tier::cpu, bytes_16bit * std::min(inputs.max_in_cpu, part),
              "2 * min(max_in_cpu, part)", inputs.param_pin_memory);
}

}  // namespace

std::vector<std::int64_t> gpt_tensor_elements(const GptShape& shape) {
  std::int64_t d = shape.d_model;
  std::vector<std::int64_t> tensors = {shape.vocab * d, shape.seq_len * d};
  for (std::int64_t layer = 0; layer < shape.n_layer; ++layer) {
    tensors.insert(tensors.end(),
                   {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d});
  }
  tensors.insert(tensors.end(), {d, d});
  return tensors;
}

std::int64_t gpt_param_count(const GptShape& shape) {
  std::int64_t d = shape.d_model;
  return shape.vocab * d + shape.seq_len * d + shape.n_layer * (12 * d * d + 13 * d) + 2 * d;
}

std::int64_t gpt_largest_module_params(const GptShape& shape) {
  std::int64_t d = shape.d_model;
  return std::max(shape.vocab * d + shape.seq_len * d, 12 * d * d + 13 * d);
}

EstimateInputs estimate_inputs_from_config(const Config& config, std::int64_t params,
                                           std::int64_t largest_layer_params,
                                           std::int64_t gpus_per_node, std::int64_t nodes,
                                           bool use_model) {
  EstimateInputs inputs;
  inputs.params = params;
  inputs.largest_layer_params = largest_layer_params;
  inputs.gpus_per_node = gpus_per_node;
  inputs.nodes = nodes;
  const ZeroConfig& zero = config.zero;
  inputs.reduce_bucket_size = zero.reduce_bucket_size;
  inputs.overlap_comm = zero.overlap_comm;
  inputs.stage3_prefetch_bucket_size = zero.stage3_prefetch_bucket_size;
  inputs.stage3_max_live_parameters = zero.stage3_max_live_parameters;
  inputs.stage3_param_persistence_threshold = zero.stage3_param_persistence_threshold;
  inputs.stage3_model_persistence_threshold = zero.stage3_model_persistence_threshold;
  inputs.sub_group_size = zero.sub_group_size;
  inputs.param_buffer_count = zero.offload_param.buffer_count;
  inputs.param_buffer_size = zero.offload_param.buffer_size;
  inputs.max_in_cpu = zero.offload_param.max_in_cpu;
  inputs.param_pin_memory = zero.offload_param.pin_memory;
  inputs.optimizer_buffer_count = zero.offload_optimizer.buffer_count;
  inputs.optimizer_pin_memory = zero.offload_optimizer.pin_memory;
  inputs.pipeline_read = zero.offload_optimizer.pipeline_read;
  inputs.pipeline_write = zero.offload_optimizer.pipeline_write;
  inputs.aio_block_size_bytes = config.aio.block_size;
  inputs.micro_batch = config.batch.train_micro_batch_size_per_gpu;
  const ActivationCheckpointingConfig& checkpointing = config.activation_checkpointing;
  inputs.activation_checkpointing =
      checkpointing.partition_activations || checkpointing.number_checkpoints.value_or(0) > 0;
  if (use_model) {
    const ModelConfig& model = config.strata.model;
    GptShape shape{model.n_layer, model.n_head, model.d_model, model.seq_len, model.vocab};
    inputs.model = shape;
    inputs.params = gpt_param_count(shape);
    inputs.largest_layer_params = gpt_largest_module_params(shape);
  }
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
  if (stage != 2 && stage != 3) {
    return fmt::format("stage {} is not estimated (only stages 2 and 3)", stage);
  }
  if (stage == 2 && offload_param != OffloadDevice::none) {
    return "offload_param needs ZeRO stage 3";
  }
  if (stage == 2 && offload_optimizer == OffloadDevice::nvme) {
    return "offload_optimizer nvme needs ZeRO stage 3";
  }
  if (offload_param != OffloadDevice::none && offload_optimizer == OffloadDevice::none) {
    return "offload_param needs offload_optimizer cpu or nvme";
  }
  return {};
}

EstimateRow estimate_row(const EstimateInputs& inputs, int stage, OffloadDevice offload_param,
                         OffloadDevice offload_optimizer) {
  STRATA_ASSERT(invalid_choice_reason(stage, offload_param, offload_optimizer).empty());
  STRATA_ASSERT(inputs.params > 0);
  STRATA_ASSERT(inputs.largest_layer_params > 0);
  STRATA_ASSERT(inputs.world_size() > 0);
  EstimateRow row;
  row.stage = stage;
  row.offload_param = offload_param;
  row.offload_optimizer = offload_optimizer;
  RowBuilder builder(row);
  Layout layout = plan_layout(inputs);
  add_gpu_params(builder, inputs, stage, offload_param, layout);
  add_gpu_gradients(builder, inputs, stage, layout);
  if (inputs.activation_bytes) {
    builder.add("activations", Tier::gpu, *inputs.activation_bytes,
                fmt::format("the model's activations for a micro-batch of {}{}", inputs.micro_batch,
                            inputs.activation_checkpointing ? ", checkpointed" : ""));
  }
  add_optimizer(builder, inputs, stage, offload_optimizer, layout);
  add_param_offload(builder, inputs, offload_param, layout.partition);
  builder.finish(inputs.gpus_per_node);
  return row;
}

std::vector<EstimateRow> estimate_all_rows(const EstimateInputs& inputs) {
  using enum OffloadDevice;
  std::vector<EstimateRow> rows;
  for (int stage : {2, 3}) {
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
  if (offload_param == nvme || offload_optimizer == nvme) return std::nullopt;
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
  if (capacity.memlock_bytes && row.pinned_bytes_per_rank > *capacity.memlock_bytes) {
    shortfalls.push_back(
        fmt::format("needs a locked-memory limit of {} per process (ulimit -l)",
                    base::format_bytes(static_cast<double>(row.pinned_bytes_per_rank))));
  }
  FitVerdict verdict;
  if (!shortfalls.empty()) {
    verdict.fits = false;
    verdict.text = fmt::format("{}", fmt::join(shortfalls, "; "));
    return verdict;
  }
  if (!capacity.gpu_bytes) {
    // The reason (capacity.gpu_unknown_reason) is said once, above the table.
    verdict.text = "GPU memory unknown";
    return verdict;
  }
  if (row.nvme_bytes > 0 && !capacity.nvme_free_bytes) {
    verdict.text = fmt::format("NVMe space unknown ({} cannot be examined)", capacity.nvme_path);
    return verdict;
  }
  verdict.fits = true;
  verdict.text = "fits";
  return verdict;
}

}  // namespace strata::engine
