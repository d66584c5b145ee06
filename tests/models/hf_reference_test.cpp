// strata against torch: the committed Hugging Face fixtures (tests/fixtures/hf, written by
// scripts/make_hf_fixtures.py from a plain torch implementation of transformers' formulas) hold
// each model's loss on a fixed batch. strata loads each folder through from_pretrained and must
// give the same loss within 1e-5 relative, at stage 0 and at stage 3 with parameters and optimizer
// states on NVMe; the Llama family's rotary frequencies must be transformers'.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/hf/hf_config.h"
#include "models/llama/rope_frequencies.h"
#include "models/model_plan.h"
#include "tests/engine/test_world.h"

namespace strata::models {
namespace {

namespace ckpt = engine::checkpoint;

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "hf" / name;
}

template <typename T>
std::vector<T> tensor_values(const ckpt::SafetensorsFile& file, const std::string& name) {
  const ckpt::TensorEntry* entry = file.find(name);
  EXPECT_NE(entry, nullptr) << name;
  if (entry == nullptr) return {};
  std::vector<T> values(static_cast<std::size_t>(entry->numel()));
  std::memcpy(values.data(), file.data(*entry).data(), values.size() * sizeof(T));
  return values;
}

// The engine's loss on the fixture's batch: inputs are input_ids[:, :T-1], targets
// input_ids[:, 1:], as transformers shifts labels=input_ids.
double strata_loss(const std::string& name, const std::string& zero) {
  const ckpt::SafetensorsFile reference = ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
  const std::vector<std::int32_t> ids = tensor_values<std::int32_t>(reference, "input_ids");
  const std::vector<std::int64_t> shape = reference.find("input_ids")->shape;
  const std::int64_t batch = shape[0], positions = shape[1];
  std::vector<std::int32_t> inputs, targets;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t + 1 < positions; ++t) {
      inputs.push_back(ids[static_cast<std::size_t>(b * positions + t)]);
      targets.push_back(ids[static_cast<std::size_t>(b * positions + t + 1)]);
    }
  }
  const engine::Config config =
      engine::parse_config_text(
          fmt::format(R"({{"train_micro_batch_size_per_gpu": {},
            "zero_optimization": {},
            "strata": {{"model": {{"from_pretrained": "{}", "seq_len": {}}}}}}})",
                      batch, zero, fixture(name).string(), positions - 1),
          "reference config")
          .config;
  gpu::DeviceOptions options;
  options.memory_budget_bytes = 64 << 20;
  auto device = gpu::create_host_device(options);
  auto ops = gpu::create_ops(*device);
  auto comm = gpu::create_comm(engine::testing::test_world(), *device);
  const std::unique_ptr<engine::Model> model =
      build_model(plan_model(config.strata.model, batch));
  engine::Runtime runtime{*device, *ops, *comm};
  engine::Engine engine(runtime, config, *model);
  return engine.evaluate(inputs, targets);
}

float reference_loss(const std::string& name) {
  const ckpt::SafetensorsFile reference = ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
  return tensor_values<float>(reference, "loss").at(0);
}

class HfReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfReference, LossEqualsTorchsAtStage0) {
  const double expected = reference_loss(GetParam());
  EXPECT_NEAR(strata_loss(GetParam(), R"({"stage": 0})"), expected, 1e-5 * expected);
}

TEST_P(HfReference, LossEqualsTorchsAtStage3WithEverythingOnNvme) {
  const std::filesystem::path swap =
      std::filesystem::temp_directory_path() /
      fmt::format("strata-hf-reference-{}-{}", GetParam(), ::getpid());
  std::filesystem::create_directories(swap);
  const std::string offload =
      fmt::format(R"({{"device": "nvme", "nvme_path": "{}", "pin_memory": false}})", swap.string());
  const double expected = reference_loss(GetParam());
  const double loss = strata_loss(
      GetParam(), fmt::format(R"({{"stage": 3, "stage3_param_persistence_threshold": 0,
        "offload_param": {}, "offload_optimizer": {}}})",
                              offload, offload));
  std::filesystem::remove_all(swap);
  EXPECT_NEAR(loss, expected, 1e-5 * expected);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfReference,
                         ::testing::Values("gpt2", "gpt2_noprefix", "llama", "llama3", "qwen2",
                                           "mistral", "llama_sharded"));

TEST(HfReference, RotaryFrequenciesAreTransformers) {
  for (const std::string name : {"llama", "llama3", "qwen2", "mistral"}) {
    const HfConfig config = read_hf_config(fixture(name) / "config.json");
    const std::vector<float> ours =
        rope_inverse_frequencies(config.rope, config.d_model / config.n_head);
    const ckpt::SafetensorsFile reference =
        ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
    const std::vector<float> theirs = tensor_values<float>(reference, "inv_freq");
    ASSERT_EQ(ours.size(), theirs.size()) << name;
    for (std::size_t j = 0; j < ours.size(); ++j)
      EXPECT_NEAR(ours[j], theirs[j], 1e-6 * theirs[j]) << name << " frequency " << j;
  }
}

}  // namespace
}  // namespace strata::models
