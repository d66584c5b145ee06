// zero_optimization (deepspeed/runtime/zero/config.py): stage, buckets, the stage3_* keys with
// their short aliases, the deprecated cpu_offload* flags, and the ZeRO++/MiCS keys strata refuses.
#include <fmt/format.h>

#include <cmath>

#include "engine/config/placement.h"
#include "engine/config/sections.h"

namespace strata::engine::detail {
namespace {

constexpr IntRange non_negative = {0, INT64_MAX};

// The stage3_* keys DeepSpeed also accepts without the prefix (pydantic aliases).
void declare_aliases(JsonReader& zero) {
  for (std::string_view key :
       {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
        "stage3_model_persistence_threshold", "stage3_max_live_parameters",
        "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
        "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
        "stage3_allgather_sequential", "stage3_partition_stream_chunk_size"}) {
    zero.alias(key, key.substr(std::string_view("stage3_").size()));
  }
  // The deprecated fp16 name of the 16-bit gather.
  zero.alias("stage3_gather_16bit_weights_on_model_save",
             "stage3_gather_fp16_weights_on_model_save");
}

// Sizes Hugging Face writes as "auto" and fills from the model's hidden size h.
void read_sizes(JsonReader& zero, const ModelConfig& model, ZeroConfig& out) {
  const std::int64_t h = model.d_model;
  zero.read("reduce_bucket_size", out.reduce_bucket_size, non_negative, h * h);
  zero.read("allgather_bucket_size", out.allgather_bucket_size, non_negative);
  // 0 is valid in DeepSpeed (every parameter its own sub-group) and common in copied stage-3
  // configs: strata reads it as one sub-group per module shard (config.h).
  zero.read("sub_group_size", out.sub_group_size, non_negative);
  auto prefetch_auto = static_cast<std::int64_t>(std::llround(0.9 * static_cast<double>(h * h)));
  zero.read("stage3_prefetch_bucket_size", out.stage3_prefetch_bucket_size, non_negative,
            prefetch_auto);
  zero.read("stage3_param_persistence_threshold", out.stage3_param_persistence_threshold,
            non_negative, 10 * h);
  zero.read("stage3_model_persistence_threshold", out.stage3_model_persistence_threshold,
            non_negative);
  zero.read("stage3_max_live_parameters", out.stage3_max_live_parameters, non_negative);
  zero.read("stage3_max_reuse_distance", out.stage3_max_reuse_distance, non_negative);
  zero.read("stage3_module_granularity_threshold", out.stage3_module_granularity_threshold,
            non_negative);
  zero.read("stage3_partition_stream_chunk_size", out.stage3_partition_stream_chunk_size,
            non_negative);
}

void read_flags(JsonReader& zero, ZeroConfig& out) {
  zero.read("contiguous_gradients", out.contiguous_gradients);
  zero.read("reduce_scatter", out.reduce_scatter);
  zero.read("use_multi_rank_bucket_allreduce", out.use_multi_rank_bucket_allreduce);
  zero.read("allgather_partitions", out.allgather_partitions);
  std::optional<bool> overlap;
  zero.read("overlap_comm", overlap);
  out.overlap_comm = overlap.value_or(out.stage == 3);
  zero.read("load_from_fp32_weights", out.load_from_fp32_weights);
  zero.read("stage3_use_all_reduce_for_fetch_params", out.stage3_use_all_reduce_for_fetch_params);
  zero.read("stage3_allgather_sequential", out.stage3_allgather_sequential);
  zero.read("ignore_unused_parameters", out.ignore_unused_parameters);
  zero.read("round_robin_gradients", out.round_robin_gradients);
  zero.read("memory_efficient_linear", out.memory_efficient_linear);
  zero.read("override_module_apply", out.override_module_apply);
  zero.read("log_trace_cache_warnings", out.log_trace_cache_warnings);
  zero.read("enable_sanity_checks", out.enable_sanity_checks);
  zero.read("pipeline_loading_checkpoint", out.pipeline_loading_checkpoint);
  zero.read("elastic_checkpoint", out.elastic_checkpoint);
  bool muon_in_memory = false;
  zero.read("save_muon_momentum_buffer_in_memory", muon_in_memory);
}

// DeepSpeed gathers the partitioned 16-bit weights into one file at save_16bit_model(); strata
// writes the whole model from a checkpoint instead, after training, so the flag changes nothing
// during the run. "auto" is false, as Accelerate fills it.
void read_gather_on_save(JsonReader& zero, CheckpointConfig& checkpoint) {
  constexpr std::string_view key = "stage3_gather_16bit_weights_on_model_save";
  zero.read(key, checkpoint.gather_16bit_weights_on_model_save, false);
  if (!checkpoint.gather_16bit_weights_on_model_save) return;
  zero.diagnostics().notes.push_back(fmt::format(
      "{}: true; strata gathers no 16-bit model while training: `strata ckpt export DIR --out "
      "FILE.safetensors --dtype bf16|fp16` writes the whole model from any checkpoint, streaming",
      zero.path_of(key)));
}

// ZeRO++, MiCS, ZenFlow and friends: DeepSpeed features strata does not implement. Their
// defaults are accepted so that templates listing them still load.
void refuse_unsupported(JsonReader& zero) {
  std::int64_t hpz = 1;
  zero.read("zero_hpz_partition_size", hpz, non_negative);
  if (hpz > 1)
    zero.unsupported("zero_hpz_partition_size", "ZeRO++ hierarchical partitioning", "set it to 1");
  for (std::string_view key : {"zero_quantized_weights", "zero_quantized_nontrainable_weights",
                               "zero_quantized_gradients"}) {
    bool quantized = false;
    zero.read(key, quantized);
    if (quantized) zero.unsupported(key, "ZeRO++ quantized communication", "set it to false");
  }
  std::int64_t mics = -1;
  zero.read("mics_shard_size", mics, IntRange{-1, INT64_MAX});
  if (mics > 0)
    zero.unsupported("mics_shard_size", "MiCS sharding",
                     "remove it (or -1); strata partitions over all ranks");
  bool mics_gather = false;
  zero.read("mics_hierarchical_params_gather", mics_gather);
  if (mics_gather) zero.unsupported("mics_hierarchical_params_gather", "MiCS", "set it to false");
  bool legacy = false;
  zero.read("legacy_stage1", legacy);
  if (legacy) zero.unsupported("legacy_stage1", "the legacy stage 1", "set it to false");
  for (std::string_view key : {"zeropp_loco_param", "zenflow", "leaf_module"}) {
    const nlohmann::json* value = zero.find(key);
    bool empty = value == nullptr || value->is_null() || (value->is_object() && value->empty());
    if (!empty) zero.unsupported(key, "a DeepSpeed extension strata lacks", "remove it");
  }
}

// cpu_offload -> offload_optimizer.device cpu, cpu_offload_param -> offload_param.device cpu,
// cpu_offload_use_pin_memory -> pin_memory of both, as DeepSpeed rewrites them.
void read_deprecated_offload(JsonReader& zero, ZeroConfig& out) {
  auto& warnings = zero.diagnostics().warnings;
  struct Rewrite {
    std::string_view old_key;
    std::string_view new_key;
    OffloadConfig* target;
  };
  for (Rewrite rewrite : {Rewrite{"cpu_offload", "offload_optimizer", &out.offload_optimizer},
                          Rewrite{"cpu_offload_param", "offload_param", &out.offload_param}}) {
    std::optional<bool> flag;
    zero.read(rewrite.old_key, flag);
    if (!flag) continue;
    if (zero.has(rewrite.new_key)) {
      zero.error(rewrite.old_key, fmt::format("is the deprecated form of {}, which is also given; "
                                              "remove {}",
                                              rewrite.new_key, rewrite.old_key));
      continue;
    }
    warnings.push_back(fmt::format("{}: deprecated; read as \"{}\": {{\"device\": \"{}\"}}",
                                   zero.path_of(rewrite.old_key), rewrite.new_key,
                                   *flag ? "cpu" : "none"));
    if (*flag) rewrite.target->device = OffloadDevice::cpu;
  }
  std::optional<bool> pin;
  zero.read("cpu_offload_use_pin_memory", pin);
  if (pin) {
    warnings.push_back(
        fmt::format("{}: deprecated; read as pin_memory of offload_param and "
                    "offload_optimizer",
                    zero.path_of("cpu_offload_use_pin_memory")));
    out.offload_param.pin_memory = *pin;
    out.offload_optimizer.pin_memory = *pin;
  }
}

void check_offload_stage(JsonReader& zero, const ZeroConfig& out) {
  for (const PlacementRefusal& refusal : placement_refusals(
           static_cast<int>(out.stage), out.offload_param.device, out.offload_optimizer.device)) {
    if (refusal.config_refuses)
      zero.error(refusal.key, fmt::format("{}; {}", refusal.cause, refusal.fix));
  }
}

}  // namespace

void read_zero(JsonReader& top, const ModelConfig& model, ZeroConfig& out,
               CheckpointConfig& checkpoint) {
  const nlohmann::json* node = top.find("zero_optimization");
  if (node != nullptr && node->is_boolean()) {
    // DeepSpeed's oldest form: "zero_optimization": true means stage 1.
    out.stage = node->get<bool>() ? 1 : 0;
    top.diagnostics().warnings.push_back(fmt::format(
        "zero_optimization: the boolean form is deprecated; read as {{\"stage\": {}}}", out.stage));
    return;
  }
  JsonReader zero(node, "zero_optimization", top.diagnostics());
  declare_aliases(zero);
  std::int64_t stage = 0;
  zero.read("stage", stage, IntRange{0, 3});
  out.stage = static_cast<int>(stage);
  read_sizes(zero, model, out);
  read_flags(zero, out);
  read_gather_on_save(zero, checkpoint);
  refuse_unsupported(zero);
  read_deprecated_offload(zero, out);
  read_offload(zero, "offload_param", out.offload_param);
  read_offload(zero, "offload_optimizer", out.offload_optimizer);
  check_offload_stage(zero, out);
  zero.finish();
}

}  // namespace strata::engine::detail
