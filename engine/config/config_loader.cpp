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

// --bf16 or --fp16 as the HF Trainer's fill_match (transformers' integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig.trainer_config_process): "auto" becomes true. strata also turns on a
// section the file leaves out, where the Trainer would leave DeepSpeed's default (off) in place
// and train in fp32 without a word; an explicit false is the Trainer's mismatch error.
nlohmann::json with_precision_flags(const nlohmann::json& root, const ConfigOverrides& overrides,
                                    detail::Diagnostics& diagnostics) {
  if ((!overrides.bf16 && !overrides.fp16) || !root.is_object()) return root;
  if (overrides.bf16 && overrides.fp16) {
    diagnostics.errors.push_back("--bf16 and --fp16: give one of them");
    return root;
  }
  nlohmann::json patched = root;
  std::string key = overrides.bf16 ? "bf16" : "fp16";
  if (overrides.bf16 && !patched.contains("bf16") && patched.contains("bfloat16")) key = "bfloat16";
  nlohmann::json& section = patched[key];
  if (section.is_null()) section = nlohmann::json::object();
  if (!section.is_object()) return patched;  // the section's reader names what is wrong
  const auto enabled = section.find("enabled");
  if (enabled == section.end() || *enabled == "auto") {
    section["enabled"] = true;
  } else if (*enabled != true) {
    diagnostics.errors.push_back(fmt::format(
        "{}.enabled: {} in the file, but --{} asks for it; remove the flag or set \"enabled\": "
        "\"auto\" (or true)",
        key, enabled->dump(), overrides.bf16 ? "bf16" : "fp16"));
  }
  return patched;
}

// `seed` holds what an earlier reading found (an Accelerate config's warnings and notes).
LoadedConfig parse(const nlohmann::json& file_root, int world_size, const std::string& source,
                   detail::Diagnostics seed, const ConfigOverrides& overrides) {
  STRATA_ASSERT(world_size >= 1);
  if (!file_root.is_object()) {
    throw ConfigError(source, {fmt::format("top level: got {}, expected a JSON object {{...}}",
                                           detail::show(file_root))});
  }
  detail::Diagnostics diagnostics = std::move(seed);
  const nlohmann::json root = with_precision_flags(file_root, overrides, diagnostics);
  LoadedConfig loaded;
  Config& config = loaded.config;
  detail::JsonReader top(&root, "", diagnostics);
  // strata first: "auto" bucket sizes and total_num_steps derive from it.
  detail::read_strata(top, config.strata, config.checkpoint);
  if (overrides.train_steps) config.strata.train_steps = *overrides.train_steps;
  detail::read_batch(top, world_size, config.strata, config.batch);
  top.read("gradient_clipping", config.gradient_clipping, detail::RealRange{0, 1e300}, 1.0);
  top.read("steps_per_print", config.steps_per_print, detail::IntRange{1, INT64_MAX});
  top.read("wall_clock_breakdown", config.wall_clock_breakdown);
  detail::read_precision(top, config.fp16, config.bf16);
  detail::read_optimizer(top, config.strata, config.optimizer);
  detail::read_scheduler(top, config.optimizer, config.strata, config.scheduler);
  detail::read_zero(top, config.strata.model, config.zero, config.checkpoint);
  detail::read_aio(top, config.aio);
  detail::read_activation_checkpointing(top, config.activation_checkpointing);
  detail::read_checkpoint(top, config.checkpoint);
  detail::read_ignored_deepspeed_keys(top);
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
  return parse(root, world_size, "config", {}, overrides);
}

LoadedConfig parse_config_text(std::string_view text, const std::string& source, int world_size,
                               const ConfigOverrides& overrides) {
  return parse(detail::parse_json_text(text, source), world_size, source, {}, overrides);
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
    return parse(root, world_size, source, {}, overrides);
  }
  detail::Diagnostics diagnostics;
  detail::AccelerateConfig accelerate =
      detail::accelerate_to_deepspeed(root, path, world_size, diagnostics);
  if (!diagnostics.errors.empty()) throw ConfigError(source, std::move(diagnostics.errors));
  return parse(accelerate.deepspeed, world_size, accelerate.source, std::move(diagnostics),
               overrides);
}

}  // namespace strata::engine
