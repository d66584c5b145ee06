// strata against torch: the committed Hugging Face fixtures (tests/fixtures/hf, written by
// scripts/make_hf_fixtures.py from a plain torch implementation of transformers' formulas) hold
// each model's loss on a fixed batch. strata loads each folder through from_pretrained and must
// give the same loss within 1e-5 relative, and the same parameters after 5 AdamW steps within
// 1e-5 of the largest, at stage 0 and at stage 3 with parameters and optimizer states on NVMe; the
// Llama family's rotary frequencies must be transformers'.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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
#include "models/hf/hf_names.h"
#include "models/llama/rope_frequencies.h"
#include "models/model_plan.h"
#include "tests/engine/test_world.h"
#include "tests/models/host_engine.h"

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

struct Outcome {
  double loss = 0;             // before any step
  std::vector<float> masters;  // after the steps, in the model's declaration order
  std::vector<std::vector<engine::ParamSpec>> modules;
};

// The engine on the fixture's batch: inputs are input_ids[:, :T-1], targets input_ids[:, 1:], as
// transformers shifts labels=input_ids; its loss, then `steps` AdamW steps on the same batch with
// scripts/make_hf_fixtures.py's settings.
Outcome run_strata(const std::string& name, const std::string& zero, int steps) {
  const ckpt::SafetensorsFile reference =
      ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
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
          fmt::format(R"({{"train_micro_batch_size_per_gpu": {}, "gradient_clipping": 0,
            "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3, "betas": [0.9, 0.999],
                                                        "eps": 1e-4, "weight_decay": 0.1}}}},
            "zero_optimization": {},
            "strata": {{"model": {{"from_pretrained": "{}", "seq_len": {}}}}}}})",
                      batch, zero, fixture(name).string(), positions - 1),
          "reference config")
          .config;
  testing::HostEngine run(config, batch);
  Outcome outcome;
  outcome.loss = run.engine.evaluate(inputs, targets);
  for (int step = 0; step < steps; ++step)
    static_cast<void>(run.engine.train_batch(inputs, targets));
  outcome.masters = run.engine.master_parameters();
  for (engine::Module* module : run.model->modules())
    outcome.modules.push_back(module->parameters());
  return outcome;
}

// torch's parameters after the AdamW steps, in the model's declaration order and strata's layout:
// a token table's padded rows (models/vocab_padding.h) zero.
std::vector<float> reference_masters(const std::string& name, const Outcome& outcome) {
  const ckpt::SafetensorsFile reference =
      ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
  const bool gpt2 = name.starts_with("gpt2");
  const HfNaming& naming = gpt2 ? gpt2_naming() : llama_naming();
  const std::string prefix =
      reference.find("adamw:transformer.wte.weight") != nullptr ? "transformer." : "";
  std::vector<float> all;
  for (const auto& module : outcome.modules) {
    for (const engine::ParamSpec& spec : module) {
      const HfName hf = naming.name(spec.name).value();
      const std::vector<float> values =
          tensor_values<float>(reference, "adamw:" + prefix + hf.name);
      if (!hf.transposed) {
        all.insert(all.end(), values.begin(), values.end());
        all.resize(all.size() + static_cast<std::size_t>(spec.numel() - spec.unpadded_numel()));
        continue;
      }
      const std::int64_t rows = spec.shape[0], cols = spec.shape[1];
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          all.push_back(values[static_cast<std::size_t>(c * rows + r)]);
    }
  }
  return all;
}

float reference_loss(const std::string& name) {
  const ckpt::SafetensorsFile reference =
      ckpt::SafetensorsFile::open(fixture(name) / "reference.safetensors");
  return tensor_values<float>(reference, "loss").at(0);
}

// Every fixture's vocabulary (64 to 80 tokens) is padded to 128 rows: after the AdamW steps, with
// weight decay, the padded rows of embed_tokens / wte and of an untied lm_head are exactly zero.
void expect_padded_rows_zero(const std::string& name, const Outcome& outcome) {
  std::size_t at = 0, padded = 0;
  for (const auto& module : outcome.modules) {
    for (const engine::ParamSpec& spec : module) {
      const auto real = static_cast<std::size_t>(spec.unpadded_numel());
      const auto end = at + static_cast<std::size_t>(spec.numel());
      for (std::size_t i = at + real; i < end; ++i, ++padded)
        EXPECT_EQ(outcome.masters.at(i), 0.0f) << name << " " << spec.name << " element " << i - at;
      at = end;
    }
  }
  EXPECT_GT(padded, 0u) << name;
}

// Loss within 1e-5 relative; every parameter after the steps within 1e-5 of the largest.
void expect_matches_torch(const std::string& name, const std::string& zero) {
  const Outcome outcome = run_strata(name, zero, 5);
  const double expected = reference_loss(name);
  EXPECT_NEAR(outcome.loss, expected, 1e-5 * expected);
  const std::vector<float> theirs = reference_masters(name, outcome);
  ASSERT_EQ(outcome.masters.size(), theirs.size());
  double largest = 0, worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(theirs[i])));
    const double difference = std::abs(static_cast<double>(outcome.masters[i]) - theirs[i]);
    if (difference > worst) {
      worst = difference;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, 1e-5 * largest) << name << ": element " << worst_at << " is "
                                   << outcome.masters[worst_at] << ", torch's " << theirs[worst_at];
  expect_padded_rows_zero(name, outcome);
  std::printf(
      "[ measured ] %s: loss %.7f vs torch %.7f; parameters after 5 AdamW steps within "
      "%.2e of max |p| %.3f\n",
      name.c_str(), outcome.loss, expected, worst / largest, largest);
}

class HfReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfReference, LossAndAdamWStepsEqualTorchsAtStage0) {
  expect_matches_torch(GetParam(), R"({"stage": 0})");
}

TEST_P(HfReference, LossAndAdamWStepsEqualTorchsAtStage3WithEverythingOnNvme) {
  const std::filesystem::path swap =
      std::filesystem::temp_directory_path() /
      fmt::format("strata-hf-reference-{}-{}", GetParam(), ::getpid());
  std::filesystem::create_directories(swap);
  const std::string offload =
      fmt::format(R"({{"device": "nvme", "nvme_path": "{}", "pin_memory": false}})", swap.string());
  expect_matches_torch(GetParam(),
                       fmt::format(R"({{"stage": 3, "stage3_param_persistence_threshold": 0,
                         "offload_param": {}, "offload_optimizer": {}}})",
                                   offload, offload));
  std::filesystem::remove_all(swap);
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
