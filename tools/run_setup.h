#pragma once

#include <optional>

#include <string>

#include "engine/config/config.h"
#include "models/data/token_dataset.h"
#include "models/data/token_file.h"
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

// The model folder's tokenizer, read when text first needs it and kept in `holder` (which must
// outlive the result), and a progress line for tokenizing: how strata.data's text (and eval's
// --data) become the model's ids.
struct TextTokenizers {
  std::optional<std::optional<models::tokenizer::Tokenizer>> tokenizer;  // once read
  std::optional<std::optional<models::ChatEncoder>> chat;                // once read
};
models::TextTokenizing text_tokenizing(const engine::Config& config, const models::ModelPlan& plan,
                                       TextTokenizers& holder);

// A run as `strata train` reads and checks it before it builds the engine.
struct RunSetup {
  engine::LoadedConfig loaded;
  models::ModelPlan plan;
  models::TokenDataset data;
};

// Every check `strata train` makes before it builds the engine, in one place so that `strata
// config check` makes the same ones: the config read with the command line's overrides, the
// model's plan (a Hugging Face config.json read whole), the data (read and checked against the
// plan, and against sequential order's batch), and each NVMe swap folder (a directory that
// exists or can be made, reached through no symbolic link; engine/memory/nvme_store.h). Makes
// nothing on disk. A refusal that comes from the config's values names the config file
// ("configs/x.json: ..."), or the built-in demo config when `config_path` is empty.
RunSetup prepare_run(const std::string& config_path, int world_size,
                     const engine::ConfigOverrides& overrides);

}  // namespace strata::tools
