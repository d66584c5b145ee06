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
  } catch (const json::exception& error) {
    refuse(path, fmt::format("a key has the wrong type ({})", error.what()),
           "give the config.json that came with the weights, unedited");
  }
  refuse(path,
         out.model_type.empty()
             ? std::string("has no \"model_type\"")
             : fmt::format("model_type \"{}\" is not one strata builds", out.model_type),
         "strata builds model_type gpt2 (docs/models.md); convert the model, or train one of "
         "those");
}

}  // namespace strata::models
