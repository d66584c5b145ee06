// activation_checkpointing, read with DeepSpeed's defaults
// (deepspeed/runtime/activation_checkpointing/config.py).
#include "engine/config/sections.h"

namespace strata::engine::detail {

void read_activation_checkpointing(JsonReader& top, ActivationCheckpointingConfig& out) {
  JsonReader section(top.find("activation_checkpointing"), "activation_checkpointing",
                     top.diagnostics());
  section.read("partition_activations", out.partition_activations);
  section.read("cpu_checkpointing", out.cpu_checkpointing);
  section.read("contiguous_memory_optimization", out.contiguous_memory_optimization);
  section.read("number_checkpoints", out.number_checkpoints, IntRange{1, INT64_MAX});
  section.read("synchronize_checkpoint_boundary", out.synchronize_checkpoint_boundary);
  section.read("profile", out.profile);
  section.finish();
}

}  // namespace strata::engine::detail
