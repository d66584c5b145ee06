// fp16 and bf16 (deepspeed/runtime/precision_config.py).
#include <fmt/format.h>

#include "engine/config/sections.h"

namespace strata::engine::detail {
namespace {

// Hugging Face writes "enabled": "auto" and fills it from --fp16/--bf16. strata resolves it
// after reading both sections: bf16 on (strata's native training precision) unless fp16 was
// explicitly enabled; fp16 "auto" is off.
struct AutoFlags {
  bool fp16_auto = false;
  bool bf16_auto = false;
};

void read_fp16(JsonReader& top, Fp16Config& out, AutoFlags& flags) {
  JsonReader section(top.find("fp16"), "fp16", top.diagnostics());
  flags.fp16_auto = section.is_auto("enabled");
  section.read("enabled", out.enabled, false);
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

void read_bf16(JsonReader& top, Bf16Config& out, AutoFlags& flags) {
  top.alias("bf16", "bfloat16");
  const nlohmann::json* node = top.find("bf16");  // first: path_of names the key found
  JsonReader section(node, top.path_of("bf16"), top.diagnostics());
  flags.bf16_auto = section.is_auto("enabled");
  section.read("enabled", out.enabled, false);
  section.read("immediate_grad_update", out.immediate_grad_update);
  section.read("check_grad_overflow", out.check_grad_overflow);
  section.read("bf16_master_weights_and_grads", out.bf16_master_weights_and_grads);
  section.read("bf16_optimizer_states", out.bf16_optimizer_states);
  if (out.bf16_optimizer_states && !out.bf16_master_weights_and_grads)
    section.error("bf16_optimizer_states",
                  "true requires bf16_master_weights_and_grads true; set both or neither");
  if (out.bf16_master_weights_and_grads)
    section.unsupported("bf16_master_weights_and_grads", "bf16 master weights",
                        "strata keeps fp32 master weights and optimizer states; set it to false");
  section.finish();
}

}  // namespace

void read_precision(JsonReader& top, Fp16Config& fp16, Bf16Config& bf16) {
  AutoFlags flags;
  read_fp16(top, fp16, flags);
  read_bf16(top, bf16, flags);
  if (flags.bf16_auto) bf16.enabled = !fp16.enabled;
  if (fp16.enabled && bf16.enabled) {
    top.diagnostics().errors.push_back(fmt::format(
        "fp16.enabled and {}.enabled: both true is not supported by strata (nor by DeepSpeed); "
        "enable one of them",
        top.path_of("bf16")));
  }
}

}  // namespace strata::engine::detail
