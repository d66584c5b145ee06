#include "engine/config/deepspeed_keys.h"

#include <fmt/format.h>

#include <array>

namespace strata::engine::detail {
namespace {

// One DeepSpeed top-level key strata does not act on: what DeepSpeed does with it, and what
// running without it means for a strata run. `off` is a value that asks for nothing beyond
// what strata does anyway (besides null, false, "", {}, [] and {"enabled": false}).
struct IgnoredKey {
  std::string_view key;
  std::string_view feature;
  std::string_view consequence;
  std::string_view off = "";  // JSON text, "" for none
};

// DeepSpeed's names (deepspeed/runtime/constants.py, config.py, and the sections of monitor/,
// profiling/, autotuning/, compression/, comm/, elasticity/, nebula/).
constexpr std::array kIgnored = {
    IgnoredKey{"zero_allow_untested_optimizer",
               "lets ZeRO wrap an optimizer DeepSpeed has not tested",
               "nothing: strata runs its own Adam, AdamW, Adagrad and Lion"},
    IgnoredKey{"zero_force_ds_cpu_optimizer", "insists on DeepSpeed's CPU Adam under offload",
               "nothing: strata always steps offloaded states with its own CPU optimizer"},
    IgnoredKey{"prescale_gradients", "divides gradients by the world size before the all-reduce",
               "strata reduces in fp32 and averages after; the same step up to rounding"},
    IgnoredKey{"gradient_predivide_factor", "divides gradients by a factor before the all-reduce",
               "strata reduces in fp32 and averages after; the same step up to rounding", "1"},
    IgnoredKey{"communication_data_type", "the data type of gradient reductions",
               "strata reduces gradients in fp32", "\"fp32\""},
    IgnoredKey{"seq_parallel_communication_data_type",
               "the data type of sequence-parallel collectives",
               "nothing: strata has no sequence parallelism", "\"fp32\""},
    IgnoredKey{"gradient_allreduce_op", "sums or averages gradients in the all-reduce",
               "strata averages over ranks", "\"mean\""},
    IgnoredKey{"sparse_gradients", "reduces embedding gradients as sparse tensors",
               "strata reduces them dense; the same step"},
    IgnoredKey{"disable_allgather", "broadcasts stage-1/2 parameters instead of all-gathering them",
               "nothing: the same parameters arrive on every rank"},
    IgnoredKey{"dump_state", "prints the engine's state at start",
               "nothing printed; `strata config check` shows the resolved config"},
    IgnoredKey{"memory_breakdown", "logs memory use at each step",
               "no such log; `strata train --metrics F` records device and CPU peaks"},
    IgnoredKey{"flops_profiler", "profiles the FLOPs of one step",
               "no profile; `strata train` prints tokens/s and `strata bench` the bounds"},
    IgnoredKey{"tensorboard", "sends metrics to TensorBoard",
               "metrics go to `strata train --metrics F.jsonl` instead"},
    IgnoredKey{"wandb", "sends metrics to Weights & Biases",
               "metrics go to `strata train --metrics F.jsonl` instead"},
    IgnoredKey{"csv_monitor", "writes metrics as CSV",
               "metrics go to `strata train --metrics F.jsonl` instead"},
    IgnoredKey{"comet", "sends metrics to Comet",
               "metrics go to `strata train --metrics F.jsonl` instead"},
    IgnoredKey{"monitor_config", "configures DeepSpeed's metric monitors",
               "metrics go to `strata train --metrics F.jsonl` instead"},
    IgnoredKey{"comms_logger", "logs every collective with its size and time",
               "no per-collective log"},
    IgnoredKey{"comms_config", "configures DeepSpeed's communication logger",
               "no per-collective log"},
    IgnoredKey{"timers", "times the engine's phases", "no such timers; steps are timed in the log"},
    IgnoredKey{"autotuning", "searches micro-batch sizes and ZeRO settings",
               "the run uses the settings given; `strata estimate` shows what fits"},
    IgnoredKey{"compile", "compiles the model with torch.compile",
               "nothing: strata's kernels are compiled ahead of time"},
    IgnoredKey{"tensor_parallel", "splits layers across GPUs (AutoTP)",
               "every rank holds whole layers: data parallelism with ZeRO only"},
    IgnoredKey{"sequence_parallel_size", "splits sequences across GPUs (Ulysses)",
               "every rank holds whole sequences", "1"},
    IgnoredKey{"data_parallel_size", "the data-parallel degree beside sequence parallelism",
               "every rank is data-parallel"},
    IgnoredKey{"expert_parallel", "places mixture-of-experts layers across GPUs",
               "nothing: strata's models have no experts"},
    IgnoredKey{"use_data_before_expert_parallelism", "orders data and expert parallel groups",
               "nothing: strata's models have no experts"},
    IgnoredKey{"data_types", "the data types of gradient accumulation, parameters and buffers",
               "gradients accumulate in fp32; parameters are stored as the bf16/fp16 sections say"},
    IgnoredKey{"nebula", "saves checkpoints asynchronously through Nebula",
               "strata does not use Nebula"},
    IgnoredKey{"datastates", "saves checkpoints asynchronously through DataStates",
               "strata does not use DataStates"},
    IgnoredKey{"elasticity", "adjusts batch sizes to the number of GPUs",
               "the batch sizes are the ones given"},
    IgnoredKey{"progressive_layer_drop", "skips layers at random as training goes",
               "every layer trains at every step"},
    IgnoredKey{"curriculum_learning", "grows the sequence length over training",
               "every step trains on full-length sequences"},
    IgnoredKey{"data_efficiency", "samples and routes data by difficulty",
               "data is read in order, the same for any world size"},
    IgnoredKey{"compression_training", "trains with quantization or pruning",
               "the model trains without compression"},
    IgnoredKey{"quantize_training", "trains with quantized weights (MoQ)",
               "the model trains without quantization"},
    IgnoredKey{"weight_quantization", "quantizes weights after loading",
               "weights are kept as trained"},
    IgnoredKey{"eigenvalue", "estimates Hessian eigenvalues for layer drop or quantization",
               "none are computed"},
    IgnoredKey{"sparse_attention", "runs block-sparse attention kernels",
               "attention is dense: the model sees every earlier token"},
    IgnoredKey{"pipeline", "configures pipeline parallelism for a PipelineModule",
               "no pipeline stages: every rank runs the whole model"},
    IgnoredKey{"hybrid_engine", "switches between generation and training for RLHF",
               "training only"},
    IgnoredKey{"torch_autocast", "runs the forward under torch.autocast",
               "precision comes from the bf16 and fp16 sections only"},
    IgnoredKey{"graph_harvesting", "captures CUDA graphs", "nothing: no graphs are captured"},
    IgnoredKey{"dataloader_drop_last", "drops the last partial batch of DeepSpeed's data loader",
               "nothing: strata's batches have no epoch end"},
    IgnoredKey{"managed_gradient_accumulation", "lets DeepSpeed's engine count micro-steps",
               "nothing: strata counts micro-steps itself"},
    IgnoredKey{"vocabulary_size", "sizes sparse embedding gradients",
               "nothing: the vocabulary comes from the model"},
    IgnoredKey{"log_level", "sets DeepSpeed's log level", "strata logs at its own level"},
    IgnoredKey{"msamp", "trains in FP8 through MS-AMP", "the model trains in bf16, fp16 or fp32"},
};

// The values that ask a feature for nothing: null, false, "", {}, [], {"enabled": false}.
bool is_off(const nlohmann::json& value, std::string_view off) {
  if (value.is_null() || value == false) return true;
  if (value.is_string() && value.get_ref<const std::string&>().empty()) return true;
  if ((value.is_object() || value.is_array()) && value.empty()) return true;
  if (value.is_object() && value.contains("enabled") && value["enabled"] == false) return true;
  if (value.is_object() && value.size() == 1 && value.contains("autotp_size") &&
      json_to_int(value["autotp_size"]).value_or(2) <= 1)
    return true;
  return !off.empty() && value == nlohmann::json::parse(off);
}

}  // namespace

void read_ignored_deepspeed_keys(JsonReader& top) {
  for (const IgnoredKey& ignored : kIgnored) {
    const nlohmann::json* value = top.find(ignored.key);
    if (value == nullptr || is_off(*value, ignored.off)) continue;
    top.diagnostics().warnings.push_back(
        fmt::format("{}: a DeepSpeed feature strata ignores ({}); {}", ignored.key, ignored.feature,
                    ignored.consequence));
  }
  // Apex AMP replaces the precision of the whole run; ignoring it would train something else.
  const nlohmann::json* amp = top.find("amp");
  if (amp != nullptr && amp->is_object() && amp->contains("enabled") && (*amp)["enabled"] == true) {
    top.error("amp",
              "enabled true (Apex AMP) is not supported by strata; use "
              "\"bf16\": {\"enabled\": true} or \"fp16\": {\"enabled\": true} instead");
  }
}

}  // namespace strata::engine::detail
