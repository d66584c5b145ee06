// `strata generate` run as a user runs it: greedy tokens that are the torch reference's argmax,
// the same ids from every placement of a checkpoint's weights, a batch of prompts, text streamed
// through the model's tokenizer and its chat template, and refusals naming the cause and the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/models/tiny_tokenizer.h"
#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "hf" / name;
}

json generated(const std::vector<std::string>& arguments) {
  std::vector<std::string> all = {"generate"};
  all.insert(all.end(), arguments.begin(), arguments.end());
  all.emplace_back("--json");
  const RunResult result = run_strata(all);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return result.exit_status == 0 ? json::parse(result.out) : json();
}

std::vector<std::int32_t> new_ids(const json& result) {
  return result.is_object() ? result["ids"].get<std::vector<std::int32_t>>()
                            : std::vector<std::int32_t>{};
}

std::string id_list(std::span<const std::int32_t> ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

// Each fixture's reference.safetensors holds torch's float64 logits for input_ids: the first
// greedy token after each prefix of the first row is their argmax there, wherever the top two
// differ by more than fp32 rounding could move them. GPT-2, Llama with 4 query heads over 2 kv
// heads, and Qwen2 with 4 over 1.
TEST(GenerateCommand, GreedyTokensAreTheTorchReferencesArgmax) {
  namespace ckpt = engine::checkpoint;
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    const ckpt::SafetensorsFile reference =
        ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
    const ckpt::TensorEntry& ids_entry = *reference.find("input_ids");
    const ckpt::TensorEntry& logits_entry = *reference.find("logits");
    const auto seq = static_cast<std::size_t>(ids_entry.shape[1]);
    const auto vocab = static_cast<std::size_t>(logits_entry.shape[2]);
    std::vector<std::int32_t> ids(seq);
    std::memcpy(ids.data(), reference.data(ids_entry).data(), seq * sizeof(std::int32_t));
    std::vector<float> logits(seq * vocab);
    std::memcpy(logits.data(), reference.data(logits_entry).data(), logits.size() * sizeof(float));
    int checked = 0;
    for (std::size_t k = 0; k < seq; ++k) {
      std::vector<float> row(logits.begin() + k * vocab, logits.begin() + (k + 1) * vocab);
      const auto best = std::ranges::max_element(row) - row.begin();
      std::vector<float> sorted = row;
      std::ranges::sort(sorted, std::greater<>());
      if (sorted[0] - sorted[1] < 1e-4f) continue;
      const json result =
          generated({"--model", fixture(name).string(), "--prompt-ids",
                     id_list(std::span(ids).first(k + 1)), "--max-new-tokens", "1"});
      EXPECT_EQ(new_ids(result), std::vector<std::int32_t>{static_cast<std::int32_t>(best)})
          << name << " after " << k + 1 << " tokens";
      ++checked;
    }
    EXPECT_GE(checked, 6) << name;
  }
}

// L2 H2 C32 T16 over the 256 bytes, its weights placed by `zero`.
std::string tiny_config(const std::string& zero) {
  return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2}}}},
  "zero_optimization": {},
  "strata": {{"model": {{"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab": 256}},
             "train_steps": 3, "seed": 7}}
}})",
                     zero);
}

std::filesystem::path trained_checkpoint(const TempDir& dir) {
  const std::filesystem::path config = dir.write("train.json", tiny_config(R"({"stage": 0})"));
  const RunResult trained =
      run_strata({"train", "--config", config.string(), "--save-dir",
                  (dir.path() / "ckpt").string(), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(trained.exit_status, 0) << trained.err;
  return dir.path() / "ckpt";
}

// The checkpoint's own config, and the same model with its weights on the device, in CPU memory
// and on NVMe at stage 3: the same ids, greedy and sampled; another seed draws others.
TEST(GenerateCommand, ACheckpointGeneratesTheSameIdsFromEveryPlacement) {
  const TempDir dir;
  const std::string checkpoint = trained_checkpoint(dir).string();
  const std::string swap = (dir.path() / "swap").string();
  const std::vector<std::string> zeros = {
      R"({"stage": 0})",
      R"({"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}})",
      fmt::format(R"({{"stage": 3, "offload_param": {{"device": "nvme", "nvme_path": "{}"}},
                      "offload_optimizer": {{"device": "nvme", "nvme_path": "{}"}}}})",
                  swap, swap)};
  const std::vector<std::string> greedy = {"--checkpoint", checkpoint,         "--prompt-ids",
                                           "5,9,11",       "--max-new-tokens", "10"};
  std::vector<std::string> sampled = greedy;
  sampled.insert(sampled.end(), {"--temperature", "1.5", "--top-k", "20", "--seed", "3"});
  const json alone = generated(greedy);
  EXPECT_EQ(alone["new_tokens"], 10);
  EXPECT_EQ(alone["prompt_tokens"], 3);
  EXPECT_EQ(alone["stop"], "max_new_tokens");
  EXPECT_TRUE(alone["text"].is_string());  // the built-in model's ids are bytes
  const json drawn = generated(sampled);
  for (std::size_t i = 0; i < zeros.size(); ++i) {
    const std::string config =
        dir.write(fmt::format("z{}.json", i), tiny_config(zeros[i])).string();
    for (const bool sampling : {false, true}) {
      std::vector<std::string> arguments = sampling ? sampled : greedy;
      arguments.insert(arguments.end(), {"--config", config});
      EXPECT_EQ(new_ids(generated(arguments)), new_ids(sampling ? drawn : alone)) << zeros[i];
    }
  }
  sampled.back() = "4";
  EXPECT_NE(new_ids(generated(sampled)), new_ids(drawn));
}

TEST(GenerateCommand, PromptsRunAsOneBatchWithOneJsonLineEach) {
  const TempDir dir;
  const std::string checkpoint = trained_checkpoint(dir).string();
  const std::filesystem::path prompts = dir.write(
      "prompts.jsonl",
      "{\"prompt_ids\": [5, 9, 11]}\n\n{\"prompt\": \"abc\"}\n{\"prompt_ids\": [1, 2]}\n");
  const RunResult batch =
      run_strata({"generate", "--checkpoint", checkpoint, "--prompts", prompts.string(),
                  "--max-new-tokens", "6", "--temperature", "1", "--seed", "5"});
  ASSERT_EQ(batch.exit_status, 0) << batch.err;
  std::vector<json> lines;
  std::istringstream out(batch.out);
  for (std::string line; std::getline(out, line);)
    lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  const std::vector<std::vector<std::string>> alone = {
      {"--prompt-ids", "5,9,11"}, {"--prompt", "abc"}, {"--prompt-ids", "1,2"}};
  for (std::size_t i = 0; i < alone.size(); ++i) {
    std::vector<std::string> arguments = {"--checkpoint",  checkpoint, "--max-new-tokens", "6",
                                          "--temperature", "1",        "--seed",           "5"};
    arguments.insert(arguments.end(), alone[i].begin(), alone[i].end());
    const json single = generated(arguments);
    EXPECT_EQ(lines[i]["ids"], single["ids"]) << "prompt " << i;
    EXPECT_EQ(lines[i]["text"], single["text"]);
    EXPECT_EQ(lines[i]["prompt_tokens"], single["prompt_tokens"]);
  }
}

// A GPT-2 of strata's own training with the tiny tokenizer and a ChatML template beside its
// config.json: text in, text streamed out, the same text as the JSON; a conversation rendered
// with the generation prompt.
TEST(GenerateCommand, TextStreamsThroughTheTokenizerAndChatRendersTheTemplate) {
  const TempDir dir;
  const std::filesystem::path folder =
      models::testing::write_chat_tokenizer(dir.path() / "model", models::testing::kChatMlTemplate);
  dir.write("model/config.json",
            R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32,
                "n_positions": 64, "vocab_size": 300, "eos_token_id": 260})");
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "hello world, hello there.\n";
  const std::filesystem::path data = dir.write("text.txt", text);
  const std::filesystem::path config =
      dir.write("train.json", fmt::format(R"({{"train_micro_batch_size_per_gpu": 2,
        "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2}}}},
        "strata": {{"model": {{"config": "{}", "seq_len": 16}}, "data": {{"path": "{}"}},
                   "train_steps": 20, "seed": 7}}}})",
                                          (folder / "config.json").string(), data.string()));
  const RunResult trained =
      run_strata({"train", "--config", config.string(), "--save-dir",
                  (dir.path() / "ckpt").string(), "--out", (dir.path() / "out").string()});
  ASSERT_EQ(trained.exit_status, 0) << trained.err;
  const std::string checkpoint = (dir.path() / "ckpt").string();
  const std::vector<std::string> asked = {"generate", "--checkpoint",     checkpoint, "--prompt",
                                          "hello",    "--max-new-tokens", "12"};
  const RunResult streamed = run_strata(asked);
  ASSERT_EQ(streamed.exit_status, 0) << streamed.err;
  const json result = generated(std::vector<std::string>(asked.begin() + 1, asked.end()));
  EXPECT_EQ(streamed.out, result["text"].get<std::string>() + "\n");
  EXPECT_THAT(streamed.err,
              HasSubstr(fmt::format("after {} new tokens", result["new_tokens"].get<int>())));

  const models::tokenizer::Tokenizer tokenizer = models::tokenizer::Tokenizer::load(folder);
  const std::filesystem::path chat =
      dir.write("chat.json", R"([{"role": "user", "content": "hello"}])");
  const json answer =
      generated({"--checkpoint", checkpoint, "--chat", chat.string(), "--max-new-tokens", "4"});
  EXPECT_EQ(
      answer["prompt_tokens"],
      tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", false).size());
}

// --sample-every: a sample at every Nth step and at the last, in the output and the metrics,
// the same text strata generate makes from the checkpoint of that step.
TEST(GenerateCommand, TrainingSamplesAreWhatGenerateMakesFromThatStep) {
  const TempDir dir;
  const std::filesystem::path config = dir.write("train.json", tiny_config(R"({"stage": 0})"));
  const std::filesystem::path metrics = dir.path() / "metrics.jsonl";
  const RunResult trained = run_strata(
      {"train", "--config", config.string(), "--steps", "5", "--sample-every", "2",
       "--sample-prompt", "ab", "--sample-tokens", "6", "--metrics", metrics.string(), "--save-dir",
       (dir.path() / "ckpt").string(), "--out", (dir.path() / "out").string()});
  ASSERT_EQ(trained.exit_status, 0) << trained.err;
  std::vector<std::int64_t> sampled_steps;
  json last;
  std::ifstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    const json step = json::parse(line);
    if (!step.contains("sample")) continue;
    sampled_steps.push_back(step["step"].get<std::int64_t>());
    last = step["sample"];
  }
  EXPECT_EQ(sampled_steps, (std::vector<std::int64_t>{2, 4, 5}));
  const json made = generated(
      {"--checkpoint", (dir.path() / "ckpt").string(), "--prompt", "ab", "--max-new-tokens", "6"});
  EXPECT_EQ(last["prompt"], "ab");
  EXPECT_EQ(last["text"], made["text"]);
  EXPECT_THAT(trained.out, HasSubstr("sample at step 5: \"ab\" -> " + made["text"].dump()));

  const RunResult too_long =
      run_strata({"train", "--config", config.string(), "--sample-every", "1", "--sample-prompt",
                  std::string(16, 'a'), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(too_long.exit_status, 2);
  EXPECT_THAT(too_long.err, HasSubstr("leave no room for a new token"));
  EXPECT_THAT(too_long.err, HasSubstr("fix: give a prompt of fewer than 16 tokens"));

  // A device budget that leaves the step waiting for memory has no room for the samples' cache:
  // the run is refused before its first step rather than stopped at its first sample. The
  // weights are in CPU memory, gathered for every module: on the device at stage 0 they are lent
  // in place, and no budget that holds the activations leaves the step short.
  std::string tight_config = tiny_config(
      R"({"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}})");
  tight_config.replace(tight_config.find(R"("seed": 7)"), 9,
                       R"("seed": 7, "device_memory_budget": 500000)");
  const std::filesystem::path tight = dir.write("tight.json", tight_config);
  const RunResult unsampled =
      run_strata({"train", "--config", tight.string(), "--out", (dir.path() / "out").string()});
  ASSERT_EQ(unsampled.exit_status, 0) << unsampled.err;
  ASSERT_THAT(unsampled.err, HasSubstr("the step will wait for the device to free memory"));
  const RunResult sampled = run_strata({"train", "--config", tight.string(), "--sample-every", "1",
                                        "--out", (dir.path() / "out").string()});
  EXPECT_EQ(sampled.exit_status, 2);
  EXPECT_THAT(sampled.err, HasSubstr("--sample-every 1: the KV cache of"));
  EXPECT_THAT(sampled.err, HasSubstr("fix: drop --sample-every"));
  EXPECT_THAT(sampled.out, ::testing::Not(HasSubstr("step ")));
}

struct Refusal {
  std::vector<std::string> arguments;
  std::string cause;
  std::string fix;
};

TEST(GenerateCommand, RefusalsNameTheCauseAndTheFix) {
  const TempDir dir;
  const std::string gpt2 = fixture("gpt2").string();
  const std::filesystem::path chat =
      dir.write("chat.json", R"([{"role": "user", "content": "hi"}])");
  const std::filesystem::path bad_line =
      dir.write("prompts.jsonl", "{\"prompt_ids\": [1]}\n{\"text\": \"hi\"}\n");
  const std::vector<Refusal> refusals = {
      {{"--prompt-ids", "1"}, "needs a model", "--model DIR"},
      {{"--model", gpt2, "--prompt-ids", "1", "--prompt", "hi"},
       "one source of prompts; 2 were given",
       "--prompt-ids 1,2,3"},
      {{"--model", gpt2, "--prompt-ids", "1,2,3", "--max-new-tokens", "20"},
       "the prompt's 3 tokens and 20 new tokens need 23 positions, more than the 16 this model "
       "runs with",
       "ask for at most 13 new tokens"},
      {{"--model", gpt2, "--prompt", "hi"}, "no tokenizer.json", "--prompt-ids"},
      {{"--model", gpt2, "--chat", chat.string()}, "no chat template", "chat_template"},
      {{"--model", gpt2, "--prompt-ids", "1,80"}, "token id 80, past the 80 ids", "below 80"},
      {{"--model", gpt2, "--prompt-ids", "1,x"}, "\"x\" is not a token id", "separated by commas"},
      {{"--model", gpt2, "--prompt-ids", "1", "--stop", "."}, "no tokenizer", "tokenizer.json"},
      {{"--model", gpt2, "--prompts", bad_line.string()}, "prompts.jsonl line 2", "\"prompt\""},
  };
  for (const Refusal& refusal : refusals) {
    std::vector<std::string> arguments = {"generate"};
    arguments.insert(arguments.end(), refusal.arguments.begin(), refusal.arguments.end());
    const RunResult result = run_strata(arguments);
    EXPECT_EQ(result.exit_status, 2) << refusal.cause;
    EXPECT_THAT(result.err, HasSubstr(refusal.cause));
    EXPECT_THAT(result.err, HasSubstr("fix: "));
    EXPECT_THAT(result.err, HasSubstr(refusal.fix));
    EXPECT_EQ(result.out, "") << refusal.cause;
  }
  const RunResult empty_stop =
      run_strata({"generate", "--model", gpt2, "--prompt-ids", "1", "--stop", ""});
  EXPECT_EQ(empty_stop.exit_status, 2);
  EXPECT_THAT(empty_stop.err, HasSubstr("empty stop string"));
}

}  // namespace
}  // namespace strata::tools::testing
