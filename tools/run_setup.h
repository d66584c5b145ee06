#pragma once

#include <string>

#include "engine/config/config.h"
#include "models/data/token_dataset.h"
#include "models/model_plan.h"

namespace strata::tools {

// What `strata train` and `strata eval` both build from a config before the engine: the config
// itself (the built-in demo's when `config_path` is empty), the model's shape and the data.
// `overrides` are the command line's (--steps, --bf16, --fp16).
engine::LoadedConfig load_run_config(const std::string& config_path, int world_size,
                                     const engine::ConfigOverrides& overrides = {});
// The model strata.model describes (models/model_plan.h), at the config's micro-batch.
models::ModelPlan plan_model(const engine::Config& config);
// strata.data's file(s), or the built-in synthetic corpus; checked against `plan` (token ids
// below its vocabulary, splits of at least one sequence).
models::TokenDataset load_data(const engine::Config& config, const models::ModelPlan& plan);

}  // namespace strata::tools
