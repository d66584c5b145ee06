#pragma once

// The readers of each config section, called in order by parse_config (config_loader.cpp). Each
// takes the top-level reader, reads its own key's object and records problems in the reader's
// diagnostics.

#include "engine/config/config.h"
#include "engine/config/json_reader.h"

namespace strata::engine::detail {

// strata: model, data and run settings, and strata.checkpoint into `checkpoint`. Read first:
// "auto" elsewhere derives from the model.
void read_strata(JsonReader& top, StrataConfig& out, CheckpointConfig& checkpoint);

// train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps; an "auto"
// micro-batch comes from strata.micro_batch_size when given.
void read_batch(JsonReader& top, int world_size, const StrataConfig& strata, BatchConfig& out);

// fp16, and bf16 (alias bfloat16); both enabled is an error. --bf16 and --fp16 (`overrides`)
// fill enabled as the HF Trainer's flags do.
void read_precision(JsonReader& top, const ConfigOverrides& overrides, Fp16Config& fp16,
                    Bf16Config& bf16);

// optimizer {type, params}; strata.lr fills an "auto" lr, and the lr of the default optimizer
// when the section is absent.
void read_optimizer(JsonReader& top, const StrataConfig& strata, OptimizerConfig& out);

// The run's length, and whether --steps set it (notes name where it came from).
struct RunLength {
  std::int64_t steps = 0;
  bool from_command_line = false;
};

// scheduler {type, params}; "auto" resolves from the optimizer, the run's length and strata's
// warm-up keys. A schedule whose lr falls to 0 before the run ends is a warning.
void read_scheduler(JsonReader& top, const OptimizerConfig& optimizer, const StrataConfig& strata,
                    RunLength run, SchedulerConfig& out);

// zero_optimization with offload_param and offload_optimizer; "auto" sizes derive from d_model.
// stage3_gather_16bit_weights_on_model_save goes to `checkpoint`.
void read_zero(JsonReader& top, const ModelConfig& model, ZeroConfig& out,
               CheckpointConfig& checkpoint);

// zero_optimization.offload_param or .offload_optimizer (`key`), read from the zero reader.
void read_offload(JsonReader& zero, std::string_view key, OffloadConfig& out);

// aio.
void read_aio(JsonReader& top, AioConfig& out);

// activation_checkpointing.
void read_activation_checkpointing(JsonReader& top, ActivationCheckpointingConfig& out);

// DeepSpeed's checkpoint section (tag_validation, load_universal, use_node_local_storage,
// parallel_write, writer, checkpoint_serialization), in checkpoint_config.cpp.
void read_checkpoint(JsonReader& top, CheckpointConfig& out);

// strata.checkpoint (dir, every_steps, keep_last), read from the strata reader.
void read_checkpoint_schedule(JsonReader& strata, CheckpointConfig& out);

}  // namespace strata::engine::detail
