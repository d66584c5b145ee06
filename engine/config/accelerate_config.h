#pragma once

// Accelerate configs (the YAML `accelerate config` writes, or its JSON form) read as the DeepSpeed
// config Accelerate would build from them (accelerate/utils/dataclasses.py, DeepSpeedPlugin):
//
//   deepspeed_config.zero_stage                -> zero_optimization.stage (default 2)
//   offload_{optimizer,param}_device           -> zero_optimization.offload_*.device (none)
//   offload_{optimizer,param}_nvme_path        -> zero_optimization.offload_*.nvme_path (nvme)
//   gradient_accumulation_steps                -> gradient_accumulation_steps ("auto")
//   gradient_clipping                          -> gradient_clipping ("auto")
//   zero3_save_16bit_model                     -> stage3_gather_16bit_weights_on_model_save
//   mixed_precision fp16 / bf16 / no           -> fp16 / bf16 {"enabled": ...}
//   train_batch_size, train_micro_batch_size_per_gpu -> "auto" (the script's to fill)
//
// With deepspeed_config.deepspeed_config_file the DeepSpeed config is that JSON file, and the keys
// above must not be given beside it (Accelerate refuses them too). What Accelerate leaves to the
// training script (micro-batch, optimizer, learning rate) comes from the config's `strata` section
// (strata.micro_batch_size, strata.lr) or strata's defaults; the notes say which.

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/json_reader.h"

namespace strata::engine::detail {

// True for a document Accelerate would read: an object with distributed_type or
// compute_environment at its top level (DeepSpeed has neither key).
bool is_accelerate_config(const nlohmann::json& root);

// The DeepSpeed config an Accelerate config stands for, and the file it came from: the
// deepspeed_config_file when there is one, else the Accelerate config itself.
struct AccelerateConfig {
  nlohmann::json deepspeed;
  std::string source;
};

// The DeepSpeed config `accelerate` (read from `path`) stands for, with `strata` carried over.
// Problems go to diagnostics.errors (named by their Accelerate keys), where each setting came
// from to diagnostics.notes. `world_size` is the run's, checked against num_processes.
AccelerateConfig accelerate_to_deepspeed(const nlohmann::json& accelerate,
                                         const std::filesystem::path& path, int world_size,
                                         Diagnostics& diagnostics);

}  // namespace strata::engine::detail
