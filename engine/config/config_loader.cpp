// parse_config and its file and text front ends: the order sections are read in, the top-level
// scalars, turning what the readers found into one ConfigError, and a file's way in (DeepSpeed
// JSON as it is, an Accelerate config through its mapping to DeepSpeed keys).
#include <fmt/format.h>

#include "base/assert.h"
#include "engine/config/accelerate_config.h"
#include "engine/config/config_error.h"
#include "engine/config/config_format.h"
#include "engine/config/deepspeed_keys.h"
#include "engine/config/sections.h"

namespace strata::engine {
namespace {

// `seed` holds what an earlier reading found (an Accelerate config's warnings and notes).
// With the optimizer offloaded and a step the gradients cannot change (no clipping, no overflow
// check), stepping each sub-group beside backward as soon as its gradients are final gives the
// bits of the step after backward, with nothing kept to undo: then overlap_optimizer is on unless
// the file says otherwise, and `strata config check` says so.
void default_overlap_optimizer(const nlohmann::json& root, Config& config,
                               detail::Diagnostics& diagnostics) {
  const bool written = root.contains("strata") && root.at("strata").is_object() &&
                       root.at("strata").contains("overlap_optimizer");
  const OffloadDevice device = config.zero.offload_optimizer.device;
  if (written || device == OffloadDevice::none ||
      gradients_can_change_the_step(config.gradient_clipping, config.fp16, config.bf16))
    return;
  config.strata.overlap_optimizer = true;
  diagnostics.notes.push_back(fmt::format(
      "strata.overlap_optimizer is on: with offload_optimizer on {} and a step the gradients "
      "cannot change (gradient_clipping 0, no overflow check), each sub-group is stepped beside "
      "backward as soon as its gradients are final, with the same result; set \"strata\": "
      "{{\"overlap_optimizer\": false}} to step after backward",
      to_string(device)));
}

LoadedConfig parse(const nlohmann::json& root, int world_size, const std::string& source,
                   const ConfigOverrides& overrides, detail::Diagnostics seed) {
  STRATA_ASSERT(world_size >= 1);
  if (!root.is_object()) {
    throw ConfigError(source, {fmt::format("top level: got {}, expected a JSON object {{...}}",
                                           detail::show(root))});
  }
  detail::Diagnostics diagnostics = std::move(seed);
  LoadedConfig loaded;
  Config& config = loaded.config;
  detail::JsonReader top(&root, "", diagnostics);
  // strata first: "auto" bucket sizes and total_num_steps derive from it.
  detail::read_strata(top, config.strata, config.checkpoint);
  // --steps is the run's length: what an "auto" total_num_steps and warm-up ratio derive from.
  if (overrides.train_steps) config.strata.train_steps = *overrides.train_steps;
  detail::read_batch(top, world_size, config.strata, config.batch);
  // "auto" is the HF Trainer's max_grad_norm, whose default is 1.0.
  top.read("gradient_clipping", config.gradient_clipping, detail::RealRange{0, 1e300}, 1.0);
  top.read("steps_per_print", config.steps_per_print, detail::IntRange{1, INT64_MAX});
  top.read("wall_clock_breakdown", config.wall_clock_breakdown);
  detail::read_precision(top, overrides, config.fp16, config.bf16);
  detail::read_optimizer(top, config.strata, config.optimizer);
  detail::read_scheduler(
      top, config.optimizer, config.strata,
      detail::RunLength{config.strata.train_steps, overrides.train_steps.has_value()},
      config.scheduler);
  detail::read_zero(top, config.strata.model, config.zero, config.checkpoint);
  detail::read_aio(top, config.aio);
  detail::read_activation_checkpointing(top, config.activation_checkpointing);
  detail::read_checkpoint(top, config.checkpoint);
  detail::read_ignored_deepspeed_keys(top);
  default_overlap_optimizer(root, config, diagnostics);
  top.finish(/*as_warnings=*/true);
  if (!diagnostics.errors.empty()) throw ConfigError(source, std::move(diagnostics.errors));
  loaded.warnings = std::move(diagnostics.warnings);
  loaded.notes = std::move(diagnostics.notes);
  loaded.auto_filled = std::move(diagnostics.auto_filled);
  return loaded;
}

}  // namespace

Config default_config() {
  Config config;
  config.zero.overlap_comm = config.zero.stage == 3;
  config.scheduler.warmup_max_lr = config.optimizer.lr;
  return config;
}

LoadedConfig parse_config(const nlohmann::json& root, int world_size,
                          const ConfigOverrides& overrides) {
  return parse(root, world_size, "config", overrides, {});
}

LoadedConfig parse_config_text(std::string_view text, const std::string& source, int world_size,
                               const ConfigOverrides& overrides) {
  return parse(detail::parse_json_text(text, source), world_size, source, overrides, {});
}

LoadedConfig load_config_file(const std::filesystem::path& path, int world_size,
                              const ConfigOverrides& overrides) {
  const std::string source = path.string();
  const std::string text =
      detail::read_config_text(path, "a DeepSpeed JSON config or an Accelerate YAML config");
  const nlohmann::json root = detail::looks_like_json(text) ? detail::parse_json_text(text, source)
                                                            : detail::parse_yaml_text(text, source);
  if (!detail::is_accelerate_config(root)) {
    if (!detail::looks_like_json(text)) {
      throw ConfigError(source, {"YAML, but not an Accelerate config (no distributed_type); "
                                 "strata reads DeepSpeed JSON configs and Accelerate YAML "
                                 "configs: give one of those"});
    }
    return parse(root, world_size, source, overrides, {});
  }
  detail::Diagnostics diagnostics;
  detail::AccelerateConfig accelerate =
      detail::accelerate_to_deepspeed(root, path, world_size, diagnostics);
  if (!diagnostics.errors.empty()) throw ConfigError(source, std::move(diagnostics.errors));
  return parse(accelerate.deepspeed, world_size, accelerate.source, overrides,
               std::move(diagnostics));
}

}  // namespace strata::engine
