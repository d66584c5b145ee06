#include "models/tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_fields.h"

namespace strata::models::tokenizer {
namespace {

// A special token as the config writes it: a string, or an object with "content".
std::optional<std::string> token_text(const nlohmann::json& config, const char* field,
                                      const std::string& where) {
  if (!config.is_object() || !config.contains(field) || config[field].is_null()) return {};
  const nlohmann::json& value = config[field];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  refuse_field(where, field, fmt::format("is {}, not a token", value.dump()));
}

std::optional<bool> flag(const nlohmann::json& config, const char* field,
                         const std::string& where) {
  if (!config.is_object() || !config.contains(field) || config[field].is_null()) return {};
  if (!config[field].is_boolean()) refuse_field(where, field, "is not true or false");
  return config[field].get<bool>();
}

bool class_is(const std::string& tokenizer_class, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (tokenizer_class == name || tokenizer_class == std::string(name) + "Fast") return true;
  }
  return false;
}

}  // namespace

TokenizerConfig TokenizerConfig::from_json(const nlohmann::json& config,
                                           const nlohmann::json& special_tokens_map,
                                           const std::string& where) {
  TokenizerConfig made;
  if (config.is_object() && config.contains("tokenizer_class") &&
      config["tokenizer_class"].is_string()) {
    made.tokenizer_class = config["tokenizer_class"].get<std::string>();
  }
  made.bos_token = token_text(config, "bos_token", where);
  made.eos_token = token_text(config, "eos_token", where);
  const std::string map_where = "special_tokens_map.json beside " + where;
  if (!made.bos_token) made.bos_token = token_text(special_tokens_map, "bos_token", map_where);
  if (!made.eos_token) made.eos_token = token_text(special_tokens_map, "eos_token", map_where);
  made.add_bos_token = flag(config, "add_bos_token", where);
  made.add_eos_token = flag(config, "add_eos_token", where);
  made.legacy = flag(config, "legacy", where);
  made.split_special_tokens = flag(config, "split_special_tokens", where).value_or(false);
  made.clean_up_tokenization_spaces =
      flag(config, "clean_up_tokenization_spaces", where).value_or(false);
  return made;
}

bool TokenizerConfig::rebuilds_post_processor() const {
  return class_is(tokenizer_class, {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"});
}

std::pair<std::string, std::string> TokenizerConfig::default_bos_eos() const {
  if (class_is(tokenizer_class, {"GemmaTokenizer"})) return {"<bos>", "<eos>"};
  return {"<s>", "</s>"};
}

bool TokenizerConfig::llama_without_legacy() const {
  return class_is(tokenizer_class, {"LlamaTokenizer"}) && legacy.has_value() && !*legacy;
}

}  // namespace strata::models::tokenizer
