#pragma once

#include <memory>
#include <string>

#include "engine/config/config.h"
#include "models/data/token_dataset.h"
#include "models/gpt/gpt.h"
#include "models/gpt/gpt_shape.h"

namespace strata::tools {

// What `strata train` and `strata eval` both build from a config before the engine: the config
// itself (the built-in demo's when `config_path` is empty), the model's shape and the data.
engine::LoadedConfig load_run_config(const std::string& config_path, int world_size);
// Throws UserError naming the key and the fix for a shape the engine cannot build.
models::GptShape model_shape(const engine::Config& config);
// The model: the built-in GPT, started from strata.model.from_pretrained's weights when set.
std::unique_ptr<models::Gpt> make_model(const engine::Config& config,
                                        const models::GptShape& shape);
// strata.data's file(s), or the built-in synthetic corpus; checked against `shape` (token ids
// below its vocabulary, splits of at least one sequence).
models::TokenDataset load_data(const engine::Config& config, const models::GptShape& shape);

}  // namespace strata::tools
