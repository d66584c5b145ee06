// Generation by full forwards (no cache) on a tiny GPT: the argmax of a full forward, the same ids
// from every placement of the weights, the stop conditions, and the context's limit.
#include "models/generate/generator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/config/config.h"
#include "tests/engine/swap_directory.h"
#include "tests/models/host_engine.h"

namespace strata::models::generate {
namespace {

constexpr std::int64_t kSeqLen = 16;

// The tiny GPT with its weights placed by `zero` (a zero_optimization section).
engine::Config tiny_config(const std::string& zero) {
  return engine::parse_config_text(R"({"train_micro_batch_size_per_gpu": 1,
    "zero_optimization": )" + zero + R"(,
    "strata": {"model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab": 64},
               "seed": 7}})",
                                   "test config")
      .config;
}

const std::string kOnTheDevice = R"({"stage": 0})";

GenerationRequest request(std::int64_t max_new_tokens) {
  GenerationRequest asked;
  asked.prompt = {5, 9, 11};
  asked.max_new_tokens = max_new_tokens;
  return asked;
}

// The tiny GPT's ids are below 64: as bytes, ASCII text.
constexpr IdsToText kBytes{.tokenizer = nullptr, .bytes = true};

Generation generate(const std::string& zero, const GenerationRequest& asked) {
  testing::HostEngine run(tiny_config(zero), 1);
  return generate_without_cache(run.engine, {1, kSeqLen}, std::span(&asked, 1), kBytes)
      .sequences.at(0);
}

// Each greedy token is the first largest logit at the sequence's end, and tokens after a
// position do not change its logits, to the bit.
TEST(GenerateWithoutCache, GreedyIsTheArgmaxOfAFullForwardAtTheSequencesEnd) {
  testing::HostEngine run(tiny_config(kOnTheDevice), 1);
  const GenerationRequest asked = request(6);
  const Generation greedy =
      generate_without_cache(run.engine, {1, kSeqLen}, std::span(&asked, 1), kBytes)
          .sequences.at(0);
  ASSERT_EQ(greedy.ids.size(), 6u);
  EXPECT_EQ(greedy.reason, StopReason::max_new_tokens);
  std::vector<std::int32_t> sequence = request(6).prompt;
  for (std::int32_t id : greedy.ids) {
    std::vector<std::int32_t> tokens(kSeqLen, 0);
    std::ranges::copy(sequence, tokens.begin());
    const std::int64_t last = std::ssize(sequence) - 1;
    const std::vector<float> logits = run.engine.logits_at(tokens, std::span(&last, 1));
    ASSERT_EQ(std::ssize(logits), 64);
    EXPECT_EQ(greedy_token(logits), id);
    std::fill(tokens.begin() + std::ssize(sequence), tokens.end(), 63);  // what follows
    EXPECT_EQ(run.engine.logits_at(tokens, std::span(&last, 1)), logits);
    sequence.push_back(id);
  }
}

// The same ids, greedy and sampled, whether the weights live on the device, in CPU memory or on
// NVMe (stage 3).
TEST(GenerateWithoutCache, EveryPlacementGeneratesTheSameIds) {
  engine::testing::SwapDirectory swap;
  const std::string on_nvme = R"({"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": ")" +
                              swap.string() + R"("},
      "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                              swap.string() + R"("}})";
  const std::string in_cpu = R"({"stage": 3, "offload_param": {"device": "cpu"},
      "offload_optimizer": {"device": "cpu"}})";
  GenerationRequest sampled = request(8);
  sampled.sampling = {.sample = true, .temperature = 1.5, .top_k = 20, .top_p = 0.95};
  sampled.seed = 42;
  for (const GenerationRequest& asked : {request(8), sampled}) {
    const Generation on_device = generate(kOnTheDevice, asked);
    EXPECT_EQ(generate(in_cpu, asked).ids, on_device.ids);
    EXPECT_EQ(generate(on_nvme, asked).ids, on_device.ids);
  }
}

TEST(GenerateWithoutCache, TheSameSeedDrawsTheSameTokens) {
  GenerationRequest asked = request(10);
  asked.sampling = {.sample = true, .temperature = 2.0};
  asked.seed = 1;
  const Generation first = generate(kOnTheDevice, asked);
  EXPECT_EQ(generate(kOnTheDevice, asked).ids, first.ids);
  asked.seed = 2;
  EXPECT_NE(generate(kOnTheDevice, asked).ids, first.ids);
}

TEST(GenerateWithoutCache, StopsAtAnEndIdAStopStringOrTheBudget) {
  const Generation greedy = generate(kOnTheDevice, request(5));
  GenerationRequest asked = request(5);
  asked.eos_ids = {63, greedy.ids.back()};  // any of them ends it, at its first appearance
  const Generation ended = generate(kOnTheDevice, asked);
  EXPECT_EQ(ended.reason, StopReason::eos);
  const auto first = std::ranges::find(greedy.ids, greedy.ids.back());
  EXPECT_EQ(ended.ids, std::vector<std::int32_t>(greedy.ids.begin(), first + 1));
  // A stop string made of the third and fourth tokens' bytes ends the generation where it first
  // appears, and the text shown stops before it.
  asked = request(5);
  const std::string text(greedy.ids.begin(), greedy.ids.end());
  asked.stop_strings = {text.substr(2, 2)};
  const std::size_t at = text.find(asked.stop_strings[0]);
  const Generation stopped = generate(kOnTheDevice, asked);
  EXPECT_EQ(stopped.reason, StopReason::stop_string);
  EXPECT_EQ(stopped.ids.size(), at + 2);
  EXPECT_EQ(stopped.text, text.substr(0, at));
}

// A batch's sequences are each what they are alone, each its own text shown piece by piece.
TEST(GenerateWithoutCache, ABatchGivesEachPromptWhatItGivesAlone) {
  std::vector<GenerationRequest> asked = {request(6), request(4), request(5)};
  asked[1].prompt = {1, 2, 3, 4, 5, 6, 7};
  asked[2].sampling = {.sample = true, .temperature = 1.5};
  asked[2].seed = 9;
  testing::HostEngine run(tiny_config(kOnTheDevice), 3);
  std::vector<std::string> shown(asked.size());
  const Generated batch = generate_without_cache(
      run.engine, {3, kSeqLen}, asked, kBytes,
      [&](std::size_t index, std::string_view text) { shown.at(index) += text; });
  ASSERT_EQ(batch.sequences.size(), 3u);
  for (std::size_t i = 0; i < asked.size(); ++i) {
    const Generation alone = generate(kOnTheDevice, asked[i]);
    EXPECT_EQ(batch.sequences[i].ids, alone.ids) << "prompt " << i;
    EXPECT_EQ(batch.sequences[i].text, alone.text);
    EXPECT_EQ(shown[i], alone.text);
    EXPECT_EQ(std::ssize(alone.ids), asked[i].max_new_tokens);
  }
  EXPECT_GT(batch.decode_tokens_per_s(), 0.0);
}

TEST(GenerateWithoutCache, APromptAndItsNewTokensPastTheContextAreRefusedFirst) {
  testing::HostEngine run(tiny_config(kOnTheDevice), 1);
  std::string shown;
  const OnText show = [&](std::size_t, std::string_view text) { shown += text; };
  GenerationRequest asked = request(5);
  asked.prompt.assign(14, 3);
  try {
    static_cast<void>(
        generate_without_cache(run.engine, {1, kSeqLen}, std::span(&asked, 1), kBytes, show));
    FAIL() << "generated past the context";
  } catch (const UserError& error) {
    EXPECT_STREQ(error.what(),
                 "the prompt's 14 tokens and 5 new tokens need 19 positions, more than the 16 "
                 "this model runs with");
    EXPECT_EQ(error.fix(), "shorten the prompt or ask for at most 2 new tokens");
  }
  EXPECT_TRUE(shown.empty());  // nothing was generated
  asked.prompt.clear();
  EXPECT_THROW(generate_without_cache(run.engine, {1, kSeqLen}, std::span(&asked, 1), kBytes),
               UserError);
}

TEST(GenerateWithoutCache, StopStringsWithoutTextAreRefused) {
  testing::HostEngine run(tiny_config(kOnTheDevice), 1);
  GenerationRequest asked = request(5);
  asked.stop_strings = {"."};
  try {
    static_cast<void>(
        generate_without_cache(run.engine, {1, kSeqLen}, std::span(&asked, 1), IdsToText{}));
    FAIL() << "stop strings matched against no text";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("no tokenizer"));
    EXPECT_THAT(error.fix(), ::testing::HasSubstr("tokenizer.json"));
  }
}

}  // namespace
}  // namespace strata::models::generate
