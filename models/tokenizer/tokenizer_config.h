#pragma once

#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

namespace strata::models::tokenizer {

// What transformers reads from tokenizer_config.json (and special_tokens_map.json) that changes
// the ids or the text: the special tokens and the switches below.
struct TokenizerConfig {
  std::string tokenizer_class;  // "LlamaTokenizerFast", ...; "" when not given
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<bool> legacy;
  bool split_special_tokens = false;
  bool clean_up_tokenization_spaces = false;  // transformers' default when unset

  // From the parsed tokenizer_config.json (null when the folder has none) and
  // special_tokens_map.json (null likewise), which fills in the special tokens the config lacks.
  static TokenizerConfig from_json(const nlohmann::json& config,
                                   const nlohmann::json& special_tokens_map,
                                   const std::string& where);

  // transformers' Llama and Gemma tokenizer classes rebuild the post-processor from
  // add_bos_token (default true) and add_eos_token (default false).
  bool rebuilds_post_processor() const;
  // The BOS and EOS those classes name when the config names none ("<s>", "</s>"; Gemma's
  // "<bos>", "<eos>").
  std::pair<std::string, std::string> default_bos_eos() const;
  // transformers' Llama tokenizers with legacy false: no normalizer, a Metaspace pre-tokenizer
  // that prepends only at the start, and no "▁" before a special token that starts the text.
  bool llama_without_legacy() const;
};

}  // namespace strata::models::tokenizer
