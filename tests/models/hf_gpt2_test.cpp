// Hugging Face GPT-2 folders as the built-in GPT's starting weights: every tensor found by HF's
// name (with or without "transformer."), Conv1D weights transposed, F32/BF16/F16 converted, the
// values landing in the engine's masters element for element; and every malformed folder refused
// naming the file, the tensor and the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/gpt/gpt.h"
#include "models/hf/hf_config.h"
#include "models/hf/hf_names.h"
#include "models/model_plan.h"
#include "tests/engine/test_world.h"
#include "tests/models/hf_test_util.h"

namespace strata::models {
namespace {

using testing::Folder;
using ::testing::HasSubstr;
using testing::loaded_masters;
using testing::refusal;
using testing::Tensor;
using testing::write_safetensors;

// L2 H2 C8, vocabulary 16, 6 positions.
constexpr std::int64_t kLayers = 2, kHeads = 2, kWidth = 8, kVocab = 16, kPositions = 6;

// GPT2LMHeadModel's state dict for the shape above, HF's names and layouts, seeded values.
std::map<std::string, Tensor> gpt2_state(const std::string& prefix) {
  std::mt19937 generator(5);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::map<std::string, Tensor> state;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    std::int64_t count = 1;
    for (std::int64_t extent : shape)
      count *= extent;
    Tensor tensor{std::move(shape), std::vector<float>(static_cast<std::size_t>(count))};
    for (float& value : tensor.values)
      value = normal(generator);
    state[prefix + name] = std::move(tensor);
  };
  const std::int64_t c = kWidth;
  add("wte.weight", {kVocab, c});
  add("wpe.weight", {kPositions, c});
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    add(h + "ln_1.weight", {c});
    add(h + "ln_1.bias", {c});
    add(h + "attn.c_attn.weight", {c, 3 * c});
    add(h + "attn.c_attn.bias", {3 * c});
    add(h + "attn.c_proj.weight", {c, c});
    add(h + "attn.c_proj.bias", {c});
    add(h + "ln_2.weight", {c});
    add(h + "ln_2.bias", {c});
    add(h + "mlp.c_fc.weight", {c, 4 * c});
    add(h + "mlp.c_fc.bias", {4 * c});
    add(h + "mlp.c_proj.weight", {4 * c, c});
    add(h + "mlp.c_proj.bias", {c});
    // The causal mask old files carry: a buffer, not a parameter.
    add(h + "attn.bias", {1, 1, kPositions, kPositions});
  }
  add("ln_f.weight", {c});
  add("ln_f.bias", {c});
  return state;
}

std::string gpt2_config_json(const std::string& extra = "") {
  return fmt::format(R"({{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
    "n_layer": {}, "n_head": {}, "n_embd": {}, "vocab_size": {}, "n_positions": {},
    "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new"{}}})",
                     kLayers, kHeads, kWidth, kVocab, kPositions, extra);
}

// What the masters must hold: strata's tensors in declaration order, each HF tensor under its
// strata name, Conv1D weights transposed to [out, in], `round` applied to every value; wte's
// rows past the vocabulary's 16 (to 128, models/vocab_padding.h) zero.
std::vector<float> expected_masters(const std::map<std::string, Tensor>& state,
                                    const std::string& prefix, float (*round)(float)) {
  Gpt gpt(GptShape{kLayers, kHeads, kWidth, 4, kVocab, 1, kPositions});
  std::vector<float> all;
  for (engine::Module* module : gpt.modules()) {
    for (const engine::ParamSpec& spec : module->parameters()) {
      const HfName hf = gpt2_naming().name(spec.name).value();
      const Tensor& tensor = state.at(prefix + hf.name);
      if (!hf.transposed) {
        for (float value : tensor.values)
          all.push_back(round(value));
        all.resize(all.size() + static_cast<std::size_t>(spec.numel() - spec.unpadded_numel()));
        continue;
      }
      const std::int64_t rows = spec.shape[0], cols = spec.shape[1];
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          all.push_back(round(tensor.values[static_cast<std::size_t>(c * rows + r)]));
    }
  }
  return all;
}

float exact(float value) {
  return value;
}
float through_bf16(float value) {
  return cpu_adam::to_float(cpu_adam::to_bf16(value));
}
float through_fp16(float value) {
  return cpu_adam::to_float(cpu_adam::to_fp16(value));
}

TEST(HfGpt2, EveryTensorLandsInTheMastersWithConv1DWeightsTransposed) {
  Folder folder("f32");
  folder.write("config.json", gpt2_config_json());
  const auto state = gpt2_state("transformer.");
  write_safetensors(folder.path / "model.safetensors", state, "F32");
  EXPECT_EQ(loaded_masters(folder.path), expected_masters(state, "transformer.", exact));
}

// The original openai-community/gpt2 files: no "transformer." prefix, and in half precision.
TEST(HfGpt2, NamesWithoutThePrefixAndHalfPrecisionLoad) {
  for (const auto& [dtype, round] : {std::pair{std::string("BF16"), &through_bf16},
                                     std::pair{std::string("F16"), &through_fp16}}) {
    Folder folder("half");
    folder.write("config.json", gpt2_config_json());
    const auto state = gpt2_state("");
    write_safetensors(folder.path / "model.safetensors", state, dtype);
    EXPECT_EQ(loaded_masters(folder.path), expected_masters(state, "", round)) << dtype;
  }
}

// Shards listed by model.safetensors.index.json load as one model.
TEST(HfGpt2, ShardsOfAnIndexLoadAsOne) {
  Folder folder("sharded");
  folder.write("config.json", gpt2_config_json());
  const auto state = gpt2_state("transformer.");
  std::map<std::string, Tensor> first, second;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, tensor] : state) {
    const bool early =
        name.find("h.1.") == std::string::npos && name.find("ln_f") == std::string::npos;
    (early ? first : second)[name] = tensor;
    map[name] = early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(folder.path / "model-00001-of-00002.safetensors", first, "F32");
  write_safetensors(folder.path / "model-00002-of-00002.safetensors", second, "F32");
  folder.write("model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  EXPECT_EQ(loaded_masters(folder.path), expected_masters(state, "transformer.", exact));
}

// A folder holding both layouts loads model.safetensors, as transformers' from_pretrained does
// (it looks for the single file before the index), whatever the index says.
TEST(HfGpt2, ASingleFileBesideAnIndexIsTheOneLoaded) {
  Folder folder("both-layouts");
  folder.write("config.json", gpt2_config_json());
  const auto state = gpt2_state("transformer.");
  write_safetensors(folder.path / "model.safetensors", state, "F32");
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, tensor] : state)
    map[name] = "model-00001-of-00002.safetensors";  // a shard no longer there
  folder.write("model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  EXPECT_EQ(loaded_masters(folder.path), expected_masters(state, "transformer.", exact));
}

// A shard an interrupted download left out: the refusal names the file and what it holds.
TEST(HfGpt2, AMissingShardIsRefusedNamingItsTensors) {
  Folder folder("shard-missing");
  folder.write("config.json", gpt2_config_json());
  const auto state = gpt2_state("transformer.");
  std::map<std::string, Tensor> first;
  nlohmann::json map = nlohmann::json::object();
  std::size_t in_second = 0;
  for (const auto& [name, tensor] : state) {
    const bool early = name.find("h.1.") == std::string::npos;
    if (early) first[name] = tensor;
    in_second += early ? 0 : 1;
    map[name] = early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(folder.path / "model-00001-of-00002.safetensors", first, "F32");
  folder.write("model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  const std::string text = refusal(folder.path);
  EXPECT_THAT(text, HasSubstr((folder.path / "model-00002-of-00002.safetensors").string() +
                              ": no such file"));
  EXPECT_THAT(text, HasSubstr(fmt::format("maps {} tensors to it", in_second)));
  EXPECT_THAT(text,
              HasSubstr("(\"transformer.h.1.attn.bias\", \"transformer.h.1.attn.c_attn.bias\", "));
  EXPECT_THAT(text, HasSubstr("all 2 shard files"));
}

TEST(HfGpt2, AMissingTensorIsRefusedNamingIt) {
  Folder folder("missing");
  folder.write("config.json", gpt2_config_json());
  auto state = gpt2_state("transformer.");
  state.erase("transformer.h.1.mlp.c_fc.bias");
  write_safetensors(folder.path / "model.safetensors", state, "F32");
  EXPECT_THAT(refusal(folder.path), HasSubstr("no tensor \"transformer.h.1.mlp.c_fc.bias\""));
}

TEST(HfGpt2, AShapeThatDisagreesWithConfigJsonIsRefused) {
  Folder folder("shape");
  folder.write("config.json", gpt2_config_json());
  auto state = gpt2_state("transformer.");
  state["transformer.wpe.weight"].shape = {3, 16};  // same element count, another shape
  write_safetensors(folder.path / "model.safetensors", state, "F32");
  const std::string text = refusal(folder.path);
  EXPECT_THAT(text,
              HasSubstr("model.safetensors: tensor \"transformer.wpe.weight\" has shape [3, 16]"));
  EXPECT_THAT(text, HasSubstr("makes it [6, 8]"));
}

TEST(HfGpt2, AnUnknownTensorIsRefusedNotIgnored) {
  Folder folder("extra");
  folder.write("config.json", gpt2_config_json());
  auto state = gpt2_state("transformer.");
  state["transformer.h.0.attn.rotary.inv_freq"] = {{4}, {1, 2, 3, 4}};
  write_safetensors(folder.path / "model.safetensors", state, "F32");
  EXPECT_THAT(refusal(folder.path),
              HasSubstr("\"transformer.h.0.attn.rotary.inv_freq\" is not a parameter of GPT-2"));
}

TEST(HfGpt2, AFolderWithoutSafetensorsIsRefusedWithTheFix) {
  Folder folder("empty");
  folder.write("config.json", gpt2_config_json());
  const std::string text = refusal(folder.path);
  EXPECT_THAT(text, HasSubstr("holds neither model.safetensors nor model.safetensors.index.json"));
  EXPECT_THAT(text, HasSubstr("save_pretrained"));
}

TEST(HfConfig, SettingsStrataCannotHonourAreRefusedNamingTheKey) {
  Folder folder("config");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(, "layer_norm_epsilon": 1e-6)", "\"layer_norm_epsilon\""},
      {R"(, "activation_function": "relu")", "\"activation_function\""},
      {R"(, "tie_word_embeddings": false)", "\"tie_word_embeddings\""},
      {R"(, "scale_attn_by_inverse_layer_idx": true)", "\"scale_attn_by_inverse_layer_idx\""}};
  for (const auto& [extra, key] : cases) {
    // A later key wins in nlohmann's parse, as in Python's json.
    folder.write("config.json", gpt2_config_json(extra));
    try {
      read_hf_config(folder.path / "config.json");
      ADD_FAILURE() << "no refusal for " << extra;
    } catch (const UserError& error) {
      EXPECT_THAT(error.what(), HasSubstr(key));
      EXPECT_THAT(error.what(), HasSubstr("config.json"));
    }
  }
  folder.write("config.json", R"({"model_type": "bert"})");
  try {
    read_hf_config(folder.path / "config.json");
    ADD_FAILURE() << "bert was not refused";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("model_type \"bert\" is not one strata builds"));
  }
}

TEST(HfConfig, ShapeKeysBesideFromPretrainedAreRefused) {
  Folder folder("keys");
  folder.write("config.json", gpt2_config_json());
  try {
    engine::parse_config_text(
        fmt::format(
            R"({{"train_micro_batch_size_per_gpu": 1, "strata": {{"model": {{"from_pretrained": "{}", "n_layer": 3}}}}}})",
            folder.path.string()),
        "test config");
    ADD_FAILURE() << "no refusal";
  } catch (const std::exception& error) {
    EXPECT_THAT(error.what(), HasSubstr("strata.model.n_layer"));
    EXPECT_THAT(error.what(), HasSubstr("remove n_layer"));
  }
  const engine::Config config =
      engine::parse_config_text(
          fmt::format(
              R"({{"train_micro_batch_size_per_gpu": 1, "strata": {{"model": {{"from_pretrained": "{}"}}}}}})",
              folder.path.string()),
          "test config")
          .config;
  EXPECT_EQ(config.strata.model.d_model, kWidth);
  EXPECT_EQ(config.strata.model.seq_len, kPositions);  // the model's context by default
}

}  // namespace
}  // namespace strata::models
