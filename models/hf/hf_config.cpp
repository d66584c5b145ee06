// config.json as transformers writes it (GPT2Config), read into the shape strata builds.
#include "models/hf/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace strata::models {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& what,
                         const std::string& fix) {
  throw UserError(fmt::format("{}: {}", path.string(), what), fix, 2);
}

// A positive integer key, or `fallback` when absent (transformers' default).
std::int64_t positive(const json& config, const std::filesystem::path& path, const char* key,
                      std::int64_t fallback) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) {
    if (fallback > 0) return fallback;
    refuse(path, fmt::format("has no \"{}\"", key),
           "give the config.json that came with the weights, unedited");
  }
  if (!found->is_number_integer() || found->get<std::int64_t>() < 1) {
    refuse(path, fmt::format("\"{}\" is {}, not a positive integer", key, found->dump()),
           "give the config.json that came with the weights, unedited");
  }
  return found->get<std::int64_t>();
}

// GPT2Config, with its defaults. strata's GPT is GPT-2 as OpenAI trained it: layer norms with
// epsilon 1e-5, GELU with the tanh approximation, attention scaled by 1/sqrt(head size), an MLP
// 4 x d_model wide, the LM head tied to the token embedding.
void read_gpt2(const json& config, HfConfig& out) {
  const std::filesystem::path& path = out.path;
  out.n_layer = positive(config, path, "n_layer", 12);
  out.n_head = positive(config, path, "n_head", 12);
  out.d_model = positive(config, path, "n_embd", 768);
  out.vocab = positive(config, path, "vocab_size", 50257);
  out.max_positions = positive(config, path, "n_positions", 1024);
  if (out.d_model % out.n_head != 0) {
    refuse(path, fmt::format("n_embd {} is not a multiple of n_head {}", out.d_model, out.n_head),
           "give the config.json that came with the weights, unedited");
  }
  auto refuse_value = [&](const char* key, const std::string& strata_builds) {
    refuse(path,
           fmt::format("\"{}\": {} is not what strata's GPT-2 computes ({})", key,
                       config.at(key).dump(), strata_builds),
           "fine-tune a checkpoint with GPT-2's own settings, or train with the built-in shape "
           "keys instead of from_pretrained");
  };
  if (config.contains("layer_norm_epsilon") &&
      std::abs(config["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12) {
    refuse_value("layer_norm_epsilon", "1e-05");
  }
  if (config.contains("activation_function") && config["activation_function"] != "gelu_new" &&
      config["activation_function"] != "gelu_pytorch_tanh") {
    refuse_value("activation_function", "\"gelu_new\", GELU's tanh approximation");
  }
  if (config.contains("n_inner") && !config["n_inner"].is_null() &&
      config["n_inner"] != 4 * out.d_model) {
    refuse_value("n_inner", fmt::format("null: 4 x n_embd = {}", 4 * out.d_model));
  }
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    if (config.contains(key) && config[key] == true) refuse_value(key, "false");
  }
  if (config.contains("scale_attn_weights") && config["scale_attn_weights"] == false) {
    refuse_value("scale_attn_weights", "true");
  }
  out.tie_word_embeddings = config.value("tie_word_embeddings", true);
  if (!out.tie_word_embeddings) refuse_value("tie_word_embeddings", "true: the head is wte");
  out.n_kv_head = out.n_head;
  out.d_ff = 4 * out.d_model;
  out.norm_eps = 1e-5;
}

// A number key, or `fallback` when absent or null.
double number(const json& config, const char* key, double fallback) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return fallback;
  return found->get<double>();
}

// rope_parameters (transformers 5) or rope_theta with rope_scaling (earlier); the llama3 scaling
// or none.
void read_rope(const json& config, HfConfig& out) {
  const std::filesystem::path& path = out.path;
  json scaling = config.value("rope_scaling", json());
  out.rope.theta = number(config, "rope_theta", 10000.0);
  const char* key = "rope_scaling";
  if (config.contains("rope_parameters") && config["rope_parameters"].is_object()) {
    scaling = config["rope_parameters"];
    out.rope.theta = number(scaling, "rope_theta", out.rope.theta);
    key = "rope_parameters";
  }
  if (scaling.is_null()) return;
  if (!scaling.is_object())
    refuse(path, fmt::format("\"{}\" is not an object", key),
           "give the config.json that came with the weights");
  out.rope.type = scaling.value("rope_type", scaling.value("type", std::string("default")));
  if (out.rope.type == "default") return;
  if (out.rope.type != "llama3") {
    refuse(path,
           fmt::format("\"{}\": rope type \"{}\" is not one strata computes (default, llama3)", key,
                       out.rope.type),
           "fine-tune a model with default or llama3 rotary embeddings");
  }
  out.rope.factor = number(scaling, "factor", 8.0);
  out.rope.low_freq_factor = number(scaling, "low_freq_factor", 1.0);
  out.rope.high_freq_factor = number(scaling, "high_freq_factor", 4.0);
  out.rope.original_max_positions =
      static_cast<std::int64_t>(number(scaling, "original_max_position_embeddings", 8192));
  if (out.rope.factor <= 0 || out.rope.high_freq_factor <= out.rope.low_freq_factor ||
      out.rope.original_max_positions <= 0) {
    refuse(path,
           fmt::format("\"{}\" has llama3 factors strata cannot use: {}", key, scaling.dump()),
           "give the config.json that came with the weights");
  }
}

// LlamaConfig, MistralConfig and Qwen2Config, with their defaults.
void read_llama_family(const json& config, HfConfig& out) {
  const std::filesystem::path& path = out.path;
  const bool qwen2 = out.model_type == "qwen2", mistral = out.model_type == "mistral";
  out.n_layer = positive(config, path, "num_hidden_layers", 32);
  out.n_head = positive(config, path, "num_attention_heads", 32);
  out.n_kv_head = positive(config, path, "num_key_value_heads",
                           qwen2 || mistral ? (mistral ? 8 : 32) : out.n_head);
  out.d_model = positive(config, path, "hidden_size", 4096);
  out.d_ff = positive(config, path, "intermediate_size", qwen2 ? 22016 : mistral ? 14336 : 11008);
  out.vocab = positive(config, path, "vocab_size", qwen2 ? 151936 : 32000);
  out.max_positions = positive(config, path, "max_position_embeddings",
                               qwen2     ? 32768
                               : mistral ? 131072
                                         : 2048);
  out.norm_eps = number(config, "rms_norm_eps", 1e-6);
  out.tie_word_embeddings = config.value("tie_word_embeddings", false);
  out.qkv_bias = qwen2;
  const std::string fix =
      "fine-tune a checkpoint of the plain architecture, or train with the "
      "built-in shape keys instead of from_pretrained";
  if (out.d_model % out.n_head != 0 || out.n_head % out.n_kv_head != 0) {
    refuse(path,
           fmt::format("hidden_size {}, num_attention_heads {} and num_key_value_heads {} do not "
                       "divide into heads",
                       out.d_model, out.n_head, out.n_kv_head),
           "give the config.json that came with the weights, unedited");
  }
  const std::int64_t head_dim = out.d_model / out.n_head;
  if (config.contains("head_dim") && !config["head_dim"].is_null() &&
      config["head_dim"] != head_dim) {
    refuse(path,
           fmt::format("\"head_dim\": {} differs from hidden_size / num_attention_heads = {}",
                       config["head_dim"].dump(), head_dim),
           fix);
  }
  if (head_dim % 2 != 0)
    refuse(path, fmt::format("head dimension {} is odd: rotary embeddings rotate pairs", head_dim),
           fix);
  const std::string act = config.value("hidden_act", std::string("silu"));
  if (act != "silu" && act != "swish") {
    refuse(path, fmt::format("\"hidden_act\": \"{}\" is not SwiGLU's silu", act), fix);
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (config.value(key, false))
      refuse(path, fmt::format("\"{}\": true is not a layout strata builds", key), fix);
  }
  const bool sliding = mistral ? !config.value("sliding_window", json()).is_null()
                               : config.value("use_sliding_window", false);
  if (sliding)
    out.sliding_window = static_cast<std::int64_t>(number(config, "sliding_window", 4096));
  read_rope(config, out);
}

}  // namespace

HfConfig read_hf_config(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw UserError(fmt::format("{} cannot be read", path.string()),
                    "point strata.model.from_pretrained at a folder holding config.json (as "
                    "save_pretrained writes it), or strata.model.config at the file itself",
                    2);
  }
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& error) {
    refuse(path, fmt::format("not JSON ({})", error.what()),
           "give the config.json that came with the weights, unedited");
  }
  if (!config.is_object()) refuse(path, "not a JSON object", "give a model's config.json");
  HfConfig out;
  out.path = path;
  out.model_type = config.value("model_type", "");
  try {
    if (out.model_type == "gpt2") {
      read_gpt2(config, out);
      return out;
    }
    if (out.model_type == "llama" || out.model_type == "mistral" || out.model_type == "qwen2") {
      read_llama_family(config, out);
      return out;
    }
  } catch (const json::exception& error) {
    refuse(path, fmt::format("a key has the wrong type ({})", error.what()),
           "give the config.json that came with the weights, unedited");
  }
  refuse(path,
         out.model_type.empty()
             ? std::string("has no \"model_type\"")
             : fmt::format("model_type \"{}\" is not one strata builds", out.model_type),
         "strata builds model_type gpt2, llama, mistral and qwen2 (docs/models.md); convert the "
         "model, or train one of those");
}

}  // namespace strata::models
