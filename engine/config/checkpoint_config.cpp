// strata.checkpoint (where and how often `strata train` saves) and DeepSpeed's "checkpoint"
// section, with what each of DeepSpeed's keys means in strata.
#include <fmt/format.h>

#include "engine/config/sections.h"

namespace strata::engine {

const char* to_string(CheckpointConfig::TagValidation validation) {
  switch (validation) {
    case CheckpointConfig::TagValidation::ignore:
      return "Ignore";
    case CheckpointConfig::TagValidation::warn:
      return "Warn";
    case CheckpointConfig::TagValidation::fail:
      return "Fail";
  }
  return "?";
}

namespace detail {
namespace {

// checkpoint.parallel_write.pipeline_stage: DeepSpeed's write of pipeline-parallel checkpoints
// by stage.
void read_parallel_write(JsonReader& section) {
  JsonReader parallel_write(section.find("parallel_write"), "checkpoint.parallel_write",
                            section.diagnostics());
  bool pipeline_stage = false;
  parallel_write.read("pipeline_stage", pipeline_stage);
  if (pipeline_stage) {
    parallel_write.diagnostics().warnings.push_back(
        "checkpoint.parallel_write.pipeline_stage: true is not used: strata has no pipeline "
        "parallelism, and every rank always writes its own shard files in parallel");
  }
  parallel_write.finish();
}

// checkpoint.writer: DeepSpeed's FastPersist writer (deepspeed/runtime/model_checkpointing/). Its
// keys are accepted so that a typo is still caught; none of them is used.
void read_writer(JsonReader& section) {
  const nlohmann::json* node = section.find("writer");
  JsonReader writer(node, "checkpoint.writer", section.diagnostics());
  writer.accept({"type", "decoupled", "io_buffer_size", "io_buffer_double", "show_statistics",
                 "data_parallel", "io_multiplier"});
  if (node != nullptr && node->is_object() && !node->empty()) {
    writer.diagnostics().warnings.push_back(
        "checkpoint.writer: DeepSpeed's checkpoint writer (FastPersist) is not used; strata "
        "writes with its own, every rank its own shard files in parallel");
  }
  writer.finish();
}

}  // namespace

// strata.checkpoint: where and how often `strata train` saves. A schedule without a directory
// saves nothing, which is worth saying: the user asked for checkpoints.
void read_checkpoint_schedule(JsonReader& strata, CheckpointConfig& out) {
  JsonReader checkpoint(strata.find("checkpoint"), "strata.checkpoint", strata.diagnostics());
  checkpoint.read("dir", out.dir);
  checkpoint.read("every_steps", out.every_steps, IntRange{0, INT64_MAX});
  checkpoint.read("keep_last", out.keep_last, IntRange{0, INT64_MAX});
  if (out.dir.empty() && (out.every_steps > 0 || out.keep_last > 0)) {
    checkpoint.diagnostics().warnings.push_back(
        fmt::format("strata.checkpoint: every_steps {} and keep_last {} without dir; nothing is "
                    "saved (set strata.checkpoint.dir)",
                    out.every_steps, out.keep_last));
  }
  checkpoint.finish();
}

void read_checkpoint(JsonReader& top, CheckpointConfig& out) {
  using TagValidation = CheckpointConfig::TagValidation;
  JsonReader section(top.find("checkpoint"), "checkpoint", top.diagnostics());
  auto& diagnostics = section.diagnostics();
  // DeepSpeed upper-cases the value before matching it.
  section.read_enum("tag_validation", out.tag_validation,
                    {{"Ignore", TagValidation::ignore},
                     {"Warn", TagValidation::warn},
                     {"Fail", TagValidation::fail}},
                    /*ignore_case=*/true);
  if (section.read("load_universal", out.load_universal) && out.load_universal) {
    diagnostics.notes.push_back(
        "checkpoint.load_universal: true changes nothing: strata's checkpoints are universal by "
        "construction (tensors stored by parameter name with shard offsets), so any checkpoint "
        "loads at any ZeRO stage, offload and world size without a conversion step");
  }
  if (section.read("use_node_local_storage", out.use_node_local_storage) &&
      out.use_node_local_storage) {
    diagnostics.warnings.push_back(
        "checkpoint.use_node_local_storage: true is not used: strata writes every rank's files "
        "into the one checkpoint directory, which every rank must see (a shared file system)");
  }
  read_parallel_write(section);
  read_writer(section);
  bool serialization = true;  // torch.save's zipfile format, DeepSpeed's default
  if (section.read("checkpoint_serialization", serialization) && !serialization) {
    diagnostics.warnings.push_back(
        "checkpoint.checkpoint_serialization: false is not used: strata's checkpoints are "
        "safetensors files, never torch.save's");
  }
  section.finish();
}

}  // namespace detail
}  // namespace strata::engine
