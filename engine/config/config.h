#pragma once

// The typed form of a DeepSpeed JSON config, plus strata's own "strata" section.
//
// Every field holds DeepSpeed's default (deepspeed/runtime/zero/config.py, offload_config.py,
// precision_config.py, swap_tensor/aio_config.py, lr_schedules.py) unless a comment says strata
// chose otherwise. Sizes named "elements" count tensor elements, as DeepSpeed's do; sizes named
// "bytes" count bytes. After parse_config every field is resolved: "auto" is replaced by the value
// documented beside the field, aliases and deprecated keys are folded into their canonical field.

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::engine {

// train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size.
// Any two give the third (DeepSpeed's rule, with its integer division); train alone or micro
// alone gives gradient_accumulation_steps = 1. "auto" counts as not given; when every one of
// them is "auto", micro = 1 and gradient_accumulation_steps = 1.
struct BatchConfig {
  std::int64_t train_batch_size = 1;
  std::int64_t train_micro_batch_size_per_gpu = 1;
  std::int64_t gradient_accumulation_steps = 1;
};

// Mixed precision with fp16 and a dynamic (or static) loss scale.
struct Fp16Config {
  bool enabled = false;  // "auto" resolves to false, as the HF Trainer without --fp16
  bool auto_cast = false;
  double loss_scale = 0;                  // 0 = dynamic loss scaling; > 0 = this static scale
  std::int64_t initial_scale_power = 16;  // dynamic scaling starts at 2^initial_scale_power
  std::int64_t loss_scale_window = 1000;  // steps without overflow before the scale doubles
  std::int64_t hysteresis = 2;            // overflows tolerated before the scale halves
  bool consecutive_hysteresis = false;    // refill hysteresis after a step without overflow
  double min_loss_scale = 1;
  bool fp16_master_weights_and_grads = false;
};

// Mixed precision with bf16 (no loss scale). Read from "bf16" or its alias "bfloat16".
struct Bf16Config {
  bool enabled = false;  // "auto" resolves to false, as the HF Trainer without --bf16
  bool immediate_grad_update = false;
  bool check_grad_overflow = true;
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;  // requires bf16_master_weights_and_grads
};

enum class OptimizerType { adam, adamw, adagrad, lion };

// optimizer.type and optimizer.params. The type is matched case-insensitively ("Adam", "AdamW").
// "auto" for lr, betas, eps and weight_decay resolves to the defaults below.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::adamw;   // no "optimizer" section: AdamW with these params
  double lr = 1e-3;                            // Adagrad's default is 1e-2
  std::array<double, 2> betas = {0.9, 0.999};  // Adam, AdamW, Lion
  double eps = 1e-8;                           // Adagrad's default is 1e-10
  double weight_decay = 0;
  bool bias_correction = true;  // Adam, AdamW
  // DeepSpeed's default is true, so "type": "Adam" runs AdamW (decoupled weight decay) unless
  // adam_w_mode is false. Always true for type AdamW.
  bool adam_w_mode = true;
  bool torch_adam = false;  // accepted for compatibility; strata always runs its own Adam
};

enum class SchedulerType { none, warmup_lr, warmup_decay_lr, warmup_cosine_lr, one_cycle };

enum class WarmupType { log, linear };

// scheduler.type and scheduler.params with deepspeed/runtime/lr_schedules.py's defaults. Only the
// params of the chosen type may be given. "auto" is filled as the HF Trainer fills it
// (transformers' integrations/deepspeed.py): warmup_min_lr 0, warmup_max_lr optimizer.lr,
// total_num_steps the run's steps (strata.train_steps, which --steps replaces), warmup_num_steps
// the Trainer's get_warmup_steps(): strata.warmup_steps when above 0, else
// ceil(strata.warmup_ratio x the run's steps), 0 when neither is given. A warmup_num_steps of 0
// (or 1) warms up over 2 steps, as DeepSpeed's schedules take max(2, warmup_num_steps).
struct SchedulerConfig {
  SchedulerType type = SchedulerType::none;
  // WarmupLR, WarmupDecayLR
  double warmup_min_lr = 0;
  double warmup_max_lr = 1e-3;
  std::int64_t warmup_num_steps = 1000;      // also WarmupCosineLR; 0 and 1 act as 2
  WarmupType warmup_type = WarmupType::log;  // also WarmupCosineLR
  std::int64_t total_num_steps = 0;          // required by WarmupDecayLR and WarmupCosineLR
  // WarmupCosineLR (ratios of optimizer.lr)
  double warmup_min_ratio = 0;
  double cos_min_ratio = 1e-4;
  // OneCycle (cycle_min_lr and cycle_max_lr are required)
  double cycle_min_lr = 0;
  double cycle_max_lr = 0;
  double decay_lr_rate = 0;
  std::int64_t cycle_first_step_size = 2000;
  std::int64_t cycle_second_step_size = 2000;  // DeepSpeed: null = cycle_first_step_size
  std::int64_t cycle_first_stair_count = 0;
  std::int64_t cycle_second_stair_count = 0;  // DeepSpeed: null = cycle_first_stair_count
  std::int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
  std::int64_t last_batch_iteration = -1;  // every type
};

// DeepSpeed's last_batch_iteration from which the schedule's lr stays 0 to the end: WarmupDecayLR
// with warmup_min_lr 0 from total_num_steps on, WarmupCosineLR with cos_min_ratio 0 once its
// cosine ends, OneCycle with cycle_min_lr 0 from its cycle's end. nullopt when the lr never falls
// to 0 for good, or never rises above it. engine::optim::LrSchedule computes the same lr.
std::optional<std::int64_t> lr_zero_from_iteration(const SchedulerConfig& scheduler,
                                                   const OptimizerConfig& optimizer);

enum class OffloadDevice { none, cpu, nvme };

// zero_optimization.offload_param (stage 3 only) and zero_optimization.offload_optimizer. The
// keys that belong to only one of the two are noted; the loader refuses them in the other.
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::none;
  // Directory for swap files (device nvme). DeepSpeed requires it; strata does too, so that swap
  // files never land somewhere the user did not choose.
  std::string nvme_path;
  std::int64_t buffer_count = 5;  // pinned buffers in the pool (offload_optimizer default: 4)
  std::int64_t buffer_size = 100'000'000;   // elements per buffer (offload_param only)
  std::int64_t max_in_cpu = 1'000'000'000;  // elements of params kept in CPU RAM (offload_param)
  // Page-locked CPU buffers: faster host-device copies, counted against what the process may lock
  // (gpu::pinned_limit). On by default, as DeepSpeed's since deepspeedai/DeepSpeed#8207
  // (deepspeed/runtime/zero/offload_config.py; off before it); a run that cannot lock them trains
  // unpinned with one warning unless strata.require_pinned_memory.
  bool pin_memory = true;
  bool pipeline_read = false;   // read sub-group i+1 while Adam runs on i (offload_optimizer)
  bool pipeline_write = false;  // write sub-group i-1 while Adam runs on i (offload_optimizer)
  bool fast_init = false;       // build fp32 masters from the swapped params in bulk
  double ratio = 1;             // fraction of optimizer state offloaded; strata supports 1 only
};

// offload_optimizer's defaults differ from offload_param's in buffer_count: 4, one buffer per
// state of a parameter under Adam (param, grad, exp_avg, exp_avg_sq).
inline OffloadConfig optimizer_offload_defaults() {
  OffloadConfig offload;
  offload.buffer_count = 4;
  return offload;
}

// zero_optimization. The stage3_* keys are also accepted by their short names
// (max_live_parameters for stage3_max_live_parameters, ...).
struct ZeroConfig {
  int stage = 0;  // 0 none, 1 optimizer states, 2 + gradients, 3 + parameters
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  // Elements per gradient reduction bucket. "auto" = d_model^2 (Hugging Face's rule).
  std::int64_t reduce_bucket_size = 500'000'000;
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  std::int64_t allgather_bucket_size = 500'000'000;
  // DeepSpeed's null default resolves to true iff stage is 3.
  bool overlap_comm = false;
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  // Elements per optimizer sub-group (the unit the offloaded optimizer reads, steps and writes).
  // 0, as in DeepSpeed (where every parameter is then its own sub-group): one sub-group per
  // module's shard, strata's unit of partitioning (zero::make_sub_groups).
  std::int64_t sub_group_size = 1'000'000'000;
  OffloadConfig offload_param = {};
  OffloadConfig offload_optimizer = optimizer_offload_defaults();
  // Elements prefetched ahead of use. "auto" = 0.9 * d_model^2.
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  // Params with at most this many elements stay whole on every GPU. "auto" = 10 * d_model.
  std::int64_t stage3_param_persistence_threshold = 100'000;
  std::int64_t stage3_model_persistence_threshold = INT64_MAX;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  std::int64_t stage3_max_reuse_distance = 1'000'000'000;
  // stage3_gather_16bit_weights_on_model_save is read into CheckpointConfig.
  std::int64_t stage3_module_granularity_threshold = 0;
  bool stage3_use_all_reduce_for_fetch_params = false;
  bool stage3_allgather_sequential = false;
  std::int64_t stage3_partition_stream_chunk_size = 0;
  bool ignore_unused_parameters = true;
  bool round_robin_gradients = false;
  bool memory_efficient_linear = true;
  bool override_module_apply = true;
  bool log_trace_cache_warnings = false;
  bool enable_sanity_checks = false;
  bool pipeline_loading_checkpoint = false;
};

// aio: the NVMe I/O engine's settings (DeepSpeed's names and defaults).
struct AioConfig {
  std::int64_t block_size = 1'048'576;    // bytes per request; a multiple of 4096 for O_DIRECT
  std::int64_t queue_depth = 8;           // requests in flight per ring
  std::int64_t intra_op_parallelism = 1;  // rings (threads); old name thread_count
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;  // GPUDirect Storage: not supported by strata
  // strata's own key (DeepSpeed ignores unknown aio keys): CRC32C every block on write and check
  // it on read.
  bool verify = true;
};

// activation_checkpointing, read with DeepSpeed's defaults.
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  std::optional<std::int64_t> number_checkpoints;  // null: not set
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

// strata.model: the shape of the built-in GPT decoder. The defaults are a small demo model
// (about 19M parameters) that trains on the byte-level demo corpus on a laptop.
struct ModelConfig {
  std::int64_t n_layer = 6;
  std::int64_t n_head = 8;
  std::int64_t d_model = 512;  // hidden size h; "auto" bucket sizes derive from it
  std::int64_t seq_len = 256;
  std::int64_t vocab = 256;  // the byte tokenizer's vocabulary
  // A Hugging Face model folder (config.json and safetensors weights) to start from; "" = the
  // weights strata.seed makes. `hf_config` is the config.json that gives the shape: the folder's,
  // or "strata.model.config" for the architecture with fresh weights. With either, the shape
  // keys above are read from it (models/hf/hf_config.h checks the rest).
  std::string from_pretrained;
  std::string hf_config;
  // The model's context: GPT-2's n_positions (the rows of its position embedding) or the Llama
  // family's max_position_embeddings; 0 = seq_len (the built-in shape keys).
  std::int64_t positions = 0;
};

// strata.data: where the training tokens come from.
// How `strata train` picks each step's sequences (docs/data.md).
enum class DataOrder {
  random,      // windows chosen from (seed, step, sequence index) alone: any world size, any split
  sequential,  // the file front to back in micro-batches, as llm.c's loader reads it
};

struct DataConfig {
  // "" = the built-in synthetic corpus; else a text file, an llm.c .bin, a raw token array (with
  // `dtype`) or a Megatron-LM .bin/.idx pair (models/data/token_file.h).
  std::string path;
  std::string dtype;                 // "" = the file says; "uint16" or "uint32" = a raw token array
  std::string validation_path;       // "" = the validation split is the tail of `path`
  double validation_fraction = 0.1;  // tail of the tokens held out for validation, in (0, 0.5]
  DataOrder order = DataOrder::random;
  // Examples back to back in seq_len windows (true), or one example per window, padded, the
  // padding left out of the loss (models/data/examples.h).
  bool packing = true;
};

// strata: settings DeepSpeed has no key for, under one top-level key so that the rest of the
// file stays a DeepSpeed config.
struct StrataConfig {
  ModelConfig model = {};
  DataConfig data = {};
  std::uint64_t seed = 1234;
  std::int64_t train_steps = 200;  // optimizer steps of `strata train`
  // GPU memory strata may use, in bytes (JSON: an integer or a string such as "512MiB"). On the
  // host backend this is the emulated GPU's size. 0 = all of the device's free memory.
  std::int64_t device_memory_budget = 0;
  // Let a sub-group's optimizer step start as soon as its gradients are final, while backward
  // still runs on earlier layers. Left out, it is on exactly when the optimizer is offloaded and
  // the gradients cannot change the step (gradients_can_change_the_step): then the result has
  // the same bits either way, and nothing is kept to undo.
  bool overlap_optimizer = false;
  std::string job_name = "strata";  // names the swap directory <nvme_path>/strata-<job_name>/
  // pin_memory that cannot be had (more than this process may lock) refuses the run instead of
  // training unpinned with a warning.
  bool require_pinned_memory = false;
  // fp32 products (a config without bf16 or fp16) may round their inputs to TF32 on CUDA's tensor
  // cores, as PyTorch's torch.backends.cuda.matmul.allow_tf32 lets them: about 8x the fp32 rate
  // at 10 mantissa bits. Off, fp32 configs compute in fp32 throughout.
  bool allow_tf32 = false;
  // What a training script passes to the Hugging Face Trainer (per_device_train_batch_size,
  // learning_rate) and Accelerate leaves to the script: they fill train_micro_batch_size_per_gpu
  // and optimizer.params.lr (and the schedule's warmup_max_lr) where those are "auto" or, for an
  // Accelerate config, not given. null: strata's defaults (micro-batch 1, the optimizer's lr).
  std::optional<std::int64_t> micro_batch_size;
  std::optional<double> lr;
  // The HF Trainer's warmup_steps and warmup_ratio: they fill an "auto" (or missing)
  // scheduler.params.warmup_num_steps as TrainingArguments.get_warmup_steps() does (warmup_steps
  // when above 0, else ceil(warmup_ratio x the run's steps)) and must agree with one written
  // outright. null: not given (an "auto" warm-up is then 0 steps, the Trainer's default).
  std::optional<std::int64_t> warmup_steps;
  std::optional<double> warmup_ratio;
};

// Checkpoint saving of `strata train` (strata.checkpoint) and DeepSpeed's "checkpoint" section
// (deepspeed/runtime/config.py, get_checkpoint_*). strata's checkpoints are universal by
// construction: tensors are stored by parameter name with shard offsets, so any checkpoint loads
// at any ZeRO stage, offload and world size.
struct CheckpointConfig {
  std::string dir;  // strata.checkpoint.dir: where `strata train` saves; empty: no saving
  // strata.checkpoint.every_steps: save every N steps (0: only after the last step, when dir is
  // set).
  std::int64_t every_steps = 0;
  // strata.checkpoint.keep_last: newest tags kept, older ones pruned after a save; 0 keeps all.
  std::int64_t keep_last = 0;
  // checkpoint.tag_validation ("Ignore", "Warn" or "Fail", matched case-insensitively as
  // DeepSpeed upper-cases it): whether a save checks that every rank saves under the same tag,
  // and whether a mismatch is a warning or refuses the save.
  enum class TagValidation { ignore, warn, fail };
  TagValidation tag_validation = TagValidation::warn;
  bool load_universal = false;          // checkpoint.load_universal: changes nothing (see above)
  bool use_node_local_storage = false;  // checkpoint.use_node_local_storage: not used
  // zero_optimization.stage3_gather_16bit_weights_on_model_save (also its short name and the
  // deprecated stage3_gather_fp16_weights_on_model_save). strata's counterpart of DeepSpeed's
  // save_16bit_model is `strata ckpt export`, which writes the whole model from any checkpoint.
  bool gather_16bit_weights_on_model_save = false;
};

struct Config {
  BatchConfig batch = {};
  // Max global grad norm; 0 = off. 1.0 is DeepSpeed's default since v0.19.3
  // (deepspeed/runtime/constants.py, GRADIENT_CLIPPING_DEFAULT; 0 before), and "auto" is the HF
  // Trainer's max_grad_norm default, also 1.0.
  double gradient_clipping = 1.0;
  // DeepSpeed's default is null (its engine prints no step lines); strata's progress line and
  // metrics print every steps_per_print steps, so it keeps DeepSpeed's earlier default of 10.
  std::int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  Fp16Config fp16 = {};
  Bf16Config bf16 = {};
  OptimizerConfig optimizer = {};
  SchedulerConfig scheduler = {};
  ZeroConfig zero = {};
  AioConfig aio = {};
  ActivationCheckpointingConfig activation_checkpointing = {};
  StrataConfig strata = {};
  CheckpointConfig checkpoint = {};
};

struct LoadedConfig {
  Config config;
  // Keys strata accepted but does not act on (DeepSpeed features it ignores, unknown top-level
  // sections, deprecated names).
  std::vector<std::string> warnings;
  // How what the file left open was filled: each "auto" and the value it became, and for an
  // Accelerate config where each setting came from; and DeepSpeed settings whose purpose strata
  // serves another way (checkpoint.load_universal, the 16-bit gather on save).
  std::vector<std::string> notes;
  // Each "auto" the file held and the value it became, as "<path> <value>" (its note says why):
  // what `strata train` prints in one line unless asked for every note.
  std::vector<std::string> auto_filled;
};

// What the command line sets on top of the file, as the HF Trainer's arguments fill a DeepSpeed
// config's "auto" values.
struct ConfigOverrides {
  // --steps: the run's length. Replaces strata.train_steps; an "auto" total_num_steps follows it.
  std::optional<std::int64_t> train_steps;
  // --bf16: bf16.enabled "auto" or absent becomes true; an explicit false is an error naming both.
  bool bf16 = false;
  bool fp16 = false;  // --fp16: the same for fp16.enabled
};

// Every default, as if the file were `{"train_micro_batch_size_per_gpu": 1}`, world size 1.
Config default_config();

// Reads a parsed DeepSpeed config. Throws ConfigError listing every problem found.
LoadedConfig parse_config(const nlohmann::json& root, int world_size = 1,
                          const ConfigOverrides& overrides = {});

// Parses JSON text and reads it. `source` names the text in messages (a file path). Malformed
// JSON, duplicate keys (DeepSpeed refuses them too) and nesting deeper than 64 levels are
// ConfigErrors with the line and column where the parser stopped.
LoadedConfig parse_config_text(std::string_view text, const std::string& source = "config",
                               int world_size = 1, const ConfigOverrides& overrides = {});

// Reads and parses a file: a DeepSpeed JSON config, or an Accelerate config (YAML, or Accelerate's
// JSON form) with distributed_type DEEPSPEED, read with Accelerate's own mapping to DeepSpeed
// keys (engine/config/accelerate_config.h). A missing or unreadable file, malformed JSON, a file
// that is neither JSON nor YAML and a YAML file that is not an Accelerate config are ConfigErrors
// that name the file (and the line and column of a syntax error).
LoadedConfig load_config_file(const std::filesystem::path& path, int world_size = 1,
                              const ConfigOverrides& overrides = {});

// The resolved config as DeepSpeed JSON with every default filled in; parse_config reads it back
// to the same Config.
nlohmann::json to_json(const Config& config);

// Whether an inf or NaN gradient skips the step: fp16 always (DeepSpeed's overflow check); bf16
// when bf16.check_grad_overflow (DeepSpeed's key, default true); fp32 (neither enabled) always.
// The last differs from DeepSpeed, which checks no overflow for fp32 and would write inf/NaN into
// the master weights: strata already has the verdict from the norm scan at no cost, and a
// skipped step is recoverable where NaN weights are not. With bf16.check_grad_overflow false
// the step runs with the non-finite gradients, unclipped, as DeepSpeed's does.
bool checks_overflow(const Fp16Config& fp16, const Bf16Config& bf16);

// Whether the gradients can change how a step runs: not when nothing clips (max_norm <= 0) and
// nothing checks for overflow (bf16 with check_grad_overflow false). Then every step's
// multiplier is 1 / loss_scale (a constant) and none is skipped, so the step is known before
// backward: strata.overlap_optimizer steps every sub-group during backward, keeping none to undo,
// and is on by default with the optimizer offloaded.
bool gradients_can_change_the_step(double max_norm, const Fp16Config& fp16, const Bf16Config& bf16);

// Names as they are written in JSON ("nvme", "AdamW", "WarmupLR", "linear").
const char* to_string(OffloadDevice device);
const char* to_string(OptimizerType type);
const char* to_string(SchedulerType type);
const char* to_string(WarmupType type);
const char* to_string(CheckpointConfig::TagValidation validation);

}  // namespace strata::engine
