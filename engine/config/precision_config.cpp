// fp16 and bf16 (deepspeed/runtime/precision_config.py).
#include <fmt/format.h>

#include "engine/config/sections.h"

namespace strata::engine::detail {
namespace {

// Hugging Face writes "enabled": "auto" and fills it from --fp16/--bf16; a Trainer run without
// either trains in fp32, so "auto" resolves to false in both sections (docs/config.md).
//
// With strata's --bf16 or --fp16 (`flag`), enabled is filled as the Trainer's fill_match fills it
// (transformers' integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process):
// "auto" becomes true, and so does an absent key, since the flag asks for that precision; a false
// written outright contradicts the flag and is an error naming both.
void read_enabled(JsonReader& section, std::string_view flag, bool flag_given, bool& enabled) {
  if (!flag_given) {
    section.read("enabled", enabled, false);
    return;
  }
  if (section.is_auto("enabled")) {
    enabled = true;
    section.note_auto("enabled", "true", fmt::format("from {}", flag));
    return;
  }
  enabled = true;
  if (!section.read("enabled", enabled) || enabled) return;
  section.error("enabled", fmt::format("false, but {} asks for it; remove {}, or set enabled to "
                                       "true or \"auto\"",
                                       flag, flag));
}

void read_fp16(JsonReader& top, bool flag_given, Fp16Config& out) {
  JsonReader section(top.find("fp16"), "fp16", top.diagnostics());
  read_enabled(section, "--fp16", flag_given, out.enabled);
  section.read("auto_cast", out.auto_cast);
  section.read("loss_scale", out.loss_scale, RealRange{0, 1e300});
  section.read("initial_scale_power", out.initial_scale_power, IntRange{0, 126});
  section.read("loss_scale_window", out.loss_scale_window, IntRange{1, INT64_MAX});
  section.read("hysteresis", out.hysteresis, IntRange{1, INT64_MAX});
  section.read("consecutive_hysteresis", out.consecutive_hysteresis);
  section.read("min_loss_scale", out.min_loss_scale, RealRange{0, 1e300, true});
  section.read("fp16_master_weights_and_grads", out.fp16_master_weights_and_grads);
  if (out.fp16_master_weights_and_grads)
    section.unsupported("fp16_master_weights_and_grads", "fp16 master weights",
                        "strata keeps fp32 master weights; set it to false");
  // Apex AMP's key, read by old DeepSpeed versions: O1/O2 levels are not DeepSpeed's fp16.
  if (section.has("fp16_opt_level"))
    section.unsupported("fp16_opt_level", "Apex AMP opt levels", "remove it");
  section.finish();
}

// Keys of the fp16 section that configs copy into bf16, where DeepSpeed refuses them too: bf16's
// range needs no loss scaling.
void refuse_fp16_keys(JsonReader& section) {
  for (std::string_view key :
       {"auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
        "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"}) {
    if (section.has(key))
      section.error(key,
                    "is a key of fp16, not of bf16 (bf16 needs no loss scaling, and "
                    "DeepSpeed refuses it here too); remove it");
  }
}

void read_bf16(JsonReader& top, bool flag_given, Bf16Config& out) {
  top.alias("bf16", "bfloat16");
  const nlohmann::json* node = top.find("bf16");  // first: path_of names the key found
  JsonReader section(node, top.path_of("bf16"), top.diagnostics());
  refuse_fp16_keys(section);
  read_enabled(section, "--bf16", flag_given, out.enabled);
  section.read("immediate_grad_update", out.immediate_grad_update);
  section.read("check_grad_overflow", out.check_grad_overflow);
  section.read("bf16_master_weights_and_grads", out.bf16_master_weights_and_grads);
  section.read("bf16_optimizer_states", out.bf16_optimizer_states);
  if (out.bf16_optimizer_states && !out.bf16_master_weights_and_grads)
    section.error("bf16_optimizer_states",
                  "true requires bf16_master_weights_and_grads true; set both or neither");
  if (out.bf16_master_weights_and_grads && !out.enabled)
    section.error("bf16_master_weights_and_grads",
                  "true keeps master weights in bf16, which needs bf16 training: set "
                  "bf16.enabled true, or set bf16_master_weights_and_grads false");
  section.finish();
}

}  // namespace

void read_precision(JsonReader& top, const ConfigOverrides& overrides, Fp16Config& fp16,
                    Bf16Config& bf16) {
  auto& errors = top.diagnostics().errors;
  const bool both_flags = overrides.bf16 && overrides.fp16;
  if (both_flags) {
    errors.push_back(
        "--bf16 and --fp16: both given, but a run trains in one precision (DeepSpeed refuses fp16 "
        "and bf16 enabled together); give one of them");
  }
  read_fp16(top, overrides.fp16 && !both_flags, fp16);
  read_bf16(top, overrides.bf16 && !both_flags, bf16);
  if (both_flags || !fp16.enabled || !bf16.enabled) return;
  if (overrides.bf16 || overrides.fp16) {
    const bool bf16_flag = overrides.bf16;
    errors.push_back(fmt::format(
        "{}.enabled is true, but {} asks for {}: both is not supported by strata (nor by "
        "DeepSpeed); remove {} or set {}.enabled to false",
        bf16_flag ? "fp16" : top.path_of("bf16"), bf16_flag ? "--bf16" : "--fp16",
        bf16_flag ? "bf16" : "fp16", bf16_flag ? "--bf16" : "--fp16",
        bf16_flag ? "fp16" : top.path_of("bf16")));
    return;
  }
  errors.push_back(fmt::format(
      "fp16.enabled and {}.enabled: both true is not supported by strata (nor by DeepSpeed); "
      "enable one of them",
      top.path_of("bf16")));
}

}  // namespace strata::engine::detail

namespace strata::engine {

bool checks_overflow(const Fp16Config& fp16, const Bf16Config& bf16) {
  if (fp16.enabled) return true;
  if (bf16.enabled) return bf16.check_grad_overflow;
  return true;
}

bool gradients_can_change_the_step(double max_norm, const Fp16Config& fp16,
                                   const Bf16Config& bf16) {
  return max_norm > 0 || checks_overflow(fp16, bf16);
}

}  // namespace strata::engine
