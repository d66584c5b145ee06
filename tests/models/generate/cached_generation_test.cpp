// Generation with a KV cache on the host: each step's logits are a full forward's at the
// sequence's end, bit for bit in fp32; the same ids
// as generation without a cache from every placement of the weights, for GPT-2 and Llama with
// grouped-query heads; batches of prompts of different lengths; the refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "models/generate/generator.h"
#include "tests/engine/swap_directory.h"
#include "tests/models/host_engine.h"

namespace strata::models::generate {
namespace {

using ::testing::HasSubstr;

constexpr IdsToText kBytes{.tokenizer = nullptr, .bytes = true};
constexpr std::int64_t kSeqLen = 24;

std::string fixture(const std::string& name) {
  return (std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "hf" / name).string();
}

// The model of `model` (a strata.model section) with its weights placed by `zero`.
engine::Config config(const std::string& model, const std::string& zero) {
  return engine::parse_config_text(R"({"train_micro_batch_size_per_gpu": 2,
    "zero_optimization": )" + zero + R"(, "strata": {"model": )" +
                                       model + R"(, "seed": 7}})",
                                   "test config")
      .config;
}

const std::string kGpt =
    R"({"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 24, "vocab": 64})";
const std::string kLlama = R"({"from_pretrained": ")" + fixture("llama") + R"(", "seq_len": 24})";
const std::string kOnTheDevice = R"({"stage": 0})";

// The weights in CPU memory or on NVMe (under `swap`) at stage 3.
std::string in_cpu() {
  return R"({"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}})";
}
std::string on_nvme(const engine::testing::SwapDirectory& swap) {
  return R"({"stage": 3, "offload_param": {"device": "nvme", "nvme_path": ")" + swap.string() +
         R"("}, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + swap.string() + R"("}})";
}

// A prefill of a 5-token prompt in row 0 and a 3-token one in row 1, then decode steps feeding
// fixed tokens: at every step each row's logits are a full forward's over the whole sequence, bit
// for bit (each row computed alone), with a cache of `cache` positions.
void expect_steps_match_full_forwards(const std::string& model, const std::string& zero,
                                      std::int64_t cache = kSeqLen) {
  testing::HostEngine run(config(model, zero), 2);
  std::vector<std::vector<std::int32_t>> sequences = {{5, 9, 11, 2, 7}, {3, 1, 4}};
  run.engine.reserve_cache(cache);
  std::vector<std::int32_t> prefill(2 * 5, 0);
  std::ranges::copy(sequences[0], prefill.begin());
  std::ranges::copy(sequences[1], prefill.begin() + 5);
  const std::vector<std::int64_t> ends = {4, 5 + 2};
  std::vector<float> cached = run.engine.cached_logits(prefill, 5, {{0, 0}}, ends);
  for (int step = 0; step < 12; ++step) {
    std::vector<std::int32_t> tokens(2 * kSeqLen, 0);
    std::vector<std::int64_t> full_ends;
    for (std::size_t b = 0; b < 2; ++b) {
      std::ranges::copy(sequences[b], tokens.begin() + static_cast<std::ptrdiff_t>(b) * kSeqLen);
      full_ends.push_back(static_cast<std::int64_t>(b) * kSeqLen + std::ssize(sequences[b]) - 1);
    }
    ASSERT_EQ(cached, run.engine.logits_at(tokens, full_ends)) << zero << " step " << step;
    // The next token of each sequence, then a decode step of both.
    const std::vector<std::int32_t> next = {(step * 7 + 3) % 64, (step * 5 + 1) % 64};
    std::vector<std::int32_t> start;
    for (std::size_t b = 0; b < 2; ++b) {
      start.push_back(static_cast<std::int32_t>(sequences[b].size()));
      sequences[b].push_back(next[b]);
    }
    cached = run.engine.cached_logits(next, 1, start, std::vector<std::int64_t>{0, 1});
  }
}

TEST(GenerateWithCache, EachStepIsAFullForwardAtTheSequencesEndGpt) {
  engine::testing::SwapDirectory swap;
  for (const std::string& zero : {kOnTheDevice, in_cpu(), on_nvme(swap)})
    expect_steps_match_full_forwards(kGpt, zero);
}

TEST(GenerateWithCache, EachStepIsAFullForwardAtTheSequencesEndLlamaGroupedQuery) {
  engine::testing::SwapDirectory swap;
  for (const std::string& zero : {kOnTheDevice, in_cpu(), on_nvme(swap)})
    expect_steps_match_full_forwards(kLlama, zero);
}

// The cache's length is not in the bits: shorter than the sequences (the 17 positions the steps
// reach) and, for Llama's rotary positions, longer than seq_len.
TEST(GenerateWithCache, EachStepIsAFullForwardWhateverTheCachesLength) {
  expect_steps_match_full_forwards(kGpt, kOnTheDevice, 17);
  expect_steps_match_full_forwards(kLlama, kOnTheDevice, 17);
  expect_steps_match_full_forwards(kLlama, kOnTheDevice, 40);
}

GenerationRequest request(std::vector<std::int32_t> prompt, std::int64_t max_new_tokens) {
  GenerationRequest asked;
  asked.prompt = std::move(prompt);
  asked.max_new_tokens = max_new_tokens;
  return asked;
}

std::vector<std::vector<std::int32_t>> ids(const Generated& generated) {
  std::vector<std::vector<std::int32_t>> all;
  for (const Generation& sequence : generated.sequences)
    all.push_back(sequence.ids);
  return all;
}

// A batch of two prompts of different lengths, greedy and sampled, with and without the cache,
// from the device, CPU memory and NVMe: the same ids everywhere.
TEST(GenerateWithCache, EveryPlacementGivesTheIdsOfGenerationWithoutACache) {
  engine::testing::SwapDirectory swap;
  std::vector<GenerationRequest> asked = {request({5, 9, 11, 2, 7}, 10), request({3, 1}, 14)};
  asked[1].sampling = {.sample = true, .temperature = 1.5, .top_k = 20};
  asked[1].seed = 11;
  for (const std::string& model : {kGpt, kLlama}) {
    testing::HostEngine reference(config(model, kOnTheDevice), 2);
    const Generated expected =
        generate_without_cache(reference.engine, {2, kSeqLen, kSeqLen}, asked, kBytes);
    for (const std::string& zero : {kOnTheDevice, in_cpu(), on_nvme(swap)}) {
      testing::HostEngine run(config(model, zero), 2);
      const Generated cached =
          generate_with_cache(run.engine, {2, kSeqLen, kSeqLen}, asked, kBytes);
      EXPECT_EQ(ids(cached), ids(expected)) << zero;
      EXPECT_EQ(cached.sequences[0].text, expected.sequences[0].text);
    }
  }
}

// The cache may run past the micro-batch's seq_len, up to the model's positions: a prefill of 5
// positions on an engine of seq_len 8, then 30 new tokens, as an engine of seq_len 40 makes them
// without a cache.
TEST(GenerateWithCache, TheCacheRunsPastSeqLenUpToTheModelsPositions) {
  const auto llama = [](int seq_len) {
    return R"({"from_pretrained": ")" + fixture("llama") + R"(", "seq_len": )" +
           std::to_string(seq_len) + "}";
  };
  const std::vector<GenerationRequest> asked = {request({5, 9, 11, 2, 7}, 30)};
  testing::HostEngine short_run(config(llama(8), kOnTheDevice), 2);
  const Generated cached = generate_with_cache(short_run.engine, {2, 8, 64}, asked, kBytes);
  testing::HostEngine long_run(config(llama(40), kOnTheDevice), 2);
  EXPECT_EQ(ids(cached), ids(generate_without_cache(long_run.engine, {2, 40, 40}, asked, kBytes)));
  EXPECT_EQ(cached.sequences[0].ids.size(), 30u);
}

TEST(GenerateWithCache, PastThePositionsOrTheDeviceIsRefusedFirst) {
  testing::HostEngine run(config(kGpt, kOnTheDevice), 2);
  const std::vector<GenerationRequest> too_long = {request({5, 9, 11}, 22)};
  try {
    static_cast<void>(generate_with_cache(run.engine, {2, kSeqLen, kSeqLen}, too_long, kBytes));
    FAIL() << "generated past the positions";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("need 25 positions, more than the 24"));
  }
  // A cache past the device's 64 MiB: refused, naming its bytes and what is left.
  try {
    run.engine.reserve_cache(std::int64_t{1} << 20);
    FAIL() << "a cache past the budget";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(),
                HasSubstr("the KV cache of 1048576 positions for each of 2 sequences takes"));
    EXPECT_THAT(error.what(), HasSubstr("left beside the model"));
    EXPECT_THAT(error.fix(), HasSubstr("strata.device_memory_budget"));
  }
  // The engine goes on: a cache that fits is made, exactly the bytes the estimate counts
  // (strata estimate --kv-cache: Engine::cache_reservation_bytes), and generates.
  const std::int64_t before = run.device->bytes_in_use();
  run.engine.reserve_cache(kSeqLen);
  EXPECT_EQ(
      run.device->bytes_in_use() - before,
      engine::Engine::cache_reservation_bytes(*run.model, 2, kSeqLen, gpu::DataType::float32));
  const std::vector<GenerationRequest> fits = {request({5, 9, 11}, 4)};
  EXPECT_EQ(
      generate_with_cache(run.engine, {2, kSeqLen, kSeqLen}, fits, kBytes).sequences[0].ids.size(),
      4u);
}

}  // namespace
}  // namespace strata::models::generate
