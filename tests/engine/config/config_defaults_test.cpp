// strata's default for every key of a DeepSpeed config, beside DeepSpeed's own, as its source
// gives it (deepspeedai/DeepSpeed v0.19.5): a key missing from a file takes DeepSpeed's default
// (docs/config.md), unless the row says why strata chose otherwise. A new key the loader reads
// without a row here fails the completeness test below.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using nlohmann::json;

struct Row {
  const char* path;      // JSON pointer into the resolved config (to_json)
  json strata;           // strata's default
  json deepspeed;        // DeepSpeed's default; null where DeepSpeed has none
  const char* why = "";  // where the two differ: strata's reason (config.h says it too)
};

// DeepSpeed requires one of the batch sizes; the rest of every table reads this file.
constexpr std::string_view kBatchOnly = R"({"train_micro_batch_size_per_gpu": 1})";

const std::vector<Row> kTopLevel = {
    // deepspeed/runtime/config.py, _set_batch_related_parameters: micro alone gives
    // gradient_accumulation_steps 1 and train_batch_size = micro x world size.
    {"/train_micro_batch_size_per_gpu", 1, 1},
    {"/train_batch_size", 1, 1},
    {"/gradient_accumulation_steps", 1, 1},
    // deepspeed/runtime/constants.py. GRADIENT_CLIPPING_DEFAULT is 1.0 since v0.19.3
    // (deepspeedai/DeepSpeed#8068; 0, off, before).
    {"/gradient_clipping", 1.0, 1.0},
    {"/steps_per_print", 10, nullptr,
     "DeepSpeed's null prints none of its step lines; strata's progress line follows this key, so "
     "it keeps DeepSpeed's default before v0.15.2, 10"},
    {"/wall_clock_breakdown", false, false},
    // deepspeed/runtime/checkpoint_engine and constants.py: CHECKPOINT_TAG_VALIDATION_DEFAULT is
    // ValidationMode.WARN (matched without case), LOAD_UNIVERSAL_CHECKPOINT_DEFAULT and
    // USE_NODE_LOCAL_STORAGE_CHECKPOINT_DEFAULT False.
    {"/checkpoint/tag_validation", "Warn", "WARN"},
    {"/checkpoint/load_universal", false, false},
    {"/checkpoint/use_node_local_storage", false, false},
    // deepspeed/runtime/precision_config.py
    {"/fp16/enabled", false, false},
    {"/fp16/auto_cast", false, false},
    {"/fp16/loss_scale", 0, 0},
    {"/fp16/initial_scale_power", 16, 16},
    {"/fp16/loss_scale_window", 1000, 1000},
    {"/fp16/hysteresis", 2, 2},
    {"/fp16/consecutive_hysteresis", false, false},
    {"/fp16/min_loss_scale", 1, 1},
    {"/fp16/fp16_master_weights_and_grads", false, false},
    {"/bf16/enabled", false, false},
    {"/bf16/immediate_grad_update", false, false},
    {"/bf16/check_grad_overflow", true, true},
    {"/bf16/bf16_master_weights_and_grads", false, false},
    {"/bf16/bf16_optimizer_states", false, false},
    // DeepSpeed builds no optimizer without the section (the training script's is used);
    // deepspeed/ops/adam/cpu_adam.py and fused_adam.py give the params' defaults, and
    // deepspeed/runtime/config.py ADAM_W_MODE_DEFAULT and torch_adam's False.
    {"/optimizer/type", "AdamW", nullptr,
     "strata has no training script to take an optimizer from: no section trains AdamW"},
    {"/optimizer/params/lr", 1e-3, 1e-3},
    {"/optimizer/params/betas", {0.9, 0.999}, {0.9, 0.999}},
    {"/optimizer/params/eps", 1e-8, 1e-8},
    {"/optimizer/params/weight_decay", 0, 0},
    {"/optimizer/params/bias_correction", true, true},
    {"/optimizer/params/adam_w_mode", true, true},
    {"/optimizer/params/torch_adam", false, false},
    // deepspeed/runtime/zero/config.py
    {"/zero_optimization/stage", 0, 0},
    {"/zero_optimization/contiguous_gradients", true, true},
    {"/zero_optimization/reduce_scatter", true, true},
    {"/zero_optimization/reduce_bucket_size", 500'000'000, 500'000'000},
    {"/zero_optimization/use_multi_rank_bucket_allreduce", true, true},
    {"/zero_optimization/allgather_partitions", true, true},
    {"/zero_optimization/allgather_bucket_size", 500'000'000, 500'000'000},
    {"/zero_optimization/overlap_comm", false, false},  // null: true only at stage 3
    {"/zero_optimization/load_from_fp32_weights", true, true},
    {"/zero_optimization/elastic_checkpoint", false, false},
    {"/zero_optimization/sub_group_size", 1'000'000'000, 1'000'000'000},
    {"/zero_optimization/stage3_prefetch_bucket_size", 50'000'000, 50'000'000},
    {"/zero_optimization/stage3_param_persistence_threshold", 100'000, 100'000},
    {"/zero_optimization/stage3_model_persistence_threshold", INT64_MAX, INT64_MAX},  // maxsize
    {"/zero_optimization/stage3_max_live_parameters", 1'000'000'000, 1'000'000'000},
    {"/zero_optimization/stage3_max_reuse_distance", 1'000'000'000, 1'000'000'000},
    {"/zero_optimization/stage3_gather_16bit_weights_on_model_save", false, false},
    {"/zero_optimization/stage3_module_granularity_threshold", 0, 0},
    {"/zero_optimization/stage3_use_all_reduce_for_fetch_params", false, false},
    {"/zero_optimization/stage3_allgather_sequential", false, false},
    {"/zero_optimization/stage3_partition_stream_chunk_size", 0, 0},
    {"/zero_optimization/ignore_unused_parameters", true, true},
    {"/zero_optimization/round_robin_gradients", false, false},
    {"/zero_optimization/memory_efficient_linear", true, true},
    {"/zero_optimization/override_module_apply", true, true},
    {"/zero_optimization/log_trace_cache_warnings", false, false},
    {"/zero_optimization/enable_sanity_checks", false, false},
    {"/zero_optimization/pipeline_loading_checkpoint", false, false},
    // deepspeed/runtime/zero/offload_config.py
    {"/zero_optimization/offload_param/device", "none", "none"},
    {"/zero_optimization/offload_param/nvme_path", nullptr, nullptr},
    {"/zero_optimization/offload_param/buffer_count", 5, 5},
    {"/zero_optimization/offload_param/buffer_size", 100'000'000, 100'000'000},
    {"/zero_optimization/offload_param/max_in_cpu", 1'000'000'000, 1'000'000'000},
    // deepspeed/runtime/zero/offload_config.py: true since deepspeedai/DeepSpeed#8207 (false
    // before); docs/memory.md has what a run does when it cannot lock them.
    {"/zero_optimization/offload_param/pin_memory", true, true},
    {"/zero_optimization/offload_optimizer/device", "none", "none"},
    {"/zero_optimization/offload_optimizer/nvme_path", nullptr, nullptr},
    {"/zero_optimization/offload_optimizer/buffer_count", 4, 4},
    {"/zero_optimization/offload_optimizer/pin_memory", true, true},
    {"/zero_optimization/offload_optimizer/pipeline_read", false, false},
    {"/zero_optimization/offload_optimizer/pipeline_write", false, false},
    {"/zero_optimization/offload_optimizer/fast_init", false, false},
    {"/zero_optimization/offload_optimizer/ratio", 1.0, 1.0},
    // deepspeed/runtime/swap_tensor/constants.py (AIO_*_DEFAULT)
    {"/aio/block_size", 1'048'576, 1'048'576},
    {"/aio/queue_depth", 8, 8},
    {"/aio/intra_op_parallelism", 1, 1},
    {"/aio/single_submit", false, false},
    {"/aio/overlap_events", true, true},
    {"/aio/use_gds", false, false},
    {"/aio/verify", true, nullptr,
     "strata's own key (DeepSpeed has no checksums): a swapped block is checked on every read"},
    // deepspeed/runtime/activation_checkpointing/config.py (ACT_CHKPT_*_DEFAULT)
    {"/activation_checkpointing/partition_activations", false, false},
    {"/activation_checkpointing/cpu_checkpointing", false, false},
    {"/activation_checkpointing/contiguous_memory_optimization", false, false},
    {"/activation_checkpointing/number_checkpoints", nullptr, nullptr},
    {"/activation_checkpointing/synchronize_checkpoint_boundary", false, false},
    {"/activation_checkpointing/profile", false, false},
};

// deepspeed/runtime/lr_schedules.py, each schedule's constructor. warmup_max_lr's None there is the
// optimizer's lr, 1e-3 by default; OneCycle's second-half None is the first half's value.
constexpr std::string_view kWarmupDecay = R"({"train_micro_batch_size_per_gpu": 1,
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10}}})";
const std::vector<Row> kWarmupDecayRows = {
    {"/scheduler/params/warmup_min_lr", 0, 0},
    {"/scheduler/params/warmup_max_lr", 1e-3, 1e-3},
    {"/scheduler/params/warmup_num_steps", 1000, 1000},
    {"/scheduler/params/warmup_type", "log", "log"},
    {"/scheduler/params/last_batch_iteration", -1, -1},
};
constexpr std::string_view kWarmupCosine = R"({"train_micro_batch_size_per_gpu": 1,
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10}}})";
const std::vector<Row> kWarmupCosineRows = {
    {"/scheduler/params/warmup_min_ratio", 0, 0},
    {"/scheduler/params/warmup_num_steps", 1000, 1000},
    {"/scheduler/params/cos_min_ratio", 1e-4, 1e-4},
    {"/scheduler/params/warmup_type", "log", "log"},
    {"/scheduler/params/last_batch_iteration", -1, -1},
};
constexpr std::string_view kOneCycle = R"({"train_micro_batch_size_per_gpu": 1,
    "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3}}})";
const std::vector<Row> kOneCycleRows = {
    {"/scheduler/params/decay_lr_rate", 0, 0},
    {"/scheduler/params/cycle_first_step_size", 2000, 2000},
    {"/scheduler/params/cycle_second_step_size", 2000, 2000},
    {"/scheduler/params/cycle_first_stair_count", 0, 0},
    {"/scheduler/params/cycle_second_stair_count", 0, 0},
    {"/scheduler/params/decay_step_size", 0, 0},
    {"/scheduler/params/cycle_momentum", true, true},
    {"/scheduler/params/cycle_min_mom", 0.8, 0.8},
    {"/scheduler/params/cycle_max_mom", 0.9, 0.9},
    {"/scheduler/params/decay_mom_rate", 0, 0},
    {"/scheduler/params/last_batch_iteration", -1, -1},
};

json resolved(std::string_view text) {
  return to_json(parse_config_text(text).config);
}

// DeepSpeed upper-cases tag_validation before it compares; strata writes it as its docs do.
bool same_default(const json& a, const json& b) {
  if (!a.is_string() || !b.is_string()) return a == b;
  std::string x = a.get<std::string>();
  std::string y = b.get<std::string>();
  auto lower = [](std::string& text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  };
  lower(x);
  lower(y);
  return x == y;
}

void expect_rows(std::string_view given, const std::vector<Row>& rows) {
  const json config = resolved(given);
  for (const Row& row : rows) {
    const json::json_pointer pointer(row.path);
    ASSERT_TRUE(config.contains(pointer)) << row.path << " is not in the resolved config";
    EXPECT_EQ(config.at(pointer), row.strata) << row.path << ": strata's default changed";
    if (std::string_view(row.why).empty()) {
      EXPECT_TRUE(same_default(row.strata, row.deepspeed))
          << row.path << ": strata " << row.strata << ", DeepSpeed " << row.deepspeed
          << "; take DeepSpeed's, or say why not";
    } else {
      EXPECT_FALSE(same_default(row.strata, row.deepspeed)) << row.path << ": the same now";
    }
  }
}

struct Table {
  std::string_view given;
  const std::vector<Row>* rows;
};

const std::vector<Table> kTables = {{kBatchOnly, &kTopLevel},
                                    {kWarmupDecay, &kWarmupDecayRows},
                                    {kWarmupCosine, &kWarmupCosineRows},
                                    {kOneCycle, &kOneCycleRows}};

TEST(ConfigDefaults, EveryKeyTakesDeepSpeedsDefaultOrSaysWhyNot) {
  for (const Table& table : kTables)
    expect_rows(table.given, *table.rows);
}

// Every leaf of the resolved defaults outside strata's own section has a row above; the scheduler
// tables hold the params their file does not give (the required ones have no default).
TEST(ConfigDefaults, TheTableHasARowForEveryKey) {
  for (const Table& table : kTables) {
    const json given = json::parse(table.given);
    const json flat = resolved(table.given).flatten();
    std::vector<std::string> missing;
    for (const auto& item : flat.items()) {
      // A copy, not a structured binding: clang 14 cannot capture a binding in the lambda below.
      const std::string path = item.key();
      if (path.starts_with("/strata/")) continue;
      // Arrays flatten to one leaf per element; betas' row holds the whole array.
      if (path.starts_with("/optimizer/params/betas/")) continue;
      const bool scheduler = path.starts_with("/scheduler/");
      if (scheduler == (table.rows == &kTopLevel)) continue;
      if (path == "/scheduler/type" || given.contains(json::json_pointer(path))) continue;
      const bool listed = std::any_of(table.rows->begin(), table.rows->end(),
                                      [&](const Row& row) { return row.path == path; });
      if (!listed) missing.push_back(path);
    }
    EXPECT_THAT(missing, ::testing::IsEmpty())
        << table.given << ": add a row with DeepSpeed's default for each";
  }
}

// "auto" is the Trainer's value where it fills one, else the row's: gradient_clipping "auto" is
// max_grad_norm's default 1.0, the same as a missing key.
TEST(ConfigDefaults, GradientClippingAutoIsTheTrainersMaxGradNorm) {
  const Config c = parse_config_text(R"({"train_micro_batch_size_per_gpu": 1,
                                         "gradient_clipping": "auto"})")
                       .config;
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_DOUBLE_EQ(parse_config_text(R"({"train_micro_batch_size_per_gpu": 1,
                                         "gradient_clipping": 0})")
                       .config.gradient_clipping,
                   0.0);
}

}  // namespace
}  // namespace strata::engine
