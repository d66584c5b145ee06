#pragma once

// What `strata train` says before its first step: how the config was read (its warnings, one
// line for what "auto" became, every note when asked) and what the run is (model, device, ZeRO
// placement, precision, optimizer, batch, data).

#include <cstdint>

#include "engine/config/config.h"
#include "gpu/device.h"
#include "models/data/token_dataset.h"
#include "models/model_plan.h"

namespace strata::tools {

// The config's warnings, each on its own line; then, unless `verbose`, one line naming what each
// "auto" became (its note says why: `strata config check` or --verbose print them); with
// `verbose`, every note. A config that names no model and no data says, in one line, that it
// trains the built-in GPT on the built-in corpus.
void print_config_messages(const engine::LoadedConfig& loaded, bool from_file, bool verbose);

// The run in a few lines: model, device and budget, where each model state lives, precision,
// optimizer and schedule, batch and length, data.
void print_setup(const engine::Config& config, const models::ModelPlan& plan,
                 const models::TokenDataset& data, gpu::Device& device, int world_size,
                 std::int64_t steps);

}  // namespace strata::tools
