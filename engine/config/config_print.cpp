// to_json: the resolved config written back as DeepSpeed JSON, every default filled in. The keys
// are the canonical ones (no aliases, no deprecated names), so parse_config reads the output back
// to the same Config.
#include <nlohmann/json.hpp>

#include "engine/config/config.h"

namespace strata::engine {
namespace {

using nlohmann::json;

json offload_json(const OffloadConfig& offload, bool is_param) {
  json out = {
      {"device", to_string(offload.device)},
      {"nvme_path", offload.nvme_path.empty() ? json(nullptr) : json(offload.nvme_path)},
      {"buffer_count", offload.buffer_count},
      {"pin_memory", offload.pin_memory},
  };
  if (is_param) {
    out["buffer_size"] = offload.buffer_size;
    out["max_in_cpu"] = offload.max_in_cpu;
  } else {
    out["pipeline_read"] = offload.pipeline_read;
    out["pipeline_write"] = offload.pipeline_write;
    out["fast_init"] = offload.fast_init;
    out["ratio"] = offload.ratio;
  }
  return out;
}

json zero_json(const ZeroConfig& zero, const CheckpointConfig& checkpoint) {
  return {
      {"stage", zero.stage},
      {"contiguous_gradients", zero.contiguous_gradients},
      {"reduce_scatter", zero.reduce_scatter},
      {"reduce_bucket_size", zero.reduce_bucket_size},
      {"use_multi_rank_bucket_allreduce", zero.use_multi_rank_bucket_allreduce},
      {"allgather_partitions", zero.allgather_partitions},
      {"allgather_bucket_size", zero.allgather_bucket_size},
      {"overlap_comm", zero.overlap_comm},
      {"load_from_fp32_weights", zero.load_from_fp32_weights},
      {"elastic_checkpoint", zero.elastic_checkpoint},
      {"sub_group_size", zero.sub_group_size},
      {"offload_param", offload_json(zero.offload_param, true)},
      {"offload_optimizer", offload_json(zero.offload_optimizer, false)},
      {"stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size},
      {"stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold},
      {"stage3_model_persistence_threshold", zero.stage3_model_persistence_threshold},
      {"stage3_max_live_parameters", zero.stage3_max_live_parameters},
      {"stage3_max_reuse_distance", zero.stage3_max_reuse_distance},
      {"stage3_gather_16bit_weights_on_model_save", checkpoint.gather_16bit_weights_on_model_save},
      {"stage3_module_granularity_threshold", zero.stage3_module_granularity_threshold},
      {"stage3_use_all_reduce_for_fetch_params", zero.stage3_use_all_reduce_for_fetch_params},
      {"stage3_allgather_sequential", zero.stage3_allgather_sequential},
      {"stage3_partition_stream_chunk_size", zero.stage3_partition_stream_chunk_size},
      {"ignore_unused_parameters", zero.ignore_unused_parameters},
      {"round_robin_gradients", zero.round_robin_gradients},
      {"memory_efficient_linear", zero.memory_efficient_linear},
      {"override_module_apply", zero.override_module_apply},
      {"log_trace_cache_warnings", zero.log_trace_cache_warnings},
      {"enable_sanity_checks", zero.enable_sanity_checks},
      {"pipeline_loading_checkpoint", zero.pipeline_loading_checkpoint},
  };
}

json optimizer_json(const OptimizerConfig& optimizer) {
  json params = {{"lr", optimizer.lr}, {"weight_decay", optimizer.weight_decay}};
  if (optimizer.type != OptimizerType::adagrad) params["betas"] = optimizer.betas;
  if (optimizer.type != OptimizerType::lion) params["eps"] = optimizer.eps;
  if (optimizer.type == OptimizerType::adam || optimizer.type == OptimizerType::adamw) {
    params["bias_correction"] = optimizer.bias_correction;
    params["adam_w_mode"] = optimizer.adam_w_mode;
    params["torch_adam"] = optimizer.torch_adam;
  }
  return {{"type", to_string(optimizer.type)}, {"params", params}};
}

json scheduler_params(const SchedulerConfig& scheduler) {
  json params = {{"last_batch_iteration", scheduler.last_batch_iteration}};
  switch (scheduler.type) {
    case SchedulerType::warmup_decay_lr:
      params["total_num_steps"] = scheduler.total_num_steps;
      [[fallthrough]];
    case SchedulerType::warmup_lr:
      params["warmup_min_lr"] = scheduler.warmup_min_lr;
      params["warmup_max_lr"] = scheduler.warmup_max_lr;
      params["warmup_num_steps"] = scheduler.warmup_num_steps;
      params["warmup_type"] = to_string(scheduler.warmup_type);
      break;
    case SchedulerType::warmup_cosine_lr:
      params["total_num_steps"] = scheduler.total_num_steps;
      params["warmup_min_ratio"] = scheduler.warmup_min_ratio;
      params["warmup_num_steps"] = scheduler.warmup_num_steps;
      params["cos_min_ratio"] = scheduler.cos_min_ratio;
      params["warmup_type"] = to_string(scheduler.warmup_type);
      break;
    case SchedulerType::one_cycle:
      params.update({{"cycle_min_lr", scheduler.cycle_min_lr},
                     {"cycle_max_lr", scheduler.cycle_max_lr},
                     {"decay_lr_rate", scheduler.decay_lr_rate},
                     {"cycle_first_step_size", scheduler.cycle_first_step_size},
                     {"cycle_second_step_size", scheduler.cycle_second_step_size},
                     {"cycle_first_stair_count", scheduler.cycle_first_stair_count},
                     {"cycle_second_stair_count", scheduler.cycle_second_stair_count},
                     {"decay_step_size", scheduler.decay_step_size},
                     {"cycle_momentum", scheduler.cycle_momentum},
                     {"cycle_min_mom", scheduler.cycle_min_mom},
                     {"cycle_max_mom", scheduler.cycle_max_mom},
                     {"decay_mom_rate", scheduler.decay_mom_rate}});
      break;
    case SchedulerType::none:
      break;
  }
  return params;
}

json precision_json(const Config& config) {
  const Fp16Config& fp16 = config.fp16;
  const Bf16Config& bf16 = config.bf16;
  return {
      {"fp16",
       {{"enabled", fp16.enabled},
        {"auto_cast", fp16.auto_cast},
        {"loss_scale", fp16.loss_scale},
        {"initial_scale_power", fp16.initial_scale_power},
        {"loss_scale_window", fp16.loss_scale_window},
        {"hysteresis", fp16.hysteresis},
        {"consecutive_hysteresis", fp16.consecutive_hysteresis},
        {"min_loss_scale", fp16.min_loss_scale},
        {"fp16_master_weights_and_grads", fp16.fp16_master_weights_and_grads}}},
      {"bf16",
       {{"enabled", bf16.enabled},
        {"immediate_grad_update", bf16.immediate_grad_update},
        {"check_grad_overflow", bf16.check_grad_overflow},
        {"bf16_master_weights_and_grads", bf16.bf16_master_weights_and_grads},
        {"bf16_optimizer_states", bf16.bf16_optimizer_states}}},
  };
}

// DeepSpeed's "checkpoint" section. parallel_write, writer and checkpoint_serialization are left
// out: strata reads them only to warn, and their defaults ask for nothing.
json checkpoint_json(const CheckpointConfig& checkpoint) {
  return {
      {"tag_validation", to_string(checkpoint.tag_validation)},
      {"load_universal", checkpoint.load_universal},
      {"use_node_local_storage", checkpoint.use_node_local_storage},
  };
}

// The shape keys, or, for a Hugging Face model, where its config.json is (which sets them).
json model_json(const ModelConfig& model) {
  if (!model.from_pretrained.empty())
    return {{"from_pretrained", model.from_pretrained}, {"seq_len", model.seq_len}};
  if (!model.hf_config.empty()) return {{"config", model.hf_config}, {"seq_len", model.seq_len}};
  return {{"n_layer", model.n_layer},
          {"n_head", model.n_head},
          {"d_model", model.d_model},
          {"seq_len", model.seq_len},
          {"vocab", model.vocab}};
}

json strata_json(const StrataConfig& strata, const CheckpointConfig& checkpoint) {
  return {
      {"model", model_json(strata.model)},
      {"data",
       {{"path", strata.data.path},
        {"dtype", strata.data.dtype},
        {"validation_path", strata.data.validation_path},
        {"validation_fraction", strata.data.validation_fraction},
        {"order", strata.data.order == DataOrder::sequential ? "sequential" : "random"},
        {"packing", strata.data.packing}}},
      {"seed", strata.seed},
      {"train_steps", strata.train_steps},
      {"device_memory_budget", strata.device_memory_budget},
      {"overlap_optimizer", strata.overlap_optimizer},
      {"require_pinned_memory", strata.require_pinned_memory},
      {"allow_tf32", strata.allow_tf32},
      {"job_name", strata.job_name},
      {"micro_batch_size",
       strata.micro_batch_size ? json(*strata.micro_batch_size) : json(nullptr)},
      {"lr", strata.lr ? json(*strata.lr) : json(nullptr)},
      {"warmup_steps", strata.warmup_steps ? json(*strata.warmup_steps) : json(nullptr)},
      {"warmup_ratio", strata.warmup_ratio ? json(*strata.warmup_ratio) : json(nullptr)},
      {"checkpoint",
       {{"dir", checkpoint.dir},
        {"every_steps", checkpoint.every_steps},
        {"keep_last", checkpoint.keep_last}}},
  };
}

}  // namespace

json to_json(const Config& config) {
  json out = {
      {"train_batch_size", config.batch.train_batch_size},
      {"train_micro_batch_size_per_gpu", config.batch.train_micro_batch_size_per_gpu},
      {"gradient_accumulation_steps", config.batch.gradient_accumulation_steps},
      {"gradient_clipping", config.gradient_clipping},
      {"steps_per_print", config.steps_per_print},
      {"wall_clock_breakdown", config.wall_clock_breakdown},
      {"optimizer", optimizer_json(config.optimizer)},
      {"zero_optimization", zero_json(config.zero, config.checkpoint)},
      {"aio",
       {{"block_size", config.aio.block_size},
        {"queue_depth", config.aio.queue_depth},
        {"intra_op_parallelism", config.aio.intra_op_parallelism},
        {"single_submit", config.aio.single_submit},
        {"overlap_events", config.aio.overlap_events},
        {"use_gds", config.aio.use_gds},
        {"verify", config.aio.verify}}},
      {"activation_checkpointing",
       {{"partition_activations", config.activation_checkpointing.partition_activations},
        {"cpu_checkpointing", config.activation_checkpointing.cpu_checkpointing},
        {"contiguous_memory_optimization",
         config.activation_checkpointing.contiguous_memory_optimization},
        {"number_checkpoints", config.activation_checkpointing.number_checkpoints
                                   ? json(*config.activation_checkpointing.number_checkpoints)
                                   : json(nullptr)},
        {"synchronize_checkpoint_boundary",
         config.activation_checkpointing.synchronize_checkpoint_boundary},
        {"profile", config.activation_checkpointing.profile}}},
      {"checkpoint", checkpoint_json(config.checkpoint)},
      {"strata", strata_json(config.strata, config.checkpoint)},
  };
  out.update(precision_json(config));
  if (config.scheduler.type != SchedulerType::none) {
    out["scheduler"] = {{"type", to_string(config.scheduler.type)},
                        {"params", scheduler_params(config.scheduler)}};
  }
  return out;
}

}  // namespace strata::engine
