// `strata estimate`, run as a user runs it: one JSON row per stage/offload choice with strata's
// and DeepSpeed's numbers, the config's sizes and model shape taken in, every mistake refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gpu/device_query.h"
#include "gpu/host/host_device.h"
#include "models/gpt/gpt.h"
#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

nlohmann::json estimate_json(const std::vector<std::string>& extra) {
  std::vector<std::string> arguments = {"estimate", "--json"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

const nlohmann::json* find_row(const nlohmann::json& rows, int stage, const std::string& param,
                               const std::string& optimizer) {
  for (const nlohmann::json& row : rows) {
    if (row.at("stage") == stage && row.at("offload_param") == param &&
        row.at("offload_optimizer") == optimizer) {
      return &row;
    }
  }
  return nullptr;
}

std::int64_t term_bytes(const nlohmann::json& row, const std::string& name) {
  for (const nlohmann::json& term : row.at("terms")) {
    if (term.at("name") == name) return term.at("bytes_per_rank").get<std::int64_t>();
  }
  return 0;
}

TEST(EstimateCommand, SevenBillionOnEightGpusWithDeepSpeedsNumbers) {
  nlohmann::json rows =
      estimate_json({"--params", "7B", "--largest-layer", "0.5B", "--gpus-per-node", "8",
                     "--gpu-memory", "80G", "--compare", "deepspeed"});
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 12u);
  std::set<std::string> devices = {"none", "cpu", "nvme"};
  for (const nlohmann::json& row : rows) {
    EXPECT_TRUE(row.at("stage") >= 0 && row.at("stage") <= 3) << row.dump();
    EXPECT_TRUE(devices.contains(row.at("offload_param").get<std::string>()));
    EXPECT_TRUE(devices.contains(row.at("offload_optimizer").get<std::string>()));
    EXPECT_GT(row.at("per_gpu_bytes").get<std::int64_t>(), 0);
    EXPECT_GE(row.at("per_node_cpu_bytes").get<std::int64_t>(), 0);
    EXPECT_GE(row.at("nvme_bytes").get<std::int64_t>(), 0);
    EXPECT_TRUE(row.at("fits").is_boolean()) << row.dump();
    EXPECT_FALSE(row.at("verdict").get<std::string>().empty());
    EXPECT_EQ(row.at("params"), 7'000'000'000);
    EXPECT_EQ(row.at("largest_layer_params"), 500'000'000);
    bool covered = row.at("stage") >= 2 && row.at("offload_param") != "nvme" &&
                   row.at("offload_optimizer") != "nvme";
    EXPECT_EQ(row.contains("deepspeed_per_gpu_bytes"), covered) << row.dump();
    EXPECT_EQ(row.contains("deepspeed_per_node_cpu_bytes"), covered) << row.dump();
    std::int64_t sum = 0;
    for (const nlohmann::json& term : row.at("terms")) {
      if (term.at("tier") == "gpu") sum += term.at("bytes_per_rank").get<std::int64_t>();
    }
    EXPECT_EQ(sum, row.at("per_gpu_bytes").get<std::int64_t>());
  }
  // estimate_zero3_model_states_mem_needs(7e9, 5e8, 8, 1): 4L, and P*18*1*1.5 / P*16*1*1.5
  const nlohmann::json* z3_cc = find_row(rows, 3, "cpu", "cpu");
  ASSERT_NE(z3_cc, nullptr);
  EXPECT_EQ(z3_cc->at("deepspeed_per_gpu_bytes"), 2'000'000'000);
  EXPECT_EQ(z3_cc->at("deepspeed_per_node_cpu_bytes"), 189'000'000'000);
  const nlohmann::json* z3_nn = find_row(rows, 3, "none", "none");
  EXPECT_EQ(z3_nn->at("deepspeed_per_gpu_bytes"), 2'000'000'000 + 15'750'000'000);  // 4L + 18P/8
  // strata counts the same states plus fp32 gathered parameters and gradients
  EXPECT_GT(z3_nn->at("per_gpu_bytes").get<std::int64_t>(),
            z3_nn->at("deepspeed_per_gpu_bytes").get<std::int64_t>());
  // estimate_zero2_model_states_mem_needs(7e9, 8, 1, cpu_offload=True): 2P, P*max(32,16)*1.5
  const nlohmann::json* z2_c = find_row(rows, 2, "none", "cpu");
  EXPECT_EQ(z2_c->at("deepspeed_per_gpu_bytes"), 14'000'000'000);
  EXPECT_EQ(z2_c->at("deepspeed_per_node_cpu_bytes"), 336'000'000'000);
  // Stage 2 without offload: 18 bytes per element of the partition (~15.8 GB) plus the whole model
  // gathered in fp32 (28 GB) and a block's gradients: fits 80 GiB. Stage 0 (154 GB of states
  // alone) does not.
  EXPECT_EQ(find_row(rows, 2, "none", "none")->at("fits"), true);
  EXPECT_EQ(find_row(rows, 0, "none", "none")->at("fits"), false);
  // Everything on NVMe: the GPU holds the gathered modules and gradients only; the optimizer's
  // 12 bytes per element go to NVMe (the parameters stay in CPU memory: max_in_cpu is 1e9).
  const nlohmann::json* z3_vv = find_row(rows, 3, "nvme", "nvme");
  EXPECT_GT(z3_vv->at("nvme_bytes").get<std::int64_t>(), 12 * 7'000'000'000LL);
  EXPECT_EQ(term_bytes(*z3_vv, "optimizer_states_fp32") % 4096, 0);
  EXPECT_EQ(term_bytes(*z3_vv, "param_shards"), 0);
}

TEST(EstimateCommand, NoDeepSpeedFieldsUnlessAsked) {
  nlohmann::json rows = estimate_json({"--params", "1.3B", "--gpu-memory", "24GiB"});
  ASSERT_EQ(rows.size(), 12u);
  for (const nlohmann::json& row : rows)
    EXPECT_FALSE(row.contains("deepspeed_per_gpu_bytes"));
  // --largest-layer defaults to P / 32
  EXPECT_EQ(rows[0].at("largest_layer_params"), 1'300'000'000 / 32);
}

TEST(EstimateCommand, TooLittleGpuMemoryIsNamed) {
  nlohmann::json rows = estimate_json({"--params", "7B", "--gpu-memory", "1M"});
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row.at("fits"), false);
    EXPECT_NE(row.at("verdict").get<std::string>().find("more GPU memory"), std::string::npos);
  }
}

TEST(EstimateCommand, ModelShapeAndSizesComeFromTheConfig) {
  TempDir dir;
  std::filesystem::path file = dir.write("ds.json", R"({
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000},
    "strata": {"device_memory_budget": "1MiB",
               "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab": 256}}
  })");
  nlohmann::json rows =
      estimate_json({"--config", file.string(), "--model", "--gpus-per-node", "2"});
  ASSERT_EQ(rows.size(), 12u);
  // vocab*d + seq*d + n_layer*(12 d^2 + 13 d) + 2d = 16,384 + 2,048 + 2*49,984 + 128
  EXPECT_EQ(rows[0].at("params"), 118'528);
  EXPECT_EQ(rows[0].at("largest_layer_params"), 49'984);
  const nlohmann::json* z3_nn = find_row(rows, 3, "none", "none");
  ASSERT_NE(z3_nn, nullptr);
  // Stage 2 keeps every module gathered; a block's reduction (its shard of 26,624 elements is
  // over the 500 per rank that reduce_bucket_size 1000 gives) goes in ceil(26,624 / 500) = 54
  // equal pieces of ceil(26,624 / 54) = 494 elements, packed for the 2 ranks.
  EXPECT_EQ(term_bytes(*find_row(rows, 2, "none", "none"), "gradient_bucket_fp32"), 4 * 2 * 494);
  // No bf16 in this config: the engine keeps fp32 shards, 4 bytes per element.
  EXPECT_EQ(term_bytes(*z3_nn, "param_shards"),
            4 * z3_nn->at("partition_numel").get<std::int64_t>());
  // The model's own activation count for a micro-batch of 2, not checkpointed by this config.
  EXPECT_EQ(term_bytes(*z3_nn, "activations"),
            models::Gpt({2, 4, 64, 32, 256, 2}).activation_bytes(false, gpu::DataType::float32));
  // strata.device_memory_budget (1 MiB) is the GPU this tiny model still exceeds
  EXPECT_EQ(z3_nn->at("fits"), false);
}

// --kv-cache SxN: generation's cache as the engine allocates it, on the GPU in every row: 2
// layers x k and v x 3 sequences x 4 kv heads x 32 positions x 16 wide x 4 bytes, the sequences'
// starts and lengths, decode attention's scratch (each carved 64-byte aligned), and a row of
// logits per sequence.
TEST(EstimateCommand, GenerationsKvCacheIsATermOfTheDevice) {
  TempDir dir;
  std::filesystem::path file = dir.write("ds.json", R"({
    "train_micro_batch_size_per_gpu": 2,
    "strata": {"model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab": 256}}
  })");
  const nlohmann::json rows =
      estimate_json({"--config", file.string(), "--model", "--kv-cache", "3x32"});
  const std::int64_t expected = engine::Engine::cache_reservation_bytes(
      models::Gpt({2, 4, 64, 32, 256, 3}), 3, 32, gpu::DataType::float32);
  // The cache, its positions, its scratch (rounded to 64 bytes), and 3 rows of 256 fp32 logits.
  EXPECT_EQ(expected,
            2 * 2 * 3 * 4 * 32 * 16 * 4 + 64 + 64 + 3 * 4 * 1 * 18 * 4 + 32 + 3 * 256 * 4);
  for (const nlohmann::json& row : rows)
    EXPECT_EQ(term_bytes(row, "kv_cache"), expected);
  for (const std::vector<std::string>& wrong :
       {std::vector<std::string>{"--config", file.string(), "--model", "--kv-cache", "3"},
        std::vector<std::string>{"--params", "7B", "--kv-cache", "3x32"}}) {
    std::vector<std::string> arguments = {"estimate"};
    arguments.insert(arguments.end(), wrong.begin(), wrong.end());
    const RunResult refused = run_strata(arguments);
    EXPECT_EQ(refused.exit_status, 2);
    EXPECT_THAT(refused.err, ::testing::HasSubstr("--kv-cache"));
    EXPECT_THAT(refused.err, ::testing::HasSubstr("fix: "));
  }
}

// A vocabulary of 200 is held in 256 rows (models/vocab_padding.h): the parameters and the memory
// are those of the 256 rows the run allocates, and the header says so.
TEST(EstimateCommand, APaddedVocabularyIsCountedAsAllocatedAndNamed) {
  TempDir dir;
  const std::string model = R"({"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, )";
  const auto config = [&](int vocab) {
    return dir.write(fmt::format("vocab{}.json", vocab),
                     fmt::format(R"({{"train_micro_batch_size_per_gpu": 2,
                       "zero_optimization": {{"stage": 3}},
                       "strata": {{"model": {}"vocab": {}}}}}}})",
                                 model, vocab));
  };
  const nlohmann::json padded = estimate_json({"--config", config(200).string(), "--model"});
  const nlohmann::json aligned = estimate_json({"--config", config(256).string(), "--model"});
  // 256 x 64 + 32 x 64 + 2 x 49,984 + 128, as for a vocabulary of 256.
  EXPECT_EQ(padded[0].at("params"), 118'528);
  ASSERT_EQ(padded.size(), aligned.size());
  for (std::size_t row = 0; row < padded.size(); ++row)
    EXPECT_EQ(padded[row].at("per_gpu_bytes"), aligned[row].at("per_gpu_bytes")) << row;
  const RunResult text = run_strata({"estimate", "--config", config(200).string(), "--model"});
  EXPECT_EQ(text.exit_status, 0) << text.err;
  EXPECT_NE(text.out.find("118.53K params, largest layer 49.98K (from the config's strata.model; "
                          "vocab 200 padded to 256 rows)"),
            std::string::npos)
      << text.out;
}

// Where `strata train` runs on the host backend, estimate judges against the device train gets:
// the emulated GPU of the configured budget, or of half the RAM when the config sets none.
TEST(EstimateCommand, OnTheHostBackendTheGpuIsTheBudgetTrainGets) {
  const gpu::GpuInventory inventory = gpu::query_gpus();
  if (!inventory.gpus.empty() && inventory.probe_kernel_ran)
    GTEST_SKIP() << "train runs on " << inventory.gpus.front().name
                 << " here, not the host backend";
  TempDir dir;
  const std::filesystem::path unset = dir.write(
      "unset.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}})");
  RunResult text = run_strata({"estimate", "--params", "100M", "--config", unset.string()});
  ASSERT_EQ(text.exit_status, 0) << text.err;
  const double half_ram_gib =
      static_cast<double>(gpu::host::default_host_budget_bytes()) / (1024.0 * 1024.0 * 1024.0);
  EXPECT_NE(text.out.find(fmt::format("this machine: GPU {:.2f} GiB (the host backend's emulated "
                                      "GPU: half the RAM",
                                      half_ram_gib)),
            std::string::npos)
      << text.out;
  for (const nlohmann::json& row : estimate_json({"--params", "100M", "--config", unset.string()}))
    EXPECT_TRUE(row.at("fits").is_boolean()) << row.dump();

  const std::filesystem::path set =
      dir.write("set.json",
                R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
                  "strata": {"device_memory_budget": "3GiB"}})");
  RunResult budget = run_strata({"estimate", "--params", "100M", "--config", set.string()});
  ASSERT_EQ(budget.exit_status, 0) << budget.err;
  EXPECT_NE(budget.out.find("GPU 3.00 GiB (the host backend's emulated GPU: "
                            "strata.device_memory_budget)"),
            std::string::npos)
      << budget.out;
}

TEST(EstimateCommand, ActivationCheckpointingFollowsTheConfigOrTheFlag) {
  TempDir dir;
  std::string model = R"("strata": {"model": {"n_layer": 3, "n_head": 4, "d_model": 64,
                                              "seq_len": 32, "vocab": 256}})";
  std::filesystem::path plain =
      dir.write("plain.json", R"({"train_micro_batch_size_per_gpu": 1, )" + model + "}");
  std::filesystem::path checkpointed =
      dir.write("ckpt.json", R"({"train_micro_batch_size_per_gpu": 1,
                       "activation_checkpointing": {"partition_activations": true}, )" +
                                 model + "}");
  models::GptShape shape{3, 4, 64, 32, 256, 1};
  const gpu::DataType fp32 = gpu::DataType::float32;
  std::int64_t full = models::Gpt(shape).activation_bytes(false, fp32);
  std::int64_t shared = models::Gpt(shape).activation_bytes(true, fp32);
  ASSERT_LT(shared, full);
  auto activations = [](const nlohmann::json& rows) { return term_bytes(rows[0], "activations"); };
  EXPECT_EQ(activations(estimate_json({"--config", plain.string(), "--model"})), full);
  EXPECT_EQ(activations(estimate_json({"--config", checkpointed.string(), "--model"})), shared);
  EXPECT_EQ(activations(estimate_json(
                {"--config", plain.string(), "--model", "--activation-checkpointing"})),
            shared);
}

// With bf16 the model stores its activations in 16 bits (its norms' statistics and loss terms stay
// fp32), and the estimate counts what the model carves, to the byte.
TEST(EstimateCommand, ActivationsAreCountedInTheComputeType) {
  TempDir dir;
  std::string model = R"("strata": {"model": {"n_layer": 3, "n_head": 4, "d_model": 64,
                                              "seq_len": 32, "vocab": 256}})";
  std::filesystem::path bf16 = dir.write(
      "bf16.json",
      R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, )" + model + "}");
  models::GptShape shape{3, 4, 64, 32, 256, 1};
  const std::int64_t fp32_bytes =
      models::Gpt(shape).activation_bytes(false, gpu::DataType::float32);
  const std::int64_t bf16_bytes =
      models::Gpt(shape).activation_bytes(false, gpu::DataType::bfloat16);
  EXPECT_LT(bf16_bytes, fp32_bytes * 6 / 10);
  EXPECT_EQ(term_bytes(estimate_json({"--config", bf16.string(), "--model"})[0], "activations"),
            bf16_bytes);
}

TEST(EstimateCommand, TextTableHasARowPerChoice) {
  RunResult result =
      run_strata({"estimate", "--params", "7B", "--largest-layer", "0.5B", "--gpus-per-node", "8",
                  "--gpu-memory", "80G", "--compare", "deepspeed", "--terms"});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  for (const char* text : {"stage", "offload_param", "offload_optimizer", "verdict", "DS GPU",
                           "gathered_params", "fits"}) {
    EXPECT_NE(result.out.find(text), std::string::npos) << text << "\n" << result.out;
  }
  int rows = 0;
  std::size_t start = 0;
  while (start < result.out.size()) {
    std::size_t end = result.out.find('\n', start);
    std::string line = result.out.substr(start, end - start);
    for (const char* stage : {"0 ", "1 ", "2 ", "3 "})
      if (line.rfind(stage, 0) == 0) ++rows;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  EXPECT_EQ(rows, 12) << result.out;
}

struct BadUsage {
  std::vector<std::string> arguments;
  std::string message;
};

class EstimateRefuses : public ::testing::TestWithParam<BadUsage> {};

TEST_P(EstimateRefuses, WithExitStatusTwoAndAFix) {
  std::vector<std::string> arguments = {"estimate"};
  arguments.insert(arguments.end(), GetParam().arguments.begin(), GetParam().arguments.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_NE(result.err.find(GetParam().message), std::string::npos) << result.err;
  EXPECT_TRUE(result.out.empty()) << result.out;
}

INSTANTIATE_TEST_SUITE_P(
    Mistakes, EstimateRefuses,
    ::testing::Values(BadUsage{{}, "no model size given"},
                      BadUsage{{"--params", "seven"}, "--params 'seven' is not a parameter count"},
                      BadUsage{{"--params", "0"}, "is not a parameter count"},
                      BadUsage{{"--params", "1B", "--largest-layer", "2B"}, "is larger than"},
                      BadUsage{{"--params", "1B", "--largest-layer", "1"},
                               "cuts --params 1B into more than 100000 modules"},
                      BadUsage{{"--model"}, "no --config was given"},
                      BadUsage{{"--params", "1B", "--gpu-memory", "lots"}, "not a byte size"},
                      BadUsage{{"--params", "1B", "--compare", "megatron"}, "--compare"},
                      BadUsage{{"--params", "1B", "--gpus-per-node", "0"}, "--gpus-per-node"},
                      BadUsage{{"--params", "1B", "--nodes", "-1"}, "--nodes"},
                      BadUsage{{"--params", "1B", "--config", "/nonexistent/ds.json"},
                               "/nonexistent/ds.json"}));

TEST(EstimateCommand, RefusesParamsWithModel) {
  TempDir dir;
  std::filesystem::path file = dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 1})");
  RunResult result =
      run_strata({"estimate", "--params", "1B", "--config", file.string(), "--model"});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_NE(result.err.find("--params and --model"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("fix:"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace strata::tools::testing
