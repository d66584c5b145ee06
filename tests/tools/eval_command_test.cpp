// `strata eval` and the data formats and order of `strata train`, run as a user runs them: the
// loss over every whole window of a file (the last partial micro-batch counted exactly), a
// checkpoint's weights, and refusals naming the file and the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;

// L1 H1 C16 T8 over a 64-token vocabulary, micro-batch `batch` x `accumulation`, on `data`.
std::string config_json(int batch, int accumulation, const std::string& data) {
  return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": {}, "gradient_accumulation_steps": {},
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2}}}},
  "zero_optimization": {{"stage": 0}},
  "strata": {{
    "model": {{"n_layer": 1, "n_head": 1, "d_model": 16, "seq_len": 8, "vocab": 64}},
    "train_steps": 1, "seed": 7, "data": {}
  }}
}})",
                     batch, accumulation, data);
}

// `count` uint16 tokens of a repeating pattern below 64, as a raw array (nanoGPT's layout).
std::filesystem::path token_file(const TempDir& dir, const std::string& name, std::size_t count) {
  std::vector<std::uint16_t> tokens(count);
  for (std::size_t i = 0; i < count; ++i)
    tokens[i] = static_cast<std::uint16_t>((i * 7 + i / 5) % 64);
  return dir.write(name, std::string(reinterpret_cast<const char*>(tokens.data()), count * 2));
}

nlohmann::json eval_json(const TempDir& dir, int batch, int accumulation,
                         const std::filesystem::path& data) {
  const std::filesystem::path config =
      dir.write(fmt::format("eval-{}x{}.json", batch, accumulation),
                config_json(batch, accumulation,
                            fmt::format(R"({{"path": "{}", "dtype": "uint16"}})", data.string())));
  RunResult result =
      run_strata({"eval", "--config", config.string(), "--data", data.string(), "--json"});
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

// 81 tokens hold 10 windows of 8 + 1. One window per micro-batch evaluates each alone; three or
// four per micro-batch leave a partial last micro-batch, whose windows must count once each.
TEST(EvalCommand, EveryWholeWindowCountsOnceWhateverTheMicroBatch) {
  TempDir dir;
  const std::filesystem::path data = token_file(dir, "tokens.bin", 81);
  const nlohmann::json alone = eval_json(dir, 1, 1, data);
  EXPECT_EQ(alone["windows"], 10);
  EXPECT_EQ(alone["tokens"], 80);
  const double loss = alone["loss"].get<double>();
  EXPECT_GT(loss, 3.0);  // about ln 64 = 4.16 for fresh weights
  EXPECT_NEAR(alone["perplexity"].get<double>(), std::exp(loss), 1e-9 * std::exp(loss));
  for (auto [batch, accumulation] : {std::pair{3, 1}, std::pair{4, 2}, std::pair{2, 4}}) {
    const nlohmann::json grouped = eval_json(dir, batch, accumulation, data);
    EXPECT_EQ(grouped["tokens"], 80);
    EXPECT_NEAR(grouped["loss"].get<double>(), loss, 2e-5)
        << "micro-batch " << batch << " x " << accumulation;
  }
}

TEST(EvalCommand, ACheckpointsWeightsScoreBetterThanFreshOnes) {
  TempDir dir;
  const std::filesystem::path data = token_file(dir, "train.bin", 4001);
  const std::filesystem::path config = dir.write(
      "config.json",
      config_json(4, 1,
                  fmt::format(R"({{"path": "{}", "dtype": "uint16", "order": "sequential"}})",
                              data.string())));
  RunResult trained =
      run_strata({"train", "--config", config.string(), "--steps", "40", "--save-dir",
                  (dir.path() / "ckpt").string(), "--out", (dir.path() / "out").string()});
  ASSERT_EQ(trained.exit_status, 0) << trained.err;
  RunResult fresh = run_strata({"eval", "--config", config.string(), "--json"});
  ASSERT_EQ(fresh.exit_status, 0) << fresh.err;
  RunResult loaded = run_strata({"eval", "--config", config.string(), "--checkpoint",
                                 (dir.path() / "ckpt").string(), "--json"});
  ASSERT_EQ(loaded.exit_status, 0) << loaded.err;
  const nlohmann::json before = nlohmann::json::parse(fresh.out);
  const nlohmann::json after = nlohmann::json::parse(loaded.out);
  // The validation split: the last 10% of 4001 tokens, 400 tokens, 49 windows.
  EXPECT_EQ(after["windows"], 49);
  EXPECT_THAT(after["data"].get<std::string>(), HasSubstr("validation split"));
  EXPECT_THAT(after["weights"].get<std::string>(), HasSubstr("global_step40"));
  EXPECT_LT(after["loss"].get<double>(), before["loss"].get<double>() - 1.0);
}

// A Hugging Face folder in `dir`/hf: the tiny model trained `steps` steps on `data_json`'s tokens
// and exported with `strata ckpt export --hf`.
std::filesystem::path exported_model(const TempDir& dir, const std::string& data_json, int steps) {
  const std::filesystem::path config = dir.write("config.json", config_json(2, 1, data_json));
  const std::filesystem::path hf = dir.path() / "hf";
  const RunResult trained = run_strata(
      {"train", "--config", config.string(), "--steps", std::to_string(steps), "--save-dir",
       (dir.path() / "ckpt").string(), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(trained.exit_status, 0) << trained.err;
  const RunResult exported =
      run_strata({"ckpt", "export", (dir.path() / "ckpt").string(), "--hf", hf.string()});
  EXPECT_EQ(exported.exit_status, 0) << exported.err;
  return hf;
}

// Without --checkpoint, a model from_pretrained is evaluated with the folder's weights, and the
// output names that folder, in the text and in the JSON.
// An llm.c file of `count` tokens as token_file makes them, with a loss mask beside it (PATH.mask:
// "strmask1", the count, 48 zero bytes, one byte per token) that leaves out every token whose
// index is a multiple of 3 or 5.
std::filesystem::path masked_token_file(const TempDir& dir, std::size_t count) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<std::int32_t>(count);
  std::vector<std::uint16_t> tokens(count);
  std::string mask = "strmask1";
  const auto count64 = static_cast<std::uint64_t>(count);
  mask.append(reinterpret_cast<const char*>(&count64), 8);
  mask.append(48, '\0');
  for (std::size_t i = 0; i < count; ++i) {
    tokens[i] = static_cast<std::uint16_t>((i * 7 + i / 5) % 64);
    mask.push_back(i % 3 == 0 || i % 5 == 0 ? '\0' : '\1');
  }
  const std::filesystem::path bin = dir.write(
      "masked.bin", std::string(reinterpret_cast<const char*>(header.data()), 1024) +
                        std::string(reinterpret_cast<const char*>(tokens.data()), count * 2));
  dir.write("masked.bin.mask", mask);
  return bin;
}

// The mean over the targets in the loss: each window weighs as many targets as it has in the
// loss, so any grouping of windows into micro-batches gives the same loss.
TEST(EvalCommand, AMaskedFileScoresTheMeanOverTheTargetsInTheLoss) {
  TempDir dir;
  const std::filesystem::path data = masked_token_file(dir, 81);
  const auto eval = [&](int batch, int accumulation) {
    const std::filesystem::path config = dir.write(
        fmt::format("masked-{}x{}.json", batch, accumulation),
        config_json(batch, accumulation, fmt::format(R"({{"path": "{}"}})", data.string())));
    RunResult result =
        run_strata({"eval", "--config", config.string(), "--data", data.string(), "--json"});
    EXPECT_EQ(result.exit_status, 0) << result.err;
    return nlohmann::json::parse(result.out);
  };
  const nlohmann::json alone = eval(1, 1);
  // Targets are tokens 1 .. 80; of those, the multiples of 3 or 5 are out: 80 - 37 = 43 in.
  EXPECT_EQ(alone["loss_tokens"], 43);
  const double loss = alone["loss"].get<double>();
  for (auto [batch, accumulation] : {std::pair{3, 1}, std::pair{4, 2}}) {
    EXPECT_NEAR(eval(batch, accumulation)["loss"].get<double>(), loss, 2e-5)
        << "micro-batch " << batch << " x " << accumulation;
  }
}

TEST(EvalCommand, PretrainedWeightsAreNamedByTheirFolder) {
  TempDir dir;
  const std::filesystem::path data = token_file(dir, "train.bin", 2001);
  const std::string data_json =
      fmt::format(R"({{"path": "{}", "dtype": "uint16"}})", data.string());
  const std::filesystem::path hf = exported_model(dir, data_json, 2);
  const std::filesystem::path from_hf =
      dir.write("from_hf.json", fmt::format(R"({{"train_micro_batch_size_per_gpu": 2,
  "strata": {{"model": {{"from_pretrained": "{}"}}, "data": {}}}}})",
                                            hf.string(), data_json));
  const std::string named = hf.string() + " (strata.model.from_pretrained)";
  RunResult json = run_strata({"eval", "--config", from_hf.string(), "--json"});
  ASSERT_EQ(json.exit_status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["weights"], named);
  RunResult text = run_strata({"eval", "--config", from_hf.string()});
  ASSERT_EQ(text.exit_status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("weights  " + named));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("fresh weights")));
}

// --data is checked as strata.data is: a text file is refused for a model whose ids are its own
// tokenizer's (a Hugging Face folder) when the folder has no tokenizer.json, with the fix.
TEST(EvalCommand, TextDataForAPretrainedModelIsRefused) {
  TempDir dir;
  const std::filesystem::path data = token_file(dir, "train.bin", 2001);
  const std::filesystem::path hf =
      exported_model(dir, fmt::format(R"({{"path": "{}", "dtype": "uint16"}})", data.string()), 1);
  // No strata.data: its dtype would make --data a raw array rather than text.
  const std::filesystem::path from_hf =
      dir.write("from_hf.json", fmt::format(R"({{"train_micro_batch_size_per_gpu": 2,
  "strata": {{"model": {{"from_pretrained": "{}"}}}}}})",
                                            hf.string()));
  // Digits and spaces: every byte is below the vocabulary of 64, so only the tokenizer refuses.
  std::string digits;
  for (int i = 0; i < 400; ++i)
    digits += "0123456789 ";
  const std::filesystem::path text = dir.write("notes.txt", digits);
  RunResult result = run_strata({"eval", "--config", from_hf.string(), "--data", text.string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr(text.string() + " is text"));
  EXPECT_THAT(result.err, HasSubstr("holds no tokenizer.json"));
  EXPECT_THAT(result.err, HasSubstr("fix: put the model's tokenizer.json"));
}

// --help gives each option's text whole: --config's ends by naming its default.
TEST(EvalCommand, HelpNamesTheConfigsDefault) {
  RunResult help = run_strata({"eval", "--help"});
  ASSERT_EQ(help.exit_status, 0) << help.err;
  EXPECT_THAT(help.out, HasSubstr("(default: the built-in demo)"));
}

TEST(EvalCommand, AFileShorterThanOneWindowIsRefused) {
  TempDir dir;
  const std::filesystem::path data = token_file(dir, "short.bin", 8);
  const std::filesystem::path config =
      dir.write("config.json", config_json(1, 1, R"({"dtype": "uint16"})"));
  RunResult result = run_strata({"eval", "--config", config.string(), "--data", data.string()});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr("holds 8 tokens, fewer than one window of seq_len 8 + 1"));
  EXPECT_THAT(result.err, HasSubstr("fix:"));
}

// Token 64 is within the 128 rows the model pads its 64-token vocabulary to
// (models/vocab_padding.h), but the ids are checked against the vocabulary itself.
TEST(TrainCommand, ATokenPastTheVocabularyIsRefusedNamingFileAndPosition) {
  TempDir dir;
  std::vector<std::uint16_t> tokens(200, 5);
  tokens[123] = 64;
  const std::filesystem::path data = dir.write(
      "tokens.bin", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  const std::filesystem::path config = dir.write(
      "config.json",
      config_json(1, 1, fmt::format(R"({{"path": "{}", "dtype": "uint16"}})", data.string())));
  RunResult result =
      run_strata({"train", "--config", config.string(), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr(data.string() + " holds token id 64 at token 123"));
  EXPECT_THAT(result.err, HasSubstr("\"vocab\": 65"));
}

TEST(TrainCommand, SequentialOrderNeedsAMicroBatchOfTokens) {
  TempDir dir;
  const std::filesystem::path data = token_file(dir, "tokens.bin", 300);
  const std::filesystem::path config = dir.write(
      "config.json",
      config_json(64, 1,
                  fmt::format(R"({{"path": "{}", "dtype": "uint16", "order": "sequential"}})",
                              data.string())));
  RunResult result =
      run_strata({"train", "--config", config.string(), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err,
              HasSubstr("strata.data.order \"sequential\" reads micro-batches of 64 x 8"));
}

TEST(TrainCommand, ABadDataDtypeOrOrderNamesTheKey) {
  TempDir dir;
  for (const std::string& data :
       {std::string(R"({"dtype": "int8"})"), std::string(R"({"order": "shuffled"})")}) {
    const std::filesystem::path config = dir.write("config.json", config_json(1, 1, data));
    RunResult result = run_strata({"train", "--config", config.string()});
    EXPECT_EQ(result.exit_status, 2) << data;
    EXPECT_THAT(result.err,
                HasSubstr(data.find("dtype") != std::string::npos ? "strata.data.dtype"
                                                                  : "strata.data.order"));
  }
}

}  // namespace
}  // namespace strata::tools::testing
