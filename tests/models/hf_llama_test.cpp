// Hugging Face Llama, Mistral and Qwen2 folders as a Llama's starting weights: every tensor under
// HF's own name, the untied head, Qwen2's biases, and config.json's settings strata cannot honour
// refused naming the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>

#include "models/hf/hf_config.h"
#include "models/llama/llama.h"
#include "models/llama/rope_frequencies.h"
#include "models/model_plan.h"
#include "tests/models/hf_test_util.h"

namespace strata::models {
namespace {

using testing::Folder;
using ::testing::HasSubstr;
using testing::loaded_masters;
using testing::refusal;
using testing::Tensor;
using testing::write_safetensors;

// 2 layers, 4 query heads over 2 kv heads of 4 channels, MLP 24, vocabulary 20.
std::string llama_config_json(const std::string& model_type, const std::string& extra = "") {
  return fmt::format(R"({{"model_type": "{}", "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "hidden_size": 16, "intermediate_size": 24, "vocab_size": 20,
    "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "rope_theta": 10000.0, "tie_word_embeddings": false{}}})",
                     model_type, extra);
}

std::map<std::string, Tensor> llama_state(bool biased, bool tied) {
  std::mt19937 generator(7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::map<std::string, Tensor> state;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    std::int64_t count = 1;
    for (std::int64_t extent : shape)
      count *= extent;
    Tensor tensor{std::move(shape), std::vector<float>(static_cast<std::size_t>(count))};
    for (float& value : tensor.values)
      value = normal(generator);
    state[name] = std::move(tensor);
  };
  add("model.embed_tokens.weight", {20, 16});
  for (int l = 0; l < 2; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {16});
    add(p + "self_attn.q_proj.weight", {16, 16});
    add(p + "self_attn.k_proj.weight", {8, 16});
    add(p + "self_attn.v_proj.weight", {8, 16});
    if (biased) {
      add(p + "self_attn.q_proj.bias", {16});
      add(p + "self_attn.k_proj.bias", {8});
      add(p + "self_attn.v_proj.bias", {8});
    }
    add(p + "self_attn.o_proj.weight", {16, 16});
    add(p + "post_attention_layernorm.weight", {16});
    add(p + "mlp.gate_proj.weight", {24, 16});
    add(p + "mlp.up_proj.weight", {24, 16});
    add(p + "mlp.down_proj.weight", {16, 24});
  }
  add("model.norm.weight", {16});
  if (!tied) add("lm_head.weight", {20, 16});
  return state;
}

// The masters in the model's declaration order: HF's names are the Llama's own; the tables'
// rows past the vocabulary's 20 (to 128, models/vocab_padding.h) are zero.
std::vector<float> expected_masters(const std::map<std::string, Tensor>& state,
                                    const std::filesystem::path& config_json) {
  const engine::Config config =
      engine::parse_config_text(fmt::format(R"({{"train_micro_batch_size_per_gpu": 1,
        "strata": {{"model": {{"config": "{}", "seq_len": 4}}}}}})",
                                            config_json.string()),
                                "test config")
          .config;
  std::unique_ptr<engine::Model> model = build_model(plan_model(config.strata.model, 1));
  std::vector<float> all;
  for (engine::Module* module : model->modules())
    for (const engine::ParamSpec& spec : module->parameters()) {
      for (float value : state.at(spec.name).values)
        all.push_back(value);
      all.resize(all.size() + static_cast<std::size_t>(spec.numel() - spec.unpadded_numel()));
    }
  return all;
}

TEST(HfLlama, EveryTensorLandsUnderItsOwnNameUntiedAndGrouped) {
  Folder folder("llama");
  folder.write("config.json", llama_config_json("llama"));
  auto state = llama_state(false, false);
  // Older Llama files carry each layer's rotary cache: a buffer, passed over.
  state["model.layers.0.self_attn.rotary_emb.inv_freq"] = {{2}, {1.0f, 0.01f}};
  write_safetensors(folder.path / "model.safetensors", state, "BF16");
  auto expected = expected_masters(state, folder.path / "config.json");
  for (float& value : expected)
    value = cpu_adam::to_float(cpu_adam::to_bf16(value));
  EXPECT_EQ(loaded_masters(folder.path), expected);
}

TEST(HfLlama, Qwen2BiasesAndATiedHeadLoad) {
  Folder folder("qwen2");
  folder.write("config.json", llama_config_json("qwen2", R"(, "tie_word_embeddings": true)"));
  const auto state = llama_state(true, true);
  write_safetensors(folder.path / "model.safetensors", state, "F32");
  EXPECT_EQ(loaded_masters(folder.path), expected_masters(state, folder.path / "config.json"));
}

TEST(HfLlama, AnUntiedHeadMissingFromTheFileIsRefused) {
  Folder folder("nohead");
  folder.write("config.json", llama_config_json("mistral"));
  write_safetensors(folder.path / "model.safetensors", llama_state(false, true), "F32");
  EXPECT_THAT(refusal(folder.path), HasSubstr("no tensor \"lm_head.weight\""));
}

TEST(HfLlama, SettingsStrataCannotHonourAreRefusedNamingTheKey) {
  Folder folder("config");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})", "rope type \"yarn\""},
      {R"(, "attention_bias": true)", "\"attention_bias\""},
      {R"(, "hidden_act": "gelu")", "\"hidden_act\""},
      {R"(, "head_dim": 8)", "\"head_dim\""},
      {R"(, "num_key_value_heads": 3)", "num_key_value_heads 3"}};
  for (const auto& [extra, key] : cases) {
    folder.write("config.json", llama_config_json("llama", extra));
    try {
      read_hf_config(folder.path / "config.json");
      ADD_FAILURE() << "no refusal for " << extra;
    } catch (const UserError& error) {
      EXPECT_THAT(error.what(), HasSubstr(key));
    }
  }
}

// Mistral's sliding window: full attention is the same up to the window, refused past it.
TEST(HfLlama, ASeqLenPastTheSlidingWindowIsRefused) {
  Folder folder("window");
  folder.write("config.json", llama_config_json("mistral", R"(, "sliding_window": 8)"));
  const auto plan_for = [&](int seq_len) {
    const engine::Config config =
        engine::parse_config_text(fmt::format(R"({{"train_micro_batch_size_per_gpu": 1,
          "strata": {{"model": {{"config": "{}", "seq_len": {}}}}}}})",
                                              (folder.path / "config.json").string(), seq_len),
                                  "test config")
            .config;
    return plan_model(config.strata.model, 1);
  };
  EXPECT_EQ(plan_for(8).seq_len(), 8);
  try {
    plan_for(9);
    ADD_FAILURE() << "no refusal";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("past the sliding_window of 8"));
    EXPECT_THAT(error.fix(), HasSubstr("8 or less"));
  }
}

// transformers' _compute_llama3_parameters for Llama 3.1's settings: wavelengths past 8192 / 1
// are divided by 8, those under 8192 / 4 kept, those between blended.
TEST(RopeFrequencies, Llama3ScalingKeepsHighDividesLowAndBlendsTheBand) {
  RopeConfig rope;
  rope.theta = 500000.0;
  const std::vector<float> plain = rope_inverse_frequencies(rope, 128);
  rope.type = "llama3";
  rope.factor = 8.0;
  rope.original_max_positions = 8192;
  const std::vector<float> scaled = rope_inverse_frequencies(rope, 128);
  ASSERT_EQ(plain.size(), 64u);
  EXPECT_FLOAT_EQ(plain[0], 1.0f);
  for (std::size_t j = 0; j < plain.size(); ++j) {
    const double wavelen = 2 * 3.141592653589793 / plain[j];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[j], plain[j]) << j;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(scaled[j], plain[j] / 8.0f) << j;
    } else {
      EXPECT_LT(scaled[j], plain[j]) << j;
      EXPECT_GT(scaled[j], plain[j] / 8.0f) << j;
    }
  }
}

}  // namespace
}  // namespace strata::models
